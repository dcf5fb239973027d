import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { GUESTS, GuestRole, twinNetns } from "./contract";
import { alive, NotReadyError, runDirOf, tapOf, TwinError } from "./network";
import { ExecOptions, ExecResult, guestExec, Qga } from "./qga";

/**
 * The guests: QEMU under TCG (no usable KVM here), booted with the base image's
 * kernel on a qcow2 overlay of its disk, inside the twin's namespace. What makes
 * cloud-init see Hetzner: SMBIOS manufacturer Hetzner with the server id as
 * serial (the metadata's instance-id), and the hcloud Volume as a SCSI disk from
 * vendor HC, product Volume, serial <volume id>.
 */

export interface BootFiles {
    kernel: string;
    initrd: string;
    /** The base image (qcow2); never written, guests get overlays. */
    disk: string;
    rootDevice: string;
}

export interface GuestLaunch {
    role: GuestRole;
    instanceId: string;
    /** The sandbox's workspace volume (a qcow2 that outlives the guest). */
    volume?: { file: string; id: string };
}

/** Memory per guest: Hetzner's cx23 has 4 GiB, the twin gives at most 2 GiB. */
export const GUEST_MEMORY_MB = 2048;
/** TCG's translation cache (MiB): the default (1 GiB) costs RSS for little speed here. */
const TCG_CACHE_MB = 256;
/**
 * Emulated guests are the heaviest load this machine carries: they yield to the rest
 * of it (an operator's shell, the test suite beside them, whose systemd-nspawn boots
 * stalled past three minutes under two guests at normal priority), but not so far
 * that they starve: at 10 the twin's first boot beside the test suite took 17 minutes
 * instead of 12.5 alone, and the twin is the whole suite's longest part.
 */
const GUEST_NICENESS = "5";

export const guestDir = (stack: string, role: GuestRole) => path.join(runDirOf(stack), role);
export const qgaSocket = (stack: string, role: GuestRole) => path.join(guestDir(stack, role), "qga.sock");
export const consoleLog = (stack: string, role: GuestRole) => path.join(guestDir(stack, role), "console.log");
const pidFile = (stack: string, role: GuestRole) => path.join(guestDir(stack, role), "qemu.pid");

export function qemuArgs(stack: string, launch: GuestLaunch, boot: BootFiles, overlay: string): string[] {
    const dir = guestDir(stack, launch.role);
    const guest = GUESTS[launch.role];
    const args = [
        "qemu-system-x86_64",
        "-name", `airlock-twin-${stack}-${launch.role}`,
        "-machine", "pc",
        "-accel", `tcg,tb-size=${TCG_CACHE_MB}`,
        "-cpu", "qemu64",
        "-smp", "2",
        "-m", String(GUEST_MEMORY_MB),
        "-nodefaults", "-no-user-config", "-display", "none",
        "-kernel", boot.kernel,
        "-initrd", boot.initrd,
        "-append", `root=${boot.rootDevice} console=ttyS0`,
        "-smbios", `type=1,manufacturer=Hetzner,product=vServer,serial=${launch.instanceId}`,
        "-drive", `file=${overlay},if=virtio,format=qcow2,cache=unsafe,discard=unmap`,
        "-netdev", `tap,id=public,ifname=${tapOf(launch.role)},script=no,downscript=no`,
        "-device", `virtio-net-pci,netdev=public,mac=${guest.mac}`,
        "-object", "rng-random,id=rng,filename=/dev/urandom",
        "-device", "virtio-rng-pci,rng=rng",
        // Appended, not truncated: a guest powered on again keeps what its earlier boots printed.
        "-chardev", `file,id=console,path=${path.join(dir, "console.log")},append=on`,
        "-serial", "chardev:console",
        "-chardev", `socket,id=qga,path=${qgaSocket(stack, launch.role)},server=on,wait=off`,
        "-device", "virtio-serial-pci",
        "-device", "virtserialport,chardev=qga,name=org.qemu.guest_agent.0",
        "-pidfile", pidFile(stack, launch.role),
    ];
    if (launch.volume) {
        args.push(
            "-drive", `file=${launch.volume.file},if=none,id=volume,format=qcow2,cache=writeback`,
            "-device", "virtio-scsi-pci,id=scsi",
            "-device", `scsi-hd,bus=scsi.0,drive=volume,vendor=HC,product=Volume,serial=${launch.volume.id}`,
        );
    }
    return args;
}

function must(cmd: string, args: string[]): void {
    const result = spawnSync(cmd, args, { encoding: "utf8" });
    if (result.error) throw new TwinError(`${cmd}: ${result.error.message}`);
    if (result.status !== 0) throw new TwinError(`${cmd} ${args.join(" ")}: ${(result.stderr || result.stdout).trim()}`);
}

