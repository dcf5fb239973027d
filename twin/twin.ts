import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { GUESTS, GuestRole, HOST_ADDRESS } from "./contract";
import {
    type BootFiles,
    agentWorkloadsState,
    consoleLog,
    ensureVolume,
    execInGuest,
    guestPid,
    launchGuest,
    restartGuest,
    sleep,
    stopGuest,
    waitForAgent,
    waitForCloudInit,
    waitForWorkloads,
} from "./guests";
import { startBackupStandIn, stopBackupStandIn } from "./backup";
import { publishMetadata, startMetadataService, stopMetadataService } from "./metadata";
import { createNetwork, destroyNetwork, firewallOn, netnsExists, NotReadyError, runDirOf, setFirewall, TwinError, writeFirewall } from "./network";
import type { ExecOptions, ExecResult } from "./qga";
import { startOperator, stopOperator } from "./operator";
import { coordinatorSocket, registryNames, startStandIns, StandIns, stopStandIns, twinB2Dir } from "./standins";
import { pinTailscaleKey, renderDeployment, TwinDeployment, twinResolverUpstreams } from "./userdata";
import { encodeUserData } from "../policies/engine/userData";

/**
 * `airlock twin`: both hosts of a stack as QEMU guests on this machine, booted
 * from the user_data the program renders, with stand-ins for Hetzner, Tailscale
 * and the registries. State lives in /run/airlock-twin/<stack>/.
 */

export interface GuestState {
    instanceId: string;
    launchedAt: string;
    /** When first boot ended, and in which cloud-init status. */
    cloudInitAt?: string;
    cloudInit?: string;
    /** When the agent's workloads ran (the guest is ready). */
    readyAt?: string;
    /** The image its disk is an overlay of, with that image's kernel and initrd (a restart boots them again). */
    bootFiles: BootFiles;
}

export interface TwinState {
    stack: string;
    stackFile: string;
    agentUser: string;
    hostnames: Record<GuestRole, string>;
    volume: { id: string; file: string; sizeGb: number };
    guests: Partial<Record<GuestRole, GuestState>>;
}

/**
 * How long first boot may take under emulation before the twin gives up. Beside the whole
 * test suite on 2 cores (CI) the gateway's first boot took 37.5 min (its package step alone
 * 26 min, 4.6 min on an idle machine); this leaves room above that.
 */
export const BOOT_TIMEOUT_MS = 55 * 60_000;

const stateFile = (stack: string) => path.join(runDirOf(stack), "state.json");
/** What `twin up` and `twin replace` reported, line by line with its time (the CLI shows it only on a terminal). */
export const logFile = (stack: string) => path.join(runDirOf(stack), "twin.log");

export function appendLog(stack: string, line: string) {
    if (fs.existsSync(runDirOf(stack))) fs.appendFileSync(logFile(stack), `${new Date().toISOString()} ${line}\n`);
}
const keysDir = (stack: string) => path.join(runDirOf(stack), "keys");

export type Log = (line: string) => void;

export function readState(stack: string): TwinState | undefined {
    try {
        return JSON.parse(fs.readFileSync(stateFile(stack), "utf8")) as TwinState;
    } catch {
        return undefined;
    }
}

function writeState(state: TwinState): void {
    fs.writeFileSync(stateFile(state.stack), `${JSON.stringify(state, null, 2)}\n`);
}

/** The twin of `stack`, which must be up. */
export function requireState(stack: string): TwinState {
    const state = readState(stack);
    if (!state || !netnsExists(stack)) throw new TwinError(`the twin of stack ${stack} is not up (airlock twin up --stack ${stack})`);
    return state;
}

/** What the twin needs from this machine, as one clear line each. */
export function preflight(): void {
    if (process.getuid?.() !== 0) throw new TwinError("needs root (network namespaces, taps, QEMU)");
    for (const [tool, pkg] of [
        ["qemu-system-x86_64", "qemu-system-x86"],
        ["qemu-img", "qemu-utils"],
        ["dnsmasq", "dnsmasq-base"],
        ["nft", "nftables"],
        ["ssh-keygen", "openssh-client"],
    ]) {
        if (spawnSync("sh", ["-c", `command -v ${tool}`]).status !== 0) throw new TwinError(`needs ${tool} (apt-get install ${pkg})`);
    }
}

