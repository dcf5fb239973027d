import { z } from "zod";
import { DEFAULT_AGENT_USER, ENV_NAME, FORBIDDEN_ENV, RUNTIME_PINNED_ENV } from "../../policies/contract";
import { findSecrets } from "../../policies/engine/secrets";
import { GITHUB_HIGH_IMPACT, GITHUB_REPOSITORY_PERMISSIONS, highImpactEntry, scopeListed } from "./automation";

export { ENV_NAME, FORBIDDEN_ENV };

/**
 * The subordinate uids and gids the agent gets for rootless Docker (its containers'
 * users map into them). They are the agent's as much as its own uid: the egress
 * rules confine all of them.
 */
export const AGENT_SUBORDINATE_IDS = { first: 100000, last: 165535 } as const;

/**
 * The whole `airlock:*` stack config, one schema. Every default lives here (zod
 * `.default()` plus the derivations in `withDerivedDefaults`), so a reader finds
 * what an omitted key means in one place.
 */

/** Hetzner Cloud server types that can be ordered, and that airlock is sized for. */
export const SERVER_TYPES = [
    "cx23", "cx33", "cx43", "cx53",
    "cpx12", "cpx22", "cpx32", "cpx42", "cpx52", "cpx62",
    "cax11", "cax21", "cax31", "cax41",
    "ccx13", "ccx23", "ccx33", "ccx43", "ccx53", "ccx63",
] as const;

/**
 * Types Hetzner withdrew (deprecated 2025-10-16, not orderable after 2025-12-31: the
 * whole cx*2 and cpx*1 generations), each with its successor. The API still lists and
 * prices them; creating one fails ("Server Type "cpx11" is unavailable in "nbg1" and
 * can no longer be ordered").
 */
export const WITHDRAWN_SERVER_TYPES: Record<string, string> = {
    cx22: "cx23", cx32: "cx33", cx42: "cx43", cx52: "cx53",
    cpx11: "cpx12 (1 vCPU) or cpx22", cpx21: "cpx22", cpx31: "cpx32", cpx41: "cpx42", cpx51: "cpx52",
};

/** Hetzner offers its CX (cost-optimised) and CAX (Arm) types in its European locations only. */
export const EU_LOCATIONS = ["fsn1", "nbg1", "hel1"] as const;
/** Each CX and CAX type, with the CPX type of the same vCPUs and memory that is offered everywhere. */
const EU_ONLY_SERVER_TYPES: Record<string, string> = {
    cx23: "cpx22", cx33: "cpx32", cx43: "cpx42", cx53: "cpx62",
    cax11: "cpx22", cax21: "cpx32", cax31: "cpx42", cax41: "cpx62",
};

/** The CPX type to use in `location` instead of `serverType`, when Hetzner does not offer that one there. */
export function offeredInstead(serverType: string, location: string): string | undefined {
    return (EU_LOCATIONS as readonly string[]).includes(location) ? undefined : EU_ONLY_SERVER_TYPES[serverType];
}

/** The AdGuard Home release templates/adguard/AdGuardHome.yaml is written for (its schema_version: 29). */
export const ADGUARD_HOME_VERSION = "v0.107.63";

export const LOCATIONS = ["fsn1", "nbg1", "hel1", "ash", "hil", "sin"] as const;

/** The variable a client sets to pick its session (per-session mode). */
export const SESSION_ENV = "AIRLOCK_SESSION";

const envName = z
    .string()
    .regex(ENV_NAME, "expected an exact variable name in upper case (no wildcards)")
    .refine((name) => !FORBIDDEN_ENV.test(name), {
        message: "this variable changes how programs run and may never be passed through",
    });

const sshPublicKey = z
    .string()
    .trim()
    .regex(
        /^(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)|sk-ssh-ed25519@openssh\.com|sk-ecdsa-sha2-nistp256@openssh\.com|ssh-rsa) [A-Za-z0-9+/=]+( [^\n]*)?$/,
        "expected one OpenSSH public key line (ssh-ed25519 AAAA... comment)",
    );

const tailscaleTag = z.string().regex(/^tag:[a-z0-9][a-z0-9-]{0,62}$/, "expected a tag like tag:airlock-dev-sandbox");

/**
 * An extra inbound firewall rule. A loosening on purpose: it is visible in the stack
 * file, and the policy gate judges it (hcloud-firewall-no-public-inbound-tcp).
 */
const inboundRule = z.strictObject({
    protocol: z.enum(["tcp", "udp", "icmp", "esp", "gre"]).describe("The protocol it lets in."),
    port: z.string().regex(/^\d{1,5}(-\d{1,5})?$/, "expected a port or a range like 8000-8010").optional().describe("A port, or a range like 8000-8010."),
    sourceIps: z.array(z.string().regex(/^[0-9a-fA-F:.]+\/\d{1,3}$/, "expected a CIDR like 203.0.113.7/32")).min(1).describe("Where it may come from, as CIDRs like 203.0.113.7/32."),
    description: z.string().max(255).optional().describe("Shown beside the rule in Hetzner's console."),
});

