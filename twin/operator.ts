import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { HOST_ADDRESS, OPERATOR_ADDRESS, twinNetns } from "./contract";
import { alive, BRIDGE, daemonRunning, runDirOf, TwinError } from "./network";
import { addCoordinatorAuthKey, AuthKeySpec, newAuthKey, SOURCES as TAILSCALE_SOURCES } from "./tailscale";

/**
 * The operator's device: a laptop on the twin's "internet" (the public bridge),
 * joined to the tailnet as the stack's first `airlock:tailnet.operators` entry
 * with the twin's Tailscale stand-in, holding the ssh key the twin adds to
 * `airlock:gateway.adminSshKeys`. Every step the README gives an operator runs
 * here, over the tailnet and through the policy, as `ssh ops@<gateway>`, never
 * through the guest agent.
 */

export const operatorNetns = (stack: string) => `${twinNetns(stack)}-op`;
export const operatorDir = (stack: string) => path.join(runDirOf(stack), "operator");
/** The operator's home: ~/.ssh (their key, their known_hosts), bind-mounted over /root for each command. */
const homeOf = (stack: string) => path.join(operatorDir(stack), "home");
const socketOf = (stack: string) => path.join(operatorDir(stack), "tailscaled.sock");
const PID_NAME = "operator-tailscaled";
/** The operator's login when the stack names only a role autogroup: somebody holding that role. */
export const TWIN_OPERATOR_LOGIN = "operator@example.com";
/** The operator's laptop's host name (its node's name in the tailnet). */
export const OPERATOR_HOSTNAME = "operator-laptop";

/**
 * The auth key an operator's device joins with, for the first of the stack's operators:
 * a tag's key for a tag (CI), otherwise a user's key: theirs for a login, one of a user
 * holding the role for a role autogroup (autogroup:member: any user).
 */
export function operatorKeySpec(operators: string[]): AuthKeySpec {
    const first = operators[0];
    if (first === undefined) throw new TwinError("airlock:tailnet.operators is empty: no operator could reach the gateway");
    if (first.startsWith("tag:")) return { tags: [first] };
    if (first.startsWith("autogroup:")) return { tags: [], user: TWIN_OPERATOR_LOGIN, role: first === "autogroup:member" ? "member" : first.slice("autogroup:".length) };
    return { tags: [], user: first, role: "member" };
}

