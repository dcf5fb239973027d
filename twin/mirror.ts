import { spawn } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import * as zlib from "node:zlib";
import * as YAML from "yaml";
import { collectArtifacts } from "../cli/plan";
import { planStack, stackFilePath } from "../cli/offline";
import { ensureArchiveKey, signRelease, type ArchiveKey } from "./archive-key";
import type { BaseImage } from "./base-image";
import { issueLeaf } from "./ca";
import { B2_DOWNLOAD_HOST, HOST_ADDRESS, HOST_SUITE, TWIN_CACHE_DIR } from "./contract";
import { APT_CONF, BUILD_SOURCES, DEBIAN_SUITES, exec, privateApt } from "./private-apt";
import { TWIN_SOURCES } from "./sources";

/**
 * The twin's apt mirror: the .debs the guests' cloud-init installs, downloaded
 * with apt (a private apt state: the host's apt is untouched), laid out as real
 * Debian archives at the paths deb.debian.org/debian and
 * security.debian.org/debian-security serve, indexed with apt-ftparchive and
 * signed with the twin's archive key (the base image trusts it), so apt in a
 * guest verifies every index as against Debian. Beside them, the stand-in for
 * pkgs.tailscale.com/stable/debian: the twin's own .debs, signed by the same key,
 * with the key where airlock-install-tailscale downloads it.
 */

const SOURCES = path.join(TWIN_SOURCES, "mirror");
/** Bump when the mirror's layout changes, so cached mirrors are rebuilt. */
const LAYOUT = "1";
const SERVER = path.join(SOURCES, "serve.py");

/** The stand-in for Tailscale's repository: `${REPO}` of airlock-install-tailscale for ID=debian and the hosts' VERSION_CODENAME. */
export const TAILSCALE_REPO = "stable/debian";
export const TAILSCALE_SUITE = HOST_SUITE;
/** Names the mirror's TLS certificate covers (the twin's DNS points them at the mirror). */
const TLS_NAMES = ["pkgs.tailscale.com", "deb.debian.org", "security.debian.org", B2_DOWNLOAD_HOST];

export interface Mirror {
    /** The document root: debian/, debian-security/, stable/debian/. */
    dir: string;
    /** The archive key's fingerprint: what the twin pins in airlock-install-tailscale. */
    fingerprint: string;
}

export interface MirrorOptions {
    /** What cloud-init's `packages:` installs (userDataPackages). */
    packages: string[];
    /** The base image the guests boot: apt in them resolves against its dpkg status. */
    image: Pick<BaseImage, "manifest" | "dpkgStatus">;
    /** The Tailscale stand-in and anything else served from pkgs.tailscale.com/stable/debian. */
    extraDebs?: string[];
    log: (line: string) => void;
    cacheDir?: string;
}

/** The union of `packages:` in both hosts' rendered cloud-init, for each stack. */
export async function userDataPackages(stacks: string[] = ["dev", "prod"], stacksDir = "stacks"): Promise<string[]> {
    const packages = new Set<string>();
    for (const stack of stacks) {
        const plan = await planStack(stackFilePath(stacksDir, stack), stack);
        for (const [folder, files] of collectArtifacts(plan)) {
            const cloudInit = files["cloud-init.yaml"];
            if (cloudInit === undefined) continue;
            const listed: unknown = YAML.parse(cloudInit)?.packages ?? [];
            if (!Array.isArray(listed) || !listed.every((p) => typeof p === "string")) {
                throw new Error(`stack ${stack}, ${folder}/cloud-init.yaml: packages is not a list of names`);
            }
            for (const name of listed) packages.add(name);
        }
    }
    return [...packages].sort();
}

/** The fingerprint airlock-install-tailscale must pin for the twin's repository. */
export function tailscaleKeyFingerprint(cacheDir = TWIN_CACHE_DIR): string {
    return ensureArchiveKey(cacheDir).fingerprint;
}

const sha256 = (data: string | Buffer) => crypto.createHash("sha256").update(data).digest("hex");

export function mirrorKey(options: Pick<MirrorOptions, "packages" | "image" | "extraDebs">, fingerprint: string): string {
    const parts = [
        JSON.stringify([...options.packages].sort()),
        fs.readFileSync(options.image.manifest, "utf8"),
        ...(options.extraDebs ?? []).map((deb) => `${path.basename(deb)} ${sha256(fs.readFileSync(deb))}`).sort(),
        fingerprint,
        LAYOUT,
        ...[APT_CONF, BUILD_SOURCES].map((file) => fs.readFileSync(file, "utf8")),
    ];
    return sha256(parts.join("\0")).slice(0, 16);
}

