import * as path from "node:path";
import type { Command } from "commander";
import type { Cli } from "../command";
import { changesBetween, formatChanges, readPlannedResources } from "../changes";
import { gatePlan } from "../gate";
import { planStack, stackFilePath } from "../offline";
import { formatSummary, locateInPlan, summarize, usableOutDir, writePlan } from "../plan";
import { policyOf, report } from "../report";

export function define(command: Command, cli: Cli) {
    command
        .requiredOption("--stack <name>", "stack name (stacks/Pulumi.<name>.yaml)")
        .option("--out <dir>", "output folder (default: out/<stack>)")
        .option("--against <preview.json>", "also say what an `up` from that plan (a previous `airlock plan`'s preview.json) to this one does to each resource")
        .option("--json", "print the summary and findings as JSON");
    return async (opts: { stack: string; out?: string; against?: string; json?: boolean }) => {
        const outDir = opts.out ?? path.join("out", opts.stack);
        const policy = policyOf(cli);
        usableOutDir(outDir); // fail at once, not after planning
        // Read before the plan replaces it (it is often out/<stack>/preview.json itself).
        const before = opts.against ? readPlannedResources(opts.against) : undefined;
        const plan = await planStack(stackFilePath(cli.stacksDir, opts.stack), opts.stack);
        const changes = before ? changesBetween(before, plan.resources) : undefined;
        const files = writePlan(plan, outDir);
        const summary = summarize(plan);
        const findings = locateInPlan(gatePlan(plan, policy), plan, outDir);
        if (opts.json) return report(findings, true, { ...summary, outDir, files, ...(changes ? { changes } : {}) });
        process.stdout.write(formatSummary(summary, outDir));
        if (changes) process.stdout.write(formatChanges(changes, opts.against!));
        process.stdout.write(findings.length === 0 ? "gate: clean\n" : "gate:\n");
        return report(findings, false);
    };
}