/** A server type, with the successor named when the one given was withdrawn. */
const serverType = z.preprocess((value, ctx) => {
    const successor = typeof value === "string" ? WITHDRAWN_SERVER_TYPES[value] : undefined;
    if (!successor) return value;
    ctx.addIssue({ code: "custom", message: `withdrawn by Hetzner (not orderable since 2026-01-01): use ${successor} instead` });
    return z.NEVER;
}, z.enum(SERVER_TYPES));

const host = z.strictObject({
    serverType: serverType.describe("Hetzner server type, one that can still be ordered: a withdrawn one (the whole cx*2 and cpx*1 generations) is refused with its successor named. CX and CAX types are offered in fsn1, nbg1 and hel1 only (`airlock fork --region` outside them takes the CPX type of the same size)."),
    location: z.enum(LOCATIONS).describe("Hetzner location."),
    // The templates name Debian 13's packages (docker-cli) and settle its defaults (ssh generator, dhcpcd).
    image: z
        .string()
        .regex(/^debian-13$/, "expected debian-13: the hosts' packages and settings are Debian 13's (Debian 12 has no docker-cli package, and left regular security support in June 2026)")
        .default("debian-13").describe("Hetzner's image; debian-12 is refused. A server keeps the image it was created with (it ignores a later change): moving the gateway is a rebuild (docs/day-two.md)."),
    protect: z.boolean().default(false).describe("Pulumi `protect` and Hetzner's delete and rebuild protection on the server: `pulumi destroy` refuses until it is lifted."),
    extraInboundRules: z
        .array(inboundRule)
        .default([]).describe("A deliberate loosening of the firewall beyond Tailscale's UDP port and ICMP, judged by the gate (`hcloud-firewall-no-public-inbound-tcp`: a /32 passes, 0.0.0.0/0 fails)."),
});

/** The major version of pg_dump in the built shell (templates/images/sandbox-shell: Debian 12's postgresql-client). */
export const SHELL_PG_DUMP_MAJOR = 15;
/**
 * The major version of pg_restore on the gateway (its `postgresql` package, Debian 13's),
 * which restores every drill's dump: it reads no archive of a newer pg_dump.
 */
export const GATEWAY_PG_RESTORE_MAJOR = 17;

/** Why a PostgreSQL image's dumps would not restore in the gateway's drills, if they would not. */
function newerThanGatewayRestore(image: string): string | undefined {
    const major = postgresMajor(image);
    if (major === undefined || major <= GATEWAY_PG_RESTORE_MAJOR) return undefined;
    return `PostgreSQL ${major} is newer than the gateway's pg_restore (${GATEWAY_PG_RESTORE_MAJOR}, Debian 13's), which cannot restore its dumps: the monthly restore drill would fail; use PostgreSQL ${GATEWAY_PG_RESTORE_MAJOR} or older`;
}

/** The PostgreSQL major an image's tag names (postgres:16-bookworm, pgvector/pgvector:pg15), when it names one. */
export function postgresMajor(reference: string): number | undefined {
    const tag = /:([^@/]+)(?:@|$)/.exec(reference)?.[1];
    const major = tag === undefined ? undefined : /^(?:pg)?(\d+)(?:[.-]|$)/.exec(tag)?.[1];
    return major === undefined ? undefined : Number(major);
}

/** registry/name[:tag][@sha256:digest] */
export const IMAGE_REFERENCE =
    /^(?:[a-z0-9.-]+(?::\d+)?\/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:\/[a-z0-9]+(?:[._-][a-z0-9]+)*)*(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$/;
export const PINNED_BY_DIGEST = /@sha256:[0-9a-f]{64}$/;

const image = z.string().regex(IMAGE_REFERENCE, "expected an image reference like registry/name:tag@sha256:<digest>");

/** Hardening a service may tighten (or, visibly, loosen: the gate judges the result). */
const serviceOverrides = {
    cap_add: z.array(z.string().regex(/^[A-Z_]+$/)).optional().describe("Capabilities given back (every service starts with none), like NET_BIND_SERVICE; the gate judges each."),
    pids_limit: z.number().int().optional().describe("Most processes the container may run."),
    mem_limit: z.string().regex(/^\d+[bkmg]?$/).optional().describe("Memory limit, like 512m or 2g."),
    cpus: z.number().positive().optional().describe("CPUs the container may use, like 1.5."),
    read_only: z.boolean().optional().describe("A read-only root filesystem."),
};
/** The keys of serviceOverrides, which the configuration reference lists once for every service. */
export const SERVICE_OVERRIDE_KEYS = Object.keys(serviceOverrides);

/** A service of the stack's own, beside the built-in ones. */
const userService = z.strictObject({
    name: z.string().regex(/^[a-z][a-z0-9-]{0,40}$/).describe("The service's name (a-z, 0-9, -), not a built-in one's."),
    image: image.describe("Its image, pinned by digest unless `resolveDigests`."),
    command: z.array(z.string()).optional().describe("The container's command."),
    environment: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/), z.string()).optional().describe("Plain settings, rendered into user_data: no secrets."),
    volumes: z.array(z.string()).optional().describe("Compose volume entries; the gate judges host paths."),
    ports: z.array(z.string()).optional().describe("Compose port entries; the gate judges any address but 127.0.0.1 and the tailnet's."),
    network: z.enum(["internal", "egress"]).default("internal").describe("`internal`: the internal network only, no egress. `egress`: may reach out, under the DNS and nftables policy."),
    ...serviceOverrides,
});

