/**
 * What components/ (which renders) and policies/ (which judges) must agree on.
 * policies/ imports nothing from components/ - the pack is published on its own -
 * so these live here, with no imports, and components/ imports them.
 */

/** Filled at deploy time with the TailnetKey's value; one of the two secrets user_data may hold. */
export const TAILNET_AUTH_KEY_PLACEHOLDER = "@TAILNET_AUTH_KEY@";
/** The one file the join key is written to (and shredded from after use). */
export const TAILNET_AUTH_KEY_PATH = "/etc/airlock/tailnet-authkey";
/** Filled at boot with the host's tailnet IPv4 by a script that refuses anything else. */
export const TAILNET_IPV4_PLACEHOLDER = "@TAILNET_IPV4@";
/** Filled at deploy time with the built sandbox-shell image's `registry/name@sha256:...`. */
export const BUILT_SANDBOX_SHELL_PLACEHOLDER = "@SANDBOX_SHELL_IMAGE@";

/**
 * The host code bundle: `airlock-bundle-<sha256>.json` (the JSON object airlock-bundle-install
 * reads: {format, templates: {name: text}}), stashed by the stack; a host's user_data names it
 * by sha256 in BUNDLE_SOURCE_PATH ({url, sha256}).
 */
export const BUNDLE_NAME = /^airlock-bundle-([0-9a-f]{64})\.json$/;
export const BUNDLE_SOURCE_PATH = "/etc/airlock/bundle.json";
/** Which files a host installs from it: [{path, permissions, template, vars}]. */
export const BUNDLE_FILES_PATH = "/etc/airlock/bundle-files.json";

/** The resource that carries rendered files, with inputs known at preview. */
export const STASH_TYPE = "pulumi:index:Stash";

/** Relative path -> file content, exactly as rendered. */
export type Artifacts = Record<string, string>;

/** A Stash's `input` as airlock writes it. */
export const stashInput = (artifacts: unknown) => ({ airlockArtifacts: artifacts });

/** Reads the artifacts back from a Stash's inputs (in a preview, a stack export, under mocks). */
export function artifactsOf(inputs: unknown): Artifacts | undefined {
    const carried = (inputs as { input?: { airlockArtifacts?: unknown } } | undefined)?.input?.airlockArtifacts;
    return carried !== null && typeof carried === "object" ? (carried as Artifacts) : undefined;
}

/**
 * Variables the sandbox must never accept from a client: they change how the
 * dynamic loader, the shell, the wrapper itself or the resolver (glibc's
 * LOCALDOMAIN, RES_OPTIONS: a search domain, ndots) behave before any allowlist applies.
 */
export const FORBIDDEN_ENV =
    /^(LD_.*|DYLD_.*|BASH_ENV|ENV|BASH_FUNC_.*|PATH|HOME|SHELL|USER|LOGNAME|IFS|PS4|SHELLOPTS|BASHOPTS|PROMPT_COMMAND|GLOBIGNORE|CDPATH|DOCKER_.*|SSH_.*|PYTHON(PATH|STARTUP|HOME)|PERL5?LIB|PERL5OPT|NODE_OPTIONS|RUBYOPT|GIT_SSH(_COMMAND)?|GIT_EXEC_PATH|GCONV_PATH|LOCPATH|HOSTALIASES|LOCALDOMAIN|RES_OPTIONS|RESOLV_HOST_CONF|TMPDIR)$/;

/** The sandbox user every agent command runs as, when a stack names none. */
export const DEFAULT_AGENT_USER = "agent";

/** An exact, upper-case variable name: no wildcards. */
export const ENV_NAME = /^[A-Z_][A-Z0-9_]*$/;

/**
 * Bad input: one line per problem, each naming the file and the key path. Every
 * front end turns it into exit 2 without a stack trace.
 */
export class ConfigError extends Error {
    constructor(readonly problems: string[]) {
        super(problems.join("\n"));
        this.name = "ConfigError";
    }
}

/**
 * The agent runtime (Hermes Agent) as airlock deploys it: where its managed scope
 * (hermes_cli/managed_scope.py: root-owned settings laid over the user's own, key by
 * key) and airlock's preflight sit in its container. The gate judges a Hermes service
 * by them; components/ renders them.
 */
export const HERMES_RUNTIME = {
    /** Hermes's managed config.yaml and .env (its default managed directory, /etc/hermes). */
    managedConfig: "/etc/hermes/config.yaml",
    managedEnv: "/etc/hermes/.env",
    /** Starts the runtime only when Hermes's own loader says every command goes over ssh to the sandbox. */
    preflight: "/usr/local/libexec/airlock/hermes-preflight",
} as const;

/**
 * Variables that choose the runtime's terminal or where Hermes reads what chooses it:
 * airlock's managed files set them, so neither a stack's environment nor a pushed
 * secret may, and the preflight refuses a process environment that changed them.
 */
export const RUNTIME_PINNED_ENV = /^(TERMINAL_.*|HERMES_MANAGED_DIR|HERMES_HOME)$/;

/** An image of Hermes Agent, from any registry: its repository's last part is hermes-agent. */
export const isHermesImage = (image: string) => /(^|\/)hermes-agent(:[\w.-]+)?(@sha256:[0-9a-f]{64})?$/.test(image);
