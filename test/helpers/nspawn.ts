import { ChildProcess, spawn } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { readStackFile } from "../../components/config/load";
import type { StackConfig } from "../../components/config/schema";
import type { RenderedHost } from "../../components/render/hosts";
import { editedStack, renderHosts } from "./stacks";
import { HOST_SUITE } from "../../twin/contract";
import { installFiles, run } from "./tools";

/**
 * A root filesystem of the hosts' Debian release (HOST_SUITE) booted with its own systemd under systemd-nspawn:
 * the host units airlock renders run for real (ordering, dependencies, failures),
 * in seconds rather than a VM's minutes. The image is built with mmdebstrap from
 * Debian's registry and cached under /var/cache, keyed by its package list.
 */

const CACHE = "/var/cache/airlock-nspawn";

/** Packages of the booted host: systemd with logind and user managers, nftables, sshd. */
export const ROOTFS_PACKAGES = [
    "systemd", "systemd-sysv", "dbus", "dbus-user-session", "libpam-systemd",
    "nftables", "iproute2", "procps", "openssh-server", "passwd", "util-linux", "python3", "socat",
    // The checkpoint engine's btrfs commands (the sandbox installs them too).
    "btrfs-progs",
];

/** The cached rootfs tarball, built when missing. */
export function debianRootfs(packages = ROOTFS_PACKAGES): string {
    const key = crypto.createHash("sha256").update([HOST_SUITE, ...packages].join("\n")).digest("hex").slice(0, 16);
    const tarball = path.join(CACHE, `${HOST_SUITE}-${key}.tar`);
    if (fs.existsSync(tarball)) return tarball;
    fs.mkdirSync(CACHE, { recursive: true });
    const staged = `${tarball}.${process.pid}.tmp`;
    const built = run("mmdebstrap", ["--quiet", "--variant=apt", "--format=tar", `--include=${packages.join(",")}`, HOST_SUITE, staged, "http://deb.debian.org/debian"], { timeout: 600_000 });
    if (built.status !== 0) {
        fs.rmSync(staged, { force: true });
        throw new Error(`mmdebstrap failed: ${built.stderr.slice(-2000)}`);
    }
    fs.renameSync(staged, tarball);
    return tarball;
}

export interface BootedHost {
    root: string;
    /** Runs a command inside the booted host (all its namespaces), as root. */
    exec(cmd: string[], options?: { input?: string; timeout?: number }): ReturnType<typeof run>;
    /** Waits until `cmd` exits 0 inside the host. */
    waitFor(cmd: string[], seconds: number): Promise<boolean>;
    log(): string;
    stop(): Promise<void>;
}

/** Extracts the rootfs into `root` (a fresh directory). */
export function extractRootfs(tarball: string, root: string): void {
    fs.mkdirSync(root, { recursive: true });
    const extracted = run("tar", ["-C", root, "-xf", tarball], { timeout: 120_000 });
    if (extracted.status !== 0) throw new Error(`tar: ${extracted.stderr}`);
}

/**
 * A fresh copy of the cached rootfs in a new directory under /var/tmp, with what
 * cloud-init does before runcmd for the dev stack's sandbox: its write_files
 * installed and its agent user added as the rendered users entry says.
 */
export function sandboxRootfs(label: string): { dir: string; root: string; cfg: StackConfig; sandbox: RenderedHost } {
    const tarball = debianRootfs();
    const dir = fs.mkdtempSync(`/var/tmp/airlock-${label}-`);
    const cfg = readStackFile(editedStack("dev", () => undefined));
    const sandbox = renderHosts(cfg).sandbox;
    const root = path.join(dir, "root");
    extractRootfs(tarball, root);
    installFiles(sandbox, root);
    const user = YAML.parse(sandbox.cloudInit).users.find((u: { name: string }) => u.name === cfg.agent.user);
    const added = run("chroot", [root, "useradd", "--uid", String(user.uid), "--create-home", "--shell", user.shell, cfg.agent.user]);
    if (added.status !== 0) throw new Error(`useradd in the rootfs: ${added.stderr}`);
    return { dir, root, cfg, sandbox };
}