const optionalService = (defaultImage: string) =>
    z.strictObject({ enabled: z.boolean().default(false).describe("Run it."), image: image.default(defaultImage).describe("Its image."), ...serviceOverrides });

const workloads = z
    .strictObject({
        resolveDigests: z
            .boolean()
            .default(false).describe("Look tag-only images up in their registry at deploy (through @pulumi/docker) and render `name:tag@sha256:…`; when false, an image without a digest is a plan-time error."),
        registry: z
            .string()
            .regex(/^[a-z0-9.-]+(?::\d+)?(\/[a-z0-9._-]+)*$/)
            .optional().describe("A registry (`host/path`) to build `templates/images/sandbox-shell` and push it to; its digest-pinned reference is filled into user_data at deploy."),
        sandboxShell: z
            .strictObject({ image: image.optional().describe("Its image; required unless `registry` is set (then it is built)."), ...serviceOverrides })
            .prefault({}).describe("`agent-sandbox-shell`, the container every command runs in."),
        browser: z
            .strictObject({ enabled: z.boolean().default(true).describe("Run it."), image: image.default("chromedp/headless-shell:stable").describe("Its image."), ...serviceOverrides })
            .prefault({}).describe("A headless browser on the sandbox: CDP on the tailnet address's port 9222 only, no /workspace."),
        postgres: optionalService(`postgres:${SHELL_PG_DUMP_MAJOR}-bookworm`)
            .prefault({}).describe("PostgreSQL, on an `internal: true` network only, dumped hourly by the shell's `pg_dump` and drilled monthly on the gateway. Two limits: the gateway's `pg_restore` (17) reads no dump of a newer server, so a major above 17 is refused; and `pg_dump` refuses a server newer than itself, so with the built shell (`registry` set; its client is 15) a major above 15 is refused too."),
        redis: optionalService("redis:7-bookworm").prefault({}).describe("Redis, on an `internal: true` network only."),
        api: z
            .strictObject({
                enabled: z.boolean().default(false).describe("Run it."),
                image: image.optional().describe("Its image (airlock ships no API): required when enabled."),
                port: z.number().int().min(1024).max(65535).default(8080).describe("Its port, published on 127.0.0.1."),
                ...serviceOverrides,
            })
            .prefault({}).describe("An API of your own, published on 127.0.0.1 only."),
        services: z.array(userService).default([]).describe("Your own services, hardened like the built-in ones."),
        adguard: z
            .strictObject({
                image: image
                    .default(`adguard/adguardhome:${ADGUARD_HOME_VERSION}`)
                    .refine((ref) => !/:v?\d+\.\d+\.\d+/.test(ref.split("@")[0]) || ref.split("@")[0].endsWith(`:${ADGUARD_HOME_VERSION}`), {
                        message: `airlock renders AdGuard Home's config for ${ADGUARD_HOME_VERSION} (schema 29), which another release may refuse: use that release (or your mirror of it)`,
                    }).describe("Its image: the release airlock renders the config for, or your mirror of it."),
            })
            .prefault({}).describe("AdGuard Home on the gateway, the sandbox's resolver."),
    })
    .superRefine((w, ctx) => {
        if (!w.registry && !w.sandboxShell.image) {
            ctx.addIssue({ code: "custom", path: ["sandboxShell", "image"], message: "required unless airlock:workloads.registry is set (then it is built)" });
        }
        const images: [PropertyKey[], string | undefined, boolean][] = [
            [["sandboxShell", "image"], w.sandboxShell.image, true],
            [["browser", "image"], w.browser.image, w.browser.enabled],
            [["postgres", "image"], w.postgres.image, w.postgres.enabled],
            [["redis", "image"], w.redis.image, w.redis.enabled],
            [["api", "image"], w.api.image, w.api.enabled],
            [["adguard", "image"], w.adguard.image, true],
            ...w.services.map((s, i): [PropertyKey[], string, boolean] => [["services", i, "image"], s.image, true]),
        ];
        for (const [path, ref, used] of images) {
            if (used && ref && !w.resolveDigests && !PINNED_BY_DIGEST.test(ref)) {
                ctx.addIssue({ code: "custom", path, message: `${ref} is not pinned: write ${ref.split("@")[0]}@sha256:<digest>, or set airlock:workloads.resolveDigests: true` });
            }
        }
        if (w.api.enabled && !w.api.image) ctx.addIssue({ code: "custom", path: ["api", "image"], message: "required when airlock:workloads.api.enabled is true" });
        // The hourly dump runs pg_dump in the shell, and pg_dump refuses a server newer than itself.
        const serverMajor = postgresMajor(w.postgres.image);
        if (w.postgres.enabled && w.registry && serverMajor !== undefined && serverMajor > SHELL_PG_DUMP_MAJOR) {
            ctx.addIssue({
                code: "custom",
                path: ["postgres", "image"],
                message: `PostgreSQL ${serverMajor} is newer than the built shell's pg_dump (${SHELL_PG_DUMP_MAJOR}, Debian 12's postgresql-client), which refuses to dump it: use postgres:${SHELL_PG_DUMP_MAJOR}-bookworm`,
            });
        }
        const unrestorable = w.postgres.enabled ? newerThanGatewayRestore(w.postgres.image) : undefined;
        if (unrestorable) ctx.addIssue({ code: "custom", path: ["postgres", "image"], message: unrestorable });
        const names = new Set(["agent-sandbox-shell", "browser", "postgres", "redis", "api"]);
        w.services.forEach((s, i) => {
            if (names.has(s.name)) ctx.addIssue({ code: "custom", path: ["services", i, "name"], message: `${s.name} is taken (a built-in service or a duplicate)` });
            names.add(s.name);
        });
    });

