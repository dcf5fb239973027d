import { spawn } from "node:child_process";
import * as path from "node:path";
import { GITHUB_APP_KEY_SECRET, deployCredential } from "../components/config/automation";
import { ConfigError, readStackFile } from "../components/config/load";
import type { StackConfig } from "../components/config/schema";
import { GATEWAY_AGENT_PATHS } from "../components/workloads/compose";
import { stackFilePath } from "./stacks";
import { status as mark } from "./style";

/**
 * `airlock secrets push|status --stack S`: the agent runtime's secrets, delivered at
 * run time over the tailnet to the gateway's operator login. Values come from Pulumi
 * (one `pulumi config get` per declared name) or, for CI, one JSON object on stdin;
 * they travel on ssh's stdin to the gateway's airlock-agent-secrets (through sudo)
 * and never appear in an argument, a log line or this command's output.
 */

export interface SecretsOptions {
    stacksDir: string;
    stack: string;
    /** Read {"NAME": "value"} from stdin instead of asking Pulumi. */
    stdin?: boolean;
    /** An ssh_config for reaching the gateway (`ssh -F`). */
    sshConfig?: string;
    json?: boolean;
}

/** What one child process gave back. */
interface Ran {
    code: number | null;
    stdout: string;
    stderr: string;
    error?: Error;
}

/** Runs a program with `input` on its stdin (never in its arguments). */
function runWithStdin(command: string, args: string[], input: string, cwd?: string): Promise<Ran> {
    return new Promise((resolve) => {
        const child = spawn(command, args, { cwd, stdio: ["pipe", "pipe", "pipe"] });
        let stdout = "";
        let stderr = "";
        child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString("utf8")));
        child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
        child.on("error", (error) => resolve({ code: null, stdout, stderr, error }));
        child.on("close", (code) => resolve({ code, stdout, stderr }));
        child.stdin.on("error", () => {}); // a child that exits early closes its stdin; its exit code says why
        child.stdin.end(input);
    });
}

function runtimeOf(cfg: StackConfig, file: string): NonNullable<StackConfig["gateway"]["agent"]> {
    if (!cfg.gateway.agent) throw new ConfigError([`${file}: airlock:gateway.agent: not set, so there is no runtime to deliver secrets to`]);
    return cfg.gateway.agent;
}

/** The names the stack declares, checked for what the gateway will need. */
function declaredNames(cfg: StackConfig, file: string): string[] {
    const names = runtimeOf(cfg, file).secrets;
    if (cfg.gateway.github && !names.includes(GITHUB_APP_KEY_SECRET)) {
        throw new ConfigError([
            `${file}: airlock:gateway.agent.secrets.${GITHUB_APP_KEY_SECRET}: required by airlock:gateway.github: pulumi config set --secret --path 'airlock:gateway.agent.secrets.${GITHUB_APP_KEY_SECRET}' < app-private-key.pem`,
        ]);
    }
    return names;
}

/**
 * The same checks the gateway applies, so a bad value fails here with its name
 * (never its value) before anything is sent.
 */
