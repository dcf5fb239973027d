import { ChildProcess } from "node:child_process";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { COMPOSE_TEMPLATE_PATH, GATEWAY_ROOT_SANDBOX_KEY, RenderedHost, SSHD_TEMPLATE_PATH } from "../components/render/hosts";
import { GATEWAY_AGENT_PATHS, RUNTIME_SSH_FOLDER, RUNTIME_SSH_KEY } from "../components/workloads/compose";
import { HERMES_RUNTIME } from "../policies/contract";
import { importTestImage, startDockerd, TestDocker } from "./helpers/dockerd";
import { createTestNet, inNamespace, spawnInNamespace, TestNet, waitForPort } from "./helpers/netns";
import { newHostKey } from "./helpers/sshdRig";
import { AIRLOCK_BIN } from "./helpers/cli";
import { docSample } from "./helpers/docs";
import { editedStack, renderedFile, renderHosts, sandboxSshConfigAt, tempDir } from "./helpers/stacks";
import { freeUid, installFiles, isRoot, run, TEST_TAILNET_DOMAIN, toolsAvailable, withTailnetValues } from "./helpers/tools";
import { hostSshd } from "./helpers/hostTools";

/** The hosts' sshd (Debian 13's OpenSSH), not this machine's. */
const HOST_SSHD = hostSshd().sshd;

/**
 * `airlock secrets push` end to end: the operator's CLI in one network namespace,
 * the gateway's rendered sshd (operator login only, keys only) in another, the
 * operator's sudo, the rendered airlock-agent-secrets, and the runtime container
 * from the rendered gateway compose on a real dockerd, restarted by the tool as
 * the agent user. Paths the tool and compose file name on a gateway are moved
 * into a throwaway tree; nothing else in them changes.
 */

const AGENT = "airlock-e2s-agent";
const OPS = "airlock-e2s-ops";
const SUDOERS = "/etc/sudoers.d/airlock-e2s-ops";
const IMAGE = "airlock-test/runtime:1";

const canRun = isRoot() && toolsAvailable("e2e secrets push", ["ip", "sshd", "ssh", "sudo", "useradd", "dockerd", "docker-compose", "busybox", "python3"]);
if (!isRoot()) console.warn("SKIPPED e2e secrets push: needs root (CI runs it as root)");