/**
 * A stack secret: `{secure: ...}` in the stack file (`pulumi config set --secret --path`),
 * its decrypted value inside a Pulumi run. Only the NAME is kept: no value ever
 * reaches a component, a rendered file or the plan (`airlock secrets push` delivers them).
 */
/** A variable of the runtime's own: never one that changes how programs run, nor one that moves its terminal. */
const runtimeVariable = envName.refine((name) => !RUNTIME_PINNED_ENV.test(name), {
    message: "airlock sets this variable (the runtime's terminal is pinned to the sandbox) and a stack may not",
});

const stackSecrets = z
    .record(runtimeVariable, z.union([z.strictObject({ secure: z.string().min(1) }), z.string().min(1)]))
    .default({})
    .transform((secrets) => Object.keys(secrets).sort());

/** table or schema.table, as the drills' SQL names it. */
const tableName = z.string().regex(/^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$/, "expected a table name like messages or memory.peers");

/** The agent's runtime on the gateway: one hardened service of the gateway's compose. */
const agentRuntime = z.strictObject({
    image: image.describe("Hermes Agent's image, pinned by digest unless `resolveDigests`."),
    command: z
        .array(z.string().min(1))
        .min(1)
        .refine((command) => command[0] === "hermes", {
            message: "must start with hermes (the preflight checks Hermes's configuration, then runs exactly this: a shell or env in front could change it)",
        })
        .optional().describe("What the runtime runs, always after `airlock-hermes-preflight`; unset: `[hermes, gateway, run]`. It must start with hermes."),
    environment: z.record(runtimeVariable, z.string()).optional().describe("Plain settings only (rendered into user_data); secrets go in `secrets`."),
    secrets: stackSecrets.describe(
        "The runtime's secrets, each `secure:` (`pulumi config set --secret --path 'airlock:gateway.agent.secrets.NAME'`), delivered at run time by `airlock secrets push`; only their names reach the plan. `GITHUB_APP_PRIVATE_KEY` is the GitHub App's key, read by root only.",
    ),
    statePath: z
        .string()
        .regex(/^\/[\w.-]+(\/[\w.-]+)*$/, "expected an absolute path like /opt/data")
        .default("/opt/data").describe("Where the image keeps its state (memory, skills, sessions: Hermes's HERMES_HOME); a named volume is mounted there."),
    stateGb: z
        .number()
        .int()
        .min(1)
        .max(500)
        .default(10).describe("Size of the filesystem holding the runtime's volumes (state, memory database): a runaway agent cannot fill the gateway's disk."),
    port: z.number().int().min(1024).max(65535).optional().describe("A port published on 127.0.0.1 only (a local UI or API, reached through an ssh tunnel); unset, nothing is published."),
    memoryDb: z
        .strictObject({
            enabled: z.boolean().default(false).describe("Run it."),
            image: image.default("pgvector/pgvector:pg15").describe("Its image: PostgreSQL 17 at most, which the gateway's pg_restore reads."),
            drillTables: z.array(tableName).default([]).describe("Tables the monthly drill requires to have rows in the restored dump (Hermes: peers, messages)."),
            ...serviceOverrides,
        })
        .prefault({}).describe("PostgreSQL (pgvector) for the runtime's memory, on an internal network only; dumped hourly, drilled monthly."),
    ...serviceOverrides,
});

