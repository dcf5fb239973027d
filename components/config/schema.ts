import { z } from "zod";

/**
 * The whole `airlock:*` stack config, one schema. Every default lives here (zod
 * `.default()` plus the derivations in `withDerivedDefaults`), so a reader finds
 * what an omitted key means in one place.
 */

/** Hetzner Cloud server types airlock is sized and tested for. */
export const SERVER_TYPES = [
    "cx22", "cx23", "cx32", "cx33", "cx42", "cx43", "cx52", "cx53",
    "cpx11", "cpx21", "cpx22", "cpx31", "cpx32", "cpx41", "cpx42", "cpx51", "cpx62",
    "cax11", "cax21", "cax31", "cax41",
    "ccx13", "ccx23", "ccx33", "ccx43", "ccx53", "ccx63",
] as const;

export const LOCATIONS = ["fsn1", "nbg1", "hel1", "ash", "hil", "sin"] as const;

/**
 * Variables the sandbox must never accept from a client: they change how the
 * dynamic loader, the shell or the wrapper itself behave before any allowlist applies.
 */
export const FORBIDDEN_ENV = /^(LD_.*|DYLD_.*|BASH_ENV|ENV|BASH_FUNC_.*|PATH|HOME|SHELL|USER|LOGNAME|IFS|PS4|SHELLOPTS|BASHOPTS|PROMPT_COMMAND|GLOBIGNORE|CDPATH|DOCKER_.*|SSH_.*|PYTHON(PATH|STARTUP|HOME)|PERL5?LIB|PERL5OPT|NODE_OPTIONS|RUBYOPT|GIT_SSH(_COMMAND)?|GIT_EXEC_PATH|GCONV_PATH|LOCPATH|HOSTALIASES|TMPDIR)$/;

/** An exact, upper-case variable name: no wildcards. */
export const ENV_NAME = /^[A-Z_][A-Z0-9_]*$/;

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
    protocol: z.enum(["tcp", "udp", "icmp", "esp", "gre"]),
    port: z.string().regex(/^\d{1,5}(-\d{1,5})?$/, "expected a port or a range like 8000-8010").optional(),
    sourceIps: z.array(z.string().regex(/^[0-9a-fA-F:.]+\/\d{1,3}$/, "expected a CIDR like 203.0.113.7/32")).min(1),
    description: z.string().max(255).optional(),
});

const host = z.strictObject({
    serverType: z.enum(SERVER_TYPES),
    location: z.enum(LOCATIONS),
    /** A Hetzner image name; the templates target Debian 12. */
    image: z.string().regex(/^debian-1[2-9]$/, "expected a Debian image such as debian-12").default("debian-12"),
    /** Pulumi `protect` on the server: `pulumi destroy` refuses until it is lifted. */
    protect: z.boolean().default(false),
    /** Beyond Tailscale's UDP port and ICMP; empty by default, and every one is gated. */
    extraInboundRules: z.array(inboundRule).default([]),
});

const stackConfigBase = z.strictObject({
    /** Unique per stack: names every server, firewall, volume, tag and hostname. */
    prefix: z
        .string()
        .regex(/^[a-z][a-z0-9-]{1,22}[a-z0-9]$/, "expected 3-24 lower-case letters, digits or dashes, starting with a letter"),
    /** Public half of the break-glass key, used only through Hetzner's rescue system. */
    breakGlassSshPublicKey: sshPublicKey,
    gateway: host.extend({
        /** The human operator's login on the gateway (tailnet only, keys only). */
        adminUser: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/).default("ops"),
        adminSshKeys: z.array(sshPublicKey).min(1, "expected at least one operator key"),
    }),
    sandbox: host.extend({
        /** Size of the hcloud Volume mounted at /workspace; it outlives sandbox servers. */
        workspaceVolumeGb: z.number().int().min(10).max(10240).default(20),
        /** Pulumi `protect` on the workspace volume. */
        protectWorkspace: z.boolean().default(true),
    }),
    tailnet: z
        .strictObject({
            /**
             * `tailscale.Acl` replaces the tailnet's WHOLE policy file. Turn this on only
             * for a tailnet dedicated to airlock; when off, the policy snippet is rendered
             * for the operator to merge.
             */
            manageAcl: z.boolean(),
            gatewayTag: tailscaleTag.optional(),
            sandboxTag: tailscaleTag.optional(),
            /** Who may apply the tags (tagOwners). */
            tagOwners: z.array(z.string().min(1)).min(1).default(["autogroup:admin"]),
            /** Lifetime of the single-use join keys, in seconds (5 min to 1 day). */
            keyExpirySeconds: z.number().int().min(300).max(86400).default(3600),
        }),
    agent: z
        .strictObject({
            user: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/).default("agent"),
            /** The only variables a client may send (SendEnv/AcceptEnv) and the wrapper passes on. */
            envAllowlist: z
                .array(envName)
                .min(1)
                .default(["GITHUB_TOKEN"])
                .refine((names) => new Set(names).size === names.length, "expected each name once"),
            /** Public keys allowed to run commands as the agent on the sandbox (the gateway agent's key). */
            authorizedKeys: z.array(sshPublicKey).default([]),
        })
        .default({ user: "agent", envAllowlist: ["GITHUB_TOKEN"], authorizedKeys: [] }),
    backup: z
        .strictObject({
            /** Days B2 keeps hidden (superseded) versions before lifecycle rules purge them. */
            retentionDays: z.number().int().min(1).max(3650).default(30),
        })
        .default({ retentionDays: 30 }),
});

export const stackConfigSchema = stackConfigBase
    .superRefine((cfg, ctx) => {
        if (cfg.gateway.adminUser === cfg.agent.user) {
            ctx.addIssue({ code: "custom", path: ["gateway", "adminUser"], message: "must differ from agent.user" });
        }
    })
    .transform(withDerivedDefaults);

/** Tags and hostnames follow from the prefix unless set, so a forked stack is unique by default. */
function withDerivedDefaults(cfg: z.output<typeof stackConfigBase>) {
    return {
        ...cfg,
        tailnet: {
            ...cfg.tailnet,
            gatewayTag: cfg.tailnet.gatewayTag ?? `tag:${cfg.prefix}-gateway`,
            sandboxTag: cfg.tailnet.sandboxTag ?? `tag:${cfg.prefix}-sandbox`,
        },
        hostnames: { gateway: `${cfg.prefix}-gateway`, sandbox: `${cfg.prefix}-sandbox` },
    };
}

export type StackConfig = z.output<typeof stackConfigSchema>;
export type StackConfigInput = z.input<typeof stackConfigSchema>;