/** The cached mirror for the inputs, or a new one (downloads: minutes on a cold package cache). */
export async function ensureMirror(options: MirrorOptions): Promise<Mirror> {
    const cacheDir = options.cacheDir ?? TWIN_CACHE_DIR;
    const key = ensureArchiveKey(cacheDir);
    const dir = path.join(cacheDir, `mirror-${mirrorKey(options, key.fingerprint)}`);
    const mirror = { dir: path.join(dir, "www"), fingerprint: key.fingerprint };
    if (fs.existsSync(mirror.dir)) {
        options.log(`mirror: cached ${mirror.dir}`);
        return mirror;
    }
    const started = Date.now();
    fs.mkdirSync(cacheDir, { recursive: true });
    const staging = fs.mkdtempSync(path.join(cacheDir, ".mirror-"));
    fs.chmodSync(staging, 0o755);
    try {
        const www = path.join(staging, "www");
        const apt = privateApt(path.join(staging, "apt"), path.join(cacheDir, "debs"));
        options.log("mirror: apt-get update (deb.debian.org)");
        await apt.run(["update"]);
        const wanted = await apt.resolve(options.packages, options.image.dpkgStatus, options.image.manifest);
        options.log(`mirror: downloading ${wanted.length} packages`);
        await apt.download(wanted);
        const index = apt.suiteIndex();
        const missing = wanted.filter((p) => !DEBIAN_SUITES.some((s) => index.get(s.suite)!.has(`${p.name} ${p.version}`)));
        if (missing.length > 0) throw new Error(`mirror: not in any suite: ${missing.map((p) => `${p.name}=${p.version}`).join(", ")}`);
        // Each .deb goes where Debian serves it, once per archive that carries its version.
        const poolPaths = new Map<string, string[]>();
        for (const suite of DEBIAN_SUITES) {
            const inSuite = index.get(suite.suite)!;
            const paths = wanted.filter((p) => inSuite.has(`${p.name} ${p.version}`)).map((p) => {
                const poolPath = inSuite.get(`${p.name} ${p.version}`)!;
                const target = path.join(www, suite.archive, poolPath);
                fs.mkdirSync(path.dirname(target), { recursive: true });
                if (!fs.existsSync(target)) fs.linkSync(apt.archiveFile(p), target);
                return poolPath;
            });
            poolPaths.set(suite.suite, paths);
        }
        options.log("mirror: indexing and signing (apt-ftparchive, gpg)");
        const scanned = new Map<string, string>();
        for (const archive of new Set(DEBIAN_SUITES.map((s) => s.archive))) scanned.set(archive, await execIn(path.join(www, archive), "apt-ftparchive", ["packages", "pool"]));
        for (const suite of DEBIAN_SUITES) {
            await writeSuite(path.join(www, suite.archive), suite.suite, poolPaths.get(suite.suite)!, scanned.get(suite.archive)!, apt.releaseFields(suite.list), key);
        }
        await writeTailscaleRepo(path.join(www, TAILSCALE_REPO), options.extraDebs ?? [], key);
        fs.rmSync(apt.root, { recursive: true, force: true });
        fs.renameSync(staging, dir);
    } catch (err) {
        fs.rmSync(staging, { recursive: true, force: true });
        if (fs.existsSync(mirror.dir)) return mirror;
        throw err;
    }
    options.log(`mirror: built ${mirror.dir} in ${Math.round((Date.now() - started) / 1000)} s`);
    return mirror;
}

/**
 * Indexes `debs` (pool paths under `root`) as `dists/<suite>/main/binary-amd64`
 * from `scanned` (apt-ftparchive's stanzas for every .deb under root), writes the
 * Release with `fields` and signs it (InRelease, Release.gpg).
 */
async function writeSuite(root: string, suite: string, debs: string[], scanned: string, fields: Record<string, string>, key: ArchiveKey): Promise<void> {
    const binary = path.join(root, "dists", suite, "main", "binary-amd64");
    fs.mkdirSync(binary, { recursive: true });
    const listed = new Set(debs);
    const packages = scanned
        .split(/\n\n+/)
        .filter((block) => listed.has(/^Filename: (.*)$/m.exec(block)?.[1] ?? ""))
        .map((block) => `${block.trim()}\n\n`)
        .join("");
    writeIndex(binary, packages);
    await writeRelease(path.join(root, "dists", suite), { ...fields, Architectures: "amd64", Components: "main" }, key);
}