const githubScope = z
    .string()
    .regex(new RegExp(`^(${GITHUB_REPOSITORY_PERMISSIONS.join("|")}):(read|write|\\*)$`), "expected a repository permission and level, like contents:write");

/** The GitHub App the gateway mints per-task tokens from (`airlock-github-token`). */
const github = z
    .strictObject({
        appId: z.number().int().positive().describe("The GitHub App's id."),
        installationId: z.number().int().positive().describe("The App's installation on your organisation or account."),
        maxPermissions: z
            .partialRecord(z.enum(GITHUB_REPOSITORY_PERMISSIONS), z.enum(["read", "write"]))
            .refine((p) => Object.keys(p).length > 0, {
                message: "expected at least one permission, like contents: read",
                when: (payload) => payload.issues.length === 0,
            }).describe("The most a task's token may carry (a repository permission: read or write); anything more is refused before GitHub is asked."),
        allowHighImpact: z.array(githubScope).default([]).describe("High-impact scopes (merge, administration, workflows, deploys) this stack allows on purpose, like `contents:write`."),
        approvalRequired: z.array(githubScope).default([]).describe("Scopes minted only after an operator approves the task on the gateway (`airlock-github-token --approve`)."),
        apiUrl: z.url({ protocol: /^https$/ }).default("https://api.github.com").describe("GitHub's REST API (GitHub Enterprise Server: https://HOST/api/v3)."),
        repositories: z
            .array(z.string().regex(/^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})\/(?:\*|[A-Za-z0-9._-]{1,100})$/, "expected owner/name or owner/*"))
            .refine((r) => r.every((name) => !/\/\.{1,2}$/.test(name)), { message: "expected owner/name or owner/*" })
            .default([]).describe("The repositories a task's token may name (owner/name, or owner/* for all of one owner's); any other is refused before GitHub is asked. Empty, it mints nothing (and the checklist says so)."),
    })
    .superRefine((g, ctx) => {
        for (const [name, level] of Object.entries(g.maxPermissions)) {
            const entry = highImpactEntry(name, level!);
            if (entry && !scopeListed(g.allowHighImpact, name, level!)) {
                ctx.addIssue({
                    code: "custom",
                    path: ["maxPermissions", name],
                    message: `${name}: ${level} is high-impact (${GITHUB_HIGH_IMPACT[entry]}): allow it explicitly in airlock:gateway.github.allowHighImpact ("${name}:${level}"), ideally with approvalRequired too`,
                });
            }
        }
        g.approvalRequired.forEach((scope, i) => {
            const [name, level] = scope.split(":");
            const granted = g.maxPermissions[name as keyof typeof g.maxPermissions];
            if (!granted || (level === "write" && granted !== "write")) {
                ctx.addIssue({ code: "custom", path: ["approvalRequired", i], message: `${scope} is not in maxPermissions, so it is never minted` });
            }
        });
    });

const dns = z.strictObject({
    mode: z.enum(["observe", "allowlist"]).default("observe").describe("`observe` logs every query; `allowlist` answers only the names in `allowlist` (and their subdomains) and drops the agent's other egress."),
    upstreams: z
        .array(z.string().regex(/^(https|tls|quic):\/\/[a-z0-9.-]+(:\d+)?(\/[\w./-]*)?$/, "expected an encrypted upstream like https://dns.quad9.net/dns-query"))
        .min(1)
        .default(["https://dns.quad9.net/dns-query"]).describe("Encrypted upstreams only (https://, tls://, quic://)."),
    bootstrap: z
        .array(z.string().regex(/^[0-9a-fA-F:.]+$/))
        .min(1)
        .default(["9.9.9.9", "149.112.112.112"]).describe("Plain resolvers used only to look up the upstreams' own names."),
    allowlist: z
        .array(z.string().regex(/^(\*\.)?[a-z0-9-]+(\.[a-z0-9-]+)+$/, "expected a domain like github.com"))
        .default([]).describe("In allowlist mode, the only names that resolve, and whose addresses the agent may reach on ports 80 and 443."),
    queryLogDays: z.number().int().min(1).max(365).default(90).describe("Days AdGuard Home keeps its query log."),
});

