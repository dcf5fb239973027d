import * as fs from "node:fs";
import * as YAML from "yaml";
import { ConfigError } from "../../policies/contract";
import { describeIssue } from "../../policies/engine/describeIssue";
import { StackConfig, stackConfigSchema } from "./schema";

/** The Pulumi project name, and so the namespace of every config key airlock reads. */
export const PROJECT = "airlock";

export { ConfigError };

/** Validates raw `airlock:*` values (namespace stripped) and applies every default. */
export function parseStackConfig(values: Record<string, unknown>, source: string): StackConfig {
    const result = stackConfigSchema.safeParse(values, { reportInput: true });
    if (result.success) return result.data;
    throw new ConfigError(result.error.issues.map((issue) => `${source}: ${keyPath(issue.path)}: ${describeIssue(issue)}`));
}

/** Reads `stacks/Pulumi.<stack>.yaml` the way Pulumi does and validates its `airlock:*` keys. */
export function readStackFile(file: string): StackConfig {
    let text: string;
    try {
        text = fs.readFileSync(file, "utf8");
    } catch (err) {
        throw new ConfigError([`${file}: cannot read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`]);
    }
    const doc = YAML.parseDocument(text);
    if (doc.errors.length > 0) {
        // The first error is the cause; the parser's later ones follow from it.
        const [e] = doc.errors;
        const at = e.linePos ? `:${e.linePos[0].line}:${e.linePos[0].col}` : "";
        throw new ConfigError([`${file}${at}: YAML syntax error: ${firstLine(e.message).replace(/ at line \d+, column \d+:?$/, "")}`]);
    }
    const root = doc.toJS() as unknown;
    const config = (root as { config?: unknown } | null)?.config;
    if (config === undefined || config === null || typeof config !== "object" || Array.isArray(config)) {
        throw new ConfigError([`${file}: config: expected a mapping of ${PROJECT}:* keys`]);
    }
    const own = ownKeys(config as Record<string, unknown>);
    const problems = secretsInStackFile(own).map((problem) => `${file}: ${problem}`);
    if (problems.length > 0) throw new ConfigError(problems);
    return parseStackConfig(own, file);
}

/**
 * Agent secrets must be encrypted in the stack file (`secure:`) and nested under
 * airlock:gateway.agent.secrets, which is where `pulumi config set --secret --path` puts them.
 */
function secretsInStackFile(own: Record<string, unknown>): string[] {
    const problems: string[] = [];
    for (const key of Object.keys(own)) {
        if (key.startsWith("gateway.agent.secrets.")) {
            problems.push(`${PROJECT}:${key}: a flat key; set it with --path: pulumi config set --secret --path '${PROJECT}:${key}' <value>`);
        }
    }
    const secrets = (own.gateway as { agent?: { secrets?: unknown } } | undefined)?.agent?.secrets;
    if (secrets !== null && typeof secrets === "object" && !Array.isArray(secrets)) {
        for (const [name, value] of Object.entries(secrets)) {
            if (typeof value === "string") {
                problems.push(`${PROJECT}:gateway.agent.secrets.${name}: in clear in the stack file; encrypt it: pulumi config set --secret --path '${PROJECT}:gateway.agent.secrets.${name}' <value>`);
            }
        }
    }
    return problems;
}

/**
 * The same validation inside a real `pulumi up`/`preview`: Pulumi hands structured
 * values over as JSON strings, so decode those first.
 */
export function configFromPulumiRuntime(all: Record<string, string>, stack: string): StackConfig {
    const values: Record<string, unknown> = {};
    for (const [key, raw] of Object.entries(all)) {
        values[key] = decodeConfigValue(raw);
    }
    return parseStackConfig(ownKeys(values), `stacks/Pulumi.${stack}.yaml`);
}

/** Keeps `airlock:*` keys, without the namespace; other providers' keys are theirs. */
export function ownKeys(config: Record<string, unknown>): Record<string, unknown> {
    const own: Record<string, unknown> = {};
    for (const [key, value] of Object.entries(config)) {
        if (key.startsWith(`${PROJECT}:`)) own[key.slice(PROJECT.length + 1)] = value;
    }
    return own;
}

function decodeConfigValue(raw: string): unknown {
    const trimmed = raw.trim();
    if (/^[[{]/.test(trimmed) || trimmed === "true" || trimmed === "false" || /^-?\d+(\.\d+)?$/.test(trimmed)) {
        try {
            return JSON.parse(trimmed);
        } catch {
            return raw;
        }
    }
    return raw;
}

/** `["gateway", "adminSshKeys", 0]` -> `airlock:gateway.adminSshKeys[0]`. */
export function keyPath(path: readonly PropertyKey[]): string {
    if (path.length === 0) return `${PROJECT}:*`;
    let out = `${PROJECT}:${String(path[0])}`;
    for (const part of path.slice(1)) out += typeof part === "number" ? `[${part}]` : `.${String(part)}`;
    return out;
}

function firstLine(message: string): string {
    return message.split("\n")[0].trim();
}