function execIn(cwd: string, cmd: string, args: string[]): Promise<string> {
    return exec("sh", ["-c", 'cd "$1" && shift && exec "$@"', "sh", cwd, cmd, ...args]);
}

function writeIndex(binaryDir: string, packages: string): void {
    fs.writeFileSync(path.join(binaryDir, "Packages"), packages);
    fs.writeFileSync(path.join(binaryDir, "Packages.gz"), zlib.gzipSync(packages, { level: 9 }));
}

async function writeRelease(distDir: string, fields: Record<string, string>, key: ArchiveKey): Promise<void> {
    const options = Object.entries(fields).flatMap(([field, value]) => ["-o", `APT::FTPArchive::Release::${field}=${value}`]);
    const release = await execIn(distDir, "apt-ftparchive", [...options, "release", "."]);
    fs.writeFileSync(path.join(distDir, "Release"), release);
    signRelease(key, path.join(distDir, "Release"));
}

/** pkgs.tailscale.com/stable/debian: the given .debs, signed, and the key at `<codename>.noarmor.gpg`. */
async function writeTailscaleRepo(repo: string, debs: string[], key: ArchiveKey): Promise<void> {
    const pool = path.join(repo, "pool");
    fs.mkdirSync(pool, { recursive: true });
    for (const deb of debs) fs.copyFileSync(deb, path.join(pool, path.basename(deb)));
    const binary = path.join(repo, "dists", TAILSCALE_SUITE, "main", "binary-amd64");
    fs.mkdirSync(binary, { recursive: true });
    writeIndex(binary, debs.length === 0 ? "" : await execIn(repo, "apt-ftparchive", ["packages", "pool"]));
    await writeRelease(
        path.join(repo, "dists", TAILSCALE_SUITE),
        { Origin: "Tailscale", Label: "Tailscale (airlock twin stand-in)", Suite: TAILSCALE_SUITE, Codename: TAILSCALE_SUITE, Architectures: "amd64", Components: "main" },
        key,
    );
    fs.copyFileSync(key.publicKey, path.join(repo, `${TAILSCALE_SUITE}.noarmor.gpg`));
}

export interface RunningMirror {
    pid: number;
    stop(): void;
}

/**
 * Serves `dir` inside the network namespace `netns`: HTTP on `address`:80 and,
 * with a twin-CA certificate for pkgs.tailscale.com (and the Debian names),
 * HTTPS on 443; requests for B2's download host are served from `b2Dir`. Every request goes to `logFile`. The server outlives this
 * process (a twin keeps running after `twin up` returns): stop it with stop()
 * or by its pid.
 */
export async function startMirror(options: { netns: string; dir: string; logFile: string; b2Dir: string; address?: string; cacheDir?: string }): Promise<RunningMirror> {
    const address = options.address ?? HOST_ADDRESS;
    const tls = issueLeaf({ dnsNames: TLS_NAMES, ips: [address], outDir: `${options.logFile}.tls`, name: "mirror", cacheDir: options.cacheDir });
    fs.mkdirSync(path.dirname(options.logFile), { recursive: true });
    const before = fs.existsSync(options.logFile) ? fs.statSync(options.logFile).size : 0;
    const out = fs.openSync(options.logFile, "a");
    const child = spawn(
        "ip",
        ["netns", "exec", options.netns, "/usr/bin/python3", SERVER, "--root", options.dir, "--b2-root", options.b2Dir, "--address", address, "--cert", tls.cert, "--key", tls.key, "--log", options.logFile],
        { stdio: ["ignore", out, out], detached: true },
    );
    fs.closeSync(out);
    child.unref();
    const pid = child.pid!;
    const stop = () => {
        try {
            process.kill(pid, "SIGTERM");
        } catch {
            // already gone
        }
    };
    let exited: number | null | undefined;
    child.on("exit", (code) => (exited = code));
    for (let i = 0; i < 100; i++) {
        const written = fs.readFileSync(options.logFile, "utf8").slice(before);
        if (written.includes(`serving http://${address}:80`)) return { pid, stop };
        if (exited !== undefined) throw new Error(`mirror server exited (${exited}): ${written.slice(-2000)}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
    }
    stop();
    throw new Error(`mirror server did not start in 10 s; see ${options.logFile}`);
}

