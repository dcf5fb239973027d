import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { SANDBOX_WRAPPER_PATH } from "../components/render/hosts";
import { renderSandboxCompose } from "../components/workloads/compose";
import { installBrokerFiles, recordEntries, startBroker, TestBroker } from "./helpers/broker";
import { egressRulesFor, inEgressNamespace } from "./helpers/egress";
import { editedStack, renderHosts, renderedFile } from "./helpers/stacks";
import { importTestImage, startDockerd, TestDocker } from "./helpers/dockerd";
import { isRoot, run, toolsAvailable } from "./helpers/tools";
import { hostToolsBin } from "./helpers/hostTools";

/**
 * The rendered sandbox compose file, run by a real dockerd; `docker inspect` and
 * the kernel's own view (/proc, cgroups) prove the hardening. Test images replace
 * the registry images (no registry here); nothing else in the file changes except
 * the /workspace source and the tailnet address (127.0.0.1 here).
 */

const canRun = isRoot() && toolsAvailable("e2e containers", ["dockerd", "docker", "docker-compose", "busybox", "tar", "socat", "systemd-socket-activate"]);
if (!isRoot()) console.warn("SKIPPED e2e containers: a test dockerd needs root (CI runs it as root)");

const IMAGE = "airlock-test/shell:1";
const TOKEN = ["ghp", "dockerE2Etoken0123456789abcdefABCD"].join("_");

