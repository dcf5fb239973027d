import { Argument, type Command } from "commander";
import { EXIT, type Cli } from "../command";
import { existingStackFile } from "../stacks";
import { progress as makeProgress } from "../style";

const ACTIONS = ["up", "status", "exec", "agent", "operator", "replace", "firewall", "down"] as const;
type Action = (typeof ACTIONS)[number];

interface Options {
    stack: string;
    json?: boolean;
    env: string[];
}

/**
 * `airlock twin up|status|exec|agent|operator|replace|firewall|down --stack S`: the stack's
 * gateway and sandbox as local QEMU guests booted from their rendered cloud-init
 * (see ../../twin/twin.ts and docs/twin.md).
 */
export function define(command: Command, cli: Cli) {
    command
        .addArgument(new Argument("<action>", "up | status | exec gateway|sandbox -- CMD | agent -- CMD | operator -- CMD | replace | firewall on|off | down").choices(ACTIONS))
        .argument("[args...]", "exec: the guest, then the command line; agent, operator: the command line; firewall: on or off")
        .requiredOption("--stack <name>", "stack name (stacks/Pulumi.<name>.yaml)")
        .option("--env <NAME=value>", "agent: a variable of the agent's environment (repeatable; SendEnv carries only the allowlisted ones)", (value: string, all: string[]) => [...all, value], [])
        .option("--json", "machine-readable output");
    return async (action: Action, args: string[], opts: Options): Promise<number> => {
        const twin = await import("../../twin/twin");
        const { QgaError } = await import("../../twin/qga");
        const out = (value: unknown, text: string) => process.stdout.write(opts.json ? `${JSON.stringify(value, null, 2)}\n` : text);
        // Boots take minutes: on a terminal, a progress line; piped, quiet. Every line also goes to the
        // twin's log file, and all of them to stderr when the action fails.
        const progress = makeProgress();
        const log = (line: string) => {
            progress.report(`twin: ${line}`);
            twin.appendLog(opts.stack, line);
        };
        const failed = () => {
            progress.done();
            for (const line of progress.kept) process.stderr.write(`${line}\n`);
        };
        try {
            switch (action) {
                case "up": {
                    const state = await twin.up({ stack: opts.stack, stackFile: existingStackFile(cli.stacksDir, opts.stack), log });
                    progress.done();
                    out(state, `twin of ${opts.stack} is up: gateway ${state.guests.gateway?.cloudInit}, sandbox ${state.guests.sandbox?.cloudInit}\n`);
                    return EXIT.clean;
                }
                case "status": {
                    const status = await twin.status(opts.stack);
                    out(
                        status,
                        status.guests
                            .map((g) => `${g.role.padEnd(8)} ${g.state.padEnd(8)} public ${g.publicAddress}  tailnet ${g.tailnetAddress ?? "-"}  cloud-init ${g.cloudInit ?? "-"}  workloads ${g.workloads ?? "-"}\n`)
                            .join("") + `firewall ${status.firewall ? "on" : "off"}\n`,
                    );
                    return status.guests.every((g) => g.state === "running" && g.cloudInit === "done" && g.workloads === "active") ? EXIT.clean : EXIT.violations;
                }
                case "exec":
                case "agent": {
                    const [role, ...rest] = action === "exec" ? args : ["gateway", ...args];
                    if (role !== "gateway" && role !== "sandbox") return badInput(`airlock twin exec: which guest? gateway or sandbox, not ${role ?? "nothing"}`);
                    if (rest.length === 0) return badInput(`airlock twin ${action}: no command (airlock twin ${action} ${action === "exec" ? `${role} ` : ""}--stack ${opts.stack} -- CMD)`);
                    const env = parseEnv(opts.env);
                    if (typeof env === "string") return badInput(env);
                    const command = rest.join(" ");
                    const result = action === "exec" ? await twin.execAsRoot(opts.stack, role, command) : await twin.execAsAgent(opts.stack, command, env);
                    if (opts.json) out(result, "");
                    else {
                        process.stdout.write(result.stdout);
                        process.stderr.write(result.stderr);
                    }
                    return result.code;
                }
                case "operator": {
                    // The operator's laptop (twin/operator.ts): bash with their ~/.ssh and the tailnet; stdin passed on.
                    if (args.length === 0) return badInput(`airlock twin operator: no command (airlock twin operator --stack ${opts.stack} -- CMD)`);
                    twin.requireState(opts.stack);
                    const { operatorExec } = await import("../../twin/operator");
                    const input = process.stdin.isTTY ? "" : await readStdin();
                    const result = operatorExec(opts.stack, args.join(" "), { input });
                    if (opts.json) out(result, "");
                    else {
                        process.stdout.write(result.stdout);
                        process.stderr.write(result.stderr);
                    }
                    return result.code;
                }
                case "replace": {
                    const state = await twin.replaceSandbox(opts.stack, log);
                    progress.done();
                    out(state, `sandbox replaced: cloud-init ${state.guests.sandbox?.cloudInit}\n`);
                    return EXIT.clean;
                }
                case "firewall": {
                    const [setting] = args;
                    if (setting !== "on" && setting !== "off") return badInput(`airlock twin firewall: on or off, not ${setting ?? "nothing"}`);
                    twin.requireState(opts.stack);
                    twin.setFirewall(opts.stack, setting === "on");
                    out({ firewall: setting }, `firewall ${setting}\n`);
                    return EXIT.clean;
                }
                case "down":
                    await twin.down(opts.stack);
                    out({ down: opts.stack }, `twin of ${opts.stack} is down\n`);
                    return EXIT.clean;
            }
        } catch (err) {
            failed();
            if (err instanceof twin.TwinError || err instanceof QgaError) {
                process.stderr.write(`airlock twin: ${err.message}\n`);
                return err instanceof twin.NotReadyError ? EXIT.violations : EXIT.badInput;
            }
            throw err;
        }
    };
}

async function readStdin(): Promise<string> {
    const chunks: Buffer[] = [];
    for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
    return Buffer.concat(chunks).toString("utf8");
}

function badInput(line: string): number {
    process.stderr.write(`${line}\n`);
    return EXIT.badInput;
}

function parseEnv(pairs: string[]): Record<string, string> | string {
    const env: Record<string, string> = {};
    for (const pair of pairs) {
        const at = pair.indexOf("=");
        if (at <= 0 || !/^[A-Za-z_][A-Za-z0-9_]*$/.test(pair.slice(0, at))) return `airlock twin agent: --env takes NAME=value, not ${pair}`;
        env[pair.slice(0, at)] = pair.slice(at + 1);
    }
    return env;
}
