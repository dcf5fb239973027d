import { ChildProcess, spawn } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { StackConfig } from "../components/config/schema";
import { CHECKPOINT_CLIENT_PATH, CHECKPOINT_ENGINE_PATH } from "../components/render/checkpoints";
import { BROKER_SOCKET_PATH, RenderedHost, SANDBOX_WRAPPER_PATH, SSHD_TEMPLATE_PATH } from "../components/render/hosts";
import { checkpointClient, recordEntries, talk, TestBroker } from "./helpers/broker";
import { CheckpointRig, startCheckpointRig } from "./helpers/checkpointRig";
import { createTestNet, inNamespace, spawnInNamespace, TestNet, waitForPort } from "./helpers/netns";
import { editedStack, renderHosts, renderedFile, sandboxSshConfigAt, tempDir } from "./helpers/stacks";
import { docTranscript } from "./helpers/docs";
import { agentSshArgs, enforceEgress, installSandboxSshd, pinnedKnownHosts, startSandboxBroker } from "./helpers/sshdRig";
import { freeUid, isRoot, run, toolsAvailable } from "./helpers/tools";
import { hostSshd } from "./helpers/hostTools";

/** The hosts' sshd (Debian 13's OpenSSH), not this machine's. */
const HOST_SSHD = hostSshd().sshd;

/**
 * The undo button end to end, the agent's way: ssh from a "gateway" namespace with
 * the rendered client config, the rendered sshd and wrapper, the root broker and
 * the checkpoint engine, a btrfs workspace volume on a loop device laid out by the
 * rendered mount script, and the rendered compose on the test dockerd (its shell
 * image carries git). First with one shared workspace, then per-session.
 */

const canRun =
    isRoot() &&
    toolsAvailable("e2e undo through ssh", ["ip", "sshd", "ssh", "ssh-keygen", "useradd", "socat", "systemd-socket-activate", "losetup", "mkfs.btrfs", "btrfs", "dockerd", "docker", "docker-compose", "busybox", "git", "setpriv"]);
if (!isRoot()) console.warn("SKIPPED e2e undo through ssh: needs root (CI runs it as root)");

const AGENT = "airlock-undo";
const GiB = 1024 ** 3;

