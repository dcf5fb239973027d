import { ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { CHECKPOINT_CLIENT_PATH, DESTRUCTIVE_RULES_PATH, TRY_OUTPUT_PATH } from "../../components/render/checkpoints";
import { BROKER_CLIENT_PATH, BROKER_PATH, BROKER_SOCKET_PATH, HERMES_CLIENT_PATH, RenderedHost, SANDBOX_WRAPPER_PATH } from "../../components/render/hosts";
import { renderedFile } from "./stacks";
import { isRoot, run } from "./tools";

/**
 * The sandbox's root broker without systemd as PID 1: `systemd-socket-activate
 * --accept --inetd` does what airlock-broker.socket (Accept=yes) does - one broker
 * per connection, the connection as stdin/stdout - and the socket gets the unit's
 * owner, group and mode. The broker's state directory (systemd's StateDirectory=)
 * is a root-owned 0700 folder under `root`.
 */
export interface TestBroker {
    socket: string;
    stateDir: string;
    recordFile: string;
    log: string;
    /** The public half of the key the broker signs the record's head with (the sandbox's host key there). */
    signingPublicKey: string;
    stop(): Promise<void>;
}

/** The rendered broker client with its socket moved to `socket` (nothing else changes). */
export function brokerClient(sandbox: RenderedHost, socket: string): string {
    const client = renderedFile(sandbox, BROKER_CLIENT_PATH);
    if (!client.includes(`BROKER_SOCKET=${BROKER_SOCKET_PATH}\n`)) throw new Error("broker client: socket path not found");
    return client.replace(`BROKER_SOCKET=${BROKER_SOCKET_PATH}\n`, `BROKER_SOCKET=${socket}\n`);
}

/** The rendered checkpoint client with the destructive-command list moved under `root` (nothing else changes). */
export function checkpointClient(sandbox: RenderedHost, root: string): string {
    const client = renderedFile(sandbox, CHECKPOINT_CLIENT_PATH);
    if (!client.includes(`DESTRUCTIVE_RULES=${DESTRUCTIVE_RULES_PATH}\n`)) throw new Error("checkpoint client: rules path not found");
    return client.replace(`DESTRUCTIVE_RULES=${DESTRUCTIVE_RULES_PATH}\n`, `DESTRUCTIVE_RULES=${path.join(root, DESTRUCTIVE_RULES_PATH)}\n`);
}

/**
 * Installs the broker client (socket moved under `dir`), the wrapper's other sourced files and the broker
 * itself into `dir` at their host paths; returns the paths.
 */
export function installBrokerFiles(sandbox: RenderedHost, dir: string): { broker: string; socket: string; stateDir: string } {
    const socket = path.join(dir, BROKER_SOCKET_PATH);
    const broker = path.join(dir, BROKER_PATH);
    fs.mkdirSync(path.dirname(broker), { recursive: true });
    fs.writeFileSync(broker, renderedFile(sandbox, BROKER_PATH), { mode: 0o755 });
    fs.writeFileSync(path.join(dir, BROKER_CLIENT_PATH), brokerClient(sandbox, socket), { mode: 0o644 });
    fs.writeFileSync(path.join(dir, CHECKPOINT_CLIENT_PATH), checkpointClient(sandbox, dir), { mode: 0o644 });
    fs.writeFileSync(path.join(dir, HERMES_CLIENT_PATH), renderedFile(sandbox, HERMES_CLIENT_PATH), { mode: 0o644 });
    fs.mkdirSync(path.dirname(path.join(dir, DESTRUCTIVE_RULES_PATH)), { recursive: true });
    fs.writeFileSync(path.join(dir, DESTRUCTIVE_RULES_PATH), renderedFile(sandbox, DESTRUCTIVE_RULES_PATH));
    return { broker, socket, stateDir: path.join(dir, "var/lib/airlock/record") };
}

/** The rendered wrapper and its broker files, at their host paths under `dir`. */
export function installWrapperFiles(sandbox: RenderedHost, dir: string): ReturnType<typeof installBrokerFiles> & { wrapper: string } {
    const files = installBrokerFiles(sandbox, dir);
    const wrapper = path.join(dir, SANDBOX_WRAPPER_PATH);
    fs.mkdirSync(path.dirname(wrapper), { recursive: true });
    fs.writeFileSync(wrapper, renderedFile(sandbox, SANDBOX_WRAPPER_PATH), { mode: 0o755 });
    // What a try hands back of its output, beside the wrapper as on the sandbox.
    fs.writeFileSync(path.join(dir, TRY_OUTPUT_PATH), renderedFile(sandbox, TRY_OUTPUT_PATH), { mode: 0o755 });
    return { ...files, wrapper };
}

/** Starts the broker for connections to `socket`; `group` may connect (root tests: the agent's group). */
export async function startBroker(broker: string, socket: string, stateDir: string, group?: string, env: Record<string, string> = {}): Promise<TestBroker> {
    fs.mkdirSync(path.dirname(socket), { recursive: true, mode: 0o755 });
    fs.rmSync(socket, { force: true });
    fs.mkdirSync(stateDir, { recursive: true, mode: 0o700 });
    fs.chmodSync(stateDir, 0o700);
    const log = path.join(path.dirname(stateDir), "broker.log");
    // Each test sandbox has a host key of its own, as a real one does; the broker signs with it.
    let signingKey = env.AIRLOCK_RECORD_SIGNING_KEY;
    if (!signingKey) {
        signingKey = path.join(path.dirname(stateDir), "ssh_host_ed25519_key");
        if (!fs.existsSync(signingKey)) {
            const made = run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "", "-f", signingKey]);
            if (made.status !== 0) throw new Error(`ssh-keygen: ${made.stderr}`);
        }
        env = { ...env, AIRLOCK_RECORD_SIGNING_KEY: signingKey };
    }
    const out = fs.openSync(log, "a");
    const child: ChildProcess = spawn(
        "systemd-socket-activate",
        ["--accept", "--inetd", "--listen", socket, `--setenv=STATE_DIRECTORY=${stateDir}`, ...Object.entries(env).map(([k, v]) => `--setenv=${k}=${v}`), broker],
        { stdio: ["ignore", out, out] },
    );
    fs.closeSync(out);
    for (let i = 0; i < 100 && !fs.existsSync(socket); i++) await new Promise((resolve) => setTimeout(resolve, 50));
    if (!fs.existsSync(socket)) {
        child.kill("SIGKILL");
        throw new Error(`broker socket did not appear: ${fs.readFileSync(log, "utf8")}`);
    }
    // What SocketUser=root, SocketGroup=<agent>, SocketMode=0660 give the real socket.
    if (group && isRoot()) run("chgrp", [group, socket]);
    fs.chmodSync(socket, group ? 0o660 : 0o600);
    const stop = () =>
        new Promise<void>((resolve) => {
            if (child.exitCode !== null || child.signalCode !== null) return resolve();
            child.once("exit", () => resolve());
            child.kill("SIGTERM");
        });
    const signingPublicKey = fs.readFileSync(`${signingKey}.pub`, "utf8").trim().split(" ").slice(0, 2).join(" ");
    return { socket, stateDir, recordFile: path.join(stateDir, "record.jsonl"), log, signingPublicKey, stop };
}

