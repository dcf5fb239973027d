import * as YAML from "yaml";
import { HERMES_RUNTIME, TAILNET_IPV4_PLACEHOLDER } from "../../policies/contract";
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
    /** The agent runtime on the gateway and its memory database ("" when the stack has none). */
    agent: string;
    agentMemoryDb: string;
    services: Record<string, string>;
}

export { BUILT_SANDBOX_SHELL_PLACEHOLDER } from "../../policies/contract";

/** Capabilities a root-started image needs to drop to its own user (chown, gosu); the gate's allowed set. */
const STARTUP_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"];

/** The gateway's resolver in its compose file (started ahead of the rest). */
export const RESOLVER_SERVICE = "adguard";
/** Where the agent's AdGuard Home keeps its live config and query log on the gateway. */
export const adguardDataDir = (cfg: StackConfig) => `/home/${cfg.agent.user}/.local/share/airlock/adguard`;
/** AdGuard Home's work directory, on the resolver's fixed-size filesystem (airlock-resolver-state, /var/lib/airlock/resolver). */
export const RESOLVER_WORK_DIR = "/var/lib/airlock/resolver/work";

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

/** The container every agent command runs in; a session's is the same definition with its own name, workspace and networks. */
function shellService(cfg: StackConfig, images: ResolvedImages, containerName: string, workspace: string, networks: string[]): Service {
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
            networks,
        },
        cfg.workloads.sandboxShell,
    );
}

/** PostgreSQL for the agent's containers, reachable only on the internal network. */
function postgresService(cfg: StackConfig, images: ResolvedImages, containerName: string, environment: Record<string, string>): Service {
    return hardened(
        {
            container_name: containerName,
            image: images.postgres,
            cap_add: STARTUP_CAPABILITIES,
            environment: { ...environment, POSTGRES_DB: "agent" },
            volumes: ["pgdata:/var/lib/postgresql/data"],
            networks: ["internal"],
        },
        cfg.workloads.postgres,
    );
}

function redisService(cfg: StackConfig, images: ResolvedImages, containerName: string, command?: string[]): Service {
    return hardened(
        { container_name: containerName, image: images.redis, ...(command ? { command } : {}), cap_add: ["SETGID", "SETUID"], volumes: ["redisdata:/data"], networks: ["internal"] },
        cfg.workloads.redis,
    );
}

/** Where a session's workspace subvolume is reached on the host (see templates/scripts/mount-workspace). */
export const SESSION_WORKSPACES_DIR = "/var/lib/airlock/workspaces";
/** Filled by the checkpoint helper with the session's workspace name (s-<name> or c-<connection>). */
export const SESSION_PLACEHOLDER = "@SESSION@";
/** The sandbox compose project (a session's is airlock-<workspace>, with networks of its own). */
export const SANDBOX_COMPOSE_PROJECT = "airlock";
/**
 * The password of one session's PostgreSQL and Redis: generated by the checkpoint engine when the
 * session is created, kept in its root-only state, and handed to docker-compose in an env file
 * (--env-file) that fills this variable; the session's shell gets it as PGPASSWORD and REDISCLI_AUTH.
 */
export const SESSION_SECRET_VARIABLE = "AIRLOCK_SESSION_SECRET";