describe.runIf(canRun)("the rendered sandbox compose on a real dockerd", () => {
    let dir: string;
    let dockerd: TestDocker;
    let compose: string;
    let wrapper: string;
    let broker: TestBroker | undefined;
    let egressRules: string;
    const runWrapper = (env: Record<string, string>) => {
        const [cmd, ...args] = inEgressNamespace(egressRules, [wrapper]);
        return run(cmd, args, { env: { PATH: [hostToolsBin(), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"].filter(Boolean).join(":"), ...env }, timeout: 60_000 });
    };
    const userSocketDir = "/run/user/0";
    let createdUserSocketDir = false;

    const inspect = (name: string) => JSON.parse(dockerd.docker(["inspect", name]).stdout)[0];
    const exec = (name: string, script: string) => dockerd.docker(["exec", name, "sh", "-c", script]);

    beforeAll(async () => {
        dir = fs.mkdtempSync("/tmp/airlock-docker-");
        // The wrapper talks to the agent's rootless socket, /run/user/$UID/docker.sock; as root here that is /run/user/0.
        if (!fs.existsSync(userSocketDir)) {
            fs.mkdirSync(userSocketDir, { recursive: true, mode: 0o700 });
            createdUserSocketDir = true;
        }
        expect(fs.existsSync(path.join(userSocketDir, "docker.sock")), "a docker socket already exists in /run/user/0").toBe(false);
        dockerd = await startDockerd(dir, [path.join(userSocketDir, "docker.sock")]);
        importTestImage(dockerd, dir, IMAGE);

        const cfg = readStackFile(editedStack("dev", (c) => (c["airlock:workloads"].postgres = { enabled: false })));
        const images = { sandboxShell: IMAGE, browser: IMAGE, postgres: IMAGE, redis: IMAGE, api: IMAGE, adguard: IMAGE, agent: IMAGE, agentMemoryDb: IMAGE, services: {} };
        fs.mkdirSync(path.join(dir, "workspace"));
        compose = path.join(dir, "compose.yml");
        fs.writeFileSync(
            compose,
            renderSandboxCompose(cfg, images)
                .replaceAll("@TAILNET_IPV4@", "127.0.0.1")
                .replace("- /workspace:/workspace", `- ${dir}/workspace:/workspace`),
        );
        const sandbox = renderHosts(cfg).sandbox;
        const brokerFiles = installBrokerFiles(sandbox, dir);
        broker = await startBroker(brokerFiles.broker, brokerFiles.socket, brokerFiles.stateDir);
        wrapper = path.join(dir, SANDBOX_WRAPPER_PATH);
        fs.writeFileSync(wrapper, renderedFile(sandbox, SANDBOX_WRAPPER_PATH), { mode: 0o755 });
        // The wrapper runs (as uid 0 of its own namespaces) under the sandbox's egress rules, as on the host.
        egressRules = path.join(dir, "egress.nft");
        fs.writeFileSync(egressRules, egressRulesFor(sandbox, cfg.agent.uid, 0));

        const up = run("docker-compose", ["--project-name", "airlocke2e", "--file", compose, "up", "--detach"], { env: dockerd.env, timeout: 180_000 });
        expect(up.status, up.stderr).toBe(0);
    }, 300_000);

    afterAll(async () => {
        if (compose) run("docker-compose", ["--project-name", "airlocke2e", "--file", compose, "down", "--volumes", "--timeout", "1"], { env: dockerd.env, timeout: 120_000 });
        await dockerd?.stop();
        await broker?.stop();
        fs.rmSync(path.join(userSocketDir, "docker.sock"), { force: true });
        if (createdUserSocketDir) fs.rmSync(userSocketDir, { recursive: true, force: true });
        if (dir) run("rm", ["-rf", dir]);
    }, 60_000);

    it("the shell container runs with every hardened setting", () => {
        const c = inspect("agent-sandbox-shell");
        const h = c.HostConfig;
        expect(h.CapDrop).toEqual(["ALL"]);
        expect(h.CapAdd.map((cap: string) => cap.replace(/^CAP_/, "")).sort()).toEqual(["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"]);
        expect(h.SecurityOpt).toContain("no-new-privileges:true");
        expect(h.PidsLimit).toBe(256);
        expect(h.Memory).toBe(3 * 1024 ** 3);
        expect(h.NanoCpus).toBe(1.8e9);
        expect(Object.keys(h.Tmpfs).sort()).toEqual(["/run", "/tmp"]);
        expect(h.Init).toBe(true);
        expect(h.IpcMode).toBe("private");
        expect(h.Privileged).toBe(false);
        expect(h.LogConfig).toEqual({ Type: "json-file", Config: { "max-file": "3", "max-size": "10m" } });
        expect(h.Ulimits).toEqual(expect.arrayContaining([{ Name: "nofile", Soft: 4096, Hard: 8192 }, { Name: "nproc", Soft: 1024, Hard: 2048 }]));
    });

    it("the kernel agrees: no new privileges, only the allowed capabilities, pids capped", () => {
        const status = exec("agent-sandbox-shell", "grep -E '^(NoNewPrivs|CapEff):' /proc/1/status").stdout;
        expect(status).toMatch(/NoNewPrivs:\s+1/);
        // CHOWN(0) DAC_OVERRIDE(1) FOWNER(3) SETGID(6) SETUID(7) = 0xcb
        expect(status).toMatch(/CapEff:\s+00000000000000cb/);
        expect(exec("agent-sandbox-shell", "cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max").stdout.trim()).toBe("256");
    });

    it("the shell and the browser share no network: the shell's only way to CDP would be through the host", () => {
        const networks = (name: string) => Object.keys(inspect(name).NetworkSettings.Networks);
        expect(networks("agent-browser")).toEqual(["airlocke2e_browser"]);
        expect(networks("agent-sandbox-shell").filter((n) => networks("agent-browser").includes(n))).toEqual([]);
        // No shared bridge: the browser's address is not on any of the shell's links.
        const browserIp = Object.values(inspect("agent-browser").NetworkSettings.Networks as Record<string, { IPAddress: string }>)[0].IPAddress;
        expect(exec("agent-sandbox-shell", "ip -4 -o addr 2>/dev/null || cat /proc/net/fib_trie").stdout).not.toContain(browserIp.split(".").slice(0, 3).join(".") + ".");
    });

    it("no container has a docker socket or any host path but /workspace", () => {
        for (const name of ["agent-sandbox-shell", "agent-browser"]) {
            const mounts = inspect(name).Mounts as { Type: string; Source: string; Destination: string }[];
            expect(mounts.filter((m) => /docker\.sock|containerd\.sock/.test(m.Source + m.Destination)), name).toEqual([]);
            expect(mounts.filter((m) => m.Type === "bind").map((m) => m.Destination), name).toEqual(name === "agent-sandbox-shell" ? ["/workspace"] : []);
            expect(exec(name, "ls /var/run/docker.sock /run/docker.sock 2>&1; true").stdout, name).not.toMatch(/^\/(var\/)?run\/docker\.sock$/m);
        }
    });

    it("the browser is read-only and publishes CDP on the given address only", () => {
        const b = inspect("agent-browser");
        expect(b.HostConfig.ReadonlyRootfs).toBe(true);
        expect(b.HostConfig.PortBindings).toEqual({ "9222/tcp": [{ HostIp: "127.0.0.1", HostPort: "9222" }] });
        expect(exec("agent-browser", "touch /rootfs-write 2>&1; true").stdout).toMatch(/Read-only file system/);
    });

    it("the wrapper's docker exec runs the command in /workspace with only the allowlisted variables", () => {
        fs.writeFileSync(path.join(dir, "workspace", "marker"), "in-the-volume\n");
        const result = runWrapper({
            SSH_ORIGINAL_COMMAND: 'pwd; cat marker; echo "token=${GITHUB_TOKEN:-absent} other=${OTHER_SECRET:-absent}"',
            GITHUB_TOKEN: TOKEN,
            OTHER_SECRET: "must-not-arrive",
        });
        expect(result.stderr).toBe("");
        expect(result.stdout.trim().split("\n")).toEqual(["/workspace", "in-the-volume", `token=${TOKEN} other=absent`]);
    });

    it("the record names the image the container really runs (docker inspect), and the token by name only", () => {
        const [begin, end] = recordEntries(broker!.recordFile).slice(-2);
        const c = inspect("agent-sandbox-shell");
        expect(begin).toMatchObject({ kind: "begin", env: ["GITHUB_TOKEN"], image: IMAGE, image_id: c.Image });
        expect(begin.image_id).toMatch(/^sha256:[0-9a-f]{64}$/);
        expect(end).toMatchObject({ of: begin.seq, exit: 0 });
        expect(fs.readFileSync(broker!.recordFile, "utf8")).not.toContain(TOKEN);
    });

    it("in the real container, nothing an earlier command planted runs before the next one", () => {
        const plant = runWrapper({
            SSH_ORIGINAL_COMMAND: "for f in .bash_profile .profile .bashrc; do echo 'echo PLANTED' >\"$HOME/$f\"; echo 'echo PLANTED' >/workspace/$f; done; echo \"$HOME\"",
        });
        expect(plant.status, plant.stderr).toBe(0);
        const home = plant.stdout.trim();
        expect(home).toMatch(/^\/tmp\/airlock-home\./);
        const next = runWrapper({ SSH_ORIGINAL_COMMAND: `echo ran; test -e ${home} && echo home-survived; true` });
        expect(next.stdout.trim()).toBe("ran");
        for (const f of [".bash_profile", ".profile", ".bashrc"]) fs.rmSync(path.join(dir, "workspace", f), { force: true });
    });

    it("compose config of the file it ran matches what airlock rendered", () => {
        const effective = YAML.parse(run("docker-compose", ["--file", compose, "config"], { env: dockerd.env }).stdout);
        expect(effective.services["agent-sandbox-shell"].pids_limit).toBe(256);
        expect(effective.services["agent-sandbox-shell"].cap_drop).toEqual(["ALL"]);
    });
});