export const stackConfigBase = z.strictObject({
    prefix: z
        .string()
        .regex(/^[a-z][a-z0-9-]{1,22}[a-z0-9]$/, "expected 3-24 lower-case letters, digits or dashes, starting with a letter").describe("Unique per stack: names every server, firewall, volume, key, tag and hostname (3-24 of a-z, 0-9 and -, starting with a letter)."),
    breakGlassSshPublicKey: sshPublicKey.describe(
        "Public half of the break-glass key, usable only through Hetzner's rescue system (root login is off). Hetzner holds one key per fingerprint in a project: when the project already has this key, the stack uses it and creates none. A server reads its keys once, at creation, so a later change never replaces it.",
    ),
    gateway: host
        .extend({
            adminUser: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/).default("ops").describe("The operator's login on the gateway (tailnet only, keys only); not the agent's user."),
            adminSshKeys: z.array(sshPublicKey).min(1, "expected at least one operator key").describe("The operator's ssh public keys."),
            agent: agentRuntime.optional().describe("The agent runtime (Hermes Agent) on the gateway, one hardened service of its compose (docs/agent-runtime.md); unset, no runtime."),
            github: github.optional().describe("Per-task GitHub tokens from a GitHub App (`airlock-github-token`); needs `agent`, whose secret `GITHUB_APP_PRIVATE_KEY` is the App's key."),
            resolverLogGb: z
                .number()
                .int()
                .min(1)
                .max(100)
                .default(4).describe("Size of the fixed-size filesystem holding AdGuard Home's query log, own log and statistics: a DNS flood fills it, never the gateway's disk. It grows with the setting, never shrinks."),
        })
        .describe("The gateway host: the agent's runtime, the sandbox's resolver, the backups and the record's copy."),
    sandbox: host
        .extend({
            workspaceVolumeGb: z
                .number()
                .int()
                .min(10)
                .max(10240)
                .default(20).describe("Size of the hcloud Volume holding /workspace (btrfs, formatted on first use); it outlives sandbox servers."),
            protectWorkspace: z.boolean().default(true).describe("Pulumi `protect` and Hetzner's delete protection on the workspace volume."),
            checkpoints: z
                .strictObject({
                    keep: z.number().int().min(1).max(500).default(20).describe("Newest checkpoints kept per workspace; the first of each of the last 24 hours and of each day are kept besides."),
                    keepDays: z.number().int().min(1).max(365).default(7).describe("Days a checkpoint is kept (a workspace's newest always stays)."),
                    auto: z.boolean().default(true).describe("Take a checkpoint before a destructive command (templates/checkpoints/destructive-commands)."),
                    minFreePercent: z
                        .number()
                        .int()
                        .min(1)
                        .max(50)
                        .default(10).describe("The volume's free-space floor, in %: a btrfs quota stops the agent's writes above it, and below it the oldest checkpoints go first (never a workspace's newest, nor the first of an hour or a day)."),
                })
                .prefault({}).describe("The undo button: read-only btrfs snapshots of each workspace, taken by a root helper (docs/checkpoints.md)."),
            sessions: z
                .preprocess(
                    (value) => (typeof value === "string" ? { mode: value } : value),
                    z.strictObject({
                        mode: z.enum(["shared", "per-session"]).default("shared").describe("`shared`: one container and workspace for every command. `per-session`: the client's AIRLOCK_SESSION picks a container and workspace of its own (a connection without it gets a throwaway one)."),
                        idleMinutes: z.number().int().min(5).max(10080).default(60).describe("A session unused this long is archived as a checkpoint and its container removed."),
                        max: z.number().int().min(1).max(64).default(8).describe("Sessions that may exist at once (each a container with the shell's limits)."),
                    }),
                )
                .prefault({}).describe("How commands share containers and workspaces; the string `shared` or `per-session` is shorthand for `{mode}`."),
        })
        .describe("The sandbox host, where every command runs."),
    tailnet: z
        .strictObject({
            manageAcl: z
                .boolean()
                .describe(
                    "`true` only for a tailnet dedicated to airlock: `tailscale.Acl` replaces the WHOLE policy file. `false`: merge `out/<stack>/tailnet/policy.hujson` into your policy (`airlock doctor` checks it).",
                ),
            gatewayTag: tailscaleTag.optional().describe("The gateway's tag; unset, `tag:<prefix>-gateway`."),
            sandboxTag: tailscaleTag.optional().describe("The sandbox's tag; unset, `tag:<prefix>-sandbox`."),
            tagOwners: z.array(z.string().min(1)).min(1).default(["autogroup:admin"]).describe("Who may apply the hosts' tags (the policy's tagOwners)."),
            // A group would need the policy's groups section, which airlock does not write.
            operators: z
                .array(
                    z
                        .string()
                        .regex(
                            /^(autogroup:(admin|owner|member|it-admin|network-admin)|tag:[a-z0-9][a-z0-9-]{0,62}|[^\s@:*]+@[^\s@:*]+)$/,
                            "expected a tailnet login (alice@example.com), autogroup:admin (or another role autogroup) or a tag",
                        ),
                )
                .min(1)
                .default(["autogroup:admin"])
                .describe(
                    "Who may reach the gateway's sshd (the operator login, for `airlock secrets push` and the backups' set-up): tailnet logins (alice@example.com), role autogroups or tags; nothing else of the gateway and nothing of the sandbox. The policy's `tests` assert it for each login and tag; an operator tag gets `tagOwners` like the hosts' tags, and a host's tag is refused.",
                ),
            keyExpirySeconds: z.number().int().min(300).max(86400).default(3600).describe("Lifetime of the single-use join keys, in seconds (5 minutes to a day)."),
        })
        .describe("The private network the hosts join (Tailscale)."),
    agent: z
        .strictObject({
            user: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/).default(DEFAULT_AGENT_USER).describe("The sandbox user every command runs as."),
            uid: z.number().int().min(1000).max(59999).default(1500).describe("The agent's fixed uid: the egress rules match it (and its rootless containers)."),
            envAllowlist: z
                .array(envName)
                .min(1)
                .default(["GITHUB_TOKEN"])
                .refine((names) => new Set(names).size === names.length, "expected each name once")
                .describe(
                    "The only variables a client may send: `SendEnv` on the gateway, `AcceptEnv` on the sandbox, and what the wrapper passes into the container. Exact upper-case names, no wildcards; `LD_*`, `PATH`, `BASH_ENV`, `ENV`, `SSH_*`, `DOCKER_*` and the like are refused.",
                ),
            authorizedKeys: z
                .array(sshPublicKey)
                .default([]).describe("Keys allowed to run commands as the agent (the gateway agent's key, printed on its first boot); installed with `restrict`."),
        })
        .prefault({}).describe("The agent's user on the sandbox."),
    workloads: workloads.describe("The containers on both hosts (docs/workloads.md)."),
    dns: dns.prefault({}).describe("AdGuard Home on the gateway, the sandbox's only resolver (docs/workloads.md)."),
    backup: z
        .strictObject({
            retentionDays: z.number().int().min(1).max(3650).default(30).describe("Days B2 keeps hidden (superseded) versions before its lifecycle rule purges them."),
            objectLockDays: z
                .number()
                .int()
                .min(1)
                .max(3650)
                .optional().describe("Object Lock default retention on the buckets, in days (compliance mode, fixed at creation); not with `deleteDataOnDestroy`."),
            pruneKey: z.boolean().default(false).describe("Also create an operator-only prune key (deleteFiles) per bucket, as the secret stack output `pruneKeys`."),
            heartbeatUrl: z.url({ protocol: /^https$/ }).optional().describe("Pinged (https) after every successful backup, healthchecks.io-style."),
            alertWebhookUrl: z.url({ protocol: /^https$/ }).optional().describe("Receives a JSON POST (https) when a backup, check or drill unit fails (`OnFailure=`)."),
            drillTables: z.array(tableName).default([]).describe("Tables the monthly restore drill requires to have rows (table or schema.table)."),
        })
        .prefault({}).describe("restic backups to Backblaze B2 (docs/backups.md)."),
    hosts: z
        .strictObject({
            bundleUrl: z
                .url({ protocol: /^https$/ })
                .regex(/^https:\/\/[A-Za-z0-9.-]+(:\d+)?(\/[A-Za-z0-9._~%+=-]+)*\/?$/, "expected a plain https URL of a folder, like https://mirror.example.com/airlock")
                .optional()
                .describe(
                    "Your mirror (https) of the folder holding the host code bundle, `airlock-bundle-<sha256>.json`, which the plan writes to `out/<stack>/bundle/`. Unset, the stack uploads it to a public-read B2 bucket of its own.",
                ),
        })
        .prefault({}).describe("What both hosts boot from."),
    deleteDataOnDestroy: z
        .boolean()
        .default(false)
        .describe(
            "`pulumi destroy` keeps the backup buckets and the workspace volume (and what they cost) unless this is true: set it and `pulumi up` before `pulumi destroy`. The B2 keys are always revoked (docs/day-two.md).",
        ),
});

