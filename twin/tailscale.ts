import { spawn, spawnSync } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as http from "node:http";
import * as path from "node:path";

/**
 * The twin's Tailscale stand-in (Tailscale is not obtainable here): a `tailscale`
 * Debian package (tailscaled + the CLI, twin/tailscale/) that the twin's apt mirror
 * serves in place of Tailscale's repository, and the coordinator it registers with
 * as controlplane.tailscale.com. See twin/tailscale/tailscaled for what it covers.
 */

export const SOURCES = [path.resolve(__dirname, "tailscale"), path.resolve(__dirname, "..", "..", "twin", "tailscale")].find((dir) => fs.existsSync(path.join(dir, "tailscaled")))!;

/** The package's version: the stand-in's tailscaled reports the same (its VERSION). */
export const TAILSCALE_DEB_VERSION = "1.76.6+twin1";

/** Where each file of the package goes, as in Tailscale's own package. */
const PAYLOAD: { source: string; target: string; mode: number }[] = [
    { source: "tailscaled", target: "usr/sbin/tailscaled", mode: 0o755 },
    { source: "tailscale", target: "usr/bin/tailscale", mode: 0o755 },
    { source: "tailscaled.service", target: "lib/systemd/system/tailscaled.service", mode: 0o644 },
    { source: "tailscaled.defaults", target: "etc/default/tailscaled", mode: 0o644 },
];
const MAINTAINER_SCRIPTS = ["postinst", "prerm", "postrm"];

/** A fixed timestamp for the package's files, so the same sources build the same .deb. */
const SOURCE_DATE_EPOCH = "1700000000";

function must(cmd: string, args: string[], options: { input?: string; env?: NodeJS.ProcessEnv } = {}): string {
    const result = spawnSync(cmd, args, { encoding: "utf8", ...options });
    if (result.error) throw new Error(`${cmd}: ${result.error.message}`);
    if (result.status !== 0) throw new Error(`${cmd} ${args.join(" ")}: ${(result.stderr || result.stdout).trim()}`);
    return result.stdout;
}

/**
 * Builds tailscale_<version>_all.deb in `outDir` with dpkg-deb; returns its path.
 * `bootstrapDns` is the address baked into its tailscaled for bootstrap DNS (as the
 * real one carries its DERP servers' addresses): the twin's coordinator.
 */
export function buildTailscaleDeb(outDir: string, bootstrapDns: string): string {
    fs.mkdirSync(outDir, { recursive: true });
    const staging = fs.mkdtempSync(path.join(outDir, ".tailscale-deb-"));
    try {
        const debian = path.join(staging, "DEBIAN");
        fs.mkdirSync(debian, { mode: 0o755 });
        const control = fs.readFileSync(path.join(SOURCES, "debian", "control"), "utf8").replace("@VERSION@", TAILSCALE_DEB_VERSION);
        fs.writeFileSync(path.join(debian, "control"), control, { mode: 0o644 });
        fs.copyFileSync(path.join(SOURCES, "debian", "conffiles"), path.join(debian, "conffiles"));
        fs.chmodSync(path.join(debian, "conffiles"), 0o644);
        for (const script of MAINTAINER_SCRIPTS) {
            fs.copyFileSync(path.join(SOURCES, "debian", script), path.join(debian, script));
            fs.chmodSync(path.join(debian, script), 0o755);
        }
        const epoch = new Date(Number(SOURCE_DATE_EPOCH) * 1000);
        for (const file of PAYLOAD) {
            const target = path.join(staging, file.target);
            fs.mkdirSync(path.dirname(target), { recursive: true, mode: 0o755 });
            let content = fs.readFileSync(path.join(SOURCES, file.source), "utf8");
            if (file.source === "tailscaled") {
                if (!content.includes('"@BOOTSTRAP_DNS@"')) throw new Error(`${path.join(SOURCES, file.source)}: no "@BOOTSTRAP_DNS@" to fill`);
                content = content.replace('"@BOOTSTRAP_DNS@"', JSON.stringify(bootstrapDns));
            }
            fs.writeFileSync(target, content);
            fs.chmodSync(target, file.mode);
        }
        for (const entry of fs.readdirSync(staging, { recursive: true, encoding: "utf8" })) fs.utimesSync(path.join(staging, entry), epoch, epoch);
        const deb = path.join(outDir, `tailscale_${TAILSCALE_DEB_VERSION}_all.deb`);
        must("dpkg-deb", ["--root-owner-group", "-Zxz", "--build", staging, deb], { env: { ...process.env, SOURCE_DATE_EPOCH } });
        return deb;
    } finally {
        fs.rmSync(staging, { recursive: true, force: true });
    }
}

