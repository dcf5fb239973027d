import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SANDBOX_WRAPPER_PATH } from "../components/render/hosts";
import { attachLoop, LoopDevice, unmountUnder } from "./helpers/btrfs";
import { SANDBOX_INTERFACES } from "./helpers/egress";
import { bootRootfs, BootedHost, sandboxRootfs } from "./helpers/nspawn";
import { isRoot, run, toolsAvailable } from "./helpers/tools";

/**
 * The checkpoint engine under the broker unit systemd really runs it with
 * (airlock-broker.socket, airlock-broker@.service: its capabilities, read-only
 * system, ReadWritePaths, syscall filter, no network), in the sandbox's rendered
 * files booted with systemd-nspawn. The workspace volume is a btrfs loop device
 * laid out by the rendered mount script; the agent's Docker is a stand-in that
 * answers the Engine API as the agent; the agent sends the verbs through the
 * rendered wrapper, under the egress rules airlock-egress.service loads.
 */

const canRun = isRoot() && toolsAvailable("checkpoints under systemd (nspawn)", ["systemd-nspawn", "mmdebstrap", "nsenter", "ip", "losetup", "mkfs.btrfs"]);
if (!isRoot()) console.warn("SKIPPED checkpoints under systemd (nspawn): needs root (CI runs it as root)");

/** The agent's Docker as far as a restore needs it: no such container (so compose makes one), nothing listed. */
const FAKE_DOCKER_API = `
import socket, struct, sys
path = sys.argv[1]
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen()
while True:
    conn, _ = server.accept()
    request = conn.recv(65536).decode(errors="replace")
    method, url = request.split(" ")[:2]
    print(f"peer uid {struct.unpack('3i', conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]} {method} {url}", flush=True)
    if url.endswith("/containers/json?all=1"):
        conn.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Type: application/json\\r\\n\\r\\n[]")
    else:
        conn.sendall(b"HTTP/1.0 404 Not Found\\r\\nContent-Type: application/json\\r\\n\\r\\n{}")
    conn.close()
`;
/** docker-compose, as far as the engine starts a container: it notes that it ran, and as whom. */
const COMPOSE_STUB = `#!/bin/bash
logger --tag fake-compose "uid $(id -u): $*"
`;