/** The stack's top-level keys (`airlock:<key>`), as Pulumi.yaml declares them. */
export const STACK_CONFIG_KEYS = Object.keys(stackConfigBase.shape);

export const stackConfigSchema = stackConfigBase
    .superRefine((cfg, ctx) => {
        for (const role of ["gateway", "sandbox"] as const) {
            const { serverType, location } = cfg[role];
            const instead = offeredInstead(serverType, location);
            if (instead) {
                ctx.addIssue({
                    code: "custom",
                    path: [role, "serverType"],
                    message: `${serverType} is not offered in ${location} (CX and CAX types are in ${EU_LOCATIONS.join(", ")} only): use ${instead} there`,
                });
            }
        }
        // An operator is a person (or their CI), never a host of airlock's: a sandbox's tag here would let
        // a sandbox (this stack's, or another's, which no test of this policy names) reach the gateway's sshd.
        const { gatewayTag, sandboxTag } = hostTags(cfg);
        cfg.tailnet.operators.forEach((operator, i) => {
            if (operator === gatewayTag || operator === sandboxTag || /^tag:.*-sandbox$/.test(operator)) {
                ctx.addIssue({ code: "custom", path: ["tailnet", "operators", i], message: `${operator} is a host's tag: operators are people or their CI, never the gateway or a sandbox` });
            }
        });
        // The backups are locked in compliance mode (components/b2/client.ts): B2 deletes no version
        // before its retention ends, whoever asks, so a destroy could never empty those buckets.
        if (cfg.deleteDataOnDestroy && cfg.backup.objectLockDays !== undefined) {
            ctx.addIssue({
                code: "custom",
                path: ["deleteDataOnDestroy"],
                message: `cannot be true with airlock:backup.objectLockDays set: B2 keeps each backup ${cfg.backup.objectLockDays} days under Object Lock, and nothing can delete it before then`,
            });
        }
        if (cfg.gateway.adminUser === cfg.agent.user) {
            ctx.addIssue({ code: "custom", path: ["gateway", "adminUser"], message: "must differ from agent.user" });
        }
        const runtime = cfg.gateway.agent;
        if (cfg.gateway.github && !runtime) {
            ctx.addIssue({ code: "custom", path: ["gateway", "github"], message: "needs airlock:gateway.agent (the App's private key is one of its secrets)" });
        }
        if (!runtime) return;
        const images: [PropertyKey[], string, boolean][] = [
            [["gateway", "agent", "image"], runtime.image, true],
            [["gateway", "agent", "memoryDb", "image"], runtime.memoryDb.image, runtime.memoryDb.enabled],
        ];
        for (const [path, ref, used] of images) {
            if (used && !cfg.workloads.resolveDigests && !PINNED_BY_DIGEST.test(ref)) {
                ctx.addIssue({ code: "custom", path, message: `${ref} is not pinned: write ${ref.split("@")[0]}@sha256:<digest>, or set airlock:workloads.resolveDigests: true` });
            }
        }
        const memoryUnrestorable = runtime.memoryDb.enabled ? newerThanGatewayRestore(runtime.memoryDb.image) : undefined;
        if (memoryUnrestorable) ctx.addIssue({ code: "custom", path: ["gateway", "agent", "memoryDb", "image"], message: memoryUnrestorable });
        for (const [name, value] of Object.entries(runtime.environment ?? {})) {
            if (runtime.secrets.includes(name)) {
                ctx.addIssue({ code: "custom", path: ["gateway", "agent", "environment", name], message: "is also a secret: keep it in secrets only" });
            } else if (findSecrets(`${name}=${value}`).length > 0) {
                ctx.addIssue({
                    code: "custom",
                    path: ["gateway", "agent", "environment", name],
                    message: `looks like a secret, and environment is rendered into user_data: pulumi config set --secret --path 'airlock:gateway.agent.secrets.${name}' instead`,
                });
            }
        }
    })
    .transform(withDerivedDefaults);

