import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { HOST_SUITE } from "./contract";
import { TWIN_SOURCES } from "./sources";

/**
 * apt with a state of its own (sources, lists, package cache, dpkg status), so the
 * machine's apt is neither read nor changed: the twin's mirror downloads the hosts'
 * packages with it, and the test rigs the hosts' own versions of the tools whose
 * behaviour changed between Debian releases (test/helpers/hostTools.ts). apt checks
 * every .deb against the lists Debian signed (debian-archive-keyring).
 */

export const APT_CONF = path.join(TWIN_SOURCES, "mirror", "apt.conf");
export const BUILD_SOURCES = path.join(TWIN_SOURCES, "mirror", "sources.list");

/** The Debian archives the mirror carries: where the guests find them, and where the host's apt lists them. */
export const DEBIAN_SUITES = [
    ["debian", HOST_SUITE],
    ["debian", `${HOST_SUITE}-updates`],
    ["debian-security", `${HOST_SUITE}-security`],
].map(([archive, suite]) => ({ archive, suite, list: `deb.debian.org_${archive}_dists_${suite}_` }));
/** Release fields copied from Debian's own Release files, so the guests see the suites they expect. */
const RELEASE_FIELDS = ["Origin", "Label", "Suite", "Version", "Codename", "Changelogs"];

export interface PackageRef {
    name: string;
    version: string;
    arch: string;
}

export function exec(cmd: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<string> {
    const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on("data", (d) => out.push(d));
    child.stderr.on("data", (d) => err.push(d));
    return new Promise((resolve, reject) => {
        child.on("error", reject);
        child.on("exit", (code) =>
            code === 0 ? resolve(Buffer.concat(out).toString()) : reject(new Error(`${cmd} ${args.join(" ")}: exit ${code}\n${Buffer.concat(err).toString().slice(-3000)}`)),
        );
    });
}

/** `name (version ... [arch])` from apt-get's simulation lines (`Inst name [old] (new origin [arch])`). */
function simulatedInstalls(output: string): PackageRef[] {
    const refs: PackageRef[] = [];
    for (const line of output.split("\n")) {
        const m = /^Inst (\S+) (?:\[[^\]]*\] )?\((\S+) .*\[([^\]]+)\]\)/.exec(line);
        if (m) refs.push({ name: m[1], version: m[2], arch: m[3] });
    }
    return refs;
}

/** Parses Debian control stanzas (a Packages file) into name/version -> field map. */
export function stanzas(text: string): Array<Record<string, string>> {
    return text
        .split(/\n\n+/)
        .filter((block) => block.trim() !== "")
        .map((block) => {
            const fields: Record<string, string> = {};
            let last = "";
            for (const line of block.split("\n")) {
                if (/^\s/.test(line) && last) fields[last] += `\n${line}`;
                else {
                    const colon = line.indexOf(":");
                    last = line.slice(0, colon);
                    fields[last] = line.slice(colon + 1).trim();
                }
            }
            return fields;
        });
}

