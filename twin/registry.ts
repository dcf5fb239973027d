import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { type Log, type TwinImage, LAYOUT_REF } from "./images";
import { runLogged } from "./logged";

/**
 * The twin's registry: Debian's docker-registry (distribution), in the twin's
 * network namespace, over TLS with a certificate of the twin's CA for every
 * registry name the stack's images use. fillRegistry pushes the built images into
 * its storage with skopeo (digests preserved); startRegistry serves that storage
 * read-only, so what the guests pull by digest is exactly what was built.
 */

const CONFIG_TEMPLATE = path.join(__dirname, "registry", "config.yml");

export interface RegistryOptions {
    /** The network namespace it listens in. */
    netns: string;
    address: string;
    port: number;
    certFile: string;
    keyFile: string;
    /** Filled by fillRegistry. */
    storageDir: string;
    /** Its output; its rendered config is written beside it (<logFile>.yml). */
    logFile: string;
}

export interface RunningRegistry {
    pid: number;
    /** SIGTERM, then SIGKILL after 10 s; resolves when it is gone. */
    stop(): Promise<void>;
}

interface Launch {
    netns: string;
    address: string;
    port: number;
    tls?: { certFile: string; keyFile: string };
    storageDir: string;
    logFile: string;
    readonly: boolean;
}

function renderConfig(opts: Launch): string {
    const config = YAML.parse(fs.readFileSync(CONFIG_TEMPLATE, "utf8"));
    config.storage.filesystem.rootdirectory = path.resolve(opts.storageDir);
    config.storage.maintenance.readonly.enabled = opts.readonly;
    config.http.addr = `${opts.address}:${opts.port}`;
    if (opts.tls) config.http.tls = { certificate: path.resolve(opts.tls.certFile), key: path.resolve(opts.tls.keyFile) };
    return `# rendered by twin/registry.ts from twin/registry/config.yml\n${YAML.stringify(config)}`;
}

const alive = (pid: number) => {
    try {
        process.kill(pid, 0);
        return true;
    } catch {
        return false;
    }
};

async function launch(opts: Launch): Promise<RunningRegistry> {
    fs.mkdirSync(opts.storageDir, { recursive: true });
    fs.mkdirSync(path.dirname(opts.logFile), { recursive: true });
    const configFile = `${opts.logFile}.yml`;
    fs.writeFileSync(configFile, renderConfig(opts));
    const log = fs.openSync(opts.logFile, "a");
    // Detached: the registry outlives the command that started the twin (`twin down` stops it by pid).
    const child = spawn("ip", ["netns", "exec", opts.netns, "docker-registry", "serve", configFile], { stdio: ["ignore", log, log], detached: true });
    fs.closeSync(log);
    child.unref();
    const pid = child.pid!;
    let exited: number | string | null = null;
    child.on("exit", (code, signal) => (exited = code ?? signal));
    const stop = () => stopRegistry(pid);
    for (let i = 0; i < 150; i++) {
        if (exited !== null) break;
        const probe = spawnSync("ip", ["netns", "exec", opts.netns, "bash", "-c", `exec 3<>/dev/tcp/${opts.address}/${opts.port}`], { stdio: "ignore" });
        if (probe.status === 0) return { pid, stop };
        await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await stop();
    const tail = fs.readFileSync(opts.logFile, "utf8").split("\n").slice(-15).join("\n");
    throw new Error(`docker-registry did not listen on ${opts.address}:${opts.port} in ${opts.netns}${exited !== null ? ` (exited: ${exited})` : ""}:\n${tail}`);
}

/** Stops a registry started by startRegistry (also from another process, by its pid). */
export async function stopRegistry(pid: number): Promise<void> {
    if (!alive(pid)) return;
    process.kill(pid, "SIGTERM");
    for (let i = 0; i < 100 && alive(pid); i++) await new Promise((resolve) => setTimeout(resolve, 100));
    if (alive(pid)) process.kill(pid, "SIGKILL");
    for (let i = 0; i < 50 && alive(pid); i++) await new Promise((resolve) => setTimeout(resolve, 100));
}

/** Serves `storageDir` read-only over TLS at address:port inside `netns`; resolves once it accepts connections. */
export function startRegistry(opts: RegistryOptions): Promise<RunningRegistry> {
    return launch({ ...opts, tls: { certFile: opts.certFile, keyFile: opts.keyFile }, readonly: true });
}

/**
 * Pushes the images into the registry storage `storageDir` under their repository
 * names and tags: skopeo copies each OCI layout to a short-lived registry on the
 * loopback of a namespace of its own (nothing listens anywhere else meanwhile),
 * and fails unless the registry stores it under the digest the compose pins.
 */
export async function fillRegistry(opts: { storageDir: string; images: TwinImage[]; log: Log; workDir: string }): Promise<void> {
    const seen = new Map<string, string>();
    for (const image of opts.images) {
        const name = `${image.repository}:${image.tag}`;
        const other = seen.get(name);
        if (other && other !== image.digest) throw new Error(`twin registry: ${name} is wanted with two images (${other}, ${image.digest})`);
        seen.set(name, image.digest);
    }
    const netns = `airlock-twin-fill-${process.pid}`;
    const ip = (...args: string[]) => {
        const result = spawnSync("ip", args, { encoding: "utf8" });
        if (result.status !== 0) throw new Error(`ip ${args.join(" ")}: ${result.stderr.trim()}`);
    };
    spawnSync("ip", ["netns", "del", netns], { stdio: "ignore" });
    ip("netns", "add", netns);
    let registry: RunningRegistry | undefined;
    try {
        ip("-n", netns, "link", "set", "lo", "up");
        fs.mkdirSync(opts.workDir, { recursive: true });
        const logFile = path.join(opts.workDir, "registry-fill.log");
        registry = await launch({ netns, address: "127.0.0.1", port: 5000, storageDir: opts.storageDir, logFile, readonly: false });
        const started = Date.now();
        for (const [name, digest] of seen) {
            const image = opts.images.find((i) => `${i.repository}:${i.tag}` === name)!;
            const digestFile = path.join(opts.workDir, "pushed.digest");
            fs.rmSync(digestFile, { force: true });
            await runLogged(
                "ip",
                ["netns", "exec", netns, "skopeo", "copy", "--quiet", "--preserve-digests", "--dest-tls-verify=false", "--digestfile", digestFile, `oci:${image.layout}:${LAYOUT_REF}`, `docker://127.0.0.1:5000/${name}`],
                path.join(opts.workDir, "skopeo.log"),
            );
            const pushed = fs.readFileSync(digestFile, "utf8").trim();
            if (pushed !== digest) throw new Error(`twin registry: ${name} was stored as ${pushed}, not ${digest}`);
        }
        opts.log(`registry: ${seen.size} images in ${opts.storageDir} (${Math.round((Date.now() - started) / 1000)} s)`);
    } finally {
        await registry?.stop();
        spawnSync("ip", ["netns", "del", netns], { stdio: "ignore" });
    }
}
