import { ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { COMPOSE_TEMPLATE_PATH, SSHD_TEMPLATE_PATH } from "../components/render/hosts";
import { AGENT_MEMORY_DB_SERVICE, AGENT_SERVICE, GATEWAY_AGENT_PATHS } from "../components/workloads/compose";
import { installStubEngine, recordEntries, TestBroker } from "./helpers/broker";
import { startDockerd, TestDocker } from "./helpers/dockerd";
import { HERMES_VERSION, loadHermesImage, movedHostPaths } from "./helpers/hermes";
import { docSample } from "./helpers/docs";
import { createTestNet, inNamespace, spawnInNamespace, TestNet, waitForPort } from "./helpers/netns";
import { enforceEgress, installSandboxSshd, pinnedKnownHosts, startSandboxBroker } from "./helpers/sshdRig";
import { editedStack, REPO, renderedFile, renderHosts, sandboxSshConfigAt, tempDir } from "./helpers/stacks";
import { installFiles, isRoot, run, TEST_TAILNET_DOMAIN, toolsAvailable, withTailnetValues } from "./helpers/tools";
import { hostSshd } from "./helpers/hostTools";

/** The hosts' sshd (Debian 13's OpenSSH), not this machine's. */
const HOST_SSHD = hostSshd().sshd;

/**
 * The agent runtime the product ships, end to end: the pinned Hermes Agent (the twin's
 * image of it: the release from PyPI, unmodified) started by a real dockerd from the
 * gateway's rendered compose service (its environment, Hermes's managed files, the
 * preflight, the agent's key and ssh config), in a "gateway" namespace; the sandbox's
 * rendered sshd, wrapper and broker in another. A scripted model stands in for the
 * model provider: it decides which commands the agent runs, Hermes decides how.
 */

const AGENT = "airlock-her";
const SANDBOX_TAILNET = "100.100.7.1";
const GATEWAY_TAILNET = "100.100.7.2";
/** Where a tailnet node named like one of the runtime's compose services would point its name. */
const PLANTED = "100.100.7.66";
const MODEL_PORT = 18642;

const canRun =
    isRoot() &&
    toolsAvailable("e2e Hermes runtime", ["ip", "sshd", "ssh-keygen", "useradd", "runuser", "socat", "systemd-socket-activate", "python3", "dockerd", "docker-compose", "buildah", "mmdebstrap", "skopeo"]);
if (!isRoot()) console.warn("SKIPPED e2e Hermes runtime: needs root (CI runs it as root)");

describe.runIf(canRun)(`Hermes Agent ${HERMES_VERSION} as the gateway runs it`, () => {
    let net: TestNet;
    let sandboxRoot: string;
    let gatewayRoot: string;
    let work: string;
    let sshd: ChildProcess | undefined;
    let model: ChildProcess | undefined;
    let resolver: ChildProcess | undefined;
    let broker: TestBroker | undefined;
    let dockerd: TestDocker | undefined;
    let createdUser = false;
    let createdWorkspace = false;
    let composeFile: string;
    let stateDir: string;
    let engineCalls: () => string[];
    let image: string;
    let sandboxName: string;

    const compose = (args: string[]) => run("docker-compose", ["--project-name", "airlock", "--file", composeFile, ...args], { env: dockerd!.env, timeout: 300_000 });
    /** In the runtime's container, as the user the image runs Hermes as. */
    const asRuntime = (cmd: string[]) => dockerd!.docker(["exec", "--user", "hermes", "airlock-agent", ...cmd]);
    const scripted = (commands: string[]) => fs.writeFileSync(path.join(work, "script.json"), JSON.stringify(commands));
    /** The agent's loop, one prompt, in the runtime's container. */
    const agentRuns = (commands: string[]) => {
        scripted(commands);
        const started = Date.now();
        const result = dockerd!.docker(["exec", "--user", "hermes", "airlock-agent", "hermes", "--yolo", "-z", "do it"]);
        console.log(`hermes -z with ${commands.length} command(s): ${Math.round((Date.now() - started) / 1000)} s`);
        return result;
    };
    /** What Hermes's own loader chooses, on the path its CLI and its gateway start by. */
    const loaderSays = (launchPath: "cli" | "gateway.run") => {
        const probe = [
            "import importlib, json, sys",
            "import hermes_cli.main",
            `importlib.import_module(${JSON.stringify(launchPath)})`,
            "from tools.terminal_tool import _get_env_config",
            "c = _get_env_config()",
            "print(json.dumps({k: c[k] for k in ('env_type', 'ssh_host', 'ssh_user', 'ssh_port', 'ssh_key', 'cwd')}))",
        ].join("\n");
        const result = asRuntime(["python3", "-c", probe]);
        expect(result.status, result.stderr).toBe(0);
        return JSON.parse(result.stdout.trim().split("\n").at(-1)!);
    };
    const managedFile = (hostPath: string) => path.join(gatewayRoot, hostPath);
    const record = () => (fs.existsSync(broker!.recordFile) ? recordEntries(broker!.recordFile) : []);
    let stateVolume: string;
    /**
     * The runtime's state volume as a user (or a restored backup) may have left it, wanting
     * every command run locally: a .env saying so (which the runtime never reads: airlock's
     * read-only one is mounted over it), and a config.yaml saying so too ("terminal
     * section") or choosing only the model (then the environment decides).
     */
    const userState = (kind: "terminal section" | "model only") => {
        const model = { provider: "custom", base_url: `http://${GATEWAY_TAILNET}:${MODEL_PORT}/v1`, default: "fake-model" };
        fs.writeFileSync(path.join(stateVolume, "config.yaml"), YAML.stringify(kind === "terminal section" ? { model, terminal: { backend: "local", cwd: "/tmp" } } : { model }));
        fs.writeFileSync(path.join(stateVolume, ".env"), "TERMINAL_ENV=local\nHERMES_MANAGED_DIR=/opt/data\nPATH=/opt/data/.local/bin:/usr/bin:/bin\n");
    };
    const preflight = () => asRuntime([GATEWAY_AGENT_PATHS.hermesPreflight, "--check"]);
    /** Runs `body` with `extra` merged into the user's config.yaml in the state volume, then puts the file back. */
    const withUserConfig = (extra: Record<string, unknown>, body: () => void) => {
        const file = path.join(stateVolume, "config.yaml");
        const original = fs.readFileSync(file, "utf8");
        fs.writeFileSync(file, YAML.stringify({ ...YAML.parse(original), ...extra }));
        try {
            body();
        } finally {
            fs.writeFileSync(file, original);
        }
    };

    beforeAll(async () => {
        net = createTestNet("her");
        work = tempDir("hermes");
        if (run("id", [AGENT]).status !== 0) {
            expect(run("useradd", ["--create-home", "--shell", "/bin/bash", AGENT]).status).toBe(0);
            createdUser = true;
        }
        const uid = Number(run("id", ["-u", AGENT]).stdout.trim());
        // The gateway agent's own key, as airlock-gateway-agent-key generates it.
        const agentKey = path.join(work, "id_ed25519");
        expect(run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", agentKey]).status).toBe(0);
        const cfg = readStackFile(
            editedStack("dev", (c) => {
                c["airlock:agent"].user = AGENT;
                c["airlock:agent"].uid = uid;
                c["airlock:agent"].authorizedKeys = [fs.readFileSync(`${agentKey}.pub`, "utf8").trim()];
            }),
        );
        const hosts = renderHosts(cfg);
        sandboxName = cfg.hostnames.sandbox;

        // The sandbox: rendered sshd, wrapper and broker (a stand-in checkpoint engine), its egress rules.
        sandboxRoot = fs.mkdtempSync("/run/airlock-hermes-");
        const hostPublicKey = installSandboxSshd(hosts.sandbox, sandboxRoot);
        const engine = installStubEngine(fs.mkdtempSync(path.join(work, "engine-")));
        engineCalls = engine.calls;
        broker = await startSandboxBroker(sandboxRoot, AGENT, engine.brokerEnv);
        enforceEgress(net.server, hosts.sandbox, uid, GATEWAY_TAILNET);
        const stubBin = path.join(sandboxRoot, "stub-bin");
        stateDir = path.join(sandboxRoot, "state");
        for (const dir of [stateDir, path.join(sandboxRoot, "workspace"), stubBin]) fs.mkdirSync(dir, { mode: 0o755 });
        run("chown", [AGENT, stateDir, path.join(sandboxRoot, "workspace")]);
        fs.writeFileSync(
            path.join(stubBin, "docker"),
            fs.readFileSync(path.join(REPO, "test/fixtures/docker-exec-stub"), "utf8").replace("@STATE_DIR@", stateDir).replace("@WORKSPACE@", path.join(sandboxRoot, "workspace")),
            { mode: 0o755 },
        );
        fs.writeFileSync(path.join(stubBin, "tailscale"), `#!/bin/sh\necho ${SANDBOX_TAILNET}\n`, { mode: 0o755 });
        const rendered = inNamespace(net.server, [`${sandboxRoot}/usr/local/sbin/airlock-tailnet-render`, path.join(sandboxRoot, SSHD_TEMPLATE_PATH), `${sandboxRoot}/etc/ssh/sshd_config`, HOST_SSHD, "-t", "-f"], {
            env: { PATH: `${stubBin}:/usr/sbin:/usr/bin:/sbin:/bin`, AIRLOCK_TAILNET_WAIT_SECONDS: "5" },
        });
        expect(rendered.status, rendered.stderr).toBe(0);
        // Hermes works in /workspace, as in the sandbox's container: there, in sshd's own mount namespace, is the stand-in's workspace.
        createdWorkspace = !fs.existsSync("/workspace");
        fs.mkdirSync("/workspace", { recursive: true });
        sshd = spawnInNamespace(
            net.server,
            `mount --bind ${stubBin} /usr/local/bin && mount --bind ${sandboxRoot}/workspace /workspace && exec ${HOST_SSHD} -D -e -f ${sandboxRoot}/etc/ssh/sshd_config`,
            path.join(work, "sshd.log"),
        );
        await waitForPort(net.client, SANDBOX_TAILNET, 22);

        // The gateway: its rendered files under a root of the test's own; what boot stages, staged.
        gatewayRoot = fs.mkdtempSync("/run/airlock-hermes-gw-");
        fs.chmodSync(gatewayRoot, 0o755);
        installFiles(hosts.gateway, gatewayRoot);
        // The runtime's ssh config, as airlock-tailnet-render writes it at boot (the tailnet's domain filled).
        fs.mkdirSync(path.join(gatewayRoot, GATEWAY_AGENT_PATHS.sshFolder));
        fs.writeFileSync(path.join(gatewayRoot, GATEWAY_AGENT_PATHS.sshConfig), sandboxSshConfigAt(hosts.gateway, `${cfg.hostnames.sandbox}.${TEST_TAILNET_DOMAIN}`), { mode: 0o644 });
        fs.writeFileSync(path.join(gatewayRoot, "etc/airlock/known_hosts"), pinnedKnownHosts(hosts.gateway, hostPublicKey));
        fs.mkdirSync(path.join(gatewayRoot, "run/airlock-agent"), { recursive: true });
        fs.copyFileSync(agentKey, path.join(gatewayRoot, GATEWAY_AGENT_PATHS.runtimeSshKey));
        fs.chmodSync(path.join(gatewayRoot, GATEWAY_AGENT_PATHS.runtimeSshKey), 0o444);
        fs.writeFileSync(path.join(gatewayRoot, GATEWAY_AGENT_PATHS.runtimeEnv), `OPENAI_API_KEY='${["fake", "model", "key"].join("-")}'\n`);

        // The runtime's state volume, as a user may have left it: a config.yaml and a .env
        // that would run every command locally (the managed scope must win over both).
        const state = path.join(gatewayRoot, "var/lib/airlock/agent-state/agent-state");
        fs.mkdirSync(state, { recursive: true });
        stateVolume = state;
        userState("terminal section");

        // The scripted model, on the gateway's side.
        scripted([]);
        model = spawnInNamespace(net.client, `exec ${path.join(REPO, "test/fixtures/hermes/fake-model")} ${GATEWAY_TAILNET} ${MODEL_PORT} ${path.join(work, "script.json")}`, path.join(work, "model.log"));
        await waitForPort(net.client, GATEWAY_TAILNET, MODEL_PORT);

        // The agent's Docker in the gateway's namespace; its containers reach the sandbox through it.
        // Its name service, as MagicDNS is to the gateway: names in the tailnet's domain only (the
        // runtime's ssh config gives the sandbox's full name), every other lookup refused at once:
        // nothing here reaches the internet, and a resolver out of reach would make each lookup
        // Hermes tries at start wait for Docker's 10 s timeout. Two tailnet nodes are named like
        // the runtime's compose services (a hostile tailnet member can name its device so).
        resolver = spawnInNamespace(
            net.client,
            `exec dnsmasq --keep-in-foreground --no-resolv --no-hosts --bind-interfaces --listen-address=${GATEWAY_TAILNET} --port=53 --host-record=${cfg.hostnames.sandbox}.${TEST_TAILNET_DOMAIN},${SANDBOX_TAILNET} --host-record=${AGENT_SERVICE}.${TEST_TAILNET_DOMAIN},${PLANTED} --host-record=${AGENT_MEMORY_DB_SERVICE}.${TEST_TAILNET_DOMAIN},${PLANTED}`,
            path.join(work, "dnsmasq.log"),
        );
        fs.mkdirSync(`/etc/netns/${net.client}`, { recursive: true });
        fs.writeFileSync(`/etc/netns/${net.client}/resolv.conf`, `nameserver ${GATEWAY_TAILNET}\n`);
        dockerd = await startDockerd(fs.mkdtempSync("/tmp/airlock-hermes-docker-"), [], net.client);
        expect(inNamespace(net.client, ["sysctl", "-qw", "net.ipv4.ip_forward=1"]).status).toBe(0);
        expect(inNamespace(net.server, ["ip", "route", "replace", "10.213.0.0/16", "via", GATEWAY_TAILNET]).status).toBe(0);
        const doc = YAML.parse(withTailnetValues(renderedFile(hosts.gateway, COMPOSE_TEMPLATE_PATH), "127.0.0.1"));
        image = String(doc.services[AGENT_SERVICE].image).replace(/@sha256:[0-9a-f]{64}$/, "");
        expect(image).toBe("nousresearch/hermes-agent:v2026.7.20");
        await loadHermesImage(dockerd, image, work);
        // As rendered, but for where the host's files are and the image's digest (the twin's
        // registry pins it).
        const agent = movedHostPaths(doc.services[AGENT_SERVICE], gatewayRoot);
        Object.assign(agent, { image });
        doc.services = { [AGENT_SERVICE]: agent };
        for (const volume of Object.values(doc.volumes ?? {}) as Record<string, any>[]) volume.driver_opts.device = path.join(gatewayRoot, volume.driver_opts.device);
        composeFile = path.join(work, "compose.yml");
        fs.writeFileSync(composeFile, YAML.stringify(doc));
        const up = compose(["up", "--detach", AGENT_SERVICE]);
        expect(up.status, up.stderr).toBe(0);
        for (let i = 0; i < 120 && !dockerd.docker(["logs", "airlock-agent"]).stderr.includes("airlock-hermes-preflight:"); i++) await new Promise((r) => setTimeout(r, 500));
    }, 900_000);

    afterAll(async () => {
        if (dockerd) {
            compose(["down", "--volumes"]);
            await dockerd.stop();
        }
        model?.kill("SIGTERM");
        resolver?.kill("SIGTERM");
        sshd?.kill("SIGTERM");
        await broker?.stop();
        run("pkill", ["--uid", AGENT]);
        if (net) fs.rmSync(`/etc/netns/${net.client}`, { recursive: true, force: true });
        net?.close();
        if (createdWorkspace) fs.rmdirSync("/workspace");
        for (const dir of [sandboxRoot, gatewayRoot]) if (dir) fs.rmSync(dir, { recursive: true, force: true });
        if (createdUser) run("userdel", ["--remove", AGENT]);
    }, 120_000);

    it("starts through the preflight, which Hermes's own loader satisfies, and stays up as the hermes user", () => {
        const logs = dockerd!.docker(["logs", "airlock-agent"]).stderr;
        expect(logs).toContain(`airlock-hermes-preflight: Hermes ${HERMES_VERSION} runs every command over ssh as ${AGENT}@airlock-dev-sandbox.${TEST_TAILNET_DOMAIN} in /workspace`);
        expect(dockerd!.docker(["inspect", "--format", "{{.State.Running}}", "airlock-agent"]).stdout.trim()).toBe("true");
        expect(asRuntime(["id", "-un"]).stdout.trim()).toBe("hermes");
    });

    it.each(["terminal section", "model only"] as const)("Hermes's loader chooses ssh to the sandbox on both launch paths, over a user's config.yaml (%s) and .env", (kind) => {
        userState(kind);
        try {
            for (const launchPath of ["cli", "gateway.run"] as const) {
                expect(loaderSays(launchPath), launchPath).toEqual({ env_type: "ssh", ssh_host: "sandbox", ssh_user: AGENT, ssh_port: 22, ssh_key: "/etc/airlock/agent/id_ed25519", cwd: "/workspace" });
            }
            expect(preflight().status).toBe(0);
        } finally {
            userState("terminal section");
        }
    });

    it("a short name is never completed into a tailnet node's: the runtime's compose names are Docker's or nothing; the sandbox is asked by its full name", () => {
        const own = asRuntime(["getent", "ahostsv4", AGENT_SERVICE]);
        expect(own.stdout.split(/\s+/)[0], own.stdout).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
        expect(own.stdout).not.toContain(PLANTED);
        // A compose name Docker does not answer (the memory database, not running here; or stopped)
        // went on in the tailnet's search domain, where a node named like it answered (red team:
        // the runtime's database connection, password included, to that node). No search domain now.
        const absent = asRuntime(["getent", "ahostsv4", AGENT_MEMORY_DB_SERVICE]);
        expect(absent.stdout).not.toContain(PLANTED);
        expect(absent.status).not.toBe(0);
        expect(asRuntime(["getent", "ahostsv4", sandboxName]).status).not.toBe(0);
        expect(asRuntime(["getent", "ahostsv4", `${sandboxName}.${TEST_TAILNET_DOMAIN}`]).stdout.split(/\s+/)[0]).toBe(SANDBOX_TAILNET);
    });

    it("the agent's command runs in the sandbox, on its record, and not in the runtime's container", () => {
        const before = record().length;
        const ran = agentRuns(["echo ran-by-hermes > proof.txt && echo $((6 * 7))"]);
        expect(ran.status, ran.stderr).toBe(0);
        expect(ran.stdout).toContain("42");
        // The stand-in container is the sandbox host's workspace directory: the file landed there.
        expect(fs.readFileSync(path.join(sandboxRoot, "workspace", "proof.txt"), "utf8")).toBe("ran-by-hermes\n");
        expect(asRuntime(["sh", "-c", "test -e /workspace/proof.txt || test -e /opt/data/proof.txt || test -e /tmp/proof.txt; echo $?"]).stdout.trim()).toBe("1");
        const begins = record().slice(before).filter((e) => e.kind === "begin");
        const command = begins.find((e) => String(e.command).includes("echo ran-by-hermes > proof.txt"));
        expect(command, JSON.stringify(begins.map((e) => e.command))).toBeDefined();
        expect(command!.uid).toBe(Number(run("id", ["-u", AGENT]).stdout.trim()));
        expect(command!.source).toBe(SANDBOX_TAILNET);
        expect(record().find((e) => e.kind === "end" && e.of === command!.seq)).toMatchObject({ exit: 0, ended: "exited" });
    }, 180_000);

    it("the undo verbs the runtime is told about reach the sandbox's host, not the container, when Hermes sends them", () => {
        const hint: string = YAML.parse(fs.readFileSync(managedFile(GATEWAY_AGENT_PATHS.hermesConfig), "utf8")).agent.environment_hint;
        expect(hint).toContain('`airlock checkpoint --label "{label}"`');
        const before = record().length;
        const ran = agentRuns(['airlock checkpoint --label "before the change"', "airlock restore last"]);
        expect(ran.status, ran.stderr).toBe(0);
        expect(engineCalls()).toEqual([`create shared --label-b64 ${Buffer.from("before the change").toString("base64")}`, "restore shared --last"]);
        expect(ran.stdout).toContain("restored shared to checkpoint 1");
        // Hermes's own commands around them went to the container, as every command does; these did not.
        const ranInContainer = record().slice(before).filter((e) => e.kind === "begin").map((e) => String(e.command));
        expect(ranInContainer.length).toBeGreaterThan(0);
        expect(ranInContainer.filter((c) => /airlock (checkpoint|restore)/.test(c))).toEqual([]);
    }, 180_000);

    it("a test step Hermes sends as the runtime is told to, `airlock try`, runs in the try's container, on the record, and the engine discards its clone", () => {
        const hint: string = YAML.parse(fs.readFileSync(managedFile(GATEWAY_AGENT_PATHS.hermesConfig), "utf8")).agent.environment_hint;
        expect(hint).toContain("`airlock try --timeout 600 -- {command}`");
        const before = record().length;
        const callsBefore = engineCalls().length;
        const ran = agentRuns(["airlock try --timeout 600 -- 'echo tried in $STUB_CONTAINER; exit 3'"]);
        expect(ran.status, ran.stderr).toBe(0);
        // Hermes hands the model the try's output and its verdict (the stub engine's clone: agent-try-0123456789ab).
        expect(ran.stdout).toContain("tried in agent-try-0123456789ab");
        expect(engineCalls().slice(callsBefore)).toEqual(["try-begin shared --timeout 600 --network none", "try-end shared --id 0123456789ab --status 3"]);
        const begins = record().slice(before).filter((e) => e.kind === "begin");
        const tried = begins.find((e) => String(e.command).includes("airlock try --timeout 600"));
        expect(tried, JSON.stringify(begins.map((e) => e.command))).toBeDefined();
        expect(record().find((e) => e.kind === "end" && e.of === tried!.seq)).toMatchObject({ exit: 3 });
    }, 180_000);

    it.each<[string, string, number]>([
        ["its node's tailnet address, as airlock-sandbox-address writes it once the sandbox joined", SANDBOX_TAILNET, 0],
        ["an address outside the tailnet", "192.0.2.1", 78],
        ["another name", "elsewhere.example", 78],
    ])("the runtime's ssh config naming the sandbox by %s: preflight exit %i", (_, address, status) => {
        const file = path.join(gatewayRoot, GATEWAY_AGENT_PATHS.sshConfig);
        const original = fs.readFileSync(file, "utf8");
        // The container has the folder mounted: what is written there, it sees.
        fs.writeFileSync(file, original.replace(/^\tHostName .*$/m, `\tHostName ${address}`));
        try {
            const result = preflight();
            expect(result.status, result.stderr).toBe(status);
            if (status !== 0) expect(result.stderr).toMatch(/is not the pinned sandbox: hostname /);
        } finally {
            fs.writeFileSync(file, original);
        }
    });

    // Each rendered managed file is needed: changed, Hermes itself chooses otherwise for some user's state.
    it.each<[string, string, (text: string) => string, "terminal section" | "model only"]>([
        ["backend local in the managed config", GATEWAY_AGENT_PATHS.hermesConfig, (t) => t.replace("backend: ssh", "backend: local"), "terminal section"],
        ["no terminal section in the managed config", GATEWAY_AGENT_PATHS.hermesConfig, (t) => t.replace(/^terminal:\n(  .*\n|\s*#.*\n)*/m, ""), "terminal section"],
        ["another host in the managed config", GATEWAY_AGENT_PATHS.hermesConfig, (t) => t.replace("ssh_host: sandbox", "ssh_host: elsewhere"), "terminal section"],
        ["TERMINAL_ENV=local in the managed .env", GATEWAY_AGENT_PATHS.hermesEnv, (t) => t.replace("TERMINAL_ENV=ssh", "TERMINAL_ENV=local"), "model only"],
    ])("%s: Hermes's loader no longer says ssh to the sandbox, and the preflight refuses", (_, file, change, kind) => {
        const original = fs.readFileSync(managedFile(file), "utf8");
        userState(kind);
        // Written in place: the bind mount shows the new content.
        fs.writeFileSync(managedFile(file), change(original));
        try {
            const said = [loaderSays("cli"), loaderSays("gateway.run")];
            expect(said.some((s) => s.env_type !== "ssh" || s.ssh_host !== "sandbox")).toBe(true);
            const refused = preflight();
            expect(refused.status).toBe(78);
            expect(refused.stderr.trim().split("\n")).toHaveLength(1);
            expect(refused.stderr).toMatch(/^airlock-hermes-preflight: refusing to start the agent runtime: /);
            // The README's sample.
            if (change(original).includes("backend: local")) expect(refused.stderr).toBe(docSample("hermes-preflight-refusal"));
        } finally {
            fs.writeFileSync(managedFile(file), original);
            userState("terminal section");
        }
        expect(preflight().status).toBe(0);
    });

    it("Hermes's own .env is airlock's, read-only: the runtime cannot set a variable for its next turn or start", () => {
        // Not even as the container's root.
        const written = dockerd!.docker(["exec", "airlock-agent", "sh", "-c", "echo TERMINAL_ENV=local >> /opt/data/.env"]);
        expect(written.status).not.toBe(0);
        expect(written.stderr).toMatch(/Read-only file system/);
        expect(asRuntime(["cat", "/opt/data/.env"]).stdout).toBe(fs.readFileSync(managedFile(GATEWAY_AGENT_PATHS.hermesUserEnv), "utf8"));
    });

    it.each<[string, string[], RegExp]>([
        ["a PATH through the state volume", ["PATH=/opt/data/.local/bin:/opt/hermes/.venv/bin:/usr/bin:/bin"], /Hermes's PATH has \/opt\/data\/\.local\/bin, where uid 10000 can put programs/],
        ["LD_PRELOAD", ["LD_PRELOAD=/opt/data/evil.so"], /Hermes's environment has LD_PRELOAD/],
        ["PYTHONSTARTUP", ["PYTHONSTARTUP=/opt/data/evil.py"], /Hermes's environment has PYTHONSTARTUP/],
        // Without airlock's managed files, the user's config.yaml decides: local.
        ["a managed scope in the state volume", ["HERMES_MANAGED_DIR=/opt/data"], /Hermes would run the agent's commands here, on the gateway/],
    ])("%s in the runtime's environment makes the preflight refuse", (_, env, message) => {
        const refused = dockerd!.docker(["exec", "--user", "hermes", ...env.flatMap((e) => ["--env", e]), "airlock-agent", GATEWAY_AGENT_PATHS.hermesPreflight, "--check"]);
        expect(refused.status).toBe(78);
        expect(refused.stderr).toMatch(message);
    });

    it("a file the sandbox plants in Hermes's .hermes never reaches the runtime's state on the gateway", () => {
        // A skill of the runtime's, which Hermes copies to the sandbox when a session starts.
        const skill = path.join(stateVolume, "skills", "airlock-test", "SKILL.md");
        fs.mkdirSync(path.dirname(skill), { recursive: true });
        fs.writeFileSync(skill, "---\nname: airlock-test\ndescription: a skill of the runtime's\n---\nDo nothing.\n");
        run("chown", ["-R", "10000:10000", path.join(stateVolume, "skills")]);
        try {
            const before = record().length;
            // The agent's command, as a hostile sandbox would: a new skill and a changed one in the copy Hermes made.
            const ran = agentRuns([
                'for d in /tmp/airlock-home.*/.hermes/skills; do [ -d "$d/airlock-test" ] || continue; mkdir -p "$d/planted" && echo planted > "$d/planted/SKILL.md" && echo changed >> "$d/airlock-test/SKILL.md" && echo "planted in $d"; done',
            ]);
            expect(ran.status, ran.stderr).toBe(0);
            expect(ran.stdout).toMatch(/planted in \/tmp\/airlock-home\.\w+\/\.hermes\/skills/);
            expect(fs.existsSync(path.join(stateVolume, "skills", "planted"))).toBe(false);
            expect(fs.readFileSync(skill, "utf8")).not.toContain("changed");
            // Hermes had copied the skill to the sandbox (so it copies .hermes back at the end: the
            // wrapper answers that with an empty archive, and nothing runs in the container for it).
            const commands = record().slice(before).filter((e) => e.kind === "begin").map((e) => String(e.command));
            expect(commands.filter((c) => /^tar xf - --no-overwrite-dir -C \/tmp\/airlock-home\.\w+\/\.hermes$/.test(c)).length).toBeGreaterThan(0);
            expect(commands.filter((c) => /^tar cf - -C \/ /.test(c))).toEqual([]);
        } finally {
            fs.rmSync(path.join(stateVolume, "skills"), { recursive: true, force: true });
        }
    }, 180_000);

    // Red team 6: Hermes's own features that run programs in the runtime's container, set in the
    // user's config.yaml (the state volume), or that copy the runtime's files to the sandbox.
    it.each<[string, Record<string, unknown>, string]>([
        ["an MCP server", { mcp_servers: { tool: { command: "/bin/sh", args: ["-c", "id"] } } }, "mcp_servers"],
        ["a shell hook", { hooks: { pre_tool_call: [{ command: "id" }] } }, "hooks"],
        ["a quick command", { quick_commands: { who: { type: "exec", command: "id" } } }, "quick_commands"],
        ["a plugin", { plugins: { enabled: ["anything"] } }, "plugins.enabled"],
        ["credential files", { terminal: { credential_files: ["auth.json"] } }, "terminal.credential_files"],
        // Red team 7: the messaging gateway reads its quick commands from its own section too.
        ["a quick command in the gateway section", { gateway: { quick_commands: { who: { type: "exec", command: "id" } } } }, "gateway quick_commands"],
    ])("%s in the user's config.yaml makes the preflight refuse", (_, extra, key) => {
        withUserConfig(extra, () => {
            const refused = preflight();
            expect(refused.status).toBe(78);
            expect(refused.stderr).toMatch(new RegExp(`Hermes's configuration sets ${key.replace(".", "\\.")} \\(started by cli\\): programs of its own would run here`));
        });
        expect(preflight().status).toBe(0);
    });

    // Red team 8: the messaging gateway copies config.yaml's top-level scalars into its environment
    // (gateway/run.py); glibc's resolver then takes a search domain and ndots from them, and a short
    // name (the memory database's) would go to a tailnet node named like it.
    it.each<[string, Record<string, string>]>([
        ["a search domain (LOCALDOMAIN)", { LOCALDOMAIN: TEST_TAILNET_DOMAIN }],
        ["resolver options (RES_OPTIONS)", { RES_OPTIONS: "ndots:5" }],
    ])("%s in the user's config.yaml makes the preflight refuse", (_, extra) => {
        withUserConfig(extra, () => {
            const refused = preflight();
            expect(refused.status).toBe(78);
            expect(refused.stderr).toMatch(new RegExp(`(Hermes's environment has|a \\.env file of Hermes's sets) ${Object.keys(extra)[0]} \\(started by`));
        });
        expect(preflight().status).toBe(0);
    });

    // Red team 7: what Hermes loads from its home whatever config.yaml says.
    it.each<[string, Record<string, string>, string]>([
        ["an event hook", { "hooks/y/HOOK.yaml": "name: y\nevents: [agent:start]\n", "hooks/y/handler.py": "def handle(*a): pass\n" }, "hooks/y/handler.py"],
        ["a model-provider plugin", { "plugins/model-providers/x/__init__.py": "\n" }, "plugins/model-providers/x/__init__.py"],
        ["the gateway's own quick commands file", { "gateway.json": JSON.stringify({ quick_commands: { who: { type: "exec", command: "id" } } }) }, ""],
    ])("%s in the state volume makes the preflight refuse", (_, files, named) => {
        for (const [rel, content] of Object.entries(files)) {
            fs.mkdirSync(path.dirname(path.join(stateVolume, rel)), { recursive: true });
            fs.writeFileSync(path.join(stateVolume, rel), content);
        }
        try {
            const refused = preflight();
            expect(refused.status).toBe(78);
            expect(refused.stderr).toContain(named ? `Hermes's home holds ${named} (started by cli)` : "Hermes's configuration sets gateway quick_commands");
        } finally {
            for (const rel of Object.keys(files)) fs.rmSync(path.join(stateVolume, rel.split("/")[0]), { recursive: true, force: true });
        }
        expect(preflight().status).toBe(0);
    });

    it("a skill's inline shell, turned on in the user's config.yaml, stays off: the managed scope says so (without it the preflight refuses)", () => {
        const managed = fs.readFileSync(managedFile(GATEWAY_AGENT_PATHS.hermesConfig), "utf8");
        withUserConfig({ skills: { inline_shell: true }, hooks_auto_accept: true }, () => {
            expect(preflight().status).toBe(0);
            fs.writeFileSync(managedFile(GATEWAY_AGENT_PATHS.hermesConfig), managed.replace(/^skills:\n  inline_shell: false\n/m, ""));
            try {
                const refused = preflight();
                expect(refused.status).toBe(78);
                expect(refused.stderr).toContain("Hermes's configuration sets skills.inline_shell");
            } finally {
                fs.writeFileSync(managedFile(GATEWAY_AGENT_PATHS.hermesConfig), managed);
            }
        });
    });

    it("a user's ssh config in the state volume (read before the pinned one) makes the preflight refuse", () => {
        expect(asRuntime(["sh", "-c", "mkdir -p /opt/data/.ssh && printf 'Host sandbox\\n  HostName 192.0.2.1\\n' > /opt/data/.ssh/config"]).status).toBe(0);
        try {
            const refused = preflight();
            expect(refused.status).toBe(78);
            expect(refused.stderr).toContain("/opt/data/.ssh/config exists: ssh would read it before airlock's pinned config");
        } finally {
            asRuntime(["rm", "-rf", "/opt/data/.ssh"]);
        }
    });

    it("refused, the runtime is never started: the container exits with the preflight's line", async () => {
        const file = managedFile(GATEWAY_AGENT_PATHS.hermesConfig);
        const original = fs.readFileSync(file, "utf8");
        fs.writeFileSync(file, original.replace("backend: ssh", "backend: local"));
        try {
            expect(dockerd!.docker(["restart", "--time", "5", "airlock-agent"]).status).toBe(0);
            let state = "";
            for (let i = 0; i < 60; i++) {
                state = dockerd!.docker(["inspect", "--format", "{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}", "airlock-agent"]).stdout.trim();
                if (/ 78 /.test(state)) break;
                await new Promise((r) => setTimeout(r, 500));
            }
            expect(state).toMatch(/ 78 /);
            const logs = dockerd!.docker(["logs", "--since", "60s", "airlock-agent"]).stderr;
            expect(logs).toMatch(/airlock-hermes-preflight: refusing to start the agent runtime: Hermes would run the agent's commands here, on the gateway/);
            expect(logs).not.toContain("Hermes Gateway Starting");
        } finally {
            fs.writeFileSync(file, original);
        }
        expect(dockerd!.docker(["restart", "--time", "5", "airlock-agent"]).status).toBe(0);
        let running = "";
        for (let i = 0; i < 60 && running !== "true"; i++) {
            await new Promise((r) => setTimeout(r, 500));
            running = dockerd!.docker(["inspect", "--format", "{{.State.Running}}", "airlock-agent"]).stdout.trim();
        }
        expect(running).toBe("true");
    }, 120_000);
});
