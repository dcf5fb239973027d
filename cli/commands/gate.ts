import type { Command } from "commander";
import { ConfigError } from "../../policies/contract";
import { judgeResources } from "../../policies/engine/judge";
import { enforce, failing } from "../../policies/policy";
import { resourcesOfPreview } from "../check";
import { Cli, readText } from "../command";
import { policyOf, report } from "../report";
import { status, step } from "../style";

export function define(command: Command, cli: Cli) {
    command
        .option("--stack <name>", "gate one stack's offline plan (with --preview: only names the stack)")
        .option("--all", "gate every stack in the stacks folder")
        .option("--preview <file>", "gate the output of `pulumi preview --json` or `pulumi stack export`")
        .option("--json", "machine-readable output");
    return async (opts: { stack?: string; all?: boolean; preview?: string; json?: boolean }) => {
        const chosen = [opts.stack !== undefined && !opts.preview, opts.all === true, opts.preview !== undefined].filter(Boolean).length;
        if (chosen !== 1) throw new ConfigError(["airlock gate: pass exactly one of --stack, --all, --preview"]);
        const policy = policyOf(cli);
        if (opts.preview) {
            const resources = resourcesOfPreview(opts.preview, readText(opts.preview));
            return report(enforce(judgeResources(resources, policy.context), policy), opts.json, { preview: opts.preview, resources: resources.length });
        }
        // Only the stack modes plan, and so load Pulumi.
        const { gateStack } = await import("../gate");
        const { listStacks } = await import("../offline");
        const stacks = opts.all ? listStacks(cli.stacksDir) : [opts.stack!];
        const results = [];
        for (const stack of stacks) results.push(await step(`gating ${stack}`, () => gateStack(cli.stacksDir, stack, policy)));
        const findings = results.flatMap((r) => r.findings.map((f) => ({ ...f, stack: r.stack })));
        if (!opts.json) {
            for (const r of results) {
                const violations = failing(r.findings).length;
                process.stdout.write(`${r.stack}: ${violations === 0 ? status("pass", "clean") : status("fail", `${violations} violation(s)`)}\n`);
            }
        }
        return report(findings, opts.json, { stacks: results.map((r) => ({ stack: r.stack, violations: failing(r.findings).length })) });
    };
}