describe.runIf(canRun)("the undo button through ssh", () => {
    let net: TestNet;
    let root: string;
    let rig: CheckpointRig | undefined;
    let broker: TestBroker | undefined;
    let sshd: ChildProcess | undefined;
    let createdUser = false;
    let clientDir: string;
    let clientKey: string;
    let gatewayConfig: string;
    let engineEnv: Record<string, string>;
    let dirs: { volume: string; workspaces: string; link: string };
    const sandboxes: Partial<Record<"shared" | "per-session", RenderedHost>> = {};

    const docker = (...args: string[]) => rig!.docker.docker(args);
    const containerId = (name: string) => docker("inspect", "--format", "{{.Id}}", name).stdout.trim();
    /** The engine as the timer runs it, in the sandbox's namespace (it looks at the sandbox's connections). */
    const maintain = () => inNamespace(net.server, [path.join(root, CHECKPOINT_ENGINE_PATH), "maintain"], { env: engineEnv });

    /** ssh from the gateway namespace with the gateway's rendered config; `options` win (first value). */
    function ssh(command: string, env: Record<string, string> = {}, options: string[] = []) {
        return inNamespace(
            net.client,
            [
                "ssh",
                ...options,
                ...agentSshArgs({ config: gatewayConfig, address: net.serverTailnet, user: AGENT, key: clientKey, dir: clientDir }),
                "sandbox",
                command,
            ],
            { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: clientDir, ...env } },
        );
    }

    /** The sandbox's wrapper and checkpoint client as rendered for one session mode. */
    function useMode(mode: "shared" | "per-session") {
        const sandbox = sandboxes[mode]!;
        fs.writeFileSync(path.join(root, SANDBOX_WRAPPER_PATH), renderedFile(sandbox, SANDBOX_WRAPPER_PATH), { mode: 0o755 });
        fs.writeFileSync(path.join(root, CHECKPOINT_CLIENT_PATH), checkpointClient(sandbox, root), { mode: 0o644 });
    }

    beforeAll(async () => {
        net = createTestNet("und");
        if (run("id", [AGENT]).status !== 0) {
            expect(run("useradd", ["--create-home", "--shell", "/bin/bash", "--uid", String(freeUid(1631, 1649)), AGENT]).status).toBe(0);
            createdUser = true;
        }
        const uid = Number(run("id", ["-u", AGENT]).stdout.trim());
        clientDir = tempDir("undo-client");
        clientKey = path.join(clientDir, "id_ed25519");
        expect(run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", clientKey]).status).toBe(0);
        const clientPublicKey = fs.readFileSync(`${clientKey}.pub`, "utf8").trim();
        const configs: Partial<Record<"shared" | "per-session", StackConfig>> = {};
        for (const mode of ["shared", "per-session"] as const) {
            configs[mode] = readStackFile(
                editedStack("dev", (c) => {
                    c["airlock:agent"].user = AGENT;
                    c["airlock:agent"].uid = uid;
                    c["airlock:agent"].authorizedKeys = [clientPublicKey];
                    c["airlock:sandbox"].sessions = mode;
                    // Per-session: each session gets a PostgreSQL of its own (the rig's image stands in for it).
                    c["airlock:workloads"].postgres = { enabled: mode === "per-session" };
                }),
            );
            sandboxes[mode] = renderHosts(configs[mode]!).sandbox;
        }
        const cfg = configs["per-session"]!;
        const gateway = renderHosts(cfg).gateway;

        // The sandbox's files in a root-owned tree (sshd's StrictModes); per-session sshd: it accepts AIRLOCK_SESSION.
        root = fs.mkdtempSync("/run/airlock-undo-");
        const hostPublicKey = installSandboxSshd(sandboxes["per-session"]!, root);
        // The wrapper runs nothing unless the sandbox's egress rules hold for the agent.
        enforceEgress(net.server, sandboxes["per-session"]!, uid, "198.18.7.2");

        // The volume, the agent's Docker and the engine; the broker runs that engine.
        // The agent's daemon in the sandbox's namespace with its own packet rules (its networks' isolation, its DNS), as rootless Docker runs.
        rig = await startCheckpointRig(cfg, sandboxes["per-session"]!, 3 * GiB, { netns: net.server });
        dirs = rig.dirs;
        engineEnv = { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", AIRLOCK_CHECKPOINTS_CONFIG: rig.configPath, AIRLOCK_BROKER_SOCKET: path.join(root, BROKER_SOCKET_PATH) };
        broker = await startSandboxBroker(root, AGENT, { AIRLOCK_CHECKPOINT_ENGINE: path.join(root, CHECKPOINT_ENGINE_PATH), AIRLOCK_CHECKPOINTS_CONFIG: rig.configPath });

        // sshd on the "tailnet" address, its config rendered by the real boot script.
        const stubBin = path.join(root, "stub-bin");
        fs.mkdirSync(stubBin);
        fs.writeFileSync(path.join(stubBin, "tailscale"), `#!/bin/sh\necho ${net.serverTailnet}\n`, { mode: 0o755 });
        const rendered = inNamespace(net.server, [`${root}/usr/local/sbin/airlock-tailnet-render`, path.join(root, SSHD_TEMPLATE_PATH), `${root}/etc/ssh/sshd_config`, HOST_SSHD, "-t", "-f"], {
            env: { PATH: `${stubBin}:/usr/sbin:/usr/bin:/sbin:/bin`, AIRLOCK_TAILNET_WAIT_SECONDS: "2" },
        });
        expect(rendered.status, rendered.stderr).toBe(0);
        sshd = spawnInNamespace(net.server, `exec ${HOST_SSHD} -D -e -f ${root}/etc/ssh/sshd_config`, path.join(clientDir, "sshd.log"));
        await waitForPort(net.client, net.serverTailnet, 22);
        gatewayConfig = path.join(clientDir, "ssh_config");
        fs.writeFileSync(gatewayConfig, sandboxSshConfigAt(gateway, net.serverTailnet));
        fs.writeFileSync(path.join(clientDir, "known_hosts"), pinnedKnownHosts(gateway, hostPublicKey));
    }, 300_000);

    afterAll(async () => {
        if (sshd && clientDir) {
            for (const master of fs.readdirSync(clientDir).filter((f) => f.startsWith("cm-"))) {
                inNamespace(net.client, ["ssh", "-o", `ControlPath=${path.join(clientDir, master)}`, "-O", "exit", "sandbox"]);
            }
        }
        sshd?.kill("SIGTERM");
        await broker?.stop();
        await rig?.release();
        run("pkill", ["--uid", AGENT]);
        net?.close();
        if (root) fs.rmSync(root, { recursive: true, force: true });
        if (createdUser) run("userdel", ["--remove", AGENT]);
        if (process.env.AIRLOCK_DEBUG && clientDir) console.log(fs.readFileSync(path.join(clientDir, "sshd.log"), "utf8"));
    }, 120_000);

    describe("one shared workspace", () => {
        const migrations: Record<string, string> = {
            "001_create_users.sql": `CREATE TABLE users (id bigint PRIMARY KEY);\n-- ${crypto.randomBytes(32).toString("hex")}\n`,
            "002_create_orders.sql": `CREATE TABLE orders (id bigint PRIMARY KEY, user_id bigint);\n-- ${crypto.randomBytes(32).toString("hex")}\n`,
        };
        beforeAll(() => useMode("shared"));

        /** Runs a command the docs show as `$ ssh sandbox '...'`; what it prints must be the docs' sample (times aside). */
        function asInReadme(shown: string, stream: "stdout" | "stderr" = "stdout") {
            const command = /^ssh sandbox '(.*)'$/.exec(shown)![1];
            const result = ssh(command);
            const times = (text: string) => text.replace(/\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\dZ?/g, "<time>");
            if (process.env.AIRLOCK_PRINT_SAMPLES) console.log(`$ ${shown}\n${result[stream]}`);
            expect(times(result[stream])).toBe(times(docTranscript(shown)));
            return result;
        }

        it("the classic scenario: write two migrations, checkpoint, rm -rf the app and git, restore - both files back byte for byte, git works again", () => {
            for (const [name, content] of Object.entries(migrations)) {
                const wrote = ssh(`mkdir -p app/migrations && printf '%s' '${content}' > app/migrations/${name}`);
                expect(wrote.stderr).toBe("");
                expect(wrote.status).toBe(0);
            }
            const checkpoint = asInReadme(`ssh sandbox 'airlock checkpoint --label "before cleanup"'`);
            expect(checkpoint.stderr).toBe("");

            const removed = asInReadme("ssh sandbox 'rm -rf /workspace/app /usr/bin/git'", "stderr");
            expect(removed.status).toBe(0);
            expect(ssh("ls app").status).not.toBe(0);
            expect(ssh("git --version").status).toBe(127);
            const before = containerId("agent-sandbox-shell");

            const restored = asInReadme(`ssh sandbox 'airlock restore --label "before cleanup"'`);
            expect(restored.stderr).toBe("");
            expect(restored.status).toBe(0);
            for (const [name, content] of Object.entries(migrations)) {
                expect(ssh(`cat app/migrations/${name}`).stdout).toBe(content);
                expect(fs.readFileSync(path.join(dirs.link, "app", "migrations", name), "utf8")).toBe(content);
            }
            expect(ssh("git --version").stdout).toMatch(/^git version \d/);
            expect(containerId("agent-sandbox-shell")).not.toBe(before);
            // Both verbs are on the record, written by the broker, as started before they ran and with their outcome: a restore leaves a trace.
            const verbs = recordEntries(broker!.recordFile).filter((e) => e.kind === "verb");
            const twice = (verb: string, args: Record<string, string>) => [["started", ""], ["ok", ""]].map(([outcome]) => [verb, "shared", args, outcome]);
            expect(verbs.map((e) => [e.verb, e.workspace, e.args, e.outcome])).toEqual([
                ...twice("checkpoint", { label: "before cleanup" }),
                // The automatic one before the rm -rf, asked for by the wrapper.
                ...twice("checkpoint", { auto: "yes", label: "rm -rf /workspace/app /usr/bin/git" }),
                ...twice("restore", { label: "before cleanup" }),
            ]);
        });

        it("the list names each checkpoint's label, the command that followed and its exit status; the record names the automatic one", () => {
            asInReadme("ssh sandbox 'airlock checkpoints'");
            const listed = ssh("airlock checkpoints --json");
            expect(listed.status).toBe(0);
            const found = JSON.parse(listed.stdout) as { id: number; kind: string; label: string; then: string | null; exit: number | null }[];
            expect(found.map((c) => [c.id, c.kind, c.label, c.then, c.exit])).toEqual([
                [1, "manual", "before cleanup", "rm -rf /workspace/app /usr/bin/git", 0],
                [2, "auto", "rm -rf /workspace/app /usr/bin/git", "rm -rf /workspace/app /usr/bin/git", 0],
                [3, "pre-restore", "before restore to 1", `cat app/migrations/${Object.keys(migrations)[0]}`, 0],
            ]);
            const removal = recordEntries(broker!.recordFile).find((e) => e.kind === "begin" && e.command === "rm -rf /workspace/app /usr/bin/git");
            expect(removal?.checkpoint).toBe(2);
        });

        it("restoring a checkpoint that does not exist fails clearly and changes nothing", () => {
            const state = () => ({ files: ssh("find . | sort").stdout, container: containerId("agent-sandbox-shell"), list: ssh("airlock checkpoints --json").stdout });
            const before = state();
            const result = ssh("airlock restore 999");
            expect(result.status).toBe(1);
            expect(result.stdout).toBe("");
            expect(result.stderr).toBe("airlock: no checkpoint 999 in workspace shared (see: airlock checkpoints)\n");
            expect(state()).toEqual(before);
            expect(recordEntries(broker!.recordFile).filter((e) => e.kind === "verb" && e.verb === "restore").at(-1)).toMatchObject({
                args: { id: "999" },
                outcome: "refused",
                detail: "no checkpoint 999 in workspace shared (see: airlock checkpoints)",
            });
        });

        it("from inside the container the checkpoints are out of sight and out of reach", () => {
            const probe = ssh("cat /proc/self/mountinfo; ls -a / /workspace/..; ls /var/lib/airlock 2>&1; true");
            expect(probe.stdout).not.toMatch(/checkpoints|\/volume\b/);
            expect(probe.stdout).toContain("No such file or directory");
            // Deleting what it can see deletes only its own workspace, which a restore brings back.
            expect(ssh("rm -rf /workspace/* /workspace/.[!.]*; ls -A /workspace | wc -l").stdout.trim()).toBe("0");
            expect(ssh("airlock restore 1").status).toBe(0);
            expect(ssh(`cat app/migrations/${Object.keys(migrations)[1]}`).stdout).toBe(migrations[Object.keys(migrations)[1]]);
        });
    });

    describe("airlock try", () => {
        beforeAll(() => useMode("shared"));
        /** Every file of the workspace with its sha256, in order: what "byte for byte" compares. */
        const tree = () => ssh("find /workspace -type f -print0 | sort -z | xargs -0 -r sha256sum").stdout;
        const tryContainers = () => docker("ps", "--all", "--filter", "name=agent-try-", "--format", "{{.Names}}").stdout.trim();
        /** ssh without waiting: for tries that run at once. */
        function sshAsync(command: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
            const args = ["netns", "exec", net.client, "ssh", ...agentSshArgs({ config: gatewayConfig, address: net.serverTailnet, user: AGENT, key: clientKey, dir: clientDir }), "sandbox", command];
            return new Promise((resolve) => {
                const child = spawn("ip", args, { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: clientDir } });
                let stdout = "";
                let stderr = "";
                child.stdout.on("data", (d) => (stdout += d));
                child.stderr.on("data", (d) => (stderr += d));
                child.on("close", (status) => resolve({ status, stdout, stderr }));
            });
        }

        it("a passing try with --keep promotes its changes, and the state it replaced is a checkpoint", () => {
            expect(ssh("mkdir -p /workspace/proj && echo 'v1' > /workspace/proj/lib.txt").status).toBe(0);
            const kept = ssh("airlock try --keep -- echo v2 > proj/lib.txt && grep -q v2 proj/lib.txt");
            expect(kept.status, kept.stderr).toBe(0);
            expect(kept.stderr).toMatch(/^airlock: try [0-9a-f]{12}: exit 0; kept: the workspace is the try's now; the state it replaced is checkpoint (\d+)$/m);
            expect(ssh("cat /workspace/proj/lib.txt").stdout).toBe("v2\n");
            const before = Number(/checkpoint (\d+)$/m.exec(kept.stderr)![1]);
            const listed = JSON.parse(ssh("airlock checkpoints --json").stdout) as { id: number; kind: string }[];
            expect(listed.find((c) => c.id === before)?.kind).toBe("pre-try");
            expect(tryContainers()).toBe("");
        });

        it("a failing try leaves the workspace byte for byte as it was, whatever it did, and its container is gone", () => {
            const before = tree();
            expect(before).toContain("/workspace/proj/lib.txt");
            const failed = ssh("airlock try --keep -- rm -rf /workspace/* && echo junk > /workspace/new.txt && exit 3");
            expect(failed.status).toBe(3);
            expect(failed.stderr).toMatch(/exit 3; discarded: the workspace is as it was/);
            expect(tree()).toBe(before);
            const unkept = ssh("airlock try -- echo changed > proj/lib.txt");
            expect(unkept.status).toBe(0);
            expect(tree()).toBe(before);
            expect(tryContainers()).toBe("");
        });

        it("with no network, a test that opens a connection fails to connect; egress gives it the shell's network", () => {
            const none = ssh("airlock try -- ls /sys/class/net; exec 3<>/dev/tcp/198.18.7.2/53");
            // Its output is stdout and stderr together: the interfaces first, then bash's refusal.
            expect(none.stdout.split("\n")[0]).toBe("lo");
            expect(none.status).not.toBe(0);
            expect(none.stdout + none.stderr).toMatch(/Network is unreachable/);
            const egress = ssh("airlock try --network egress -- ls /sys/class/net");
            expect(egress.status, egress.stderr).toBe(0);
            expect(egress.stdout.split("\n")).toContain("eth0");
        });

        it("an endless loop is killed at the timeout, and its container is gone", () => {
            const started = Date.now();
            const looped = ssh("airlock try --timeout 3 -- while true; do :; done");
            expect(looped.status).toBe(124);
            expect(looped.stderr).toMatch(/timed out after 3 s; its container was killed/);
            expect(Date.now() - started).toBeLessThan(60_000);
            expect(tryContainers()).toBe("");
        });

        it("a fork bomb stops at the shell's pids limit, and the timeout ends it", () => {
            const bomb = ssh("airlock try --timeout 10 -- for i in $(seq 1 400); do sleep 60 & done; wait");
            expect(bomb.stdout + bomb.stderr).toMatch(/fork: (retry: )?Resource temporarily unavailable/);
            expect(bomb.status).toBe(124);
            expect(tryContainers()).toBe("");
        });

        it("100 MB of output comes back as its head and tail within the limit", () => {
            const flood = ssh("airlock try --output-kb 4 -- head -c 100000000 /dev/zero | tr '\\0' a; echo; echo the end");
            expect(flood.status, flood.stderr).toBe(0);
            expect(flood.stdout.length).toBeLessThan(2 * 4096 + 200);
            expect(flood.stdout.startsWith("aaaa")).toBe(true);
            expect(flood.stdout.endsWith("the end\n")).toBe(true);
            expect(flood.stdout).toMatch(/\[airlock: 99991\d\d\d bytes of output cut here; the first and last 4 KiB are shown\]/);
        });

        it("two tries at once do not see each other's clones", async () => {
            const [a, b] = await Promise.all([
                sshAsync("airlock try -- touch /workspace/from-a && sleep 3 && ls /workspace"),
                sshAsync("airlock try -- touch /workspace/from-b && sleep 3 && ls /workspace"),
            ]);
            expect(a.status, a.stderr).toBe(0);
            expect(b.status, b.stderr).toBe(0);
            expect(a.stdout.split("\n")).toContain("from-a");
            expect(a.stdout.split("\n")).not.toContain("from-b");
            expect(b.stdout.split("\n")).toContain("from-b");
            expect(b.stdout.split("\n")).not.toContain("from-a");
            expect(ssh("ls /workspace").stdout.split("\n")).not.toContain("from-a");
        });

        it("every try is on the record: the command, its settings, its exit status and whether it was kept", () => {
            const entries = recordEntries(broker!.recordFile);
            const ends = entries.filter((e) => e.kind === "verb" && e.verb === "try-end" && e.outcome === "ok");
            expect(ends.length).toBeGreaterThanOrEqual(8);
            expect(ends.some((e) => e.args.status === "0" && e.detail.startsWith("kept:"))).toBe(true);
            expect(ends.some((e) => e.args.status === "124" && e.detail.startsWith("discarded"))).toBe(true);
            const begins = entries.filter((e) => e.kind === "verb" && e.verb === "try-begin" && e.outcome === "ok");
            expect(begins.some((e) => e.args.network === "egress")).toBe(true);
            expect(entries.some((e) => e.kind === "begin" && e.command === "airlock try --timeout 3 -- while true; do :; done")).toBe(true);
        });
    });

    describe("per-session sandboxes", () => {
        beforeAll(() => useMode("per-session"));

        it("two named sessions get containers and workspaces of their own and do not see each other's files", () => {
            expect(ssh("echo alpha > mine.txt", { AIRLOCK_SESSION: "alpha" }).status).toBe(0);
            expect(ssh("echo beta > mine.txt", { AIRLOCK_SESSION: "beta" }).status).toBe(0);
            expect(ssh("cat mine.txt; ls", { AIRLOCK_SESSION: "alpha" }).stdout).toBe("alpha\nmine.txt\n");
            expect(ssh("cat mine.txt; ls", { AIRLOCK_SESSION: "beta" }).stdout).toBe("beta\nmine.txt\n");
            expect(docker("inspect", "--format", "{{.Name}}", "agent-s-alpha", "agent-s-beta").stdout.trim().split("\n")).toEqual(["/agent-s-alpha", "/agent-s-beta"]);
            // Each session has its own undo history.
            expect(ssh("airlock checkpoint --label alpha-1", { AIRLOCK_SESSION: "alpha" }).stdout).toMatch(/^checkpoint 1 of s-alpha /);
            expect(ssh("airlock checkpoints", { AIRLOCK_SESSION: "beta" }).stdout).toContain("no checkpoints in workspace s-beta yet");
        });

        it("two sessions have no route and no name between them; each has a PostgreSQL of its own with a password of its own", () => {
            const inspectEnv = (name: string) => docker("inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", name).stdout.split("\n");
            const address = (name: string) => docker("inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", name).stdout.trim().split(" ");
            // Beta serves on its shell and its database; alpha, its neighbour, probes both by name and by address.
            const probe = (session: string, target: string, port: number) => ssh(`echo | nc -w 3 ${target} ${port}`, { AIRLOCK_SESSION: session });
            for (const [target, port] of [["agent-s-beta", 8080], ["agent-postgres-s-beta", 5432]] as const) {
                expect(docker("exec", "--detach", target, "sh", "-c", `while :; do echo pong | nc -l -p ${port}; done`).status, `${target} serves`).toBe(0);
                expect(probe("alpha", target, port).stdout, `alpha reached ${target} by name`).not.toContain("pong");
                // Docker's DNS in alpha's networks does not know the name (it asks upstream, which has none).
                const lookup = ssh(`nslookup -timeout=2 ${target}`, { AIRLOCK_SESSION: "alpha" });
                for (const ip of address(target)) {
                    expect(lookup.stdout, `alpha resolved ${target}`).not.toContain(ip);
                    expect(probe("alpha", ip, port).stdout, `alpha reached ${target} at ${ip}`).not.toContain("pong");
                }
            }
            // Within beta's own session its database answers by its service name: the probes above could succeed.
            expect(probe("beta", "postgres", 5432).stdout).toBe("pong\n");
            expect(probe("beta", "agent-s-beta", 8080).stdout).toBe("pong\n");
            // Each session's database has a password of its own, its shell knows its own, and nothing trusts the network.
            const secrets = ["alpha", "beta"].map((name) => {
                const db = inspectEnv(`agent-postgres-s-${name}`);
                expect(db.some((v) => v.startsWith("POSTGRES_HOST_AUTH_METHOD="))).toBe(false);
                const password = db.find((v) => v.startsWith("POSTGRES_PASSWORD="))?.split("=")[1] ?? "";
                expect(password).toMatch(/^[0-9a-f]{64}$/);
                expect(ssh("printf '%s %s' \"$PGHOST\" \"$PGPASSWORD\"", { AIRLOCK_SESSION: name }).stdout).toBe(`postgres ${password}`);
                return password;
            });
            expect(secrets[0]).not.toBe(secrets[1]);
            // The secret rests in root's session state and in an env file only the agent's group reads, never in the workspace.
            const envFile = path.join(rig!.config.runDir, "session-credentials", "s-alpha.env");
            const st = fs.statSync(envFile);
            expect([st.uid, st.mode & 0o777]).toEqual([0, 0o440]);
            expect(ssh(`grep -rl ${secrets[0]} /workspace; echo done`, { AIRLOCK_SESSION: "alpha" }).stdout).toBe("done\n");
            // The servers go, so the session is idle again for the test that follows.
            for (const target of ["agent-s-beta", "agent-postgres-s-beta"]) {
                for (const line of docker("top", target, "-eo", "pid,args").stdout.split("\n").filter((l) => /pong|nc -l/.test(l))) process.kill(Number(line.trim().split(/\s+/)[0]), "SIGKILL");
            }
        });

        it("an idle session is archived as a checkpoint, its container removed, and it resumes where it stopped", () => {
            const state = path.join(dirs.volume, "sessions", "s-beta.json");
            const session = JSON.parse(fs.readFileSync(state, "utf8"));
            session.lastUsed -= 61 * 60;
            fs.writeFileSync(state, JSON.stringify(session));
            const swept = maintain();
            expect(swept.status, swept.stderr).toBe(0);
            expect(swept.stdout, swept.stderr).toMatch(/session s-beta: idle 61 min, archived as checkpoint 1/);
            // Created by the agent's first command, archived by root's maintenance: both on the record.
            const sessions = recordEntries(broker!.recordFile).filter((e) => e.kind === "verb" && e.workspace === "s-beta" && e.verb.startsWith("session"));
            expect(sessions.map((e) => [e.verb, e.uid, e.detail])).toEqual([
                ["session-create", Number(run("id", ["-u", AGENT]).stdout.trim()), expect.stringMatching(/^created, /)],
                ["session-removed", 0, "idle 61 min, archived as checkpoint 1"],
            ]);
            // Only root's jobs may write such an event: the agent, on the broker's socket, is refused.
            expect(talk(broker!.socket, `record-event workspace=s-beta event=session-removed detail=${Buffer.from("forged").toString("base64")}\n`, AGENT).lines).toEqual(["error record-event: root's jobs only"]);
            expect(docker("inspect", "agent-s-beta").status).not.toBe(0);
            // Its database's container and networks go too; its data stays for its return.
            expect(docker("inspect", "agent-postgres-s-beta").status).not.toBe(0);
            expect(docker("network", "ls", "--quiet", "--filter", "name=airlock-s-beta_").stdout.trim()).toBe("");
            expect(docker("volume", "inspect", "airlock-s-beta_pgdata").status).toBe(0);
            expect(fs.existsSync(path.join(dirs.workspaces, "s-beta"))).toBe(false);
            expect(ssh("cat mine.txt", { AIRLOCK_SESSION: "alpha" }).stdout).toBe("alpha\n");

            expect(ssh("cat mine.txt", { AIRLOCK_SESSION: "beta" }).stdout).toBe("beta\n");
            expect(docker("inspect", "--format", "{{.State.Running}}", "agent-s-beta").stdout.trim()).toBe("true");
        });

        it("a connection without AIRLOCK_SESSION gets a throwaway session, kept while the connection lives", () => {
            const own = ["-o", `ControlPath=${clientDir}/cm-throwaway-%C`];
            expect(ssh("echo scratch > tmp.txt; ls", {}, own).stdout).toBe("tmp.txt\n");
            expect(ssh("cat tmp.txt", {}, own).stdout).toBe("scratch\n");
            // The named sessions' files are not here, nor is this one's there.
            expect(ssh("ls", { AIRLOCK_SESSION: "alpha" }).stdout).toBe("mine.txt\n");
            const throwaway = fs.readdirSync(dirs.workspaces).filter((n) => n.startsWith("c-"));
            expect(throwaway).toHaveLength(1);

            expect(maintain().status).toBe(0);
            expect(fs.existsSync(path.join(dirs.workspaces, throwaway[0]))).toBe(true);
            inNamespace(net.client, ["ssh", "-o", `ControlPath=${clientDir}/cm-throwaway-%C`, "-O", "exit", "-F", gatewayConfig, "-o", `HostName=${net.serverTailnet}`, "-o", `User=${AGENT}`, "sandbox"]);
            const swept = maintain();
            expect(swept.stdout).toContain(`session ${throwaway[0]}: connection ended, thrown away`);
            expect(fs.existsSync(path.join(dirs.workspaces, throwaway[0]))).toBe(false);
            expect(docker("inspect", `agent-${throwaway[0]}`).status).not.toBe(0);
            // A throwaway session's database goes with it.
            expect(docker("volume", "inspect", `airlock-${throwaway[0]}_pgdata`).status).not.toBe(0);
            expect(fs.existsSync(path.join(rig!.config.runDir, "session-credentials", `${throwaway[0]}.env`))).toBe(false);
        });

        it("a bad AIRLOCK_SESSION is refused before anything runs", () => {
            const result = ssh("touch /workspace/ran", { AIRLOCK_SESSION: "../../etc" });
            expect(result.status).toBe(2);
            expect(result.stderr).toBe("airlock: AIRLOCK_SESSION must be 1-31 of a-z, 0-9 and -, starting with a letter or digit\n");
        });
    });
});