export function privateApt(root: string, archives: string) {
    const state = root;
    for (const sub of ["apt.conf.d", "sources.list.d", "preferences.d", "state/lists/partial", "cache", "log"]) fs.mkdirSync(path.join(state, sub), { recursive: true });
    fs.mkdirSync(path.join(archives, "partial"), { recursive: true });
    fs.copyFileSync(BUILD_SOURCES, path.join(state, "sources.list"));
    const conf = path.join(state, "apt.conf");
    fs.writeFileSync(conf, fs.readFileSync(APT_CONF, "utf8").replaceAll("@STATE@", state).replaceAll("@ARCHIVES@", archives));
    const run = (args: string[], status = path.join(state, "status")) => exec("apt-get", ["-o", `Dir::State::status=${status}`, ...args], { APT_CONFIG: conf, DEBIAN_FRONTEND: "noninteractive" });
    fs.writeFileSync(path.join(state, "status"), "");

    return {
        root,
        run,
        /**
         * Everything a guest's apt fetches, at the versions Debian serves now: what
         * `package_upgrade` upgrades and what `packages:` installs on the base image,
         * and, so the archives are whole, the image's own packages with their dependencies.
         */
        async resolve(packages: string[], dpkgStatus: string, manifest: string): Promise<PackageRef[]> {
            const imagePackages = fs.readFileSync(manifest, "utf8").split("\n").filter(Boolean).map((line) => line.split(" ")[0]);
            const outputs = await Promise.all([
                run(["-s", "dist-upgrade"], dpkgStatus),
                run(["-s", "install", ...packages], dpkgStatus),
                run(["-s", "install", ...imagePackages, ...packages]),
            ]);
            const unique = new Map<string, PackageRef>();
            for (const ref of outputs.flatMap(simulatedInstalls)) unique.set(`${ref.name} ${ref.version} ${ref.arch}`, ref);
            return [...unique.values()].sort((a, b) => a.name.localeCompare(b.name));
        },
        /** `packages` at the versions the suites serve now, and with `withDependencies` all they depend on. */
        async current(packages: string[], withDependencies = false): Promise<PackageRef[]> {
            const refs = simulatedInstalls(await run(["-s", "install", "--no-install-recommends", ...packages]));
            const missing = packages.filter((name) => !refs.some((ref) => ref.name === name));
            if (missing.length > 0) throw new Error(`apt: ${missing.join(", ")} not in ${DEBIAN_SUITES.map((s) => s.suite).join(", ")}`);
            return withDependencies ? refs : refs.filter((ref) => packages.includes(ref.name));
        },
        /** apt-get download, into the shared package cache (files already there are not fetched again). */
        async download(refs: PackageRef[]): Promise<void> {
            const absent = refs.filter((ref) => !fs.existsSync(this.archiveFile(ref)));
            for (let i = 0; i < absent.length; i += 200) {
                await exec("sh", ["-c", 'cd "$1" && shift && exec apt-get download "$@"', "sh", archives, ...absent.slice(i, i + 200).map((r) => `${r.name}=${r.version}`)], { APT_CONFIG: conf });
            }
        },
        archiveFile(ref: PackageRef): string {
            return path.join(archives, `${ref.name}_${ref.version.replace(":", "%3a")}_${ref.arch}.deb`);
        },
        /** suite -> "name version" -> the pool path Debian serves it at. */
        suiteIndex(): Map<string, Map<string, string>> {
            const lists = path.join(state, "state", "lists");
            const index = new Map<string, Map<string, string>>();
            for (const suite of DEBIAN_SUITES) {
                const entries = new Map<string, string>();
                const file = fs.readdirSync(lists).find((f) => f.startsWith(suite.list) && f.endsWith("_binary-amd64_Packages"));
                if (!file) throw new Error(`mirror: no package list for ${suite.suite} in ${lists}`);
                for (const stanza of stanzas(fs.readFileSync(path.join(lists, file), "utf8"))) entries.set(`${stanza.Package} ${stanza.Version}`, stanza.Filename);
                index.set(suite.suite, entries);
            }
            return index;
        },
        /** Debian's own Release fields for a suite, from the InRelease apt fetched. */
        releaseFields(listPrefix: string): Record<string, string> {
            const lists = path.join(state, "state", "lists");
            const file = fs.readdirSync(lists).find((f) => f === `${listPrefix}InRelease`);
            if (!file) throw new Error(`mirror: no InRelease for ${listPrefix} in ${lists}`);
            const header = stanzas(fs.readFileSync(path.join(lists, file), "utf8").replace(/^-----BEGIN PGP SIGNED MESSAGE-----\n(Hash:.*\n)*\n/, ""))[0];
            return Object.fromEntries(RELEASE_FIELDS.filter((f) => header[f] !== undefined).map((f) => [f, header[f]]));
        },
    };
}