/**
 * Boots `root` in the network namespace `netns` (created by the caller), with
 * extra `--bind` mounts, and returns once its systemd answers.
 */
export async function bootRootfs(root: string, netns: string, binds: string[] = []): Promise<BootedHost> {
    const logFile = `${root}.boot.log`;
    const log = fs.openSync(logFile, "w");
    const nspawn: ChildProcess = spawn(
        "systemd-nspawn",
        ["--quiet", "-D", root, "--boot", "--register=no", "--keep-unit", "--console=read-only", "--capability=CAP_NET_ADMIN", `--network-namespace-path=/run/netns/${netns}`, ...binds.map((b) => `--bind=${b}`)],
        { stdio: ["ignore", log, log] },
    );
    fs.closeSync(log);
    // The container's PID 1 is the child of systemd-nspawn in a PID namespace of its own: before
    // it, nspawn's short-lived outer child is its only child (picked under load, every exec then
    // failed with "cannot open /proc/PID/ns/ipc" and the boot looked stuck).
    const ownPidNs = fs.readlinkSync("/proc/self/ns/pid");
    const inOtherPidNs = (pid: string) => {
        try {
            return fs.readlinkSync(`/proc/${pid}/ns/pid`) !== ownPidNs;
        } catch {
            return false;
        }
    };
    const leader = async (): Promise<number | undefined> => {
        for (let i = 0; i < 600; i++) {
            const child = run("pgrep", ["-P", String(nspawn.pid)]).stdout.trim().split("\n").find((pid) => pid !== "" && inOtherPidNs(pid));
            if (child) return Number(child);
            if (nspawn.exitCode !== null) return undefined;
            await new Promise((r) => setTimeout(r, 100));
        }
        return undefined;
    };
    const pid = await leader();
    if (pid === undefined) throw new Error(`systemd-nspawn did not start: ${fs.readFileSync(logFile, "utf8").slice(-2000)}`);
    const exec = (cmd: string[], options: { input?: string; timeout?: number } = {}) =>
        run("nsenter", ["--target", String(pid), "--mount", "--uts", "--ipc", "--net", "--pid", "--", ...cmd], {
            input: options.input,
            timeout: options.timeout ?? 60_000,
            env: { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", LANG: "C.UTF-8" },
        });
    const waitFor = async (cmd: string[], seconds: number) => {
        for (let i = 0; i < seconds * 4; i++) {
            if (exec(cmd, { timeout: 10_000 }).status === 0) return true;
            await new Promise((r) => setTimeout(r, 250));
        }
        return false;
    };
    const host: BootedHost = {
        root,
        exec,
        waitFor,
        log: () => fs.readFileSync(logFile, "utf8"),
        stop: () =>
            new Promise<void>((resolve) => {
                if (nspawn.exitCode !== null) return resolve();
                const timer = setTimeout(() => nspawn.kill("SIGKILL"), 20_000);
                nspawn.once("exit", () => {
                    clearTimeout(timer);
                    resolve();
                });
                // systemd-nspawn asks the container to power off on SIGTERM.
                nspawn.kill("SIGTERM");
            }),
    };
    // Boot is over when the manager says so, whatever the outcome (a failed unit is the tests' to judge).
    // Three minutes: seconds on a quiet machine, but a full suite beside QEMU guests once took more than one.
    for (let i = 0; i < 720; i++) {
        if (/^(running|degraded|maintenance)$/.test(exec(["systemctl", "is-system-running"], { timeout: 10_000 }).stdout.trim())) return host;
        await new Promise((r) => setTimeout(r, 250));
    }
    // What it still waits for says why (the console's tail is the shutdown's).
    const waiting = exec(["systemctl", "list-jobs", "--no-pager"], { timeout: 10_000 });
    const state = exec(["systemctl", "is-system-running"], { timeout: 10_000 }).stdout.trim();
    await host.stop();
    throw new Error(`systemd did not finish booting (${state || "no answer"}); jobs:\n${waiting.stdout}${waiting.stderr}\nconsole: ${host.log().slice(-1500)}`);
}
