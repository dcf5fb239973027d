import * as YAML from "yaml";
import { TAILNET_IPV4_PLACEHOLDER } from "../../policies/contract";
import { AGENT_SUBORDINATE_IDS, type StackConfig } from "../config/schema";
import { renderTemplate } from "../render/templates";

/**
 * Pure rendering of each host's ONE compose file. Every service starts from
 * templates/compose/service-defaults.yaml (the hardened defaults, in one visible
 * place); the stack's overrides go on top.
 */

/** Image references as they will be deployed (pinned, resolved, or built). */
export interface ResolvedImages {
    sandboxShell: string;
    browser: string;
    postgres: string;
    redis: string;
    api: string;
    adguard: string;
    services: Record<string, string>;
}

export { BUILT_SANDBOX_SHELL_PLACEHOLDER } from "../../policies/contract";

/** Capabilities a root-started image needs to drop to its own user (chown, gosu); the gate's allowed set. */
const STARTUP_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"];

/** Where the agent's AdGuard Home keeps its live config and query log on the gateway. */
export const adguardDataDir = (cfg: StackConfig) => `/home/${cfg.agent.user}/.local/share/airlock/adguard`;

type Service = Record<string, unknown>;
/** The hardening keys a stack may set per service (see serviceOverrides in the schema). */
const OVERRIDE_KEYS = ["cap_add", "pids_limit", "mem_limit", "cpus", "read_only"] as const;
type Overrides = Partial<Record<(typeof OVERRIDE_KEYS)[number], unknown>>;

let serviceDefaults: string | undefined;

function hardened(service: Service, overrides: Overrides = {}): Service {
    serviceDefaults ??= renderTemplate("compose/service-defaults.yaml", {});
    // A fresh copy per service: YAML.parse never shares nested objects between calls.
    const defaults = YAML.parse(serviceDefaults) as Service;
    const set = Object.fromEntries(OVERRIDE_KEYS.filter((k) => overrides[k] !== undefined).map((k) => [k, overrides[k]]));
    // Name and image first, so a reader sees what runs before how it is confined.
    const { container_name, image, ...rest } = service;
    return { container_name, image, ...defaults, ...rest, ...set };
}

function document(header: string, services: Record<string, Service>, extra: Record<string, unknown>): string {
    const doc = new YAML.Document({ services, ...extra });
    doc.commentBefore = header;
    return doc.toString({ lineWidth: 0 });
}

/** Whether the sandbox compose file has an internal (backend) network. */
function hasBackend(cfg: StackConfig): boolean {
    const w = cfg.workloads;
    return w.postgres.enabled || w.redis.enabled || w.api.enabled || w.services.some((s) => s.network === "internal");
}

/** The container every agent command runs in; a session's is the same definition with its own name and workspace. */
function shellService(cfg: StackConfig, images: ResolvedImages, containerName: string, workspace: string): Service {
    return hardened(
        {
            container_name: containerName,
            image: images.sandboxShell,
            hostname: "sandbox",
            command: ["sleep", "infinity"],
            working_dir: "/workspace",
            cap_add: STARTUP_CAPABILITIES,
            read_only: false,
            volumes: [`${workspace}:/workspace`],
            networks: hasBackend(cfg) ? ["egress", "internal"] : ["egress"],
        },
        cfg.workloads.sandboxShell,
    );
}

/** Where a session's workspace subvolume is reached on the host (see templates/scripts/mount-workspace). */
export const SESSION_WORKSPACES_DIR = "/var/lib/airlock/workspaces";
/** Filled by the checkpoint helper with the session's workspace name (s-<name> or c-<connection>). */
export const SESSION_PLACEHOLDER = "@SESSION@";
/** The sandbox compose project; a session's containers join its networks. */
export const SANDBOX_COMPOSE_PROJECT = "airlock";

