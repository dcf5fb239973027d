import { ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { run } from "./tools";

/**
 * A private, rootful dockerd for the tests: its own data root, exec root and
 * socket, no iptables and no default bridge, so it leaves the machine's networking
 * alone. Production runs rootless Docker under the agent user; a rootful test
 * daemon runs the same compose file and proves the same container settings.
 */
export interface TestDocker {
    env: NodeJS.ProcessEnv;
    docker(args: string[], input?: string): ReturnType<typeof run>;
    /** Stops the daemon and waits for it (SIGKILL after 20 s). */
    stop(): Promise<void>;
}

/**
 * `netns`: the daemon (and its containers' networks) live in that network namespace, with its /etc/netns files.
 * `settings`: daemon.json keys of a rendered daemon.json, on top of the tests' own.
 */
/**
 * `iptables`: the daemon keeps its own packet rules (isolation between its networks, its embedded
 * DNS), as the sandbox's rootless daemon does in its own namespace; only in a namespace of the test's.
 */
export async function startDockerd(dir: string, extraSockets: string[] = [], netns?: string, settings: Record<string, unknown> = {}, options: { iptables?: boolean } = {}): Promise<TestDocker> {
    if (options.iptables && !netns) throw new Error("startDockerd: iptables only in a network namespace of the test's");
    const socket = path.join(dir, "docker.sock");
    const hosts = [socket, ...extraSockets].flatMap((s) => ["-H", `unix://${s}`]);
    const log = fs.openSync(path.join(dir, "dockerd.log"), "a");
    // Networks from a range of the tests' own, so routes left on the machine (other
    // daemons' bridges) never exhaust Docker's default pools.
    fs.writeFileSync(path.join(dir, "daemon.json"), `${JSON.stringify({ ...settings, "default-address-pools": [{ base: "10.213.0.0/16", size: 24 }] })}\n`);
    const args = ["--data-root", path.join(dir, "data"), "--exec-root", path.join(dir, "exec"), "--pidfile", path.join(dir, "dockerd.pid"), ...hosts, ...(options.iptables ? [] : ["--iptables=false", "--ip6tables=false"]), "--bridge=none", "--config-file", path.join(dir, "daemon.json")];
    // In a namespace: its /etc/netns files bound over /etc as `ip netns exec` does, but the
    // machine's /sys (and its cgroups) kept, which `ip netns exec` would hide. Every step
    // execs the next: the child's pid is the daemon's.
    const inNetns = 'for entry in "/etc/netns/$1"/*; do [ -e "$entry" ] && mount --bind "$entry" "/etc/${entry##*/}"; done; ns=$1; shift; exec nsenter --net="/run/netns/$ns" dockerd "$@"';
    const daemon: ChildProcess = netns
        ? spawn("unshare", ["--mount", "--propagation", "private", "sh", "-c", inNetns, "sh", netns, ...args], { stdio: ["ignore", log, log], detached: false })
        : spawn("dockerd", args, { stdio: ["ignore", log, log], detached: false });
    const env = { ...process.env, DOCKER_HOST: `unix://${socket}`, DOCKER_BUILDKIT: "0" };
    const docker = (args: string[], input?: string) => run("docker", args, { env, input, timeout: 120_000 });
    for (let i = 0; i < 300; i++) {
        if (docker(["info", "--format", "{{.ServerVersion}}"]).status === 0) {
            const stop = () =>
                new Promise<void>((resolve) => {
                    // A stopped daemon leaves its networks' bridges behind: remove them too.
                    const bridges = docker(["network", "ls", "--quiet", "--no-trunc", "--filter", "driver=bridge"]).stdout.trim().split("\n").filter(Boolean);
                    const removeBridges = () => bridges.forEach((id) => run("ip", [...(netns ? ["-n", netns] : []), "link", "del", `br-${id.slice(0, 12)}`]));
                    if (daemon.exitCode !== null) {
                        removeBridges();
                        return resolve();
                    }
                    const timer = setTimeout(() => daemon.kill("SIGKILL"), 20_000);
                    daemon.once("exit", () => {
                        clearTimeout(timer);
                        removeBridges();
                        resolve();
                    });
                    daemon.kill("SIGTERM");
                });
            return { env, docker, stop };
        }
        await new Promise((resolve) => setTimeout(resolve, 100));
    }
    daemon.kill("SIGKILL");
    throw new Error(`dockerd did not start: ${fs.readFileSync(path.join(dir, "dockerd.log"), "utf8").slice(-2000)}`);
}

/**
 * A minimal image with busybox and bash (the wrapper runs `bash -lc`), from this
 * machine's own binaries: no registry, no network.
 */
export function importTestImage(docker: TestDocker, dir: string, tag: string, extraPrograms: string[] = []): void {
    const rootfs = path.join(dir, `rootfs-${tag.replace(/[^a-z0-9]/g, "-")}`);
    fs.mkdirSync(path.join(rootfs, "bin"), { recursive: true });
    for (const d of ["tmp", "run", "workspace", "proc", "sys", "dev", "etc"]) fs.mkdirSync(path.join(rootfs, d), { recursive: true });
    fs.copyFileSync("/bin/busybox", path.join(rootfs, "bin/busybox"));
    fs.chmodSync(path.join(rootfs, "bin/busybox"), 0o755);
    for (const applet of run("/bin/busybox", ["--list"]).stdout.trim().split("\n")) {
        const link = path.join(rootfs, "bin", applet);
        if (!fs.existsSync(link)) fs.symlinkSync("busybox", link);
    }
    const bash = fs.realpathSync("/bin/bash");
    fs.rmSync(path.join(rootfs, "bin/bash"), { force: true });
    fs.copyFileSync(bash, path.join(rootfs, "bin/bash"));
    fs.chmodSync(path.join(rootfs, "bin/bash"), 0o755);
    for (const lib of run("ldd", [bash]).stdout.matchAll(/(\/\S+\.so[.\d]*)/g)) {
        const target = path.join(rootfs, lib[1]);
        fs.mkdirSync(path.dirname(target), { recursive: true });
        fs.copyFileSync(fs.realpathSync(lib[1]), target);
    }
    // Further programs (e.g. /usr/bin/git) at their own paths, with their libraries.
    for (const program of extraPrograms) {
        const target = path.join(rootfs, program);
        fs.mkdirSync(path.dirname(target), { recursive: true });
        fs.copyFileSync(fs.realpathSync(program), target);
        fs.chmodSync(target, 0o755);
        for (const lib of run("ldd", [program]).stdout.matchAll(/(\/\S+\.so[.\d]*)/g)) {
            const libTarget = path.join(rootfs, lib[1]);
            if (fs.existsSync(libTarget)) continue;
            fs.mkdirSync(path.dirname(libTarget), { recursive: true });
            fs.copyFileSync(fs.realpathSync(lib[1]), libTarget);
        }
    }
    fs.writeFileSync(path.join(rootfs, "etc/passwd"), "root:x:0:0:root:/root:/bin/bash\n");
    const imported = run("sh", ["-c", `tar -C '${rootfs}' -c . | docker import --change 'CMD ["sleep","infinity"]' - ${tag}`], { env: docker.env });
    if (imported.status !== 0) throw new Error(`docker import: ${imported.stderr}`);
}