export function checkValue(name: string, value: unknown, source: string): string {
    if (typeof value !== "string" || value === "") throw new ConfigError([`${source}: ${name}: expected a non-empty string`]);
    if (name === GITHUB_APP_KEY_SECRET) {
        if (!/^-----BEGIN (RSA )?PRIVATE KEY-----\n[A-Za-z0-9+/=\n]+-----END (RSA )?PRIVATE KEY-----\n?$/.test(value)) {
            throw new ConfigError([`${source}: ${name}: expected the GitHub App's PEM private key`]);
        }
    } else if (!/^[^'\\\r\n\0]+$/.test(value) || value.includes("${")) {
        throw new ConfigError([`${source}: ${name}: a runtime secret must be one line without ', \\ or \${ (an env file cannot carry it unambiguously)`]);
    }
    return value;
}

/** CI: one JSON object of exactly the declared names. */
export function valuesFromJson(text: string, declared: string[]): Record<string, string> {
    let parsed: unknown;
    try {
        parsed = JSON.parse(text);
    } catch {
        // Never echo the input: it is made of secrets.
        throw new ConfigError(["stdin: expected one JSON object of NAME: value"]);
    }
    if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) throw new ConfigError(["stdin: expected one JSON object of NAME: value"]);
    const given = Object.keys(parsed);
    const problems = [
        ...declared.filter((n) => !given.includes(n)).map((n) => `stdin: ${n}: missing (declared in airlock:gateway.agent.secrets)`),
        ...given.filter((n) => !declared.includes(n)).map((n) => `stdin: ${n.slice(0, 64)}: not declared in airlock:gateway.agent.secrets`),
    ];
    if (problems.length > 0) throw new ConfigError(problems);
    return Object.fromEntries(declared.map((n) => [n, checkValue(n, (parsed as Record<string, unknown>)[n], "stdin")]));
}

/** Operator: each declared name decrypted by Pulumi, read from its stdout. */
async function valuesFromPulumi(options: SecretsOptions, declared: string[]): Promise<Record<string, string>> {
    const values: Record<string, string> = {};
    for (const name of declared) {
        const key = `airlock:gateway.agent.secrets.${name}`;
        const ran = await runWithStdin("pulumi", ["config", "get", "--path", "--json", "--stack", options.stack, key], "", path.resolve(options.stacksDir, ".."));
        if (ran.error) throw new ConfigError([`pulumi: ${(ran.error as NodeJS.ErrnoException).code === "ENOENT" ? "not found on PATH (or use --stdin)" : ran.error.message}`]);
        if (ran.code !== 0) throw new ConfigError([`pulumi config get ${key}: ${lastLine(ran.stderr) || `exit ${ran.code}`}`]);
        let value: unknown;
        try {
            value = (JSON.parse(ran.stdout) as { value?: unknown }).value;
        } catch {
            throw new ConfigError([`pulumi config get ${key}: expected JSON on stdout`]);
        }
        values[name] = checkValue(name, value, `pulumi config get ${key}`);
    }
    return values;
}

/** The one ssh command line: the operator's login on the gateway, and the tool with its verb. No value is in it. */
export function sshCommand(cfg: StackConfig, verb: "push" | "status", sshConfig?: string): string[] {
    return [
        ...(sshConfig ? ["-F", sshConfig] : []),
        "-o", "BatchMode=yes",
        "-o", "ConnectTimeout=15",
        "-T",
        `${cfg.gateway.adminUser}@${cfg.hostnames.gateway}`,
        `sudo -n ${GATEWAY_AGENT_PATHS.secretsTool} ${verb}`,
    ];
}

const lastLine = (text: string) => text.trim().split("\n").pop()?.trim() ?? "";

/** Runs the gateway side; its JSON answer, or a one-line failure. */
async function onGateway(cfg: StackConfig, verb: "push" | "status", input: string, sshConfig?: string): Promise<{ code: number; answer?: any; error?: string }> {
    const ran = await runWithStdin("ssh", sshCommand(cfg, verb, sshConfig), input);
    const target = `${cfg.gateway.adminUser}@${cfg.hostnames.gateway}`;
    if (ran.error) return { code: 1, error: `ssh: ${ran.error.message}` };
    // ssh exits 255 on connection and authentication failures.
    if (ran.code === 255) return { code: 1, error: `cannot reach ${target}: ${lastLine(ran.stderr)}` };
    let answer: unknown;
    try {
        answer = JSON.parse(lastLine(ran.stdout));
    } catch {
        // The gateway tool's own refusal (exit 2) is one line naming the problem, never a value.
        return { code: ran.code === 2 ? 2 : 1, error: lastLine(ran.stderr) || `${target}: ${verb} failed (exit ${ran.code})` };
    }
    return { code: ran.code ?? 1, answer };
}