export function renderSandboxCompose(cfg: StackConfig, images: ResolvedImages): string {
    const w = cfg.workloads;
    const backend = hasBackend(cfg);
    const services: Record<string, Service> = {
        "agent-sandbox-shell": shellService(cfg, images, "agent-sandbox-shell", "/workspace", backend ? ["egress", "internal"] : ["egress"]),
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
        // Reachable only on the internal network, from the agent's own containers (one tenant: the shared workspace).
        services.postgres = postgresService(cfg, images, "agent-postgres", { POSTGRES_HOST_AUTH_METHOD: "trust" });
    }
    if (w.redis.enabled) services.redis = redisService(cfg, images, "agent-redis");
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

/** Where things the agent runtime reads live on the gateway (host paths). */
export const GATEWAY_AGENT_PATHS = {
    /** What `airlock secrets push|status` runs on the gateway, through the operator's sudo. */
    secretsTool: "/usr/local/sbin/airlock-agent-secrets",
    /** Written by `airlock secrets push` (root, 0600); only root tools read it. */
    secrets: "/etc/airlock/agent/secrets.json",
    /** The runtime's share of the secrets, staged from the file above at boot and on every push (root:agent, 0440, tmpfs). */
    runtimeEnv: "/run/airlock-agent/runtime.env",
    /** The runtime's copy of the agent's ssh key, staged by airlock-gateway-agent-key (root, 0444 in that root:agent 0750 directory). */
    runtimeSshKey: "/run/airlock-agent/id_ed25519",
    /** Hermes's managed config and env (templates/agent/hermes-config.yaml, hermes.env), mounted over its managed scope. */
    hermesConfig: "/etc/airlock/agent/hermes-config.yaml",
    hermesEnv: "/etc/airlock/agent/hermes.env",
    /** templates/agent/hermes-user.env: mounted read-only over the .env in Hermes's state volume. */
    hermesUserEnv: "/etc/airlock/agent/hermes-user.env",
    /** templates/agent/hermes-preflight, at the same path in the container. */
    hermesPreflight: HERMES_RUNTIME.preflight,
    /** The runtime's /etc/ssh: a folder, so the ssh config in it is replaced by a rename the container sees at once. */
    sshFolder: "/etc/airlock/agent/ssh",
    /** The runtime's ssh config for the sandbox, rendered by airlock-sandbox-address (the sandbox's node, found by its tag). */
    sshConfig: "/etc/airlock/agent/ssh/ssh_config",
    knownHosts: "/etc/airlock/known_hosts",
    githubConfig: "/etc/airlock/github.json",
    githubTokenSocket: "/run/airlock/github-token.sock",
    githubTokenClient: "/usr/local/bin/airlock-github-token",
} as const;

/** The agent's own ssh key (generated on the gateway by airlock-gateway-agent-key). */
export const agentSshKey = (cfg: StackConfig) => `/home/${cfg.agent.user}/.ssh/id_ed25519`;
/** Where the runtime finds the pinned ssh config in its container: the system-wide file, in the folder mounted over /etc/ssh. */
export const RUNTIME_SSH_FOLDER = "/etc/ssh";
export const RUNTIME_SSH_CONFIG = `${RUNTIME_SSH_FOLDER}/ssh_config`;
/** Where the runtime finds that key in its container (Hermes's terminal.ssh_key). */
export const RUNTIME_SSH_KEY = "/etc/airlock/agent/id_ed25519";
/**
 * The runtime's PATH: the published image's, without its state volume's .local/bin
 * (a program the runtime put there would run in place of the system's, ssh included).
 */
export const RUNTIME_PATH = "/opt/hermes/bin:/opt/hermes/.venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/** What the runtime runs when the stack names nothing else: Hermes's messaging gateway, in the foreground. */
export const DEFAULT_RUNTIME_COMMAND = ["hermes", "gateway", "run"];

/** Compose names of the runtime's services and volumes (project "airlock"). */
export const AGENT_SERVICE = "agent";
export const AGENT_MEMORY_DB_SERVICE = "agent-memory-db";
export const AGENT_STATE_VOLUME = "agent-state";
export const AGENT_MEMORY_VOLUME = "agent-memory";
export const AGENT_MEMORY_NETWORK = "agent-memory";
/** The fixed-size filesystem (stateGb) that holds the runtime's volumes, mounted by airlock-agent-state. */
export const AGENT_STATE_IMAGE = "/var/lib/airlock/agent-state.img";
export const AGENT_STATE_MOUNT = "/var/lib/airlock/agent-state";
/** A named volume whose data lives in `dir` on that filesystem. */
const volumeOnStateFilesystem = (dir: string) => ({ driver_opts: { type: "none", o: "bind", device: `${AGENT_STATE_MOUNT}/${dir}` } });
export const AGENT_MEMORY_DB_CONTAINER = "airlock-agent-memory-db";
/** The memory database's name inside its PostgreSQL. */
export const AGENT_MEMORY_DB_NAME = "memory";

/**
 * The agent's runtime: its loop, on the gateway, hardened like every service. It
 * reaches the sandbox only through the pinned ssh config, and the internet only
 * outbound; it publishes nothing except, optionally, one port on 127.0.0.1.
 */
function agentServices(cfg: StackConfig, images: ResolvedImages): { services: Record<string, Service>; networks: Record<string, object>; volumes: Record<string, object> } {
    const runtime = cfg.gateway.agent;
    if (!runtime) return { services: {}, networks: {}, volumes: {} };
    const p = GATEWAY_AGENT_PATHS;
    const readOnly = (host: string, container = host) => `${host}:${container}:ro`;
    const github = cfg.gateway.github !== undefined;
    const agent: Service = {
        container_name: "airlock-agent",
        image: images.agent,
        // Every start goes through the preflight: Hermes's own loader must say ssh to the sandbox.
        command: [p.hermesPreflight, ...(runtime.command ?? DEFAULT_RUNTIME_COMMAND)],
        // The image starts as root to drop to its own user (s6-setuidgid); no capability
        // is added for the commands, which run on the sandbox, not here.
        cap_add: [...STARTUP_CAPABILITIES],
        environment: {
            ...runtime.environment,
            HERMES_HOME: runtime.statePath,
            PATH: RUNTIME_PATH,
            ...(github ? { AIRLOCK_GITHUB_TOKEN_SOCKET: p.githubTokenSocket } : {}),
        },
        // Secrets arrive at run time (airlock secrets push), never in this file.
        env_file: [p.runtimeEnv],
        volumes: [
            `${AGENT_STATE_VOLUME}:${runtime.statePath}`,
            // Hermes's own .env in that volume is airlock's, read-only: nothing the runtime writes sets a variable.
            readOnly(p.hermesUserEnv, `${runtime.statePath}/.env`),
            // The terminal: Hermes's managed scope says ssh to the sandbox, over the pinned ssh config.
            readOnly(p.hermesConfig, HERMES_RUNTIME.managedConfig),
            readOnly(p.hermesEnv, HERMES_RUNTIME.managedEnv),
            readOnly(p.hermesPreflight),
            // As the container's system ssh_config, not in its ssh_config.d: ssh refuses an
            // Include'd file not owned by root or the user, and under the agent's rootless
            // Docker a file of the host's root is owned by nobody in here (seen in the twin:
            // "Bad owner or permissions", and the runtime never started). The top file is read
            // without that check. Its folder is mounted, not the file: a new config is renamed
            // into place, and a file rewritten in place is empty while ssh may be reading it.
            readOnly(p.sshFolder, RUNTIME_SSH_FOLDER),
            readOnly(p.knownHosts),
            readOnly(p.runtimeSshKey, RUNTIME_SSH_KEY),
            // Per-task GitHub tokens from the root-side minter; the App key stays outside.
            ...(github ? [`${p.githubTokenSocket}:${p.githubTokenSocket}`, readOnly(p.githubTokenClient)] : []),
        ],
        ...(runtime.port ? { ports: [`127.0.0.1:${runtime.port}:${runtime.port}`] } : {}),
        networks: runtime.memoryDb.enabled ? ["egress", AGENT_MEMORY_NETWORK] : ["egress"],
    };
    const services: Record<string, Service> = { [AGENT_SERVICE]: hardened(agent, runtime) };
    const volumes: Record<string, object> = { [AGENT_STATE_VOLUME]: volumeOnStateFilesystem(AGENT_STATE_VOLUME) };
    const networks: Record<string, object> = {};
    if (runtime.memoryDb.enabled) {
        services[AGENT_MEMORY_DB_SERVICE] = hardened(
            {
                container_name: AGENT_MEMORY_DB_CONTAINER,
                image: images.agentMemoryDb,
                cap_add: [...STARTUP_CAPABILITIES],
                // Reachable only on its internal network, from the runtime.
                environment: { POSTGRES_HOST_AUTH_METHOD: "trust", POSTGRES_DB: AGENT_MEMORY_DB_NAME },
                volumes: [`${AGENT_MEMORY_VOLUME}:/var/lib/postgresql/data`],
                networks: [AGENT_MEMORY_NETWORK],
            },
            runtime.memoryDb,
        );
        volumes[AGENT_MEMORY_VOLUME] = volumeOnStateFilesystem(AGENT_MEMORY_VOLUME);
        networks[AGENT_MEMORY_NETWORK] = { internal: true };
    }
    return { services, networks, volumes };
}

/**
 * One session (per-session mode): the shell's own hardened definition with the session's name
 * and workspace, and a PostgreSQL and a Redis of its own when the sandbox has them, all on
 * networks of the session's own project: no route to another session and no name of one.
 * Its databases are agent-postgres-<session> and agent-redis-<session>: a session is s-… or c-…,
 * so no session's shell (agent-<session>) can bear another's database's name (red team 5:
 * agent-s-web-postgres was both session web's database and session web-postgres's shell).
 * The sandbox's shared services (api, the stack's own services) are not the session's. The
 * checkpoint helper fills @SESSION@ (a validated name) and docker-compose the session's secret
 * from its env file, nothing else, so the gate judges every session by this file.
 */
export function renderSessionCompose(cfg: StackConfig, images: ResolvedImages): string {
    const w = cfg.workloads;
    const backing = w.postgres.enabled || w.redis.enabled;
    const secret = `\${${SESSION_SECRET_VARIABLE}}`;
    const shell = shellService(cfg, images, `agent-${SESSION_PLACEHOLDER}`, `${SESSION_WORKSPACES_DIR}/${SESSION_PLACEHOLDER}`, backing ? ["egress", "internal"] : ["egress"]);
    const services: Record<string, Service> = { "agent-sandbox-shell": shell };
    const volumes: Record<string, object> = {};
    if (w.postgres.enabled) {
        // The image's entrypoint answers connections over the network with scram-sha-256 once a password is set (docker-library/postgres).
        services.postgres = postgresService(cfg, images, `agent-postgres-${SESSION_PLACEHOLDER}`, { POSTGRES_PASSWORD: secret });
        shell.environment = { PGHOST: "postgres", PGUSER: "postgres", PGDATABASE: "agent", PGPASSWORD: secret };
        volumes.pgdata = {};
    }
    if (w.redis.enabled) {
        services.redis = redisService(cfg, images, `agent-redis-${SESSION_PLACEHOLDER}`, ["redis-server", "--requirepass", secret]);
        shell.environment = { ...(shell.environment as object), REDISCLI_AUTH: secret };
        volumes.redisdata = {};
    }
    return document(
        " airlock session workloads - rendered by airlock; one project per session, run by the\n" +
            " agent's rootless Docker. @SESSION@ is filled by the checkpoint helper with the session's name;\n" +
            ` \${${SESSION_SECRET_VARIABLE}} by docker-compose from the session's env file.`,
        services,
        {
            networks: { egress: {}, ...(backing ? { internal: { internal: true } } : {}) },
            ...(Object.keys(volumes).length > 0 ? { volumes } : {}),
        },
    );
}

/** A try's id in its compose files, filled by the checkpoint helper (12 hex digits it chose). */
export const TRY_PLACEHOLDER = "@TRY@";
export const TRY_NETWORKS = ["none", "egress"] as const;
export type TryNetwork = (typeof TRY_NETWORKS)[number];

/**
 * One try (`airlock try`): the shell's own hardened definition (image, limits, capabilities; the
 * daemon's seccomp profile) on a writable clone of the workspace, never restarted once it stops,
 * with no network at all (`none`) or an egress network of its own project (`egress`, under the
 * sandbox's DNS and nftables rules like the shell's): a try reaches no session and none of the
 * sandbox's services. The gate judges both files, as it judges the session's.
 */
export function renderTryCompose(cfg: StackConfig, images: ResolvedImages, network: TryNetwork): string {
    const shell = shellService(cfg, images, `agent-try-${TRY_PLACEHOLDER}`, `${SESSION_WORKSPACES_DIR}/t-${TRY_PLACEHOLDER}`, network === "egress" ? ["egress"] : []);
    // Quoted: a bare `no` is YAML 1.1's false, which Compose refuses for `restart`.
    shell.restart = Object.assign(new YAML.Scalar("no"), { type: YAML.Scalar.QUOTE_DOUBLE });
    if (network === "none") {
        delete shell.networks;
        shell.network_mode = "none";
    }
    return document(
        ` airlock try (network ${network}) - rendered by airlock; one project per try, run by the agent's
 rootless Docker. @TRY@ is filled by the checkpoint helper with the try's id.`,
        { "agent-sandbox-shell": shell },
        network === "egress" ? { networks: { egress: {} } } : {},
    );
}

/**
 * Where the agent's rootless Docker publishes AdGuard Home on the gateway's tailnet
 * address: an unprivileged port, reached from the tailnet's port 53 through an
 * nftables redirect (templates/nftables/gateway-dns-redirect.nft).
 */
export const RESOLVER_PUBLISHED_PORT = 10053;
/**
 * Lookups a second AdGuard Home answers one client (dnsproxy's ratelimit, a one-second
 * window per /32): more are dropped unanswered. dnsproxy applies it to UDP only
 * (proxy/server.go, v0.75.6); a lookup over TCP costs the sender a connection.
 */
export const RESOLVER_RATELIMIT = 100;

export function renderGatewayCompose(cfg: StackConfig, images: ResolvedImages): string {
    const data = adguardDataDir(cfg);
    const agent = agentServices(cfg, images);
    const services = {
        [RESOLVER_SERVICE]: hardened({
            container_name: "airlock-adguard",
            image: images.adguard,
            // The sandbox's resolver, on the tailnet address only (port 53 there is redirected to it).
            ports: [`${TAILNET_IPV4_PLACEHOLDER}:${RESOLVER_PUBLISHED_PORT}:53/udp`, `${TAILNET_IPV4_PLACEHOLDER}:${RESOLVER_PUBLISHED_PORT}:53/tcp`],
            // Its work directory (query log, own log, statistics) on a filesystem of resolverLogGb: a flood fills that, never the disk.
            volumes: [`${data}/conf:/opt/adguardhome/conf`, `${RESOLVER_WORK_DIR}:/opt/adguardhome/work`],
            read_only: true,
            networks: ["egress"],
        }),
        ...agent.services,
    };
    return document(
        " airlock gateway workloads - rendered by airlock; run by the agent's rootless Docker.\n" +
            " @TAILNET_IPV4@ is filled at boot by airlock-tailnet-render (tailnet addresses only).",
        services,
        {
            networks: { egress: {}, ...agent.networks },
            ...(Object.keys(agent.volumes).length > 0 ? { volumes: agent.volumes } : {}),
        },
    );
}

/** AdGuard Home's config for the stack's DNS mode. */
export function renderAdguardConfig(cfg: StackConfig): string {
    const { mode, upstreams, bootstrap, allowlist, queryLogDays } = cfg.dns;
    const rules = mode === "allowlist" ? ["||*^", ...allowlist.map((d) => `@@||${d.replace(/^\*\./, "")}^`)] : [];
    return renderTemplate("adguard/AdGuardHome.yaml", {
        mode,
        ratelimit: String(RESOLVER_RATELIMIT),
        upstreams: JSON.stringify(upstreams),
        bootstrap: JSON.stringify(bootstrap),
        queryLogInterval: JSON.stringify(`${queryLogDays * 24}h`),
        queryLogDays: String(queryLogDays),
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