/** Creates the volume's qcow2 unless it exists (a replaced sandbox gets the same one). */
export function ensureVolume(file: string, sizeGb: number): void {
    if (fs.existsSync(file)) return;
    must("qemu-img", ["create", "-q", "-f", "qcow2", file, `${sizeGb}G`]);
}

/** Boots a guest from a fresh overlay: a new server, as far as cloud-init can tell. */
export async function launchGuest(stack: string, launch: GuestLaunch, boot: BootFiles): Promise<void> {
    if (guestPid(stack, launch.role) !== undefined) throw new TwinError(`the ${launch.role} is already running`);
    const dir = guestDir(stack, launch.role);
    fs.rmSync(dir, { recursive: true, force: true });
    fs.mkdirSync(dir, { recursive: true });
    const overlay = path.join(dir, "disk.qcow2");
    must("qemu-img", ["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", boot.disk, overlay]);
    await startQemu(stack, launch, boot, overlay);
}

/** Boots a guest again from its existing overlay: the same server, powered on. */
export async function restartGuest(stack: string, launch: GuestLaunch, boot: BootFiles): Promise<void> {
    if (guestPid(stack, launch.role) !== undefined) throw new TwinError(`the ${launch.role} is already running`);
    const overlay = path.join(guestDir(stack, launch.role), "disk.qcow2");
    if (!fs.existsSync(overlay)) throw new TwinError(`the ${launch.role} has no disk to boot`);
    await startQemu(stack, launch, boot, overlay);
}

/** What QEMU itself said (its errors, why it exited): beside the console log. */
export const qemuLog = (stack: string, role: GuestRole) => path.join(guestDir(stack, role), "qemu.log");

/**
 * QEMU in the background with its own output kept (not -daemonize, which sends it to
 * /dev/null: a guest that vanished mid-run left no reason). Returns once its guest
 * agent's socket exists, or fails with what QEMU said.
 */
async function startQemu(stack: string, launch: GuestLaunch, boot: BootFiles, overlay: string): Promise<void> {
    const logFile = qemuLog(stack, launch.role);
    const out = fs.openSync(logFile, "a");
    const child = spawn("ip", ["netns", "exec", twinNetns(stack), "nice", "-n", GUEST_NICENESS, ...qemuArgs(stack, launch, boot, overlay)], { detached: true, stdio: ["ignore", out, out] });
    fs.closeSync(out);
    child.unref();
    let exited = false;
    child.once("exit", () => (exited = true));
    const until = Date.now() + 60_000;
    while (!fs.existsSync(qgaSocket(stack, launch.role)) || guestPid(stack, launch.role) === undefined) {
        if (exited || Date.now() > until) throw new TwinError(`the ${launch.role} did not start${whyStopped(stack, launch.role)}`);
        await sleep(200);
    }
}

/** Why a guest is gone, for errors: the end of QEMU's own log, if it said anything. */
export function whyStopped(stack: string, role: GuestRole): string {
    try {
        const said = fs.readFileSync(qemuLog(stack, role), "utf8").trim().split("\n").slice(-3).join(" / ");
        return said ? ` (QEMU: ${said})` : " (QEMU exited without a word)";
    } catch {
        return "";
    }
}

export function guestPid(stack: string, role: GuestRole): number | undefined {
    try {
        const pid = Number(fs.readFileSync(pidFile(stack, role), "utf8").trim());
        return pid > 1 && alive(pid) ? pid : undefined;
    } catch {
        return undefined;
    }
}