function must(cmd: string, args: string[]): string {
    const result = spawnSync(cmd, args, { encoding: "utf8" });
    if (result.error) throw new TwinError(`${cmd}: ${result.error.message}`);
    if (result.status !== 0) throw new TwinError(`${cmd} ${args.join(" ")}: ${(result.stderr || result.stdout).trim()}`);
    return result.stdout;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface OperatorOptions {
    stack: string;
    operators: string[];
    /** The operator's ssh key pair (the public half is in the gateway's adminSshKeys). */
    sshKey: { publicKey: string; privateKey: string };
    /** The coordinator's admin socket, for the device's auth key. */
    coordinatorSocket: string;
    log: (line: string) => void;
}

/** Brings the operator's device up (or finds it up): its namespace on the bridge, its tailscaled, joined. */
export async function startOperator({ stack, operators, sshKey, coordinatorSocket, log }: OperatorOptions): Promise<void> {
    if (daemonRunning(stack, PID_NAME)) return;
    const ns = operatorNetns(stack);
    const dir = operatorDir(stack);
    stopOperator(stack);
    fs.mkdirSync(path.join(homeOf(stack), ".ssh"), { recursive: true, mode: 0o700 });
    fs.writeFileSync(path.join(homeOf(stack), ".ssh", "id_ed25519"), sshKey.privateKey, { mode: 0o600 });
    fs.writeFileSync(path.join(homeOf(stack), ".ssh", "id_ed25519.pub"), `${sshKey.publicKey} operator\n`, { mode: 0o644 });
    // First contact with a new gateway records its host key (the operator's "yes"); a changed one is refused.
    fs.writeFileSync(path.join(homeOf(stack), ".ssh", "config"), "Host *\n    StrictHostKeyChecking accept-new\n", { mode: 0o600 });

    must("ip", ["netns", "add", ns]);
    must("ip", ["-n", ns, "link", "set", "lo", "up"]);
    must("ip", ["-n", twinNetns(stack), "link", "add", "twop0", "type", "veth", "peer", "name", "eth0", "netns", ns]);
    must("ip", ["-n", twinNetns(stack), "link", "set", "twop0", "master", BRIDGE, "up"]);
    must("ip", ["-n", ns, "addr", "add", `${OPERATOR_ADDRESS}/24`, "dev", "eth0"]);
    must("ip", ["-n", ns, "link", "set", "eth0", "up"]);
    must("ip", ["-n", ns, "route", "add", "default", "via", HOST_ADDRESS]);
    // The laptop's resolver before it joins: the twin's (which names the control plane); tailscaled then points it at MagicDNS.
    fs.mkdirSync(`/etc/netns/${ns}`, { recursive: true });
    fs.writeFileSync(`/etc/netns/${ns}/resolv.conf`, `nameserver ${HOST_ADDRESS}\n`);
    fs.writeFileSync(`/etc/netns/${ns}/hosts`, "127.0.0.1 localhost\n");

    const logFd = fs.openSync(path.join(dir, "tailscaled.log"), "a");
    // wireguard-go (where the kernel has no WireGuard) keeps its socket in /run/wireguard: the device's own.
    const daemon = spawn(
        "ip",
        ["netns", "exec", ns, "sh", "-c", `mkdir -p /run/wireguard && mount -t tmpfs -o mode=0700 tmpfs /run/wireguard && exec ${path.join(TAILSCALE_SOURCES, "tailscaled")} --state=${dir}/tailscaled.state --socket=${socketOf(stack)}`],
        { detached: true, stdio: ["ignore", logFd, logFd] },
    );
    fs.closeSync(logFd);
    if (daemon.pid === undefined) throw new TwinError("cannot start the operator's tailscaled");
    fs.writeFileSync(path.join(runDirOf(stack), `${PID_NAME}.pid`), `${daemon.pid}\n`);
    daemon.unref();
    for (let i = 0; i < 100 && !fs.existsSync(socketOf(stack)); i++) await sleep(100);
    if (!fs.existsSync(socketOf(stack))) throw new TwinError(`the operator's tailscaled did not start: ${fs.readFileSync(path.join(dir, "tailscaled.log"), "utf8").slice(-500)}`);

    const key = newAuthKey([], operatorKeySpec(operators));
    await addCoordinatorAuthKey(coordinatorSocket, key);
    const keyFile = path.join(dir, "authkey");
    fs.writeFileSync(keyFile, `${key.key}\n`, { mode: 0o600 });
    try {
        const spec = operatorKeySpec(operators);
        const up = spawnSync(
            "ip",
            ["netns", "exec", ns, path.join(TAILSCALE_SOURCES, "tailscale"), `--socket=${socketOf(stack)}`, "up", `--auth-key=file:${keyFile}`, `--hostname=${OPERATOR_HOSTNAME}`, ...(spec.tags.length ? [`--advertise-tags=${spec.tags.join(",")}`] : []), "--accept-dns=true"],
            { encoding: "utf8", timeout: 150_000 },
        );
        if (up.status !== 0) throw new TwinError(`the operator's tailscale up: ${(up.stderr || up.stdout).trim()}`);
    } finally {
        fs.rmSync(keyFile, { force: true });
    }
    log(`operator: ${OPERATOR_HOSTNAME} joined the tailnet as ${operators[0]} (${OPERATOR_ADDRESS} on the public network)`);
}

export function stopOperator(stack: string): void {
    const pidFile = path.join(runDirOf(stack), `${PID_NAME}.pid`);
    try {
        const pid = Number(fs.readFileSync(pidFile, "utf8").trim());
        if (pid > 1 && alive(pid)) {
            process.kill(pid, "SIGTERM");
            for (let i = 0; i < 50 && alive(pid); i++) spawnSync("sleep", ["0.1"]);
            if (alive(pid)) process.kill(pid, "SIGKILL");
        }
    } catch {
        // not running
    }
    fs.rmSync(pidFile, { force: true });
    spawnSync("ip", ["netns", "del", operatorNetns(stack)]);
    fs.rmSync(`/etc/netns/${operatorNetns(stack)}`, { recursive: true, force: true });
}

export interface OperatorResult {
    code: number;
    stdout: string;
    stderr: string;
}

/**
 * Runs a shell command line on the operator's device, as the operator runs the
 * README's steps: bash, with their ~/.ssh, their resolver (MagicDNS), and the
 * tailnet. `input` is the command's stdin.
 */
export function operatorExec(stack: string, command: string, options: { input?: string; timeoutMs?: number; env?: NodeJS.ProcessEnv } = {}): OperatorResult {
    if (!daemonRunning(stack, PID_NAME)) throw new TwinError(`the twin of ${stack} has no operator device (airlock twin up starts it)`);
    const result = spawnSync(
        "ip",
        ["netns", "exec", operatorNetns(stack), "sh", "-c", 'mount --bind "$0" /root && exec bash -c "$1"', homeOf(stack), command],
        { encoding: "utf8", input: options.input ?? "", timeout: options.timeoutMs ?? 300_000, env: { ...(options.env ?? process.env), HOME: "/root" } },
    );
    if (result.error) throw new TwinError(`the operator's command: ${result.error.message}`);
    return { code: result.status ?? 1, stdout: result.stdout, stderr: result.stderr };
}
