import type { Command } from "commander";
import type { Cli } from "../command";
import { changesBetween, formatChanges, readPlannedResources } from "../changes";
import { gatePlan } from "../gate";
import { planStack } from "../offline";
import { formatSummary, locateInPlan, removeCreated, summarize, usableOutDir, writePlan } from "../plan";
import { existingStackFile } from "../stacks";
import { policyOf, report } from "../report";
import { step } from "../style";

/** One turn of the event loop, in which a signal that came meanwhile reaches its listener. */
const signalsHandled = () => new Promise<void>((resolve) => setImmediate(resolve));

export function define(command: Command, cli: Cli) {
    command
        .requiredOption("--stack <name>", "stack name (stacks/Pulumi.<name>.yaml)")
        .option("--out <dir>", "output folder (default: out/<stack>)")
        .option("--against <preview.json>", "also say what an `up` from that plan (a previous `airlock plan`'s preview.json) to this one does to each resource")
        .option("--json", "print the summary and findings as JSON");
    return async (opts: { stack: string; out?: string; against?: string; json?: boolean }) => {
        const stackFile = existingStackFile(cli.stacksDir, opts.stack);
        const outDir = opts.out ?? cli.outDir(opts.stack);
        const policy = policyOf(cli);
        const { created } = usableOutDir(outDir); // fail at once, not after planning
        // Ctrl-C (or a TERM) while planning: the folders this run made go (only while empty), then the
        // shell's usual status. Planning and writePlan hardly yield to the event loop, so a signal that
        // comes during them is handled at the yield after each: before anything is written, or once the
        // plan is whole. A plan is complete or absent, never half.
        const interrupted = (signal: NodeJS.Signals) => {
            removeCreated(created);
            process.exit(signal === "SIGINT" ? 130 : 143);
        };
        process.once("SIGINT", interrupted);
        process.once("SIGTERM", interrupted);
        let plan, changes, files;
        try {
            // Read before the plan replaces it (it is often out/<stack>/preview.json itself).
            const before = opts.against ? readPlannedResources(opts.against) : undefined;
            plan = await step(`planning ${opts.stack}`, () => planStack(stackFile, opts.stack));
            await signalsHandled(); // interrupted while planning: nothing is written
            changes = before ? changesBetween(before, plan.resources) : undefined;
            files = writePlan(plan, outDir);
            await signalsHandled();
        } catch (err) {
            removeCreated(created); // a failed plan leaves no folder behind
            throw err;
        }
        const summary = summarize(plan);
        const findings = locateInPlan(gatePlan(plan, policy), plan, outDir);
        if (opts.json) return report(findings, true, { ...summary, outDir, files, ...(changes ? { changes } : {}) });
        process.stdout.write(formatSummary(summary, outDir));
        if (changes) process.stdout.write(formatChanges(changes, opts.against!));
        process.stdout.write(findings.length === 0 ? "gate: clean\n" : "gate:\n");
        return report(findings, false);
    };
}