/** Powers a guest off (as Hetzner's shutdown: ACPI, then hard after a grace period) and waits for QEMU to exit. */
export async function stopGuest(stack: string, role: GuestRole, graceMs = 60_000): Promise<void> {
    const pid = guestPid(stack, role);
    if (pid === undefined) return;
    if (graceMs > 0) {
        try {
            const qga = await Qga.connect(qgaSocket(stack, role), 3000);
            try {
                // Answers nothing on success: the guest goes away.
                await qga.request("guest-shutdown", { mode: "powerdown" }, 2000).catch(() => undefined);
            } finally {
                qga.close();
            }
            const until = Date.now() + graceMs;
            while (Date.now() < until && alive(pid)) await sleep(500);
        } catch {
            // no agent: pull the plug
        }
    }
    if (alive(pid)) {
        process.kill(pid, "SIGTERM");
        const until = Date.now() + 10_000;
        while (Date.now() < until && alive(pid)) await sleep(200);
        if (alive(pid)) process.kill(pid, "SIGKILL");
    }
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs argv in the guest as root (qemu-guest-agent). */
export function execInGuest(stack: string, role: GuestRole, argv: string[], options: ExecOptions = {}): Promise<ExecResult> {
    if (guestPid(stack, role) === undefined) throw new TwinError(`the ${role} is not running${whyStopped(stack, role)}`);
    return guestExec(qgaSocket(stack, role), argv, options);
}

/** Waits until the guest agent answers (the guest has booted far enough to run commands). */
export async function waitForAgent(stack: string, role: GuestRole, timeoutMs: number): Promise<void> {
    const until = Date.now() + timeoutMs;
    for (;;) {
        if (guestPid(stack, role) === undefined) throw new TwinError(`the ${role} stopped while booting${whyStopped(stack, role)} (see ${consoleLog(stack, role)})`);
        try {
            const qga = await Qga.connect(qgaSocket(stack, role), 3000);
            qga.close();
            return;
        } catch {
            if (Date.now() > until) throw new TwinError(`the ${role}'s guest agent did not answer within ${Math.round(timeoutMs / 1000)} s (see ${consoleLog(stack, role)})`);
            await sleep(2000);
        }
    }
}

export interface CloudInitOutcome {
    status: string;
    detail: string;
}

/**
 * Waits for first boot's end (cloud-init's boot-finished; `status --wait` alone
 * returns early once a stage has reported an error), then `cloud-init status --long`.
 */
export async function waitForCloudInit(stack: string, role: GuestRole, timeoutMs: number): Promise<CloudInitOutcome> {
    const until = Date.now() + timeoutMs;
    await waitForAgent(stack, role, timeoutMs);
    // A poll the guest agent does not answer (busy guest, another client's turn) is a poll that says "not yet".
    const finished = () => execInGuest(stack, role, ["test", "-e", "/var/lib/cloud/instance/boot-finished"]).then((r) => r.code === 0, () => false);
    while (!(await finished())) {
        if (Date.now() > until) throw new TwinError(`the ${role}'s first boot did not finish within ${Math.round(timeoutMs / 1000)} s (see ${consoleLog(stack, role)})`);
        await sleep(10_000);
    }
    const result = await execInGuest(stack, role, ["cloud-init", "status", "--long"]);
    const status = /^status:\s*(\S+)/m.exec(result.stdout)?.[1] ?? "unknown";
    return { status, detail: result.stdout.trim() };
}

/**
 * `sh -c` script, the agent's user name as $1: prints its workloads' state, or nothing while
 * its user manager is not running. It asks the manager on its own socket, as the agent: no
 * login session, unlike `systemctl --user --machine`, whose session, bridge unit and PAM stack
 * per question cost the emulated guest's init a fifth of a core while the twin waited.
 */
export const AGENT_WORKLOADS_STATE_SCRIPT =
    'uid="$(id -u "$1")"; systemctl is-active --quiet "user@$uid.service" || exit 0; XDG_RUNTIME_DIR="/run/user/$uid" exec setpriv --reuid="$uid" --regid="$(id -g "$1")" --clear-groups systemctl --user is-active airlock-workloads.service';

/**
 * The agent's airlock-workloads.service as its user manager says, asked only when that
 * manager already runs: `systemctl --user --machine` would start it, and with it the
 * egress rules it is bound to, which on a first boot before Tailscale is installed cut
 * the host's DNS to everything but the gateway's resolver (a `twin status` during a
 * replacement's first boot left it off the tailnet). Undefined when it does not run.
 */
export async function agentWorkloadsState(stack: string, role: GuestRole, agentUser: string, timeoutMs: number): Promise<string | undefined> {
    const state = await execInGuest(stack, role, ["sh", "-c", AGENT_WORKLOADS_STATE_SCRIPT, "sh", agentUser], { timeoutMs }).catch(() => undefined);
    return state?.stdout.trim() || undefined;
}

/**
 * Waits until the agent's workloads run: its user manager's airlock-workloads.service
 * is active (compose up has created every container, images pulled). First boot's end
 * is not that: the workloads start once the tailnet-addressed config is rendered,
 * and pulling under emulation takes minutes more.
 */
export async function waitForWorkloads(stack: string, role: GuestRole, agentUser: string, timeoutMs: number): Promise<void> {
    const until = Date.now() + timeoutMs;
    for (;;) {
        const state = await agentWorkloadsState(stack, role, agentUser, 30_000);
        if (state === "active") return;
        if (Date.now() > until) {
            throw new NotReadyError(`the ${role}'s workloads did not start within ${Math.round(timeoutMs / 1000)} s (airlock-workloads.service: ${state ?? "unknown, the agent's user manager is not running"}; twin exec ${role} -- journalctl --user-unit airlock-workloads.service -M ${agentUser}@)`);
        }
        await sleep(15_000);
    }
}