/** What a command has to say: lines for stdout, one error line for stderr, and the same for --json. */
export interface Outcome {
    code: number;
    lines: string[];
    error?: string;
    json: Record<string, unknown>;
}

export async function pushSecrets(options: SecretsOptions, readStdin: () => Promise<string>): Promise<Outcome> {
    const file = stackFilePath(options.stacksDir, options.stack);
    const cfg = readStackFile(file);
    const declared = declaredNames(cfg, file);
    const values = options.stdin ? valuesFromJson(await readStdin(), declared) : await valuesFromPulumi(options, declared);
    const warnings = declared.flatMap((n) => {
        const why = deployCredential(n);
        return why ? [`warning: ${n} looks like a deploy credential (${why}); the agent should not hold it (see airlock checklist)`] : [];
    });
    const result = await onGateway(cfg, "push", JSON.stringify(values), options.sshConfig);
    const gateway = cfg.hostnames.gateway;
    if (!result.answer) return { code: result.code, lines: warnings, error: result.error, json: { gateway, error: result.error } };
    const { delivered, removed, restarted, restartError } = result.answer as { delivered: string[]; removed: string[]; restarted: boolean; restartError?: string };
    const lines = [
        ...warnings,
        `delivered to ${gateway}: ${delivered.join(", ") || "(none)"}`,
        ...(removed.length > 0 ? [`removed: ${removed.join(", ")}`] : []),
        restarted ? "runtime restarted" : `runtime NOT restarted: ${restartError}; it reads the new secrets when it next starts`,
    ];
    return { code: restarted ? 0 : 1, lines, json: { gateway, delivered, removed, restarted, ...(restartError ? { restartError } : {}) } };
}

/** "3d", "5h", "12m", "40s". */
export function age(seconds: number): string {
    const s = Math.max(0, Math.round(seconds));
    if (s >= 86400) return `${Math.floor(s / 86400)}d`;
    if (s >= 3600) return `${Math.floor(s / 3600)}h`;
    if (s >= 60) return `${Math.floor(s / 60)}m`;
    return `${s}s`;
}

export async function secretsStatus(options: SecretsOptions): Promise<Outcome> {
    const file = stackFilePath(options.stacksDir, options.stack);
    const cfg = readStackFile(file);
    const declared = runtimeOf(cfg, file).secrets;
    const result = await onGateway(cfg, "status", "", options.sshConfig);
    const gateway = cfg.hostnames.gateway;
    if (!result.answer) return { code: result.code, lines: [], error: result.error, json: { gateway, error: result.error } };
    const { now, secrets } = result.answer as { now: number; secrets: { name: string; updated: number }[] };
    const stored = new Map(secrets.map((s) => [s.name, s.updated]));
    const names = [...new Set([...declared, ...stored.keys()])].sort();
    const rows = names.map((name) => {
        const updated = stored.get(name);
        const state = updated === undefined ? "missing" : declared.includes(name) ? "present" : "undeclared";
        return { name, state, ...(updated !== undefined ? { ageSeconds: now - updated } : {}) };
    });
    const width = Math.max(0, ...names.map((n) => n.length));
    const lines = [
        `${gateway}: ${rows.filter((r) => r.state === "present").length} of ${declared.length} declared secrets present`,
        ...rows.map((r) => {
            const label = r.name.padEnd(width);
            if (r.state === "present") return `  ${label}  ${mark("pass", "present")}, changed ${age(r.ageSeconds!)} ago`;
            if (r.state === "missing") return `  ${label}  ${mark("fail", "missing")}: declared in the stack, not pushed (airlock secrets push --stack ${options.stack})`;
            return `  ${label}  ${mark("fail", "undeclared")}: on the gateway, not in the stack (a push removes it)`;
        }),
    ];
    const clean = rows.every((r) => r.state === "present");
    return { code: clean ? 0 : 1, lines, json: { gateway, secrets: rows } };
}