export function renderSandboxCompose(cfg: StackConfig, images: ResolvedImages): string {
    const w = cfg.workloads;
    const backend = hasBackend(cfg);
    const services: Record<string, Service> = {
        "agent-sandbox-shell": shellService(cfg, images, "agent-sandbox-shell", "/workspace"),
    };
    if (w.browser.enabled) {
        services.browser = hardened(
            {
                container_name: "agent-browser",
                image: images.browser,
                // CDP on the tailnet address only; the gateway is the only peer allowed to port 9222.
                ports: [`${TAILNET_IPV4_PLACEHOLDER}:9222:9222`],
                shm_size: "1g",
                read_only: true,
                // A network of its own: the agent's shell must not reach CDP (cookies and
                // sessions of earlier tasks, scripts in pages the gateway opens later).
                networks: ["browser"],
            },
            w.browser,
        );
    }
    if (w.postgres.enabled) {
        services.postgres = hardened(
            {
                container_name: "agent-postgres",
                image: images.postgres,
                cap_add: STARTUP_CAPABILITIES,
                // Reachable only on the internal network, from the agent's own containers.
                environment: { POSTGRES_HOST_AUTH_METHOD: "trust", POSTGRES_DB: "agent" },
                volumes: ["pgdata:/var/lib/postgresql/data"],
                networks: ["internal"],
            },
            w.postgres,
        );
    }
    if (w.redis.enabled) {
        services.redis = hardened(
            { container_name: "agent-redis", image: images.redis, cap_add: ["SETGID", "SETUID"], volumes: ["redisdata:/data"], networks: ["internal"] },
            w.redis,
        );
    }
    if (w.api.enabled) {
        services.api = hardened(
            { container_name: "agent-api", image: images.api, ports: [`127.0.0.1:${w.api.port}:${w.api.port}`], read_only: true, networks: ["egress", "internal"] },
            w.api,
        );
    }
    for (const s of w.services) {
        const { name, network, command, environment, volumes, ports } = s;
        const own = Object.fromEntries(Object.entries({ command, environment, volumes, ports }).filter(([, v]) => v !== undefined));
        services[name] = hardened({ container_name: `agent-${name}`, image: images.services[name], ...own, networks: [network] }, s);
    }
    const volumes: Record<string, object> = {};
    if (w.postgres.enabled) volumes.pgdata = {};
    if (w.redis.enabled) volumes.redisdata = {};
    return document(
        " airlock sandbox workloads - rendered by airlock; run by the agent's rootless Docker.\n" +
            " @TAILNET_IPV4@ is filled at boot by airlock-tailnet-render (tailnet addresses only).",
        services,
        {
            networks: { egress: {}, ...(w.browser.enabled ? { browser: {} } : {}), ...(backend ? { internal: { internal: true } } : {}) },
            ...(Object.keys(volumes).length > 0 ? { volumes } : {}),
        },
    );
}

/**
 * One session's container (per-session mode): the shell's own hardened definition
 * with the session's name and workspace, on the sandbox project's networks. The
 * checkpoint helper fills @SESSION@ (a validated name) and nothing else, so the gate
 * judges every session container by this file.
 */
export function renderSessionCompose(cfg: StackConfig, images: ResolvedImages): string {
    const external = (name: string) => ({ external: true, name: `${SANDBOX_COMPOSE_PROJECT}_${name}` });
    return document(
        " airlock session workloads - rendered by airlock; one project per session, run by the\n" +
            " agent's rootless Docker. @SESSION@ is filled by the checkpoint helper with the session's name.",
        { "agent-sandbox-shell": shellService(cfg, images, `agent-${SESSION_PLACEHOLDER}`, `${SESSION_WORKSPACES_DIR}/${SESSION_PLACEHOLDER}`) },
        { networks: { egress: external("egress"), ...(hasBackend(cfg) ? { internal: external("internal") } : {}) } },
    );
}

/**
 * Where the agent's rootless Docker publishes AdGuard Home on the gateway's tailnet
 * address: an unprivileged port, reached from the tailnet's port 53 through an
 * nftables redirect (templates/nftables/gateway-dns-redirect.nft).
 */
export const RESOLVER_PUBLISHED_PORT = 10053;

export function renderGatewayCompose(cfg: StackConfig, images: ResolvedImages): string {
    const data = adguardDataDir(cfg);
    const services = {
        adguard: hardened({
            container_name: "airlock-adguard",
            image: images.adguard,
            // The sandbox's resolver, on the tailnet address only (port 53 there is redirected to it).
            ports: [`${TAILNET_IPV4_PLACEHOLDER}:${RESOLVER_PUBLISHED_PORT}:53/udp`, `${TAILNET_IPV4_PLACEHOLDER}:${RESOLVER_PUBLISHED_PORT}:53/tcp`],
            volumes: [`${data}/conf:/opt/adguardhome/conf`, `${data}/work:/opt/adguardhome/work`],
            read_only: true,
            networks: ["egress"],
        }),
    };
    return document(
        " airlock gateway workloads - rendered by airlock; run by the agent's rootless Docker.\n" +
            " @TAILNET_IPV4@ is filled at boot by airlock-tailnet-render (tailnet addresses only).",
        services,
        { networks: { egress: {} } },
    );
}

/** AdGuard Home's config for the stack's DNS mode. */
export function renderAdguardConfig(cfg: StackConfig): string {
    const { mode, upstreams, bootstrap, allowlist, queryLogDays } = cfg.dns;
    const rules = mode === "allowlist" ? ["||*^", ...allowlist.map((d) => `@@||${d.replace(/^\*\./, "")}^`)] : [];
    return renderTemplate("adguard/AdGuardHome.yaml", {
        mode,
        upstreams: JSON.stringify(upstreams),
        bootstrap: JSON.stringify(bootstrap),
        queryLogInterval: JSON.stringify(`${queryLogDays * 24}h`),
        userRules: JSON.stringify(rules),
    });
}

/** The sandbox's nftables egress policy for the stack's DNS mode. */
export function renderEgressRules(cfg: StackConfig): string {
    return renderTemplate("nftables/sandbox-egress.nft", {
        mode: cfg.dns.mode,
        agentUids: `{ ${cfg.agent.uid}, ${AGENT_SUBORDINATE_IDS.first}-${AGENT_SUBORDINATE_IDS.last} }`,
        agentEgressRules: renderTemplate(`nftables/agent-egress-${cfg.dns.mode}.nft`, {}).replace(/\n$/, ""),
    });
}