/** An ed25519 key pair kept with the twin: generated once, reused by every boot of it. */
function keyPair(stack: string, name: string): { publicKey: string; privateKey: string } {
    const file = path.join(keysDir(stack), name);
    if (!fs.existsSync(file)) {
        fs.mkdirSync(keysDir(stack), { recursive: true, mode: 0o700 });
        const made = spawnSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", name, "-f", file], { encoding: "utf8" });
        if (made.status !== 0) throw new TwinError(`ssh-keygen: ${made.stderr.trim()}`);
    }
    // As the tls provider's publicKeyOpenssh: type and key, no comment.
    const [type, key] = fs.readFileSync(`${file}.pub`, "utf8").trim().split(/\s+/);
    return { publicKey: `${type} ${key}`, privateKey: fs.readFileSync(file, "utf8") };
}

/** Renders both hosts' user_data with this twin's deploy-time values. */
export async function renderForTwin(stack: string, stackFile: string, standIns: StandIns): Promise<TwinDeployment> {
    const hostKey = keyPair(stack, "sandbox-host-key");
    const agentKey = keyPair(stack, "gateway-agent-key");
    const operatorKey = keyPair(stack, "operator-key");
    const deployment = await renderDeployment(
        stackFile,
        stack,
        {
            joinKeys: { gateway: await standIns.joinKey("gateway"), sandbox: await standIns.joinKey("sandbox") },
            digestOf: (reference) => standIns.digestOf(reference),
            ...(standIns.builtSandboxShell ? { builtSandboxShell: standIns.builtSandboxShell } : {}),
            sandboxHostKey: { publicKeyOpenssh: `${hostKey.publicKey}\n`, privateKeyOpenssh: hostKey.privateKey },
            agentPublicKey: `${agentKey.publicKey} twin-gateway-agent`,
            operatorPublicKey: operatorKey.publicKey,
        },
        path.join(runDirOf(stack), "render"),
    );
    for (const role of Object.keys(GUESTS) as GuestRole[]) deployment.documents[role] = pinTailscaleKey(deployment.documents[role], standIns.tailscaleKeyFingerprint);
    deployment.documents.gateway = twinResolverUpstreams(deployment.documents.gateway, HOST_ADDRESS);
    return deployment;
}

let nextId = 0;
/** A new server id (Hetzner's are numbers): a replaced server is a new instance to cloud-init. */
function newInstanceId(): string {
    return String(Math.floor(Date.now() / 1000) * 10 + (nextId++ % 10));
}

async function boot(stack: string, state: TwinState, deployment: TwinDeployment, role: GuestRole, standIns: StandIns, log: Log): Promise<void> {
    const instanceId = newInstanceId();
    // As a deploy uploads it before it creates the servers.
    const bundleFile = path.join(twinB2Dir(stack), deployment.bundle.path);
    fs.mkdirSync(path.dirname(bundleFile), { recursive: true });
    fs.writeFileSync(bundleFile, deployment.bundle.text);
    publishMetadata(stack, role, {
        hostname: deployment.hostnames[role],
        instanceId,
        location: deployment.location[role],
        publicKeys: deployment.sshKeys,
        // Sent as the plan sends it: base64 of the document's gzip.
        userData: encodeUserData(deployment.documents[role]),
    });
    await launchGuest(stack, { role, instanceId, ...(role === "sandbox" ? { volume: { file: state.volume.file, id: state.volume.id } } : {}) }, standIns.bootFiles[role]);
    state.guests[role] = { instanceId, launchedAt: new Date().toISOString(), bootFiles: standIns.bootFiles[role] };
    writeState(state);
    log(`${role}: booting (instance ${instanceId}, console ${consoleLog(stack, role)})`);
}

/**
 * The gateway generates the agent's ssh key at first boot and keeps one that is
 * there already. A real first deploy then authorizes its public half on the
 * sandbox with a second `pulumi up`; the twin does both at once: its key is
 * authorized in the sandbox's user_data and placed for the agent as soon as
 * cloud-init has created the user, long before airlock-gateway-agent-key runs.
 */