/**
 * A single-use, pre-authorized auth key, as a TailnetKey is created: its tags, whether its
 * node is ephemeral, its lifetime. A key without tags is a user's: `user` (their login) and
 * `role` (Tailscale's user roles: owner, admin, member, ...) own the node it joins.
 */
export interface AuthKeySpec {
    tags: string[];
    user?: string;
    role?: string;
    ephemeral?: boolean;
    /** Seconds until the key expires (Tailscale's default: 90 days). */
    expirySeconds?: number;
}
export interface AuthKey extends AuthKeySpec {
    key: string;
}
/** A key for `tags`, secret-shaped as Tailscale's, made at run time. */
export function newAuthKey(tags: string[], options: Omit<AuthKeySpec, "tags"> = {}): AuthKey {
    const id = `k${crypto.randomBytes(5).toString("hex")}CNTRL`;
    return { key: ["tskey", "auth", id, crypto.randomBytes(24).toString("base64url")].join("-"), tags: [...tags], ...options };
}
/** `keys` as the coordinator takes them on its stdin. */
export function authKeysOf(...keys: AuthKey[]): Record<string, AuthKeySpec> {
    return Object.fromEntries(keys.map(({ key, ...spec }) => [key, spec]));
}

export interface CoordinatorOptions {
    /** The network namespace it listens in (the twin's, or a test's). */
    netns: string;
    /** Its address there (CONTROL_ADDRESS in the twin) and port (80: http://controlplane.tailscale.com). */
    address: string;
    port: number;
    /** The rendered tailnet policy (HuJSON), reread when it changes. */
    policyFile: string;
    /** The auth keys it accepts, each once (authKeysOf). */
    authKeys: Record<string, AuthKeySpec>;
    logFile: string;
    /** Its admin socket on this machine (root's only); default beside logFile. */
    adminSocket?: string;
    /** Where to write its pid, so a later process (`twin down`) can stop it. */
    pidFile?: string;
    /** After how long without a poll a node counts as offline (default 45 s). */
    offlineSeconds?: number;
    /** After how long offline an ephemeral node is removed, freeing its name (default 1800 s, as Tailscale's 30-60 min). */
    ephemeralOfflineSeconds?: number;
    /** How long a poll waits for a change (default 20 s); below offlineSeconds. */
    pollSeconds?: number;
}

/** A node as the coordinator knows it. */
export interface CoordinatorNode {
    id: string;
    name: string;
    hostName: string;
    dnsName: string;
    addresses: string[];
    tags: string[];
    publicKey: string;
    endpoint: string | null;
    online: boolean;
    ephemeral: boolean;
    /** When it registered (RFC 3339, as tailscale status's Created). */
    created: string;
}

export interface Coordinator {
    pid: number;
    url: string;
    /** For addCoordinatorAuthKey/coordinatorNodes from another process. */
    adminSocket: string;
    /** Accepts one more auth key (a replacement server's). */
    addAuthKey(key: AuthKey): Promise<void>;
    nodes(): Promise<CoordinatorNode[]>;
    stop(): Promise<void>;
}

