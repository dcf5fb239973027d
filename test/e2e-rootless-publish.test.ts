import { ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as YAML from "yaml";
import { readStackFile } from "../components/config/load";
import { COMPOSE_TEMPLATE_PATH, DNS_REDIRECT_PATH, RenderedHost } from "../components/render/hosts";
import { importTestImage, TestDocker } from "./helpers/dockerd";
import { editedStack, renderedFile, renderHosts, tempDir } from "./helpers/stacks";
import { isRoot, run, toolsAvailable, withTailnetValues } from "./helpers/tools";

/**
 * AdGuard Home on the gateway answers (allowed_clients) and logs (the record's DNS
 * join) by the client's source address, so the sandbox's address must reach the
 * container. Here the REAL rootless dockerd runs as a throwaway user with subuids,
 * from the rendered gateway docker.service (its environment, its ExecStart) and
 * the files the gateway installs, in a network namespace shaped like the gateway
 * (tailscale0 with a tailnet address, the rendered DNS redirect). A container
 * publishes UDP and TCP as the rendered compose publishes AdGuard Home and answers
 * each client with the peer address it sees; the client, in its own namespace,
 * sends to port 53 as the sandbox does. Then the daemon restarts, restoring the
 * container itself, and the client asks again. The runtime's port, published on
 * loopback, answers on the gateway's loopback and not on its tailnet address.
 *
 * Seen first (before airlock-rootless-publish): the container saw 172.17.0.1, the
 * docker bridge's gateway, for both TCP and UDP: docker-proxy inside rootlesskit's
 * namespace re-originates every connection even with the slirp4netns port driver.
 */
const canRun =
    isRoot() &&
    toolsAvailable("rootless port publishing", ["rootlesskit", "rootlessctl", "slirp4netns", "newuidmap", "dockerd", "docker", "socat", "nsenter", "unshare", "setpriv", "useradd", "nft", "ip"]);
if (!isRoot()) console.warn("SKIPPED rootless port publishing: needs root for a user with subuids and network namespaces (CI runs it as root)");

const GATEWAY = "100.100.9.1";
const CLIENT = "100.100.9.2";
const RUNTIME_PORT = 18080;

interface RootlessDaemon {
    process: ChildProcess;
    log: string;
}

describe.runIf(canRun)("the gateway's rootless Docker keeps client addresses", () => {
    const tag = String(process.pid % 10000);
    const user = `alpub${tag}`;
    const gw = `alpub-gw-${tag}`;
    const cl = `alpub-cl-${tag}`;
    const dir = tempDir("rootless-publish");
    const runtimeDir = path.join(dir, "run");
    let gateway: RenderedHost;
    let docker: TestDocker;
    let daemon: RootlessDaemon | undefined;
    let uid = 0;
    const inNs = (ns: string, cmd: string[], input?: string) => run("ip", ["netns", "exec", ns, ...cmd], { input, timeout: 20_000 });

    /** The rendered unit's Environment= and ExecStart= lines, as the agent's user manager runs them. */
    function unitCommand(): { env: string[]; argv: string[] } {
        const unit = renderedFile(gateway, "/etc/systemd/user/docker.service");
        const values = (key: string) => [...unit.matchAll(new RegExp(`^${key}=(.*)$`, "gm"))].map((m) => m[1].replaceAll("%t", runtimeDir));
        const execStart = values("ExecStart");
        expect(execStart).toHaveLength(1);
        return { env: values("Environment"), argv: execStart[0].split(/\s+/) };
    }

    /**
     * Starts the daemon as the throwaway user in the gateway's namespace. Its own mount
     * namespace gives it the host paths the gateway's files live at (overlays over /etc
     * and /usr/local, nothing written to this machine's) and /dev/net/tun as Debian's
     * udev leaves it (0666; here it is 0600, and slirp4netns cannot open it as a user).
     */
    async function startDaemon(): Promise<RootlessDaemon> {
        const { env, argv } = unitCommand();
        const log = path.join(dir, `dockerd-${Date.now()}.log`);
        const script = `set -eu
for tree in etc usr/local; do
  mkdir -p "${dir}/overlay/$tree/upper" "${dir}/overlay/$tree/work"
  mount -t overlay overlay -o "lowerdir=/$tree,upperdir=${dir}/overlay/$tree/upper,workdir=${dir}/overlay/$tree/work" "/$tree"
done
cp -a "${dir}/root/." /
mount --bind "${dir}/tun" /dev/net/tun
exec setpriv --reuid=${uid} --regid=${uid} --init-groups env -i HOME=/home/${user} USER=${user} LOGNAME=${user} XDG_RUNTIME_DIR=${runtimeDir} ${env.map((e) => `'${e}'`).join(" ")} ${argv.map((a) => `'${a}'`).join(" ")}
`;
        const out = fs.openSync(log, "a");
        const child = spawn("nsenter", [`--net=/run/netns/${gw}`, "unshare", "--mount", "--propagation", "private", "bash", "-c", script], { stdio: ["ignore", out, out] });
        fs.closeSync(out);
        for (let i = 0; i < 600; i++) {
            if (docker.docker(["info", "--format", "{{.ServerVersion}}"]).status === 0) return { process: child, log };
            if (child.exitCode !== null) break;
            await new Promise((resolve) => setTimeout(resolve, 100));
        }
        const said = fs.readFileSync(log, "utf8").split("\n").filter((line) => !line.includes("module=grpc"));
        throw new Error(`rootless dockerd did not start: ${said.join("\n").slice(-3000)}`);
    }

    /** SIGTERM to rootlesskit (it forwards it to dockerd), and wait for every process of the user to end. */
    async function stopDaemon(): Promise<void> {
        if (!daemon) return;
        const { process: child } = daemon;
        daemon = undefined;
        if (child.exitCode === null) {
            const exited = new Promise((resolve) => child.once("exit", resolve));
            child.kill("SIGTERM");
            await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 30_000))]);
        }
        for (let i = 0; i < 100; i++) {
            const left = run("pgrep", ["-u", String(uid)]).stdout.trim().split("\n").filter(Boolean);
            if (left.length === 0) return;
            if (i === 60) left.forEach((pid) => run("kill", ["-KILL", pid]));
            await new Promise((resolve) => setTimeout(resolve, 200));
        }
    }

    /** What the container answers a client in the sandbox's namespace: the peer address it saw, per protocol. */
    function askFromSandbox(port: number): { tcp: string; udp: string } {
        const tcp = inNs(cl, ["socat", "-t", "5", "-T", "5", "-", `TCP4:${GATEWAY}:${port}`], "");
        const udp = inNs(cl, ["socat", "-t", "5", "-T", "5", "-", `UDP4:${GATEWAY}:${port}`], "who am i\n");
        return { tcp: tcp.stdout.trim() || `nothing (${tcp.stderr.trim()})`, udp: udp.stdout.trim() || `nothing (${udp.stderr.trim()})` };
    }

    beforeAll(async () => {
        // The dev stack, its agent being the throwaway user (paths in the rendered files name it),
        // with the runtime's port on loopback, which the daemon must publish too.
        const stack = editedStack("dev", (config) => {
            config["airlock:agent"].user = user;
            config["airlock:gateway"].agent.port = RUNTIME_PORT;
        });
        gateway = renderHosts(readStackFile(stack)).gateway;
        fs.chmodSync(dir, 0o755);
        run("userdel", ["-r", user]);
        const added = run("useradd", ["--create-home", "--shell", "/usr/sbin/nologin", user]);
        if (added.status !== 0) throw new Error(`useradd: ${added.stderr}`);
        uid = Number(run("id", ["-u", user]).stdout.trim());
        if (!fs.readFileSync("/etc/subuid", "utf8").split("\n").some((line) => line.startsWith(`${user}:`))) {
            const ids = run("usermod", ["--add-subuids", "2600000-2665535", "--add-subgids", "2600000-2665535", user]);
            if (ids.status !== 0) throw new Error(`usermod: ${ids.stderr}`);
        }
        fs.mkdirSync(runtimeDir, { mode: 0o700 });
        fs.chownSync(runtimeDir, uid, uid);
        const tun = run("mknod", ["-m", "0666", path.join(dir, "tun"), "c", "10", "200"]);
        if (tun.status !== 0) throw new Error(`mknod: ${tun.stderr}`);

        // The gateway's files the daemon reads (every one under /etc/airlock or /usr/local), as installed;
        // what airlock-tailnet-render fills at boot, filled with this namespace's tailnet address.
        for (const file of gateway.files.filter((f) => /^\/(etc\/airlock|usr\/local)\//.test(f.path))) {
            const target = path.join(dir, "root", file.path.replace(/\.in$/, ""));
            fs.mkdirSync(path.dirname(target), { recursive: true });
            fs.writeFileSync(target, withTailnetValues(file.content, GATEWAY), { mode: parseInt(file.permissions, 8) });
        }

        for (const ns of [gw, cl]) run("ip", ["netns", "del", ns]);
        for (const args of [
            ["netns", "add", gw],
            ["netns", "add", cl],
            ["link", "add", "tailscale0", "netns", gw, "type", "veth", "peer", "name", "tailscale0", "netns", cl],
            ["-n", gw, "addr", "add", `${GATEWAY}/24`, "dev", "tailscale0"],
            ["-n", cl, "addr", "add", `${CLIENT}/24`, "dev", "tailscale0"],
            ["-n", gw, "link", "set", "tailscale0", "up"],
            ["-n", cl, "link", "set", "tailscale0", "up"],
            ["-n", gw, "link", "set", "lo", "up"],
            ["-n", cl, "link", "set", "lo", "up"],
        ]) {
            const result = run("ip", args);
            if (result.status !== 0) throw new Error(`ip ${args.join(" ")}: ${result.stderr}`);
        }
        const rules = path.join(dir, "dns-redirect.nft");
        fs.writeFileSync(rules, renderedFile(gateway, DNS_REDIRECT_PATH));
        const loaded = inNs(gw, ["nft", "--file", rules]);
        if (loaded.status !== 0) throw new Error(`nft: ${loaded.stderr}`);

        const env = { ...process.env, DOCKER_HOST: `unix://${runtimeDir}/docker.sock`, DOCKER_BUILDKIT: "0" };
        docker = { env, docker: (args, input) => run("docker", args, { env, input, timeout: 120_000 }), stop: stopDaemon };
        daemon = await startDaemon();
        importTestImage(docker, dir, "airlock-peer:test", ["/usr/bin/socat"]);
    }, 240_000);

    afterAll(async () => {
        await stopDaemon();
        for (const ns of [gw, cl]) run("ip", ["netns", "del", ns]);
        run("userdel", ["-r", user]);
        fs.rmSync(dir, { recursive: true, force: true });
    }, 120_000);

    it("AdGuard Home's published ports see the sandbox's tailnet address, over the DNS redirect, also after the daemon restarts", async () => {
        const compose = YAML.parse(withTailnetValues(renderedFile(gateway, COMPOSE_TEMPLATE_PATH), GATEWAY));
        const ports: string[] = compose.services.adguard.ports;
        expect(ports.length).toBeGreaterThan(0);
        // Answers every client with the address it sees (and says so in the container's log), on the container's port 53.
        // (It reads the question first: socat gives up on the answer when it cannot hand the question over.)
        const reply = (proto: string) => `SYSTEM:'read -r _; echo ${proto} $SOCAT_PEERADDR; echo ${proto} $SOCAT_PEERADDR >&2'`;
        const started = docker.docker([
            "run", "--detach", "--name", "resolver", "--restart", compose.services.adguard.restart,
            ...ports.flatMap((p) => ["--publish", p]),
            "airlock-peer:test", "sh", "-c",
            `socat UDP4-RECVFROM:53,fork ${reply("udp")} & exec socat TCP4-LISTEN:53,fork,reuseaddr ${reply("tcp")}`,
        ]);
        expect(started.status, started.stderr).toBe(0);

        // The runtime's port, published as the rendered compose file publishes it: on the gateway's loopback only.
        const runtime = docker.docker([
            "run", "--detach", "--name", "runtime", "--restart", compose.services.agent.restart,
            ...compose.services.agent.ports.flatMap((p: string) => ["--publish", p]),
            "airlock-peer:test", "socat", `TCP4-LISTEN:${RUNTIME_PORT},fork,reuseaddr`, reply("tcp"),
        ]);
        expect(runtime.status, runtime.stderr).toBe(0);
        expect(inNs(gw, ["socat", "-t", "5", "-T", "5", "-", `TCP4:127.0.0.1:${RUNTIME_PORT}`], "").stdout).toMatch(/^tcp /);
        expect(inNs(cl, ["socat", "-t", "2", "-T", "2", "-", `TCP4:${GATEWAY}:${RUNTIME_PORT}`], "").stdout).toBe("");

        const seen = askFromSandbox(53);
        console.log(`rootless publish: the container saw ${JSON.stringify(seen)} for a client at ${CLIENT}`);
        expect(seen).toEqual({ tcp: `tcp ${CLIENT}`, udp: `udp ${CLIENT}` });

        // A restarted daemon restores the container itself (restart policy), before anything else runs.
        await stopDaemon();
        daemon = await startDaemon();
        for (let i = 0; i < 100 && docker.docker(["inspect", "--format", "{{.State.Running}}", "resolver"]).stdout.trim() !== "true"; i++) {
            await new Promise((resolve) => setTimeout(resolve, 200));
        }
        const after = askFromSandbox(53);
        console.log(`rootless publish: after a daemon restart the container saw ${JSON.stringify(after)}`);
        expect(after).toEqual({ tcp: `tcp ${CLIENT}`, udp: `udp ${CLIENT}` });
    }, 240_000);

    it("another local user holding the runtime's port costs that port alone: the daemon and AdGuard Home still start (red team 3)", async () => {
        await stopDaemon();
        const squatter = spawn("ip", ["netns", "exec", gw, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "socat", `TCP4-LISTEN:${RUNTIME_PORT},bind=127.0.0.1,fork,reuseaddr`, "SYSTEM:'echo squatter'"], { stdio: "ignore" });
        try {
            for (let i = 0; i < 50 && !inNs(gw, ["ss", "-Htln", `sport = :${RUNTIME_PORT}`]).stdout.trim(); i++) await new Promise((resolve) => setTimeout(resolve, 100));
            daemon = await startDaemon();
            for (let i = 0; i < 100 && docker.docker(["inspect", "--format", "{{.State.Running}}", "resolver"]).stdout.trim() !== "true"; i++) {
                await new Promise((resolve) => setTimeout(resolve, 200));
            }
            expect(askFromSandbox(53)).toEqual({ tcp: `tcp ${CLIENT}`, udp: `udp ${CLIENT}` });
            expect(fs.readFileSync(daemon.log, "utf8")).toContain(`airlock-rootless-publish: 127.0.0.1:${RUNTIME_PORT}/tcp not published`);
        } finally {
            squatter.kill();
        }
    }, 240_000);
});