async function placeAgentKey(stack: string, agentUser: string, log: Log): Promise<void> {
    const key = keyPair(stack, "gateway-agent-key");
    await waitForAgent(stack, "gateway", BOOT_TIMEOUT_MS);
    const until = Date.now() + BOOT_TIMEOUT_MS;
    while ((await execInGuest(stack, "gateway", ["getent", "passwd", agentUser])).code !== 0) {
        if (Date.now() > until) throw new TwinError(`the gateway never created ${agentUser}`);
        await sleep(2000);
    }
    const script = [
        "set -eu",
        `home="$(getent passwd "$1" | cut -d: -f6)"`,
        `test ! -e "$home/.ssh/id_ed25519"`,
        `install -d -m 0700 -o "$1" -g "$1" "$home/.ssh"`,
        `install -m 0600 -o "$1" -g "$1" /dev/stdin "$home/.ssh/id_ed25519"`,
        `printf '%s\\n' "$2" | install -m 0644 -o "$1" -g "$1" /dev/stdin "$home/.ssh/id_ed25519.pub"`,
    ].join("\n");
    const placed = await execInGuest(stack, "gateway", ["sh", "-c", script, "sh", agentUser, `${key.publicKey} twin-gateway-agent`], { input: key.privateKey });
    if (placed.code !== 0) throw new TwinError(`could not place the agent's key on the gateway: ${placed.stderr.trim() || `exit ${placed.code}`}`);
    log(`gateway: the agent's ssh key placed for ${agentUser}`);
}

/**
 * The twin boots the kernel and initrd from its cache, never the guest's /boot: the
 * guest need not rebuild its initrd when packages trigger it (btrfs-progs does), which
 * under emulation took 15 minutes and more per guest. Set before `packages:` runs
 * (cloud-init's config stage starts minutes after the guest agent answers).
 */
async function skipInitramfsRebuilds(stack: string, role: GuestRole): Promise<void> {
    await waitForAgent(stack, role, BOOT_TIMEOUT_MS);
    const conf = "/etc/initramfs-tools/update-initramfs.conf";
    const set = await execInGuest(stack, role, ["sed", "-i", "s/^update_initramfs=.*/update_initramfs=no/", conf]);
    if (set.code !== 0) throw new TwinError(`the ${role}: cannot set update_initramfs=no in ${conf}: ${set.stderr.trim()}`);
}

/**
 * Ready: first boot ended in cloud-init status done, and (unless `workloads` is false)
 * the agent's workloads run. Under emulation, pulling the images takes minutes after
 * cloud-init is done, and the sandbox's need the gateway's resolver.
 */
async function awaitReady(stack: string, state: TwinState, role: GuestRole, log: Log, workloads = true): Promise<void> {
    const outcome = await waitForCloudInit(stack, role, BOOT_TIMEOUT_MS);
    const guest = state.guests[role]!;
    guest.cloudInit = outcome.status;
    guest.cloudInitAt = new Date().toISOString();
    writeState(readMerged(stack, role, guest));
    const since = (at: string) => ((Date.parse(at) - Date.parse(guest.launchedAt)) / 1000).toFixed(0);
    log(`${role}: cloud-init ${outcome.status} after ${since(guest.cloudInitAt)} s`);
    if (outcome.status !== "done") {
        // What runcmd printed last (the boot check names the units it found down) and what failed.
        const said = await execInGuest(stack, role, ["sh", "-c", "tail -n 30 /var/log/cloud-init-output.log; echo '--- failed units:'; systemctl --failed --plain --no-legend"]).catch(() => undefined);
        throw new NotReadyError(`the ${role}'s first boot ended in cloud-init status ${outcome.status}:\n${outcome.detail}\n${said ? `${said.stdout.trim()}\n` : ""}(see ${consoleLog(stack, role)})`);
    }
    if (!workloads) return;
    await waitForWorkloads(stack, role, state.agentUser, BOOT_TIMEOUT_MS);
    guest.readyAt = new Date().toISOString();
    writeState(readMerged(stack, role, guest));
    log(`${role}: workloads running after ${since(guest.readyAt)} s`);
}

