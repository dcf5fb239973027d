import * as path from "node:path";
import type { Command } from "commander";
import type { Cli } from "../command";
import { gatePlan } from "../gate";
import { planStack, stackFilePath } from "../offline";
import { formatSummary, locateInPlan, summarize, usableOutDir, writePlan } from "../plan";
import { policyOf, report } from "../report";

export function define(command: Command, cli: Cli) {
    command
        .requiredOption("--stack <name>", "stack name (stacks/Pulumi.<name>.yaml)")
        .option("--out <dir>", "output folder (default: out/<stack>)")
        .option("--json", "print the summary and findings as JSON");
    return async (opts: { stack: string; out?: string; json?: boolean }) => {
        const outDir = opts.out ?? path.join("out", opts.stack);
        const policy = policyOf(cli);
        usableOutDir(outDir); // fail at once, not after planning
        const plan = await planStack(stackFilePath(cli.stacksDir, opts.stack), opts.stack);
        const files = writePlan(plan, outDir);
        const summary = summarize(plan);
        const findings = locateInPlan(gatePlan(plan, policy), plan, outDir);
        if (opts.json) return report(findings, true, { ...summary, outDir, files });
        process.stdout.write(formatSummary(summary, outDir));
        process.stdout.write(findings.length === 0 ? "gate: clean\n" : "gate:\n");
        return report(findings, false);
    };
}
