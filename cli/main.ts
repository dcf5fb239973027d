import * as path from "node:path";
import { Command, CommanderError } from "commander";
import { ConfigError } from "../policies/contract";
import { Cli, EXIT } from "./command";
import { COMMANDS } from "./commands";
import { inProject, projectRoot } from "./project";
import { packageVersion } from "./report";

/**
 * `airlock <command>`: the global options, then the one command asked for. Only
 * that command's module is loaded (see commands/index.ts).
 */
const program = new Command()
    .name("airlock")
    .description("Plan, check and gate airlock stacks offline")
    .version(packageVersion(), "-V, --version", "print airlock's version")
    .option("--stacks-dir <dir>", "folder holding Pulumi.<stack>.yaml files (default: the project's stacks/, found from any of its folders)")
    .option("--policy <file>", "the policy: enforcement levels and what rules compare against (default: the shipped policies/config.json)")
    .exitOverride()
    // A verb's --help lists --policy and --stacks-dir too: they are given after the verb as often as before it.
    .configureHelp({ showGlobalOptions: true })
    .configureOutput({ writeErr: (text) => process.stderr.write(text) });

/** The first operand that is not the value of a global option: the command's name. */
function commandName(argv: string[]): string | undefined {
    for (let i = 0; i < argv.length; i++) {
        const arg = argv[i];
        // `airlock help check` shows check's own options, so check is loaded.
        if (!arg.startsWith("-")) return arg === "help" ? (argv[i + 1] ?? arg) : arg;
        const flag = arg.split("=")[0];
        const option = program.options.find((o) => o.long === flag || o.short === flag);
        if (option && (option.required || option.optional) && !arg.includes("=")) i++;
    }
    return undefined;
}

/**
 * Bad input: its lines on stderr, and, when the command was asked for JSON or SARIF,
 * the same lines as that document on stdout, so a script reading it never gets nothing.
 */
function reportBadInput(err: ConfigError, args: string[]): void {
    process.stderr.write(`${err.message}\n`);
    const at = args.findIndex((a) => a === "--format" || a.startsWith("--format="));
    const format = args.includes("--json") ? "json" : at < 0 ? "text" : args[at].includes("=") ? args[at].split("=")[1] : args[at + 1];
    if (format === "json") process.stdout.write(`${JSON.stringify({ errors: err.problems, violations: 0, findings: [] }, null, 2)}\n`);
    if (format === "sarif") {
        const { toSarif } = require("./sarif") as typeof import("./sarif");
        const { loadPolicy } = require("../policies/policy") as typeof import("../policies/policy");
        process.stdout.write(`${JSON.stringify(toSarif([], loadPolicy(), packageVersion(), err.problems), null, 2)}\n`);
    }
}

function internalError(err: unknown): number {
    process.stderr.write(`airlock: internal error: ${err instanceof Error ? err.message : String(err)}\n`);
    if (process.env.AIRLOCK_DEBUG) console.error(err);
    return EXIT.internal;
}

// `airlock check ... | head`: a reader that stops early is not an error.
for (const stream of [process.stdout, process.stderr]) {
    stream.on("error", (err: NodeJS.ErrnoException) => {
        if (err.code === "EPIPE") process.exit(typeof process.exitCode === "number" ? process.exitCode : EXIT.clean);
        throw err;
    });
}

// A failure inside a Pulumi output surfaces as a rejection nobody awaits: still one line, exit 3.
process.on("unhandledRejection", (err) => process.exit(internalError(err)));

async function main(argv: string[]): Promise<number> {
    let exitCode: number = EXIT.clean;
    try {
        const wanted = commandName(argv.slice(2));
        for (const [name, [summary, load]] of Object.entries(COMMANDS)) {
            const command = program.command(name).description(summary);
            if (name !== wanted) continue;
            const cli: Cli = {
                get stacksDir() {
                    return program.opts<{ stacksDir?: string }>().stacksDir ?? inProject("--stacks-dir DIR", "stacks");
                },
                outDir: (stack: string) => (projectRoot() ? inProject("--out DIR", "out", stack) : path.join("out", stack)),
                get policyFile() {
                    return program.opts<{ policy?: string }>().policy;
                },
            };
            const action = (await load()).define(command, cli);
            command.action(async (...args: unknown[]) => {
                exitCode = await action(...args);
            });
        }
        await program.parseAsync(argv);
        return exitCode;
    } catch (err) {
        if (err instanceof CommanderError) return err.exitCode === 0 ? EXIT.clean : EXIT.badInput;
        if (err instanceof ConfigError) {
            reportBadInput(err, argv.slice(2));
            return EXIT.badInput;
        }
        return internalError(err);
    }
}

main(process.argv).then((code) => {
    process.exitCode = code;
});
