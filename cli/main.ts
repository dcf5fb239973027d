#!/usr/bin/env node
import * as path from "node:path";
import { Command, CommanderError } from "commander";
import { ConfigError } from "../components/config/load";
import { planStack, stackFilePath } from "./offline";
import { formatSummary, summarize, writePlan } from "./plan";

/** Exit codes, the same for every command. */
export const EXIT = { clean: 0, violations: 1, badInput: 2, internal: 3 } as const;

const program = new Command()
    .name("airlock")
    .description("Plan, check and gate airlock stacks offline")
    .option("--stacks-dir <dir>", "folder holding Pulumi.<stack>.yaml files", "stacks")
    .exitOverride()
    .configureOutput({ writeErr: (text) => process.stderr.write(text) });

program
    .command("plan")
    .description("run the real program offline (Pulumi mocks) and write every rendered artifact and preview.json")
    .requiredOption("--stack <name>", "stack name (stacks/Pulumi.<name>.yaml)")
    .option("--out <dir>", "output folder (default: out/<stack>)")
    .option("--json", "print the summary as JSON")
    .action(async (opts: { stack: string; out?: string; json?: boolean }) => {
        const stacksDir = program.opts<{ stacksDir: string }>().stacksDir;
        const outDir = opts.out ?? path.join("out", opts.stack);
        const plan = await planStack(stackFilePath(stacksDir, opts.stack), opts.stack);
        const files = writePlan(plan, outDir);
        const summary = summarize(plan);
        if (opts.json) process.stdout.write(`${JSON.stringify({ ...summary, outDir, files }, null, 2)}\n`);
        else process.stdout.write(formatSummary(summary, outDir));
    });

async function main(argv: string[]): Promise<number> {
    try {
        await program.parseAsync(argv);
        return EXIT.clean;
    } catch (err) {
        if (err instanceof CommanderError) {
            return err.exitCode === 0 ? EXIT.clean : EXIT.badInput;
        }
        if (err instanceof ConfigError) {
            process.stderr.write(`${err.message}\n`);
            return EXIT.badInput;
        }
        process.stderr.write(`airlock: internal error: ${err instanceof Error ? err.message : String(err)}\n`);
        if (process.env.AIRLOCK_DEBUG) console.error(err);
        return EXIT.internal;
    }
}

main(process.argv).then((code) => {
    process.exitCode = code;
});
