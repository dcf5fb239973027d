import type { Command } from "commander";
import { Cli, EXIT } from "../command";
import { forkStack, ForkRefused } from "../fork";
import { report } from "../report";
import { status, step } from "../style";

export function define(command: Command, cli: Cli) {
    command
        .argument("<customer>", "the new stack's name (2-16 of a-z, 0-9, -)")
        .requiredOption("--from <stack>", "the stack to derive from")
        .option("--region <location>", "put both hosts in this Hetzner location")
        .option("--json", "machine-readable output");
    return async (customer: string, opts: { from: string; region?: string; json?: boolean }) => {
        let result;
        try {
            result = await step(`forking ${opts.from} into ${customer}`, () =>
                forkStack({ stacksDir: cli.stacksDir, customer, from: opts.from, region: opts.region, policyFile: cli.policyFile }),
            );
        } catch (err) {
            if (!(err instanceof ForkRefused)) throw err;
            process.stderr.write(`${err.message}\n`);
            return report(err.findings, opts.json);
        }
        if (opts.json) {
            process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
            return EXIT.clean;
        }
        process.stdout.write(`${result.status === "written" ? status("pass", "wrote") : "unchanged:"} ${result.file} (schema and gate: clean)\n`);
        process.stdout.write(`\ndiffers from ${opts.from}:\n${result.changes.map((c) => `  ${c}`).join("\n")}\n`);
        process.stdout.write(`\nstill needed (values are never copied):\n${result.stillNeeded.map((c) => `  ${c}`).join("\n")}\n`);
        return EXIT.clean;
    };
}
