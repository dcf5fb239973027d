import { generateKeyPairSync, randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { decodeUserData } from "../policies/engine/userData";
import { gatePlan } from "../cli/gate";
import { planStack } from "../cli/offline";
import { writePlan } from "../cli/plan";
import { ConfigError, configFromPulumiRuntime, readStackFile } from "../components/config/load";
import { COMPOSE_TEMPLATE_PATH, RenderedHost } from "../components/render/hosts";
import { AGENT_STATE_MOUNT, GATEWAY_AGENT_PATHS, RUNTIME_PATH, RUNTIME_SSH_FOLDER, RUNTIME_SSH_KEY } from "../components/workloads/compose";
import { HERMES_RUNTIME } from "../policies/contract";
import { docSample } from "./helpers/docs";
import { deployedValues, editedStack, renderedFile, renderHosts, tempDir } from "./helpers/stacks";

/**
 * The agent runtime on the gateway: the stack keys, the compose service (hardened
 * like every service, judged by the gate), and secrets that never reach a rendered
 * file or the plan.
 */

type Edit = (c: Record<string, any>) => void;

/** dev plus an agent runtime (and whatever `more` changes). */
function withRuntime(more: Edit = () => {}): Edit {
    return (c) => {
        c["airlock:gateway"].agent = { image: "registry.example/agent:1.0", statePath: "/opt/data" };
        more(c);
    };
}

function problemsOf(edit: Edit): string[] {
    try {
        readStackFile(editedStack("dev", edit));
    } catch (err) {
        if (err instanceof ConfigError) return err.problems.map((p) => p.split(": ").slice(1).join(": "));
        throw err;
    }
    return [];
}

const gatewayOf = (edit: Edit) => renderHosts(readStackFile(editedStack("dev", edit))).gateway;
const composeOf = (host: RenderedHost) => YAML.parse(renderedFile(host, COMPOSE_TEMPLATE_PATH));

/** Values shaped like real secrets, assembled at run time (nothing secret-shaped in git). */
function testSecrets() {
    const { privateKey } = generateKeyPairSync("rsa", { modulusLength: 2048 });
    return {
        ANTHROPIC_API_KEY: ["sk", "ant", "api03", randomBytes(24).toString("base64url")].join("-"),
        SLACK_BOT_TOKEN: ["xoxb", "1234567890", randomBytes(12).toString("hex")].join("-"),
        GITHUB_APP_PRIVATE_KEY: privateKey.export({ type: "pkcs1", format: "pem" }).toString(),
    };
}

describe("airlock:gateway.agent", () => {
    it("applies the defaults in one place: state (Hermes's HERMES_HOME) on a 10 GB filesystem at /opt/data, no memory database, no secrets", () => {
        const cfg = readStackFile(editedStack("dev", (c) => (c["airlock:gateway"].agent = { image: "registry.example/agent:1.0" })));
        expect(cfg.gateway.agent).toMatchObject({ statePath: "/opt/data", stateGb: 10, memoryDb: { enabled: false, image: "pgvector/pgvector:pg15", drillTables: [] }, secrets: [] });
    });

    it("keeps only the NAMES of secrets, whether the stack file's ciphertext or Pulumi's decrypted value", () => {
        const file = editedStack("dev", withRuntime((c) => (c["airlock:gateway"].agent.secrets = { SLACK_BOT_TOKEN: { secure: "v1:AAAA" }, ANTHROPIC_API_KEY: { secure: "v1:BBBB" } })));
        expect(readStackFile(file).gateway.agent?.secrets).toEqual(["ANTHROPIC_API_KEY", "SLACK_BOT_TOKEN"]);
        // Inside `pulumi up` the program gets plaintext; the parsed config still holds names only.
        const values = testSecrets();
        const raw = YAML.parse(fs.readFileSync(file, "utf8")).config as Record<string, any>;
        raw["airlock:gateway"].agent.secrets = { ANTHROPIC_API_KEY: values.ANTHROPIC_API_KEY };
        const all = Object.fromEntries(Object.entries(raw).map(([k, v]) => [k, typeof v === "string" ? v : JSON.stringify(v)]));
        const cfg = configFromPulumiRuntime(all, "dev");
        expect(cfg.gateway.agent?.secrets).toEqual(["ANTHROPIC_API_KEY"]);
        expect(JSON.stringify(cfg)).not.toContain(values.ANTHROPIC_API_KEY);
    });

    it.each<[string, Edit, string]>([
        ["a secret in clear in the stack file", withRuntime((c) => (c["airlock:gateway"].agent.secrets = { ANTHROPIC_API_KEY: "in-clear-value" })), "airlock:gateway.agent.secrets.ANTHROPIC_API_KEY: in clear in the stack file; encrypt it: pulumi config set --secret --path 'airlock:gateway.agent.secrets.ANTHROPIC_API_KEY' <value>"],
        ["a flat key (set without --path)", withRuntime((c) => (c["airlock:gateway.agent.secrets.SLACK_BOT_TOKEN"] = { secure: "v1:AAAA" })), "airlock:gateway.agent.secrets.SLACK_BOT_TOKEN: a flat key; set it with --path: pulumi config set --secret --path 'airlock:gateway.agent.secrets.SLACK_BOT_TOKEN' <value>"],
        ["a secret that changes how programs run", withRuntime((c) => (c["airlock:gateway"].agent.secrets = { LD_PRELOAD: { secure: "v1:AAAA" } })), "airlock:gateway.agent.secrets.LD_PRELOAD: this variable changes how programs run and may never be passed through, got the string \"LD_PRELOAD\""],
        ["a secret-looking value in plain environment", withRuntime((c) => (c["airlock:gateway"].agent.environment = { OPENAI_API_KEY: ["sk", "proj", "Zx81kQ0aLm2Nb7Vc4Xd9"].join("-") })), "airlock:gateway.agent.environment.OPENAI_API_KEY: looks like a secret, and environment is rendered into user_data: pulumi config set --secret --path 'airlock:gateway.agent.secrets.OPENAI_API_KEY' instead"],
        ["an unpinned image without resolveDigests", withRuntime((c) => (c["airlock:workloads"].resolveDigests = false)), "airlock:gateway.agent.image: registry.example/agent:1.0 is not pinned: write registry.example/agent:1.0@sha256:<digest>, or set airlock:workloads.resolveDigests: true"],
        ["a relative state path", withRuntime((c) => (c["airlock:gateway"].agent.statePath = "data")), "airlock:gateway.agent.statePath: expected an absolute path like /opt/data, got the string \"data\""],
        ["a drill table that is not a table name", withRuntime((c) => (c["airlock:gateway"].agent.memoryDb = { enabled: true, drillTables: ["peers; DROP TABLE x"] })), "airlock:gateway.agent.memoryDb.drillTables[0]: expected a table name like messages or memory.peers, got the string \"peers; DROP TABLE x\""],
    ])("refuses %s with one line naming the key", (_, edit, expected) => {
        expect(problemsOf(edit)).toContain(expected);
    });
});

describe("airlock:gateway.github", () => {
    const github = (more: Record<string, unknown>): Edit =>
        withRuntime((c) => (c["airlock:gateway"].github = { appId: 1, installationId: 2, maxPermissions: { contents: "read", pull_requests: "write" }, ...more }));

    it("accepts a least-privilege App and renders what the minter enforces", () => {
        const host = gatewayOf(github({ approvalRequired: ["pull_requests:write"] }));
        expect(JSON.parse(renderedFile(host, GATEWAY_AGENT_PATHS.githubConfig))).toEqual({
            appId: 1,
            installationId: 2,
            maxPermissions: { contents: "read", pull_requests: "write" },
            approvalRequired: ["pull_requests:write"],
            apiUrl: "https://api.github.com",
            repositories: [],
        });
    });

    it.each<[string, Record<string, unknown>, string]>([
        ["administration", { maxPermissions: { administration: "read" } }, "airlock:gateway.github.maxPermissions.administration: administration: read is high-impact (changes settings, branch protection and collaborators): allow it explicitly in airlock:gateway.github.allowHighImpact (\"administration:read\"), ideally with approvalRequired too"],
        ["workflows", { maxPermissions: { workflows: "write" } }, "airlock:gateway.github.maxPermissions.workflows: workflows: write is high-impact (edits workflow files, which run with the repository's secrets): allow it explicitly in airlock:gateway.github.allowHighImpact (\"workflows:write\"), ideally with approvalRequired too"],
        ["merge-capable contents:write", { maxPermissions: { contents: "write" } }, "airlock:gateway.github.maxPermissions.contents: contents: write is high-impact (can merge pull requests and push to any unprotected branch): allow it explicitly in airlock:gateway.github.allowHighImpact (\"contents:write\"), ideally with approvalRequired too"],
        ["an unknown permission", { maxPermissions: { org_admin: "write" } }, "airlock:gateway.github.maxPermissions: unknown key org_admin"],
        ["an approval for a scope it never mints", { approvalRequired: ["issues:write"] }, "airlock:gateway.github.approvalRequired[0]: issues:write is not in maxPermissions, so it is never minted"],
    ])("refuses %s unless allowed explicitly", (_, more, expected) => {
        const problems = problemsOf(github(more));
        expect(problems).toHaveLength(1);
        expect(problems[0].startsWith(expected)).toBe(true);
    });

    it("allows a high-impact scope that is listed explicitly", () => {
        expect(problemsOf(github({ maxPermissions: { contents: "write" }, allowHighImpact: ["contents:write"], approvalRequired: ["contents:write"] }))).toEqual([]);
    });

    it("needs the runtime whose secrets hold the App key", () => {
        const withoutRuntime: Edit = (c) => {
            delete c["airlock:gateway"].agent;
            c["airlock:gateway"].github = { appId: 1, installationId: 2, maxPermissions: { contents: "read" } };
        };
        expect(problemsOf(withoutRuntime)).toEqual([
            "airlock:gateway.github: needs airlock:gateway.agent (the App's private key is one of its secrets)",
        ]);
    });
});

describe("the runtime in the gateway's compose", () => {
    const full = gatewayOf(
        withRuntime((c) => {
            c["airlock:gateway"].agent.memoryDb = { enabled: true };
            c["airlock:gateway"].agent.port = 8642;
            c["airlock:gateway"].agent.environment = { HERMES_LOG_LEVEL: "info" };
            c["airlock:gateway"].github = { appId: 1, installationId: 2, maxPermissions: { contents: "read" } };
        }),
    );
    const { services, networks, volumes } = composeOf(full);

    it("runs beside AdGuard with the same hardened defaults, from the one defaults file", () => {
        const defaults = YAML.parse(fs.readFileSync(path.join(__dirname, "..", "templates/compose/service-defaults.yaml"), "utf8"));
        for (const name of ["adguard", "agent", "agent-memory-db"]) expect(services[name], name).toMatchObject(defaults);
        expect(services.agent.cap_add).toEqual(["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"]);
    });

    it("publishes nothing but the optional port, on 127.0.0.1; the memory database sits on an internal network only", () => {
        expect(services.agent.ports).toEqual(["127.0.0.1:8642:8642"]);
        expect(services["agent-memory-db"].ports).toBeUndefined();
        expect(services["agent-memory-db"].networks).toEqual(["agent-memory"]);
        expect(networks["agent-memory"]).toEqual({ internal: true });
        expect(services.agent.networks).toEqual(["egress", "agent-memory"]);
        const noPort = composeOf(gatewayOf(withRuntime())).services.agent;
        expect(noPort.ports).toBeUndefined();
    });

    it("keeps its state in named volumes on the fixed-size state filesystem", () => {
        expect(services.agent.volumes[0]).toBe("agent-state:/opt/data");
        expect(services["agent-memory-db"].volumes).toEqual(["agent-memory:/var/lib/postgresql/data"]);
        expect(volumes["agent-state"].driver_opts).toEqual({ type: "none", o: "bind", device: `${AGENT_STATE_MOUNT}/agent-state` });
        expect(volumes["agent-memory"].driver_opts.device).toBe(`${AGENT_STATE_MOUNT}/agent-memory`);
        expect(renderedFile(full, "/usr/local/sbin/airlock-agent-state")).toContain("readonly VOLUMES=(agent-state agent-memory)");
    });

    it("reaches the sandbox only through Hermes's managed scope and the pinned ssh config, read-only; secrets come from the staged env file", () => {
        expect(services.agent.volumes).toEqual(
            expect.arrayContaining([
                `${GATEWAY_AGENT_PATHS.hermesConfig}:${HERMES_RUNTIME.managedConfig}:ro`,
                `${GATEWAY_AGENT_PATHS.hermesEnv}:${HERMES_RUNTIME.managedEnv}:ro`,
                `${GATEWAY_AGENT_PATHS.hermesPreflight}:${GATEWAY_AGENT_PATHS.hermesPreflight}:ro`,
                `${GATEWAY_AGENT_PATHS.sshFolder}:${RUNTIME_SSH_FOLDER}:ro`,
                `${GATEWAY_AGENT_PATHS.knownHosts}:${GATEWAY_AGENT_PATHS.knownHosts}:ro`,
                `${GATEWAY_AGENT_PATHS.runtimeSshKey}:${RUNTIME_SSH_KEY}:ro`,
                `${GATEWAY_AGENT_PATHS.githubTokenSocket}:${GATEWAY_AGENT_PATHS.githubTokenSocket}`,
            ]),
        );
        // Nothing of the agent's home: its key reaches the runtime only as the staged copy.
        expect(services.agent.volumes.filter((v: string) => v.startsWith("/home/"))).toEqual([]);
        const managed = YAML.parse(renderedFile(full, GATEWAY_AGENT_PATHS.hermesConfig)).terminal;
        expect(managed).toMatchObject({ backend: "ssh", ssh_host: "sandbox", ssh_user: "agent", ssh_port: 22, ssh_key: RUNTIME_SSH_KEY, cwd: "/workspace", credential_files: [] });
        expect(renderedFile(full, GATEWAY_AGENT_PATHS.hermesEnv)).toMatch(/^TERMINAL_ENV=ssh$/m);
        expect(services.agent.env_file).toEqual([GATEWAY_AGENT_PATHS.runtimeEnv]);
        // Its PATH without the state volume's .local/bin (the published image puts that before /usr/bin).
        expect(services.agent.environment).toEqual({ HERMES_LOG_LEVEL: "info", HERMES_HOME: "/opt/data", PATH: RUNTIME_PATH, AIRLOCK_GITHUB_TOKEN_SOCKET: GATEWAY_AGENT_PATHS.githubTokenSocket });
        expect(RUNTIME_PATH.split(":")).not.toContainEqual(expect.stringMatching(/^\/opt\/data/));
        // Hermes's own .env in its state volume is airlock's file, read-only.
        expect(services.agent.volumes).toContain(`${GATEWAY_AGENT_PATHS.hermesUserEnv}:/opt/data/.env:ro`);
        // docs/agent-runtime.md shows the file as rendered for dev.
        expect(docSample("hermes-config")).toBe(renderedFile(gatewayOf(() => {}), GATEWAY_AGENT_PATHS.hermesConfig));
        // Every start goes through the preflight, whatever the stack runs.
        expect(services.agent.command).toEqual([GATEWAY_AGENT_PATHS.hermesPreflight, "hermes", "gateway", "run"]);
        expect(composeOf(gatewayOf(withRuntime((c) => (c["airlock:gateway"].agent.command = ["hermes", "serve"])))).services.agent.command).toEqual([GATEWAY_AGENT_PATHS.hermesPreflight, "hermes", "serve"]);
    });

    it("stages its secrets and mounts its filesystem before the compose file is checked and the agent's user manager starts", () => {
        const cloudInit = YAML.parse(full.cloudInit);
        const runcmd = cloudInit.runcmd.map((c: string | string[]) => (Array.isArray(c) ? c.join(" ") : c));
        const first = runcmd.indexOf("systemctl enable --now airlock-resolver-state.service airlock-agent-state.service airlock-agent-secrets.service airlock-agent-key.service airlock-github-token.socket airlock-github-token-revoke.timer");
        expect(first).toBeGreaterThan(-1);
        expect(first).toBeLessThan(runcmd.indexOf("systemctl enable --now airlock-tailnet-config.service"));
        expect(renderedFile(full, "/etc/systemd/system/airlock-agent-secrets.service")).toContain("Before=airlock-tailnet-config.service user@1500.service");
        expect(renderedFile(full, "/etc/systemd/system/airlock-agent-state.service")).toContain("Before=user@1500.service");
        expect(renderedFile(full, "/etc/systemd/system/airlock-agent-key.service")).toContain("Before=airlock-tailnet-config.service user@1500.service");
        // Ordered, not required: a runtime that cannot start must not take AdGuard (the sandbox's DNS) down with it.
        expect(renderedFile(full, "/etc/systemd/system/user@1500.service.d/10-airlock.conf")).not.toMatch(/airlock-agent-(state|secrets|key)/);
        // First boot reports them when they fail.
        expect(renderedFile(full, "/usr/local/sbin/airlock-boot-check")).toMatch(/airlock-agent-state\.service airlock-agent-secrets\.service airlock-agent-key\.service airlock-github-token\.socket/);
        expect(renderedFile(full, "/etc/systemd/system/airlock-tailnet-config.service")).not.toMatch(/airlock-agent-(state|secrets)/);
    });

    it("a stack without a runtime renders none of it", () => {
        const host = gatewayOf((c) => delete c["airlock:gateway"].agent);
        expect(Object.keys(composeOf(host).services)).toEqual(["adguard"]);
        expect(host.files.filter((f) => /airlock-agent-(secrets|state|key)\.|github|hermes/.test(f.path))).toEqual([]);
        // The agent's own key still: the gateway pulls the record and backs up the sandbox with it.
        expect(renderedFile(host, "/usr/local/sbin/airlock-gateway-agent-key")).toContain('readonly RUNTIME_KEY=""');
    });
});

describe("the gate judges the runtime like every service", () => {
    it.each<[string, Edit, string, string]>([
        ["an extra capability", withRuntime((c) => (c["airlock:gateway"].agent.cap_add = ["NET_ADMIN"])), "containers-add-only-allowed-capabilities", "agent"],
        ["no pids limit", withRuntime((c) => (c["airlock:gateway"].agent.pids_limit = -1)), "containers-resource-limits", "agent"],
        ["a memory database with an extra capability", withRuntime((c) => (c["airlock:gateway"].agent.memoryDb = { enabled: true, cap_add: ["SYS_ADMIN"] })), "containers-add-only-allowed-capabilities", "agent-memory-db"],
    ])("a stack that loosens it (%s) fails with the rule that says so", async (_, edit, rule, service) => {
        const findings = gatePlan(await planStack(editedStack("dev", edit), "dev"));
        expect([...new Set(findings.map((f) => f.rule))]).toEqual([rule]);
        expect(findings[0].where).toBe(service);
    });

    it("the shipped-style runtime passes", async () => {
        expect(gatePlan(await planStack(editedStack("dev", withRuntime((c) => (c["airlock:gateway"].agent.memoryDb = { enabled: true }))), "dev"))).toEqual([]);
    });
});

describe("no secret value in any rendered file, preview.json or user_data", () => {
    it.each(["preview", "up"] as const)("%s: a plan whose program sees the decrypted secrets writes none of them", async (mode) => {
        const values = testSecrets();
        const file = editedStack(
            "dev",
            withRuntime((c) => {
                c["airlock:gateway"].agent.secrets = Object.fromEntries(Object.keys(values).map((name) => [name, { secure: `v1:${name}` }]));
                c["airlock:gateway"].github = { appId: 1, installationId: 2, maxPermissions: { contents: "read" } };
            }),
        );
        // What `pulumi` hands the program: the plaintext of every secure value.
        const decrypt = (keyPath: string) => values[keyPath.split(".").pop() as keyof typeof values];
        const plan = await planStack(file, "dev", { mode, deployed: deployedValues, decrypt });
        const out = path.join(tempDir("plan"), "dev");
        writePlan(plan, out);
        const texts = [...fs.readdirSync(out, { recursive: true, withFileTypes: true })]
            .filter((e) => e.isFile())
            .map((e) => [path.join(e.parentPath, e.name), fs.readFileSync(path.join(e.parentPath, e.name), "utf8")] as const);
        // As sent, and as cloud-init reads it (base64 of gzip hides nothing from this search).
        const servers = plan.resources.filter((r) => r.type === "hcloud:index/server:Server");
        texts.push(["servers' userData", JSON.stringify(servers.map((r) => r.inputs.userData))]);
        if (mode === "up") for (const server of servers) texts.push([`${server.name}'s decoded userData`, decodeUserData(String(server.inputs.userData)).text]);
        expect(texts.length).toBeGreaterThan(40);
        for (const [name, value] of Object.entries(values)) {
            // The whole value, and a distinctive slice of it (a PEM body line, the random tail of a token).
            const needles = [value, name === "GITHUB_APP_PRIVATE_KEY" ? value.split("\n")[5] : value.slice(-16)];
            for (const [where, text] of texts) for (const needle of needles) expect(text.includes(needle), `${name} in ${where}`).toBe(false);
        }
        expect(gatePlan(plan)).toEqual([]);
    });
});
