import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { z } from "zod";
import { describe, expect, it } from "vitest";
import { ConfigError, readStackFile } from "../components/config/load";
import { COMPOSE_TEMPLATE_PATH, RenderedHost } from "../components/render/hosts";
import { planStack } from "../cli/offline";
import { GATEWAY_AGENT_PATHS } from "../components/workloads/compose";
import { gatePlan } from "../cli/gate";
import { editedStack, renderHosts, SHIPPED_STACKS, stackFile, tempDir, renderedFile } from "./helpers/stacks";
import { run, toolsAvailable, withTailnetValues } from "./helpers/tools";

const composeOf = (host: RenderedHost) => YAML.parse(renderedFile(host, COMPOSE_TEMPLATE_PATH));
const fileOf = renderedFile;

function hostsOf(edit: (c: Record<string, any>) => void) {
    return renderHosts(readStackFile(editedStack("dev", edit)));
}

function problemsOf(edit: (c: Record<string, any>) => void): string[] {
    try {
        readStackFile(editedStack("dev", edit));
    } catch (err) {
        if (err instanceof ConfigError) return err.problems;
        throw err;
    }
    return [];
}

const HARDENED = {
    cap_drop: ["ALL"],
    security_opt: ["no-new-privileges:true"],
    pids_limit: 256,
    mem_limit: "3g",
    cpus: 1.8,
    ulimits: { nofile: { soft: 4096, hard: 8192 }, nproc: { soft: 1024, hard: 2048 } },
    logging: { driver: "json-file", options: { "max-size": "10m", "max-file": "3" } },
    init: true,
    ipc: "private",
};

describe("compose rendering", () => {
    const everything = hostsOf((c) => {
        c["airlock:workloads"].postgres = { enabled: true };
        c["airlock:workloads"].redis = { enabled: true };
        c["airlock:workloads"].api = { enabled: true, image: `registry.example/api:1` };
        c["airlock:workloads"].services = [{ name: "worker", image: "registry.example/worker:2" }];
    });

    it.each([
        ...SHIPPED_STACKS.flatMap((stack) => {
            const hosts = renderHosts(readStackFile(stackFile(stack)));
            return [[`${stack}/sandbox`, hosts.sandbox], [`${stack}/gateway`, hosts.gateway]] as const;
        }),
        ["every optional service", everything.sandbox] as const,
    ])("%s: every service carries the hardened defaults", (_, host) => {
        const services = composeOf(host).services as Record<string, any>;
        expect(Object.keys(services).length).toBeGreaterThan(0);
        for (const [name, service] of Object.entries(services)) {
            expect(service, name).toMatchObject(HARDENED);
            expect(service.tmpfs.map((t: string) => t.split(":")[0]), name).toEqual(["/tmp", "/run"]);
            expect(service.cap_add ?? [], name).toEqual(expect.arrayContaining([]));
            for (const cap of service.cap_add ?? []) expect(["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"], name).toContain(cap);
        }
    });

    it("a minimal user service (name + image) already renders hardened, on the internal network", () => {
        const worker = composeOf(everything.sandbox).services.worker;
        expect(worker).toMatchObject({ ...HARDENED, image: expect.stringMatching(/^registry\.example\/worker:2@sha256:/), networks: ["internal"] });
    });

    it("the shell works in /workspace; the browser has CDP on the tailnet address only and no /workspace", () => {
        const { services } = composeOf(everything.sandbox);
        expect(services["agent-sandbox-shell"]).toMatchObject({ container_name: "agent-sandbox-shell", working_dir: "/workspace", volumes: ["/workspace:/workspace"] });
        expect(services.browser.ports).toEqual(["@TAILNET_IPV4@:9222:9222"]);
        expect(JSON.stringify(services.browser.volumes ?? [])).not.toContain("/workspace");
        // The browser shares no network with any other service: only the gateway reaches CDP.
        for (const [name, service] of Object.entries(services)) {
            if (name !== "browser") expect(((service as { networks: string[] }).networks).filter((n) => (services.browser.networks as string[]).includes(n)), name).toEqual([]);
        }
    });

    it("databases sit on an internal network; the API binds 127.0.0.1", () => {
        const compose = composeOf(everything.sandbox);
        expect(compose.networks.internal).toEqual({ internal: true });
        expect(compose.services.postgres.networks).toEqual(["internal"]);
        expect(compose.services.redis.networks).toEqual(["internal"]);
        expect(compose.services.postgres.ports).toBeUndefined();
        expect(compose.services.api.ports).toEqual(["127.0.0.1:8080:8080"]);
    });

    it("a stack may tighten a default", () => {
        const shell = composeOf(hostsOf((c) => (c["airlock:workloads"].sandboxShell.pids_limit = 64)).sandbox).services["agent-sandbox-shell"];
        expect(shell.pids_limit).toBe(64);
    });
});