/** The state on disk with one guest's entry replaced (the two boots finish in any order). */
function readMerged(stack: string, role: GuestRole, guest: GuestState): TwinState {
    const state = readState(stack)!;
    state.guests[role] = guest;
    return state;
}

export interface UpOptions {
    stack: string;
    stackFile: string;
    log: Log;
}

export async function up({ stack, stackFile, log }: UpOptions): Promise<TwinState> {
    preflight();
    if (netnsExists(stack) || readState(stack)) throw new TwinError(`the twin of stack ${stack} is already up (airlock twin down --stack ${stack} first)`);
    const started = Date.now();
    fs.mkdirSync(runDirOf(stack), { recursive: true });
    try {
        createNetwork(stack, registryNames(stackFile));
        startMetadataService(stack);
        await startBackupStandIn(stack, log);
        const standIns = await startStandIns({ stack, stackFile, log });
        const deployment = await renderForTwin(stack, stackFile, standIns);
        const state: TwinState = {
            stack,
            stackFile: path.resolve(stackFile),
            agentUser: deployment.plan.config.agent.user,
            hostnames: deployment.hostnames,
            volume: { id: deployment.volume.id, file: path.join(runDirOf(stack), "volume.qcow2"), sizeGb: deployment.volume.sizeGb },
            guests: {},
        };
        writeState(state);
        writeFirewall(stack, deployment.firewallRules);
        setFirewall(stack, true);
        ensureVolume(state.volume.file, state.volume.sizeGb);
        await startOperator({ stack, operators: deployment.plan.config.tailnet.operators, sshKey: keyPair(stack, "operator-key"), coordinatorSocket: coordinatorSocket(stack), log });
        await boot(stack, state, deployment, "gateway", standIns, log);
        await boot(stack, state, deployment, "sandbox", standIns, log);
        await Promise.all([
            skipInitramfsRebuilds(stack, "gateway").then(() => placeAgentKey(stack, state.agentUser, log)).then(() => awaitReady(stack, state, "gateway", log)),
            skipInitramfsRebuilds(stack, "sandbox").then(() => awaitReady(stack, state, "sandbox", log)),
        ]);
        log(`twin of ${stack}: both hosts ready after ${((Date.now() - started) / 1000).toFixed(0)} s`);
        return readState(stack)!;
    } catch (err) {
        log(`twin up failed; the guests stay up for inspection (airlock twin down --stack ${stack} removes them)`);
        throw err;
    }
}

/**
 * Destroys the sandbox and boots a new one with the same volume (a new server:
 * a new instance id and join key; the same host key, pinned on the gateway).
 */
export async function replaceSandbox(stack: string, log: Log): Promise<TwinState> {
    preflight();
    const state = requireState(stack);
    const started = Date.now();
    const standIns = await startStandIns({ stack, stackFile: state.stackFile, log });
    const deployment = await renderForTwin(stack, state.stackFile, standIns);
    // Hetzner deletes a server at once (the plug pulled) unless it is created with
    // shutdown_before_deletion, when it shuts the server down first (terraform-provider-hcloud,
    // hcloud_server); the plan's server says which.
    const server = deployment.plan.resources.find((r) => r.type === "hcloud:index/server:Server" && r.inputs.name === state.hostnames.sandbox);
    const graceful = server?.inputs.shutdownBeforeDeletion === true;
    await stopGuest(stack, "sandbox", graceful ? 60_000 : 0);
    log(`sandbox: destroyed (${graceful ? "shut down first" : "without a shutdown"})`);
    await boot(stack, state, deployment, "sandbox", standIns, log);
    await skipInitramfsRebuilds(stack, "sandbox");
    // The sandbox's workloads resolve their images through the gateway: with it down, first boot is all there is to wait for.
    const gatewayUp = guestPid(stack, "gateway") !== undefined;
    if (!gatewayUp) log("sandbox: the gateway is down, so its workloads wait for it; waiting for first boot only");
    await awaitReady(stack, state, "sandbox", log, gatewayUp);
    log(`sandbox replaced in ${((Date.now() - started) / 1000).toFixed(0)} s`);
    return readState(stack)!;
}