/** One raw exchange with the broker: `requests` as written, the reply lines as read. */
export function talk(socket: string, requests: string | Buffer, user?: string): { status: number | null; lines: string[]; stderr: string } {
    const socat = ["socat", "-t", "5", "-", `UNIX-CONNECT:${socket}`];
    const result = run(user ? "runuser" : socat[0], user ? ["-u", user, "--", ...socat] : socat.slice(1), { input: requests, timeout: 20_000 });
    return { status: result.status, lines: result.stdout.split("\n").filter((l) => l !== ""), stderr: result.stderr };
}

/** The record's entries, parsed. */
export function recordEntries(file: string): Record<string, any>[] {
    return fs.readFileSync(file, "utf8").split("\n").filter(Boolean).map((line) => JSON.parse(line));
}

/** A stand-in checkpoint engine: records its arguments; `fail` in its folder makes it refuse like the real one. */
const STUB_ENGINE = `#!/bin/bash
printf '%s\\n' "$*" >>"@DIR@/engine-calls"
if [[ -e "@DIR@/fail" ]]; then echo "airlock: $(cat "@DIR@/fail")" >&2; exit 2; fi
case "$1" in
create) echo "checkpoint 7 of $2 at 2026-11-23T10:00:00Z" ;;
list) printf 'ID  TIME (UTC)           KIND    LABEL\\n7   2026-11-23 10:00:00  manual  before\\n' ;;
restore) echo "restored $2 to checkpoint 1 (2026-11-23T10:00:00Z); its container was recreated from its image" ;;
session-ensure) echo "agent-$2" ;;
try-begin) [[ " $* " != *" --keep"* ]] || touch "@DIR@/try-keep"; echo "try 0123456789ab agent-try-0123456789ab" ;;
try-end)
	if [[ -e "@DIR@/try-keep" && " $* " == *" --status 0 "* ]]; then echo "kept: the workspace is the try's now; the state it replaced is checkpoint 8"; else echo "discarded: the workspace is as it was"; fi
	rm -f "@DIR@/try-keep" ;;
esac
`;

/**
 * The stand-in engine in `dir` (the real one is exercised as root in e2e-checkpoints),
 * with the broker environment that points a broker at it and how it was called.
 */
export function installStubEngine(dir: string) {
    const engine = path.join(dir, "engine");
    fs.writeFileSync(engine, STUB_ENGINE.replaceAll("@DIR@", dir), { mode: 0o755 });
    const volume = path.join(dir, "volume");
    fs.mkdirSync(path.join(volume, "checkpoints", "shared"), { recursive: true });
    const config = path.join(dir, "checkpoints.json");
    fs.writeFileSync(config, JSON.stringify({ volume }));
    const calls = () => (fs.existsSync(path.join(dir, "engine-calls")) ? fs.readFileSync(path.join(dir, "engine-calls"), "utf8").trim().split("\n") : []);
    return { volume, calls, brokerEnv: { AIRLOCK_CHECKPOINT_ENGINE: engine, AIRLOCK_CHECKPOINTS_CONFIG: config } };
}