describe.runIf(canRun)("checkpoints under the broker's systemd unit (nspawn)", () => {
    let dir: string;
    let host: BootedHost | undefined;
    let loop: LoopDevice | undefined;
    let agent: string;
    let agentUid: number;
    const netns = `al-ckunit-${process.pid % 10000}`;

    const wrapper = (command: string) => host!.exec(["runuser", "-u", agent, "--", "env", `SSH_ORIGINAL_COMMAND=${command}`, "SSH_CONNECTION=100.100.7.2 40000 100.100.7.1 22", SANDBOX_WRAPPER_PATH], { timeout: 120_000 });

    beforeAll(async () => {
        const prepared = sandboxRootfs("ckunit");
        const { root, cfg } = prepared;
        dir = prepared.dir;
        agent = cfg.agent.user;
        agentUid = cfg.agent.uid;
        run("ip", ["netns", "del", netns]);
        expect(run("ip", ["netns", "add", netns]).status).toBe(0);
        // Somewhere for packets to go, so the egress rules (not a missing route) decide.
        const interfaces = run("ip", ["netns", "exec", netns, "bash", "-c", SANDBOX_INTERFACES]);
        expect(interfaces.status, interfaces.stderr).toBe(0);

        fs.writeFileSync(path.join(root, "usr/bin/docker-compose"), COMPOSE_STUB, { mode: 0o755 });
        fs.writeFileSync(path.join(root, "usr/local/bin/fake-docker-api"), FAKE_DOCKER_API, { mode: 0o644 });
        // docker, for the wrapper's `docker inspect` (the record's image) and `docker exec`.
        fs.writeFileSync(path.join(root, "usr/bin/docker"), "#!/bin/bash\nexit 0\n", { mode: 0o755 });

        // The volume, laid out by the rendered mount script, run in the tree (its user, its paths).
        loop = attachLoop(dir, "volume", 1024 ** 3);
        const kernelFs = ["dev", "proc", "sys"].map((d) => path.join(root, d));
        for (const target of kernelFs) expect(run("mount", ["--rbind", `/${path.basename(target)}`, target]).status).toBe(0);
        try {
            const mounted = run("chroot", [root, "/usr/local/sbin/airlock-mount-workspace"], { env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", AIRLOCK_VOLUME_DEVICE: loop.device } });
            expect(mounted.status, mounted.stderr).toBe(0);
        } finally {
            for (const target of kernelFs) run("umount", ["--recursive", "--lazy", target]);
        }
        // No sshd here (it would wait for a tailnet address): the wrapper is run directly.
        fs.symlinkSync("/dev/null", path.join(root, "etc/systemd/system/ssh.service"));
        // The stand-in never runs the real mount script again.
        fs.writeFileSync(path.join(root, "usr/local/sbin/airlock-mount-workspace"), "#!/bin/bash\nexit 0\n", { mode: 0o755 });

        host = await bootRootfs(root, netns);
        for (const argv of [
            ["systemctl", "daemon-reload"],
            ["systemctl", "start", "airlock-egress.service", "airlock-broker.socket", "airlock-workspace.service"],
            ["install", "-d", "-o", agent, "-g", agent, "-m", "0700", `/run/user/${agentUid}`],
            ["systemd-run", `--uid=${agent}`, "--unit=fake-docker", "python3", "/usr/local/bin/fake-docker-api", `/run/user/${agentUid}/docker.sock`],
        ]) {
            const result = host.exec(argv);
            expect(result.status, `${argv.join(" ")}: ${result.stderr}`).toBe(0);
        }
        expect(await host.waitFor(["test", "-S", `/run/user/${agentUid}/docker.sock`], 20)).toBe(true);
    }, 900_000);

    afterAll(async () => {
        if (host && process.env.AIRLOCK_DEBUG) console.log(host.exec(["journalctl", "--no-pager", "-b"]).stdout.slice(-20_000));
        await host?.stop();
        if (dir) unmountUnder(dir);
        loop?.release();
        run("ip", ["netns", "del", netns]);
        if (dir) fs.rmSync(dir, { recursive: true, force: true });
    }, 120_000);

    it("the agent's checkpoint and list go through the broker unit, as root with its sandboxing", () => {
        expect(host!.exec(["sh", "-c", `echo hello > /workspace/file && chown ${agent}: /workspace/file`]).status).toBe(0);
        const taken = wrapper('airlock checkpoint --label "under systemd"');
        expect(taken.stderr).toBe("");
        expect(taken.stdout).toMatch(/^checkpoint 1 of shared at \S+Z \(under systemd\)\n$/);
        expect(fs.existsSync(path.join(dir, "root/var/lib/airlock/volume/checkpoints/shared/1/file"))).toBe(true);
        const listed = wrapper("airlock checkpoints --json");
        expect(JSON.parse(listed.stdout).map((c: { label: string; containers: unknown }) => [c.label, c.containers])).toEqual([["under systemd", []]]);
        // The broker asked the agent's Docker as the agent, never as root.
        expect(host!.exec(["journalctl", "--no-pager", "--output=cat", "-u", "fake-docker"]).stdout).toMatch(new RegExp(`^peer uid ${agentUid} GET /v1\\.41/containers/json\\?all=1$`, "m"));
    });

    it("a restore swaps the workspace back and starts the container with compose as the agent", () => {
        expect(host!.exec(["rm", "/workspace/file"]).status).toBe(0);
        const restored = wrapper("airlock restore 1");
        expect(restored.stderr).toBe("");
        expect(restored.stdout).toContain("restored shared to checkpoint 1");
        expect(host!.exec(["cat", "/workspace/file"]).stdout).toBe("hello\n");
        expect(host!.exec(["journalctl", "--no-pager", "--output=cat", "-t", "fake-compose"]).stdout).toBe(`uid ${agentUid}: --project-name airlock --file /etc/airlock/compose.yml up --detach --no-deps agent-sandbox-shell\n`);
        expect(host!.exec(["systemctl", "--failed", "--no-legend", "--plain"]).stdout).not.toMatch(/airlock-broker/);
    });

    it("the retention timer's service runs the engine too", () => {
        const result = host!.exec(["systemctl", "start", "airlock-checkpoints.service"]);
        expect(result.status, host!.exec(["journalctl", "--no-pager", "-u", "airlock-checkpoints.service"]).stdout).toBe(0);
    });
});