/** The hosts' tailnet tags: the stack's, or derived from its prefix. */
function hostTags(cfg: Pick<z.output<typeof stackConfigBase>, "prefix" | "tailnet">) {
    return { gatewayTag: cfg.tailnet.gatewayTag ?? `tag:${cfg.prefix}-gateway`, sandboxTag: cfg.tailnet.sandboxTag ?? `tag:${cfg.prefix}-sandbox` };
}

/** Tags and hostnames follow from the prefix unless set, so a forked stack is unique by default. */
function withDerivedDefaults(cfg: z.output<typeof stackConfigBase>) {
    const perSession = cfg.sandbox.sessions.mode === "per-session";
    return {
        ...cfg,
        agent: {
            ...cfg.agent,
            // Per-session mode: the client names its session with this variable, so sshd must accept it.
            envAllowlist: perSession && !cfg.agent.envAllowlist.includes(SESSION_ENV) ? [...cfg.agent.envAllowlist, SESSION_ENV] : cfg.agent.envAllowlist,
        },
        tailnet: { ...cfg.tailnet, ...hostTags(cfg) },
        hostnames: { gateway: `${cfg.prefix}-gateway`, sandbox: `${cfg.prefix}-sandbox` },
    };
}

export type StackConfig = z.output<typeof stackConfigSchema>;
export type StackConfigInput = z.input<typeof stackConfigSchema>;
