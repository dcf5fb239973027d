import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { readStackFile } from "../components/config/load";

/**
 * Is this machine ready for a real deployment? Each check says what it found and,
 * when something is missing, exactly how to fix it. Secret values are never read
 * beyond "is it there", and never printed.
 */

export interface DoctorCheck {
    name: string;
    ok: boolean;
    /** required: a deployment cannot work without it; optional: only some stacks need it. */
    required: boolean;
    detail: string;
    /** Each thing a live check found missing or wrong, one line each. */
    findings?: string[];
    /** Not run (its credentials or its stack are not here, or the stack does not need it): never a failure. */
    skipped?: boolean;
    fix?: string;
}

type Env = NodeJS.ProcessEnv;

function tool(cmd: string, args: string[], env: Env): { ok: boolean; out: string } {
    const result = spawnSync(cmd, args, { encoding: "utf8", env, timeout: 20_000 });
    return { ok: result.status === 0, out: `${result.stdout ?? ""}${result.stderr ?? ""}`.trim() };
}

/** The stack file's `config`, every provider's keys included (secrets stay encrypted). */
function stackConfigValues(stackFile: string | undefined): Record<string, unknown> {
    if (!stackFile || !fs.existsSync(stackFile)) return {};
    return (YAML.parse(fs.readFileSync(stackFile, "utf8")) as { config?: Record<string, unknown> })?.config ?? {};
}

/** Which config keys the stack file holds, and whether each is a secret (values are not read). */
function stackKeys(stackFile: string | undefined): Map<string, "secret" | "plain"> {
    const keys = new Map<string, "secret" | "plain">();
    for (const [key, value] of Object.entries(stackConfigValues(stackFile))) {
        keys.set(key, value !== null && typeof value === "object" && "secure" in (value as object) ? "secret" : "plain");
    }
    return keys;
}

/** A key's value when the stack holds it in clear (a secret's is never read). */
export function plainStackValue(stackFile: string | undefined, key: string): string | undefined {
    const value = stackConfigValues(stackFile)[key];
    return typeof value === "string" ? value : undefined;
}

/** The oldest Pulumi CLI airlock supports: the @pulumi/pulumi it pins (package.json). */
export const MIN_PULUMI_CLI: number[] = (require("@pulumi/pulumi/package.json") as { version: string }).version.split(".").map(Number);

const atLeast = (version: number[], minimum: number[]) => {
    for (let i = 0; i < minimum.length; i++) if (version[i] !== minimum[i]) return version[i] > minimum[i];
    return true;
};

const present = (env: Env, name: string) => typeof env[name] === "string" && env[name]!.length > 0;

export function runDoctor(env: Env, stackFile?: string, stack?: string): DoctorCheck[] {
    const checks: DoctorCheck[] = [];
    const forStack = stack ? ` --stack ${stack}` : "";
    if (stackFile) {
        const exists = fs.existsSync(stackFile);
        // A broken stack file is bad input, reported exactly as `airlock plan` reports it (exit 2).
        if (exists) readStackFile(stackFile);
        checks.push({
            name: "stack file",
            ok: exists,
            required: true,
            detail: exists ? `${stackFile} is valid` : `${stackFile} does not exist`,
            fix: `airlock fork ${stack ?? "<name>"} --from dev, or pass --stack with one of the stacks in ${path.dirname(stackFile)}`,
        });
    }
    const keys = stackKeys(stackFile);

    const pulumi = tool("pulumi", ["version"], env);
    const cliVersion = /^v?(\d+)\.(\d+)\.(\d+)/.exec(pulumi.out);
    checks.push({
        name: "pulumi CLI",
        ok: pulumi.ok && cliVersion !== null && atLeast(cliVersion.slice(1).map(Number), MIN_PULUMI_CLI),
        required: true,
        detail: pulumi.ok ? `pulumi ${pulumi.out}${cliVersion ? "" : " (not a version)"}` : "not found on PATH",
        fix: `install the Pulumi CLI v${MIN_PULUMI_CLI.join(".")} or newer (see pulumi.com/docs/install) and put it on PATH: the version of @pulumi/pulumi this kit pins (the builtin Stash type it records each host's artifacts in needs v3.208.0 at least)`,
    });
    const whoami = pulumi.ok ? tool("pulumi", ["whoami"], env) : { ok: false, out: "" };
    checks.push({
        name: "pulumi backend",
        ok: whoami.ok,
        required: true,
        detail: whoami.ok ? "logged in" : "not logged in",
        fix: "pulumi login (Pulumi Cloud), or pulumi login --local / s3://<bucket> for a self-managed backend",
    });

    // A token committed in clear is a failure even when it works.
    const hcloudInClear = keys.get("hcloud:token") === "plain";
    const hcloud = present(env, "HCLOUD_TOKEN") ? "HCLOUD_TOKEN in the environment" : keys.get("hcloud:token") === "secret" ? "hcloud:token (secret) in the stack" : undefined;
    checks.push({
        name: "Hetzner Cloud token",
        ok: hcloud !== undefined && !hcloudInClear,
        required: true,
        detail: hcloudInClear ? "hcloud:token is in the stack file IN CLEAR" : (hcloud ?? "missing"),
        fix: `pulumi config set --secret hcloud:token <token>${forStack}`,
    });

    const tsEnv = present(env, "TAILSCALE_API_KEY") || (present(env, "TAILSCALE_OAUTH_CLIENT_ID") && present(env, "TAILSCALE_OAUTH_CLIENT_SECRET"));
    const tsStack = keys.get("tailscale:apiKey") === "secret" || (keys.has("tailscale:oauthClientId") && keys.get("tailscale:oauthClientSecret") === "secret");
    checks.push({
        name: "Tailscale credentials",
        ok: tsEnv || tsStack,
        required: true,
        detail: tsEnv ? "in the environment" : tsStack ? "in the stack (secret)" : "missing",
        fix: `pulumi config set --secret tailscale:apiKey <key>${forStack} (or an OAuth client: tailscale:oauthClientId + --secret tailscale:oauthClientSecret)`,
    });
    const tailnet = present(env, "TAILSCALE_TAILNET") || keys.has("tailscale:tailnet");
    checks.push({
        name: "Tailscale tailnet",
        ok: tailnet,
        required: true,
        detail: tailnet ? "set" : "missing",
        fix: `pulumi config set tailscale:tailnet <tailnet name>${forStack}`,
    });

    const b2 = present(env, "B2_APPLICATION_KEY_ID") && present(env, "B2_APPLICATION_KEY");
    checks.push({
        name: "B2 credentials (operator)",
        ok: b2,
        required: true,
        detail: b2 ? "B2_APPLICATION_KEY_ID and B2_APPLICATION_KEY in the environment" : "missing (the B2 provider creates the backup buckets and keys with them)",
        fix: "export B2_APPLICATION_KEY_ID and B2_APPLICATION_KEY from your secret store (an operator key; it never reaches a host)",
    });

    const ssh = tool("ssh", ["-V"], env);
    checks.push({
        name: "ssh client",
        ok: ssh.ok,
        required: true,
        detail: ssh.ok ? ssh.out.split("\n")[0] : "not found",
        fix: "install an OpenSSH client (apt-get install openssh-client)",
    });
    return checks;
}