describe("rejections", () => {
    it("an image without a digest is a plan-time error naming the key, with the hint to pin it", () => {
        const problems = problemsOf((c) => {
            c["airlock:workloads"].resolveDigests = false;
            c["airlock:workloads"].sandboxShell.image = `debian@sha256:${"a".repeat(64)}`;
            c["airlock:workloads"].adguard = { image: `adguard/adguardhome@sha256:${"b".repeat(64)}` };
            c["airlock:gateway"].agent.image = `nousresearch/hermes-agent@sha256:${"d".repeat(64)}`;
        });
        expect(problems).toEqual([expect.stringMatching(/airlock:workloads\.browser\.image: chromedp\/headless-shell:stable is not pinned: write chromedp\/headless-shell:stable@sha256:<digest>, or set airlock:workloads\.resolveDigests: true$/)]);
    });

    it("a user service may not take a built-in name", () => {
        expect(problemsOf((c) => (c["airlock:workloads"].services = [{ name: "browser", image: "x:1" }]))[0]).toContain("airlock:workloads.services[0].name");
    });

    it("a plain-text DNS upstream is refused", () => {
        expect(problemsOf((c) => (c["airlock:dns"].upstreams = ["8.8.8.8"]))[0]).toContain("airlock:dns.upstreams[0]");
    });

    it.each<[string, Record<string, unknown>, string]>([
        ["a docker socket mount", { volumes: ["/run/user/1500/docker.sock:/var/run/docker.sock"] }, "containers-no-docker-socket"],
        ["CDP-style port on every address", { ports: ["9222:9222"] }, "containers-ports-private-only"],
        ["an extra capability", { cap_add: ["NET_ADMIN"] }, "containers-add-only-allowed-capabilities"],
        ["no pids limit", { pids_limit: -1 }, "containers-resource-limits"],
    ])("a loosening in the stack (%s) is visible and fails the gate", async (_, loosen, rule) => {
        const file = editedStack("dev", (c) => (c["airlock:workloads"].services = [{ name: "extra", image: "registry.example/x:1", ...loosen }]));
        const findings = gatePlan(await planStack(file, "dev"));
        expect([...new Set(findings.map((f) => f.rule))]).toEqual([rule]);
    });
});