describe.runIf(canRun)("airlock secrets push to the gateway over ssh", () => {
    let net: TestNet;
    let root: string;
    let work: string;
    let stacksDir: string;
    let sshConfig: string;
    let sshd: ChildProcess | undefined;
    let sshdLog: string;
    let dockerd: TestDocker | undefined;
    let runtimeDir: string;
    let uid: number;
    let gateway: RenderedHost;
    const created: string[] = [];

    const key = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey.export({ type: "pkcs1", format: "pem" }).toString();
    const first = {
        ANTHROPIC_API_KEY: ["sk", "ant", "api03", randomBytes(24).toString("base64url")].join("-"),
        SLACK_BOT_TOKEN: ["xoxb", "1234567890", randomBytes(12).toString("hex")].join("-"),
        GITHUB_APP_PRIVATE_KEY: key,
    };

    /** The gateway's paths, moved into the test tree. */
    const moved = (text: string) =>
        ["/etc/airlock/", "/etc/ssh/ssh_config.d/", "/run/airlock-agent/", "/var/lib/airlock/", "/usr/local/libexec/airlock/"].reduce((t, prefix) => t.replaceAll(prefix, `${root}${prefix}`), text);

    /** The stack file declaring `names` (as `pulumi config set --secret --path` leaves them). */
    function writeStack(names: string[], clientPublicKey: string) {
        editedStack(
            "dev",
            (c) => {
                c["airlock:gateway"].adminUser = OPS;
                c["airlock:gateway"].adminSshKeys = [clientPublicKey];
                c["airlock:gateway"].agent.secrets = Object.fromEntries(names.map((n) => [n, { secure: `v1:${n}` }]));
                c["airlock:agent"].user = AGENT;
                c["airlock:agent"].uid = uid;
            },
            stacksDir,
        );
    }

    /** The CLI on the operator's side of the tailnet (the client namespace). */
    function airlock(args: string[], stdin = "") {
        return run("ip", ["netns", "exec", net.client, process.execPath, AIRLOCK_BIN, "--stacks-dir", stacksDir, ...args], {
            input: stdin,
            env: { ...process.env, HOME: work },
            timeout: 180_000,
        });
    }

    const asAgent = (cmd: string[]) => run("runuser", ["-u", AGENT, "--", ...cmd]);
    const runtimeEnv = () => {
        const env = dockerd!.docker(["exec", "airlock-agent", "env"]);
        expect(env.status, env.stderr).toBe(0);
        return env.stdout;
    };

    beforeAll(async () => {
        uid = freeUid(1571, 1599);
        net = createTestNet("sec");
        for (const [user, extra] of [[AGENT, ["--uid", String(uid)]], [OPS, []]] as const) {
            if (run("id", [user]).status !== 0) {
                expect(run("useradd", ["--create-home", "--shell", "/bin/bash", ...extra, user]).status).toBe(0);
                created.push(user);
            }
        }
        // The operator's sudo, as cloud-init configures it on the gateway.
        fs.writeFileSync(SUDOERS, `${OPS} ALL=(ALL) NOPASSWD:ALL\n`, { mode: 0o440 });
        // The agent's own ssh key, generated on the gateway (mounted into the runtime read-only).
        const home = `/home/${AGENT}`;
        fs.mkdirSync(`${home}/.ssh`, { recursive: true, mode: 0o700 });
        run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", `${home}/.ssh/id_ed25519`]);
        run("chown", ["-R", `${AGENT}:${AGENT}`, `${home}/.ssh`]);

        work = tempDir("e2s");
        stacksDir = path.join(work, "stacks");
        fs.mkdirSync(stacksDir);
        const clientKey = path.join(work, "id_ed25519");
        run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", clientKey]);
        writeStack(Object.keys(first), fs.readFileSync(`${clientKey}.pub`, "utf8").trim());
        gateway = renderHosts(readStackFile(path.join(stacksDir, "Pulumi.dev.yaml"))).gateway;

        // The gateway's rendered files in a root-owned tree.
        root = fs.mkdtempSync("/run/airlock-e2s-");
        fs.chmodSync(root, 0o755);
        installFiles(gateway, root);
        const tool = path.join(root, GATEWAY_AGENT_PATHS.secretsTool);
        fs.writeFileSync(tool, moved(renderedFile(gateway, GATEWAY_AGENT_PATHS.secretsTool)), { mode: 0o755 });
        fs.mkdirSync(path.join(root, "run"), { mode: 0o755 });
        fs.mkdirSync(path.join(root, "var/lib/airlock/agent-state/agent-state"), { recursive: true });
        run("chown", [AGENT, path.join(root, "var/lib/airlock/agent-state/agent-state")]);
        const hostKey = path.join(root, "ssh_host_ed25519_key");
        const hostPublicKey = newHostKey(hostKey);
        fs.mkdirSync("/run/sshd", { recursive: true, mode: 0o755 });
        const sshdConfig = renderedFile(gateway, SSHD_TEMPLATE_PATH)
            .replace("@TAILNET_IPV4@", net.serverTailnet)
            .replace("HostKey /etc/ssh/ssh_host_ed25519_key", `HostKey ${hostKey}`)
            .replace("AuthorizedKeysFile /etc/ssh/authorized_keys/%u", `AuthorizedKeysFile ${root}/etc/ssh/authorized_keys/%u`);
        fs.writeFileSync(path.join(root, "sshd_config"), hostSshd().configLines + sshdConfig, { mode: 0o600 });

        // The agent's "rootless" Docker: a test daemon whose socket is where the tool looks for it.
        runtimeDir = `/run/user/${uid}`;
        fs.mkdirSync(runtimeDir, { recursive: true, mode: 0o700 });
        run("chown", [`${AGENT}:${AGENT}`, runtimeDir]);
        dockerd = await startDockerd(fs.mkdtempSync("/tmp/airlock-e2s-docker-"), [`${runtimeDir}/docker.sock`]);
        run("chown", [AGENT, `${runtimeDir}/docker.sock`]);
        importTestImage(dockerd, fs.mkdtempSync("/tmp/airlock-e2s-image-"), IMAGE);
        // As airlock-tailnet-render writes it at boot (the address only matters to AdGuard, not started here).
        // The runtime's image is a busybox stand-in here (Hermes itself runs in test/e2e-hermes.test.ts):
        // it cannot run the preflight, so its command only waits; everything else is as rendered.
        const doc = YAML.parse(withTailnetValues(moved(renderedFile(gateway, COMPOSE_TEMPLATE_PATH)), "127.0.0.1"));
        expect(doc.services.agent.command[0]).toBe(moved(GATEWAY_AGENT_PATHS.hermesPreflight));
        Object.assign(doc.services.agent, { image: IMAGE, command: ["sleep", "2147483647"] });
        fs.writeFileSync(path.join(root, "etc/airlock/compose.yml"), YAML.stringify(doc), { mode: 0o644 });
        // Every file the compose file binds exists where it says (a missing source would be made a directory by the daemon, on this machine).
        fs.mkdirSync(path.dirname(moved(GATEWAY_AGENT_PATHS.hermesPreflight)), { recursive: true });
        fs.writeFileSync(moved(GATEWAY_AGENT_PATHS.hermesPreflight), renderedFile(gateway, GATEWAY_AGENT_PATHS.hermesPreflight), { mode: 0o755 });
        // The runtime's ssh config, as airlock-tailnet-render writes it at boot.
        fs.mkdirSync(path.dirname(moved(GATEWAY_AGENT_PATHS.sshConfig)), { recursive: true });
        fs.writeFileSync(moved(GATEWAY_AGENT_PATHS.sshConfig), sandboxSshConfigAt(gateway, `${gateway.hostname.replace(/-gateway$/, "-sandbox")}.${TEST_TAILNET_DOMAIN}`), { mode: 0o644 });
        // As airlock-agent-key.service does at boot: the agent's key, staged for the runtime.
        const keyTool = path.join(root, "usr/local/sbin/airlock-gateway-agent-key");
        fs.writeFileSync(keyTool, moved(renderedFile(gateway, "/usr/local/sbin/airlock-gateway-agent-key")).replace("tee /dev/console", "cat"), { mode: 0o755 });
        const keyStaged = run(keyTool, []);
        expect(keyStaged.status, keyStaged.stderr).toBe(0);

        // Boot order: the runtime's env file is staged before its compose service starts.
        const staged = run(tool, ["stage"]);
        expect(staged.stderr).toBe("");
        expect(staged.status).toBe(0);
        const up = asAgent(["env", `DOCKER_HOST=unix://${runtimeDir}/docker.sock`, "docker-compose", "--project-name", "airlock", "--file", path.join(root, "etc/airlock/compose.yml"), "up", "--detach", "--no-deps", "agent"]);
        expect(up.status, up.stderr).toBe(0);

        // The gateway's sshd, with the tool at its gateway path (in sshd's own mount namespace).
        sshdLog = path.join(work, "sshd.log");
        sshd = spawnInNamespace(net.server, `mount --bind ${root}/usr/local/sbin /usr/local/sbin && exec ${HOST_SSHD} -D -e -f ${root}/sshd_config`, sshdLog);
        await waitForPort(net.client, net.serverTailnet, 22);

        // The operator's ssh config: the gateway's MagicDNS name, its pinned host key.
        fs.writeFileSync(path.join(work, "known_hosts"), `${gateway.hostname} ${hostPublicKey}\n`);
        sshConfig = path.join(work, "ssh_config");
        fs.writeFileSync(
            sshConfig,
            [`Host ${gateway.hostname}`, `  HostName ${net.serverTailnet}`, `  HostKeyAlias ${gateway.hostname}`, `  IdentityFile ${clientKey}`, `  UserKnownHostsFile ${work}/known_hosts`, "  StrictHostKeyChecking yes", ""].join("\n"),
        );
    }, 240_000);

    afterAll(async () => {
        if (dockerd) {
            dockerd.docker(["rm", "--force", "airlock-agent"]);
            await dockerd.stop();
        }
        sshd?.kill("SIGTERM");
        net?.close();
        fs.rmSync(SUDOERS, { force: true });
        if (runtimeDir) fs.rmSync(runtimeDir, { recursive: true, force: true });
        for (const user of created) {
            run("pkill", ["--uid", user]);
            run("userdel", ["--remove", user]);
        }
        if (root) fs.rmSync(root, { recursive: true, force: true });
        if (process.env.AIRLOCK_DEBUG && sshdLog) console.log(fs.readFileSync(sshdLog, "utf8"));
    }, 120_000);

    it("delivers the values to a root-owned 0600 file and restarts the runtime; prints names only", () => {
        const result = airlock(["secrets", "push", "--stack", "dev", "--stdin", "--ssh-config", sshConfig], JSON.stringify(first));
        expect(result.stderr).toBe("");
        // The README's sample.
        expect(result.stdout).toBe(docSample("secrets-push"));
        expect(result.stdout).toBe("delivered to airlock-dev-gateway: ANTHROPIC_API_KEY, GITHUB_APP_PRIVATE_KEY, SLACK_BOT_TOKEN\nruntime restarted\n");
        expect(result.status).toBe(0);
        const file = fs.statSync(path.join(root, GATEWAY_AGENT_PATHS.secrets));
        expect([file.uid, file.gid, file.mode & 0o777]).toEqual([0, 0, 0o600]);
        const stored = JSON.parse(fs.readFileSync(path.join(root, GATEWAY_AGENT_PATHS.secrets), "utf8")).secrets;
        expect(Object.fromEntries(Object.entries(stored).map(([n, s]) => [n, (s as { value: string }).value]))).toEqual(first);
        for (const value of Object.values(first)) expect(result.stdout + fs.readFileSync(sshdLog, "utf8")).not.toContain(value.slice(-20));
    });

    it("the runtime sees its variables; the GitHub App's key stays out of it", () => {
        const env = runtimeEnv();
        expect(env).toContain(`ANTHROPIC_API_KEY=${first.ANTHROPIC_API_KEY}\n`);
        expect(env).toContain(`SLACK_BOT_TOKEN=${first.SLACK_BOT_TOKEN}\n`);
        expect(env).not.toContain("GITHUB_APP_PRIVATE_KEY");
        expect(env).toContain("HERMES_HOME=/opt/data\n");
        const staged = fs.statSync(path.join(root, GATEWAY_AGENT_PATHS.runtimeEnv));
        expect([staged.uid, staged.mode & 0o777]).toEqual([0, 0o440]);
    });

    it("the runtime container runs hardened, its host files read-only, its state on the state filesystem", () => {
        const c = JSON.parse(dockerd!.docker(["inspect", "airlock-agent"]).stdout)[0];
        const h = c.HostConfig;
        expect(h.CapDrop).toEqual(["ALL"]);
        expect(h.SecurityOpt).toContain("no-new-privileges:true");
        expect([h.PidsLimit, h.Memory, h.NanoCpus, h.IpcMode, h.Init, h.Privileged]).toEqual([256, 3 * 1024 ** 3, 1.8e9, "private", true, false]);
        expect(h.PortBindings ?? {}).toEqual({});
        const mounts = Object.fromEntries(c.Mounts.map((m: any) => [m.Destination, m]));
        const readOnly = [RUNTIME_SSH_FOLDER, moved(GATEWAY_AGENT_PATHS.knownHosts)].concat(HERMES_RUNTIME.managedConfig, HERMES_RUNTIME.managedEnv, moved(RUNTIME_SSH_KEY), moved(GATEWAY_AGENT_PATHS.hermesPreflight));
        for (const target of readOnly) expect(mounts[target]?.RW, target).toBe(false);
        // The agent's key, as the runtime's own user (the published image's hermes, uid 10000) reads it.
        const key = dockerd!.docker(["exec", "--user", "10000:10000", "airlock-agent", "cat", moved(RUNTIME_SSH_KEY)]);
        expect(key.stdout, key.stderr).toBe(fs.readFileSync(`/home/${AGENT}/.ssh/id_ed25519`, "utf8"));
        // On the host, the staged copy is the agent's (through its group) and root's alone.
        expect(run("runuser", ["-u", OPS, "--", "cat", moved(GATEWAY_AGENT_PATHS.runtimeSshKey)]).status).not.toBe(0);
        // Root's own copy, for its jobs' ssh to the sandbox: the same key, root's alone (not even the agent's).
        const rootCopy = moved(GATEWAY_ROOT_SANDBOX_KEY);
        expect(fs.readFileSync(rootCopy, "utf8")).toBe(fs.readFileSync(`/home/${AGENT}/.ssh/id_ed25519`, "utf8"));
        expect(fs.statSync(rootCopy)).toMatchObject({ uid: 0, gid: 0 });
        expect(fs.statSync(rootCopy).mode & 0o7777).toBe(0o600);
        expect(fs.statSync(path.dirname(rootCopy)).mode & 0o7777).toBe(0o700);
        expect(run("runuser", ["-u", AGENT, "--", "cat", rootCopy]).status).not.toBe(0);
        expect(mounts["/opt/data"]).toMatchObject({ Type: "volume", RW: true });
        // The named volume's data is the directory on the state filesystem.
        dockerd!.docker(["exec", "airlock-agent", "sh", "-c", "echo remembered > /opt/data/memory.txt"]);
        expect(fs.readFileSync(path.join(root, "var/lib/airlock/agent-state/agent-state/memory.txt"), "utf8")).toBe("remembered\n");
    });

    it("the agent's key is read as the agent: links it plants at its key or the public half give root's files to no one", () => {
        const keyTool = path.join(root, "usr/local/sbin/airlock-gateway-agent-key");
        const sshDir = `/home/${AGENT}/.ssh`;
        const staged = path.join(root, GATEWAY_AGENT_PATHS.runtimeSshKey);
        const before = fs.readFileSync(staged, "utf8");
        const secretsFile = path.join(root, GATEWAY_AGENT_PATHS.secrets);
        const secretValue = first.ANTHROPIC_API_KEY;
        expect(fs.readFileSync(secretsFile, "utf8")).toContain(secretValue);
        for (const name of ["id_ed25519", "id_ed25519.pub"]) fs.renameSync(path.join(sshDir, name), path.join(sshDir, `${name}.real`));
        try {
            // The agent (its own directory) points its public half at the root-only secrets file: the console gets nothing of it.
            asAgent(["ln", "-s", secretsFile, path.join(sshDir, "id_ed25519.pub")]);
            asAgent(["cp", path.join(sshDir, "id_ed25519.real"), path.join(sshDir, "id_ed25519")]);
            const printed = run(keyTool, []);
            expect(printed.stdout + printed.stderr).not.toContain(secretValue);
            // ...and its private key: nothing is staged for the runtime, and the staged copy stays the key it was.
            fs.rmSync(path.join(sshDir, "id_ed25519"));
            asAgent(["ln", "-s", secretsFile, path.join(sshDir, "id_ed25519")]);
            const refused = run(keyTool, []);
            expect(refused.status).not.toBe(0);
            expect(refused.stdout + refused.stderr).not.toContain(secretValue);
            expect(fs.readFileSync(staged, "utf8")).toBe(before);
            // Root's copy was taken once, from the key as generated: what the agent does to its own later changes nothing.
            expect(fs.readFileSync(moved(GATEWAY_ROOT_SANDBOX_KEY), "utf8")).toBe(fs.readFileSync(path.join(sshDir, "id_ed25519.real"), "utf8"));
            // ...or a FIFO nobody writes: the boot unit gives up on it instead of waiting forever.
            fs.rmSync(path.join(sshDir, "id_ed25519"));
            asAgent(["mkfifo", path.join(sshDir, "id_ed25519")]);
            const fifo = run(keyTool, [], { timeout: 120_000 });
            // It exits by itself (a process killed at the deadline has no status), refusing.
            expect(fifo.error).toBeUndefined();
            expect(typeof fifo.status === "number" && fifo.status !== 0).toBe(true);
            expect(fs.readFileSync(staged, "utf8")).toBe(before);
        } finally {
            for (const name of ["id_ed25519", "id_ed25519.pub"]) {
                fs.rmSync(path.join(sshDir, name), { force: true });
                fs.renameSync(path.join(sshDir, `${name}.real`), path.join(sshDir, name));
            }
        }
    });

    it("an agent-user process on the gateway cannot read the secrets file, nor can the operator without sudo", () => {
        const file = path.join(root, GATEWAY_AGENT_PATHS.secrets);
        for (const user of [AGENT, OPS]) {
            const read = run("runuser", ["-u", user, "--", "cat", file]);
            expect(read.status, user).not.toBe(0);
            expect(read.stderr, user).toContain("Permission denied");
            expect(read.stdout).toBe("");
        }
    });

    it("status lists the names and their age; a second push without a name removes it from the file and the runtime", () => {
        const status = airlock(["secrets", "status", "--stack", "dev", "--ssh-config", sshConfig]);
        expect(status.stdout).toMatch(/^airlock-dev-gateway: 3 of 3 declared secrets present\n {2}ANTHROPIC_API_KEY {7}present, changed \d+s ago\n/);
        expect(status.status).toBe(0);

        writeStack(["ANTHROPIC_API_KEY", "GITHUB_APP_PRIVATE_KEY"], fs.readFileSync(path.join(work, "id_ed25519.pub"), "utf8").trim());
        const { SLACK_BOT_TOKEN: _, ...second } = first;
        const result = airlock(["secrets", "push", "--stack", "dev", "--stdin", "--ssh-config", sshConfig], JSON.stringify(second));
        expect(result.stdout).toBe("delivered to airlock-dev-gateway: ANTHROPIC_API_KEY, GITHUB_APP_PRIVATE_KEY\nremoved: SLACK_BOT_TOKEN\nruntime restarted\n");
        expect(result.status).toBe(0);
        expect(Object.keys(JSON.parse(fs.readFileSync(path.join(root, GATEWAY_AGENT_PATHS.secrets), "utf8")).secrets)).toEqual(["ANTHROPIC_API_KEY", "GITHUB_APP_PRIVATE_KEY"]);
        const env = runtimeEnv();
        expect(env).not.toContain("SLACK_BOT_TOKEN");
        expect(env).toContain(`ANTHROPIC_API_KEY=${first.ANTHROPIC_API_KEY}\n`);
    });

    it("the gateway refuses a value an env file cannot carry, changes nothing, and echoes no value", () => {
        const before = fs.readFileSync(path.join(root, GATEWAY_AGENT_PATHS.secrets), "utf8");
        const value = `line-one-${randomBytes(8).toString("hex")}\nINJECTED=1`;
        // Straight to the gateway's tool, as a CI job that bypassed the CLI's own check would.
        const direct = inNamespace(net.client, ["ssh", "-F", sshConfig, "-T", `${OPS}@${gateway.hostname}`, `sudo -n ${GATEWAY_AGENT_PATHS.secretsTool} push`], {
            input: JSON.stringify({ ANTHROPIC_API_KEY: value, GITHUB_APP_PRIVATE_KEY: key }),
            env: { ...process.env, HOME: work },
        });
        expect(direct.status).toBe(2);
        expect(direct.stderr.trim()).toBe("airlock-agent-secrets: ANTHROPIC_API_KEY: a runtime secret must be one line without ', \\ or ${ (an env file cannot carry it unambiguously)");
        expect(direct.stderr + direct.stdout).not.toContain(value.slice(0, 20));
        expect(fs.readFileSync(path.join(root, GATEWAY_AGENT_PATHS.secrets), "utf8")).toBe(before);
        expect(runtimeEnv()).not.toContain("INJECTED");
    });

    it("a damaged secrets file at boot leaves the runtime without secrets, not the gateway's compose without its env file", () => {
        const file = path.join(root, GATEWAY_AGENT_PATHS.secrets);
        const saved = fs.readFileSync(file, "utf8");
        fs.writeFileSync(file, saved.slice(0, 40));
        const staged = run(path.join(root, GATEWAY_AGENT_PATHS.secretsTool), ["stage"]);
        expect(staged.status).toBe(1);
        expect(staged.stderr).toBe(`airlock-agent-secrets: ${file} is unusable (JSONDecodeError); the runtime starts without secrets until the next push\n`);
        expect(fs.readFileSync(path.join(root, GATEWAY_AGENT_PATHS.runtimeEnv), "utf8")).toBe("# airlock: the agent runtime's secrets, staged by airlock-agent-secrets; do not edit.\n");
        fs.writeFileSync(file, saved);
    });
});
