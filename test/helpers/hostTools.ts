import { execFileSync } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { HOST_SUITE } from "../../twin/contract";
import { privateApt } from "../../twin/private-apt";

/**
 * vitest globalSetup: the hosts' own restic, Docker Compose and OpenSSH server
 * (Debian HOST_SUITE's packages, checked by apt against the lists Debian signed),
 * so the rigs outside the twin run what the hosts run, not the CI machine's older
 * release (Debian 12: restic 0.14 without hide-instead-of-delete, Compose 1.29 in
 * Python, OpenSSH 9.2 without per-source penalties). restic and Compose are Go
 * programs that run on the older libc: first on every test's PATH. sshd is run from
 * its own root with its own libraries, by its dynamic loader (hostSshd). Cached under
 * /var/cache, keyed by the suite and the lists; a new list or suite fetches again.
 */

/** Package -> the programs of it the rigs call, at their path in the package. */
export const HOST_TOOLS: Record<string, Record<string, string>> = {
    restic: { restic: "usr/bin/restic" },
    "docker-compose": { "docker-compose": "usr/libexec/docker/cli-plugins/docker-compose" },
};
/** The OpenSSH server, unpacked with its dependencies into a root of its own. */
export const HOST_SSHD_PACKAGES = ["openssh-server"];
/** The programs of it sshd runs: itself, then per connection the session and (OpenSSH 10) the authentication one. */
const SSHD_PROGRAMS = { sshd: "usr/sbin/sshd", "sshd-session": "usr/lib/openssh/sshd-session", "sshd-auth": "usr/lib/openssh/sshd-auth" };
const CACHE = "/var/cache/airlock-host-tools";
/** The .debs fetched for the host tools, kept across suites and lists (a test fetching another Debian package shares it). */
export const HOST_DEBS_CACHE = path.join(CACHE, "debs");
/** Bump when the layout of a cached folder changes. */
const LAYOUT = "1";

/** The cached folder: bin/ with the programs, versions.json with each package's version. */
export function hostToolsDir(): string {
    const key = crypto.createHash("sha256").update(JSON.stringify([LAYOUT, HOST_SUITE, HOST_TOOLS, HOST_SSHD_PACKAGES, SSHD_PROGRAMS])).digest("hex").slice(0, 16);
    return path.join(CACHE, `${HOST_SUITE}-${key}`);
}

async function ensureHostTools(): Promise<string> {
    const dir = hostToolsDir();
    if (fs.existsSync(dir)) return dir;
    fs.mkdirSync(CACHE, { recursive: true });
    const staging = fs.mkdtempSync(path.join(CACHE, ".tools-"));
    try {
        const apt = privateApt(path.join(staging, "apt"), HOST_DEBS_CACHE);
        await apt.run(["update"]);
        const refs = await apt.current(Object.keys(HOST_TOOLS));
        await apt.download(refs);
        fs.mkdirSync(path.join(staging, "bin"));
        for (const ref of refs) {
            const unpacked = path.join(staging, "unpacked", ref.name);
            fs.mkdirSync(unpacked, { recursive: true });
            execFileSync("dpkg-deb", ["-x", apt.archiveFile(ref), unpacked]);
            for (const [program, at] of Object.entries(HOST_TOOLS[ref.name])) {
                fs.copyFileSync(path.join(unpacked, at), path.join(staging, "bin", program));
                fs.chmodSync(path.join(staging, "bin", program), 0o755);
            }
        }
        const sshdRefs = await apt.current(HOST_SSHD_PACKAGES, true);
        await apt.download(sshdRefs);
        const sshdRoot = path.join(staging, "openssh", "root");
        fs.mkdirSync(sshdRoot, { recursive: true });
        for (const ref of sshdRefs) execFileSync("dpkg-deb", ["-x", apt.archiveFile(ref), sshdRoot]);
        // Each program by the root's own loader and libraries (as arguments, never LD_LIBRARY_PATH,
        // which the sessions' own programs would inherit); at the final path, once renamed.
        const final = path.join(dir, "openssh", "root");
        fs.mkdirSync(path.join(staging, "openssh", "bin"));
        for (const [program, at] of Object.entries(SSHD_PROGRAMS)) {
            const loader = `${final}/usr/lib64/ld-linux-x86-64.so.2 --library-path ${final}/usr/lib/x86_64-linux-gnu:${final}/lib/x86_64-linux-gnu`;
            fs.writeFileSync(path.join(staging, "openssh", "bin", program), `#!/bin/sh\nexec ${loader} ${final}/${at} "$@"\n`, { mode: 0o755 });
        }
        const versions = [...refs, ...sshdRefs.filter((r) => HOST_SSHD_PACKAGES.includes(r.name))];
        fs.writeFileSync(path.join(staging, "versions.json"), `${JSON.stringify(Object.fromEntries(versions.map((r) => [r.name, r.version])), null, 2)}\n`);
        fs.rmSync(path.join(staging, "apt"), { recursive: true, force: true });
        fs.rmSync(path.join(staging, "unpacked"), { recursive: true, force: true });
        fs.chmodSync(staging, 0o755);
        fs.renameSync(staging, dir);
    } catch (err) {
        fs.rmSync(staging, { recursive: true, force: true });
        if (fs.existsSync(dir)) return dir;
        throw err;
    }
    return dir;
}

/** The folder with the hosts' restic and docker-compose, for a rig that sets PATH itself ("" where they were not fetched). */
export function hostToolsBin(): string {
    const bin = path.join(hostToolsDir(), "bin");
    return fs.existsSync(bin) ? bin : "";
}

/**
 * The checkpoint engine as a rig runs it: its own fixed PATH (it never takes its
 * caller's) with the hosts' tools first, so a restore recreates containers with the
 * hosts' Compose v2, not this machine's 1.29.
 */
export function engineOnHostTools(engine: string): string {
    const bin = hostToolsBin();
    if (!bin) return engine;
    const fixed = 'PATH = "/usr/local/sbin:';
    if (!engine.includes(fixed)) throw new Error("the checkpoint engine's PATH line changed: update engineOnHostTools");
    return engine.replace(fixed, `PATH = "${bin}:/usr/local/sbin:`);
}

export default async function setup(): Promise<void> {
    let dir: string;
    try {
        dir = await ensureHostTools();
    } catch (err) {
        const reason = `the hosts' restic, Docker Compose and sshd (Debian ${HOST_SUITE}) could not be fetched: ${String(err).split("\n")[0]}`;
        if (process.env.CI === "true") throw new Error(reason);
        console.warn(`host tools: ${reason}; the rigs use this machine's`);
        return;
    }
    process.env.PATH = `${path.join(dir, "bin")}:${process.env.PATH}`;
}

/**
 * The hosts' sshd for a rig, and the lines its config needs first: where its per-connection
 * programs are (SshdSessionPath, SshdAuthPath: OpenSSH 10's sshd starts them by path, and
 * this machine's /usr/lib/openssh has its own). This machine's sshd where they were not
 * fetched (a run without root), with no lines.
 */
export function hostSshd(): { sshd: string; configLines: string } {
    const bin = path.join(hostToolsDir(), "openssh", "bin");
    if (!fs.existsSync(bin)) {
        if (process.env.CI === "true") throw new Error(`CI: the hosts' sshd is not in ${bin} (test/helpers/hostTools.ts fetches it as root)`);
        return { sshd: "/usr/sbin/sshd", configLines: "" };
    }
    return { sshd: path.join(bin, "sshd"), configLines: `SshdSessionPath ${path.join(bin, "sshd-session")}\nSshdAuthPath ${path.join(bin, "sshd-auth")}\n` };
}
