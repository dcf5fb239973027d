import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { readStackFile } from "../components/config/load";
import type { StackConfig } from "../components/config/schema";

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

/**
 * The placeholder keys the repository's stack files ship with (break-glass@example,
 * ops@example, agent@airlock-*-gateway). Their private halves are not yours: a stack
 * deployed with them lets whoever holds them in and keeps you out, and it shares its
 * global B2 bucket names (derived from the break-glass key) with every other stack
 * that kept them. test/operator.test.ts checks that each key the shipped stacks hold
 * is in this list.
 */
export const SHIPPED_EXAMPLE_KEYS: readonly string[] = [
    "AAAAC3NzaC1lZDI1NTE5AAAAIHBGTxlDeV2Q8bcniFvCucQEsrcyDFeiSGPnUF5k5UcS",
    "AAAAC3NzaC1lZDI1NTE5AAAAIPWKETrPt8oVYVlHKofRu0YtZmqfPRzEon0UODMLMRhF",
    "AAAAC3NzaC1lZDI1NTE5AAAAICOs3+Tz1jysDfJJaYO249ZyOtOgTl0rg445F/xghDMS",
];

/** Each key path of the stack that still holds a shipped placeholder key, with what to do about it. */
function exampleKeysIn(cfg: StackConfig): string[] {
    const isExample = (key: string) => SHIPPED_EXAMPLE_KEYS.includes(key.trim().split(/\s+/)[1] ?? "");
    const yours = "is the repository's placeholder: put your own public key there";
    return [
        ...(isExample(cfg.breakGlassSshPublicKey) ? [`airlock:breakGlassSshPublicKey ${yours}`] : []),
        ...cfg.gateway.adminSshKeys.flatMap((k, i) => (isExample(k) ? [`airlock:gateway.adminSshKeys[${i}] ${yours}`] : [])),
        ...cfg.agent.authorizedKeys.flatMap((k, i) =>
            isExample(k) ? [`airlock:agent.authorizedKeys[${i}] is the repository's placeholder: remove it (the new gateway prints its own agent key after the first up)`] : [],
        ),
    ];
}

const present = (env: Env, name: string) => typeof env[name] === "string" && env[name]!.length > 0;

export function runDoctor(env: Env, stackFile?: string, stack?: string): DoctorCheck[] {
    const checks: DoctorCheck[] = [];
    const forStack = stack ? ` --stack ${stack}` : "";
    if (stackFile) {
        const exists = fs.existsSync(stackFile);
        // A broken stack file is bad input, reported exactly as `airlock plan` reports it (exit 2).
        const cfg = exists ? readStackFile(stackFile) : undefined;
        checks.push({
            name: "stack file",
            ok: exists,
            required: true,
            detail: exists ? `${stackFile} is valid` : `${stackFile} does not exist`,
            fix: `airlock fork ${stack ?? "<name>"} --from dev, or pass --stack with one of the stacks in ${path.dirname(stackFile)}`,
        });
        if (cfg) {
            const examples = exampleKeysIn(cfg);
            checks.push({
                name: "ssh keys of your own",
                ok: examples.length === 0,
                required: true,
                detail: examples.length === 0 ? "no key is one of the repository's placeholders" : "the stack still holds the repository's placeholder keys: their private halves are not yours",
                ...(examples.length > 0 ? { findings: examples } : {}),
                fix: `edit ${stackFile} (or pulumi config set --path '<key path>' '<your public key>'${forStack})`,
            });
        }
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
        fix: `pulumi config set --secret hcloud:token${forStack} (it prompts for the token), or export HCLOUD_TOKEN`,
    });

    const tsEnv = present(env, "TAILSCALE_API_KEY") || (present(env, "TAILSCALE_OAUTH_CLIENT_ID") && present(env, "TAILSCALE_OAUTH_CLIENT_SECRET"));
    const tsStack = keys.get("tailscale:apiKey") === "secret" || (keys.has("tailscale:oauthClientId") && keys.get("tailscale:oauthClientSecret") === "secret");
    checks.push({
        name: "Tailscale credentials",
        ok: tsEnv || tsStack,
        required: true,
        detail: tsEnv ? "in the environment" : tsStack ? "in the stack (secret)" : "missing",
        fix: "export TAILSCALE_API_KEY (or an OAuth client's TAILSCALE_OAUTH_CLIENT_ID and TAILSCALE_OAUTH_CLIENT_SECRET); in the environment, the live tailnet policy check can read them too",
    });
    const tailnet = present(env, "TAILSCALE_TAILNET") || keys.has("tailscale:tailnet");
    checks.push({
        name: "Tailscale tailnet",
        ok: tailnet,
        required: true,
        detail: tailnet ? "set" : "missing",
        fix: `export TAILSCALE_TAILNET=<tailnet name> (or pulumi config set tailscale:tailnet <tailnet name>${forStack})`,
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