function adminRequest(socketPath: string, method: string, urlPath: string, body?: unknown): Promise<{ status: number; body: any }> {
    return new Promise((resolve, reject) => {
        const data = body === undefined ? undefined : JSON.stringify(body);
        const req = http.request({ socketPath, method, path: urlPath, headers: data ? { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data) } : {} }, (res) => {
            let text = "";
            res.setEncoding("utf8");
            res.on("data", (chunk) => (text += chunk));
            res.on("end", () => {
                try {
                    resolve({ status: res.statusCode ?? 0, body: JSON.parse(text || "{}") });
                } catch (err) {
                    reject(err);
                }
            });
        });
        req.on("error", reject);
        req.setTimeout(5000, () => req.destroy(new Error("coordinator admin socket: timeout")));
        req.end(data);
    });
}

/** Another process's way in (a later `twin` command): one more auth key, through the admin socket. */
export async function addCoordinatorAuthKey(adminSocket: string, key: AuthKey): Promise<void> {
    const answer = await adminRequest(adminSocket, "POST", "/admin/keys", key);
    if (answer.status !== 200) throw new Error(`coordinator: adding an auth key: ${answer.body.error ?? answer.status}`);
}

/** The tailnet's nodes as the coordinator knows them (addresses, tags, endpoints, online). */
export async function coordinatorNodes(adminSocket: string): Promise<CoordinatorNode[]> {
    const answer = await adminRequest(adminSocket, "GET", "/admin/nodes");
    if (answer.status !== 200) throw new Error(`coordinator: listing nodes: ${answer.body.error ?? answer.status}`);
    return answer.body.nodes;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Starts the coordinator in `netns`, detached (it outlives the process that
 * started it); resolves once it answers. The auth keys reach it on its stdin only.
 */
export async function startCoordinator(options: CoordinatorOptions): Promise<Coordinator> {
    const adminSocket = options.adminSocket ?? path.join(path.dirname(options.logFile), "tailscale-coordinator.sock");
    const log = fs.openSync(options.logFile, "a");
    const timing = [
        ...(options.pollSeconds === undefined ? [] : ["--poll-seconds", String(options.pollSeconds)]),
        ...(options.offlineSeconds === undefined ? [] : ["--offline-seconds", String(options.offlineSeconds)]),
        ...(options.ephemeralOfflineSeconds === undefined ? [] : ["--ephemeral-offline-seconds", String(options.ephemeralOfflineSeconds)]),
    ];
    const child = spawn(
        "ip",
        ["netns", "exec", options.netns, path.join(SOURCES, "coordinator"), "--listen", `${options.address}:${options.port}`, "--policy", options.policyFile, "--admin-socket", adminSocket, ...timing],
        { detached: true, stdio: ["pipe", log, log] },
    );
    fs.closeSync(log);
    if (child.pid === undefined) throw new Error("cannot start the tailscale coordinator");
    const pid = child.pid;
    child.stdin!.end(JSON.stringify({ authKeys: options.authKeys }));
    child.unref();
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    const running = () => child.exitCode === null && child.signalCode === null;
    if (options.pidFile) fs.writeFileSync(options.pidFile, `${pid}\n`);

    const coordinator: Coordinator = {
        pid,
        url: `http://${options.address}:${options.port}`,
        adminSocket,
        addAuthKey: (key) => addCoordinatorAuthKey(adminSocket, key),
        nodes: () => coordinatorNodes(adminSocket),
        async stop() {
            if (running()) process.kill(pid, "SIGTERM");
            await Promise.race([exited, sleep(5000)]);
            if (running()) process.kill(pid, "SIGKILL");
            fs.rmSync(adminSocket, { force: true });
            if (options.pidFile) fs.rmSync(options.pidFile, { force: true });
        },
    };
    for (let i = 0; i < 100; i++) {
        if (!running()) break;
        try {
            await coordinator.nodes();
            return coordinator;
        } catch {
            await sleep(100);
        }
    }
    await coordinator.stop();
    const tail = fs.readFileSync(options.logFile, "utf8").slice(-1000);
    throw new Error(`the tailscale coordinator did not start: ${tail.trim()}`);
}