/** Powers a guest off, keeping its disk (the boot-order test: a gateway that is down). */
export async function stop(stack: string, role: GuestRole): Promise<void> {
    requireState(stack);
    await stopGuest(stack, role);
}

/**
 * Powers a stopped guest on again from its own disk (not a new server: cloud-init does not
 * run again), and returns once its guest agent answers (`twin exec` works).
 */
export async function start(stack: string, role: GuestRole): Promise<void> {
    const state = requireState(stack);
    const guest = state.guests[role];
    if (!guest) throw new TwinError(`the twin of ${stack} has no ${role}`);
    await restartGuest(stack, { role, instanceId: guest.instanceId, ...(role === "sandbox" ? { volume: { file: state.volume.file, id: state.volume.id } } : {}) }, guest.bootFiles);
    await waitForAgent(stack, role, BOOT_TIMEOUT_MS);
}

export async function down(stack: string): Promise<void> {
    preflight();
    for (const role of Object.keys(GUESTS) as GuestRole[]) await stopGuest(stack, role, 0);
    stopOperator(stack);
    stopStandIns(stack);
    stopMetadataService(stack);
    stopBackupStandIn(stack);
    destroyNetwork(stack);
    fs.rmSync(runDirOf(stack), { recursive: true, force: true });
}

/** Runs a shell command line in a guest as root. */
export function execAsRoot(stack: string, role: GuestRole, command: string, options: ExecOptions = {}): Promise<ExecResult> {
    requireState(stack);
    return execInGuest(stack, role, ["/bin/sh", "-c", command], options);
}

/**
 * Runs a command line as the agent runtime on the gateway does: as the agent user,
 * with ssh and the rendered /etc/ssh/ssh_config.d/ settings, to the sandbox, where
 * sshd's ForceCommand wrapper runs it with docker exec. `env` is the agent's
 * environment (what SendEnv may carry).
 */
export function execAsAgent(stack: string, command: string, env: Record<string, string> = {}, timeoutMs?: number): Promise<ExecResult> {
    const state = requireState(stack);
    return execInGuest(stack, "gateway", ["runuser", "-u", state.agentUser, "--", "ssh", state.hostnames.sandbox, command], { env, ...(timeoutMs ? { timeoutMs } : {}) });
}

export interface GuestStatus {
    role: GuestRole;
    state: "running" | "stopped";
    publicAddress: string;
    tailnetAddress?: string;
    cloudInit?: string;
    /** The agent's airlock-workloads.service, as its user manager says now. */
    workloads?: string;
    instanceId?: string;
}

export async function status(stack: string): Promise<{ stack: string; firewall: boolean; guests: GuestStatus[] }> {
    const state = requireState(stack);
    const guests: GuestStatus[] = [];
    for (const role of Object.keys(GUESTS) as GuestRole[]) {
        const running = guestPid(stack, role) !== undefined;
        let tailnetAddress: string | undefined;
        let workloads: string | undefined;
        if (running) {
            const ip = await execInGuest(stack, role, ["sh", "-c", "command -v tailscale >/dev/null && tailscale ip -4"], { timeoutMs: 10_000 }).catch(() => undefined);
            tailnetAddress = ip?.code === 0 ? ip.stdout.trim() || undefined : undefined;
            workloads = await agentWorkloadsState(stack, role, state.agentUser, 10_000);
        }
        const guest = state.guests[role];
        guests.push({
            role,
            state: running ? "running" : "stopped",
            publicAddress: GUESTS[role].address,
            ...(tailnetAddress ? { tailnetAddress } : {}),
            ...(guest?.cloudInit ? { cloudInit: guest.cloudInit } : {}),
            ...(workloads ? { workloads } : {}),
            ...(guest ? { instanceId: guest.instanceId } : {}),
        });
    }
    return { stack, firewall: firewallOn(stack), guests };
}

export { NotReadyError, setFirewall, TwinError };