/** The AdGuard Home fields airlock writes, with the types AdGuard Home reads them as (schema_version 29). */
const adguardConfig = z.strictObject({
    http: z.strictObject({ address: z.string().regex(/^127\.0\.0\.1:\d+$/), session_ttl: z.string() }),
    users: z.array(z.never()),
    dns: z.strictObject({
        bind_hosts: z.array(z.string()),
        port: z.literal(53),
        allowed_clients: z.array(z.string()),
        upstream_dns: z.array(z.string().regex(/^(https|tls|quic):\/\//)).min(1),
        bootstrap_dns: z.array(z.string()).min(1),
        upstream_mode: z.enum(["load_balance", "parallel", "fastest_addr"]),
        refuse_any: z.boolean(),
        // Per client, and per address (a /32): a flood's cost is bounded (RESOLVER_RATELIMIT).
        ratelimit: z.literal(100),
        ratelimit_subnet_len_ipv4: z.literal(32),
        ratelimit_subnet_len_ipv6: z.literal(128),
        cache_size: z.number().int(),
        anonymize_client_ip: z.literal(false),
    }),
    tls: z.strictObject({ enabled: z.literal(false) }),
    // Every lookup written as it is answered (test/e2e-dns.test.ts shows what 1000 loses).
    querylog: z.strictObject({ enabled: z.literal(true), file_enabled: z.literal(true), interval: z.string().regex(/^\d+h$/), size_memory: z.literal(1), ignored: z.array(z.string()) }),
    // AdGuard's own log, in its work dir and in UTC: where failed lookups are named.
    log: z.strictObject({
        enabled: z.literal(true),
        file: z.literal("/opt/adguardhome/work/data/adguardhome.log"),
        max_backups: z.number().int(),
        max_size: z.number().int(),
        max_age: z.number().int(),
        compress: z.boolean(),
        local_time: z.literal(false),
        verbose: z.literal(false),
    }),
    statistics: z.strictObject({ enabled: z.boolean(), interval: z.string() }),
    filtering: z.strictObject({ protection_enabled: z.literal(true), filtering_enabled: z.literal(true), blocking_mode: z.string() }),
    filters: z.array(z.unknown()),
    whitelist_filters: z.array(z.unknown()),
    user_rules: z.array(z.string()),
    dhcp: z.strictObject({ enabled: z.literal(false) }),
    schema_version: z.number().int(),
});

describe("AdGuard Home", () => {
    it.each(SHIPPED_STACKS)("%s: the rendered AdGuardHome.yaml has AdGuard Home's fields and types, query log on", (stack) => {
        const cfg = readStackFile(stackFile(stack));
        const parsed = adguardConfig.parse(YAML.parse(fileOf(renderHosts(cfg).gateway, "/etc/airlock/adguard/AdGuardHome.yaml")));
        expect(parsed.dns.upstream_dns).toEqual(cfg.dns.upstreams);
        expect(parsed.querylog.interval).toBe(`${cfg.dns.queryLogDays * 24}h`);
    });

    it("another AdGuard Home release is refused with one line (the rendered schema is the pinned release's); a mirror of the pinned one or a digest is taken", () => {
        const problems = problemsOf((c) => (c["airlock:workloads"].adguard = { image: "adguard/adguardhome:v0.107.52" }));
        expect(problems).toHaveLength(1);
        expect(problems[0]).toMatch(/airlock:workloads\.adguard\.image: airlock renders AdGuard Home's config for v0\.107\.63 \(schema 29\)/);
        expect(problemsOf((c) => (c["airlock:workloads"].adguard = { image: "registry.example/mirror/adguardhome:v0.107.63" }))).toEqual([]);
        expect(problemsOf((c) => (c["airlock:workloads"].adguard = { image: `registry.example/adguardhome@sha256:${"ab".repeat(32)}` }))).toEqual([]);
    });

    it("observe mode blocks nothing; allowlist mode blocks everything but the listed domains", () => {
        const observe = YAML.parse(fileOf(hostsOf((c) => (c["airlock:dns"] = { mode: "observe" })).gateway, "/etc/airlock/adguard/AdGuardHome.yaml"));
        expect(observe.user_rules).toEqual([]);
        const allow = YAML.parse(fileOf(hostsOf((c) => (c["airlock:dns"] = { mode: "allowlist", allowlist: ["github.com", "*.npmjs.org"] })).gateway, "/etc/airlock/adguard/AdGuardHome.yaml"));
        expect(allow.user_rules).toEqual(["||*^", "@@||github.com^", "@@||npmjs.org^"]);
    });

    it("publishes DNS on the gateway's tailnet address only", () => {
        const { services } = composeOf(renderHosts(readStackFile(stackFile("dev"))).gateway);
        expect(services.adguard.ports).toEqual(["@TAILNET_IPV4@:10053:53/udp", "@TAILNET_IPV4@:10053:53/tcp"]);
    });

    it("the gateway's rootless Docker runs without the userland proxy and publishes exactly its compose file's ports itself; the sandbox's keeps the proxy", () => {
        const hosts = hostsOf((c) => (c["airlock:gateway"].agent.port = 8080));
        const listed = fileOf(hosts.gateway, "/etc/airlock/rootless-publish.conf.in").split("\n").filter((line) => line !== "" && !line.startsWith("#"));
        const { services } = composeOf(hosts.gateway);
        expect(services.agent.ports).toEqual(["127.0.0.1:8080:8080"]);
        expect(listed).toEqual(["udp @TAILNET_IPV4@ 10053", "tcp @TAILNET_IPV4@ 10053", "tcp 127.0.0.1 8080"]);
        // Filled at boot, before the workloads (and so the daemon) start.
        expect(fileOf(hosts.gateway, "/etc/systemd/system/airlock-tailnet-config.service")).toContain("/etc/airlock/rootless-publish.conf.in /etc/airlock/rootless-publish.conf\n");
        expect(JSON.parse(fileOf(hosts.gateway, "/etc/airlock/docker-daemon.json"))["userland-proxy"]).toBe(false);
        const gatewayUnit = fileOf(hosts.gateway, "/etc/systemd/user/docker.service");
        expect(gatewayUnit).toMatch(/^Environment=PATH=\/usr\/local\/libexec\/airlock\/rootless:\/usr\/share\/docker.io\/contrib:/m);
        expect(gatewayUnit).toContain("dockerd-rootless.sh --config-file=/etc/airlock/docker-daemon.json --log-driver");
        expect(fileOf(hosts.gateway, "/usr/local/libexec/airlock/rootless/dockerd")).toMatch(/^exec "\$DOCKERD" "\$@"$/m);

        expect(hosts.sandbox.files.map((f) => f.path)).not.toContain("/etc/airlock/rootless-publish.conf.in");
        const sandboxUnit = fileOf(hosts.sandbox, "/etc/systemd/user/docker.service");
        expect(sandboxUnit).toMatch(/^Environment=PATH=\/usr\/share\/docker.io\/contrib:/m);
        expect(sandboxUnit).toContain("dockerd-rootless.sh --log-driver");
        expect(fileOf(hosts.sandbox, "/etc/airlock/docker-daemon.json.in")).not.toContain("userland-proxy");
    });
});

describe.runIf(toolsAvailable("docker-compose config", ["docker-compose"]))("docker-compose config", () => {
    it("the boot-time check airlock-tailnet-render runs accepts the rendered file and refuses a broken one", () => {
        const host = renderHosts(readStackFile(stackFile("dev"))).sandbox;
        const dir = tempDir("compose-check");
        const check = path.join(dir, "airlock-compose-check");
        fs.writeFileSync(check, fileOf(host, "/usr/local/sbin/airlock-compose-check"), { mode: 0o755 });
        // The unit passes the staged file as the check's last argument.
        const unit = fileOf(host, "/etc/systemd/system/airlock-tailnet-config.service");
        expect(unit).toContain(`${COMPOSE_TEMPLATE_PATH} /etc/airlock/compose.yml /usr/local/sbin/airlock-compose-check\n`);
        const good = path.join(dir, "compose.yml");
        fs.writeFileSync(good, withTailnetValues(fileOf(host, COMPOSE_TEMPLATE_PATH)));
        expect(run(check, [good]).status).toBe(0);
        const broken = path.join(dir, "broken.yml");
        fs.writeFileSync(broken, "services:\n  x:\n    image: a\n    ports: {not: a list}\n");
        expect(run(check, [broken]).status).not.toBe(0);
    });

    it.each(
        SHIPPED_STACKS.flatMap((stack) => {
            const hosts = renderHosts(readStackFile(stackFile(stack)));
            return [[`${stack}/sandbox`, hosts.sandbox], [`${stack}/gateway`, hosts.gateway]] as const;
        }),
    )("%s: the rendered compose file is valid", (_, host) => {
        const dir = tempDir("compose");
        const file = path.join(dir, "compose.yml");
        // At boot airlock-agent-secrets.service stages the runtime's env file before this check runs.
        const runtimeEnv = path.join(dir, "runtime.env");
        fs.writeFileSync(runtimeEnv, "# staged\n");
        const text = withTailnetValues(fileOf(host, COMPOSE_TEMPLATE_PATH))
            .replaceAll(GATEWAY_AGENT_PATHS.runtimeEnv, runtimeEnv)
            .replaceAll("@SANDBOX_SHELL_IMAGE@", `registry.example/shell@sha256:${"c".repeat(64)}`);
        fs.writeFileSync(file, text);
        const result = run("docker-compose", ["--log-level", "ERROR", "--file", file, "config", "--quiet"]);
        expect(result.stderr).toBe("");
        expect(result.status).toBe(0);
    });
});
