import type { Command } from "commander";
import { ConfigError } from "../../policies/contract";
import { judgeResources } from "../../policies/engine/judge";
import { enforce, failing } from "../../policies/policy";
import { locateInPreview, readInput, resourcesOfPreview } from "../check";
import { Cli, EXIT } from "../command";
import type { Finding } from "../../policies/engine/finding";
import { Format, formatOf, policyOf, report, withFormat } from "../report";
import { status, step } from "../style";

export function define(command: Command, cli: Cli) {
    command
        .option("--stack <name>", "gate one stack's offline plan (with --preview: only names the stack)")
        .option("--all", "gate every stack in the stacks folder")
        .option("--preview <file>", "gate the output of `pulumi preview --json` or `pulumi stack export`");
    withFormat(command);
    return async (opts: { stack?: string; all?: boolean; preview?: string; json?: boolean; format?: Format }) => {
        const format = formatOf(opts);
        const chosen = [opts.stack !== undefined && !opts.preview, opts.all === true, opts.preview !== undefined].filter(Boolean).length;
        if (chosen !== 1) throw new ConfigError(["airlock gate: pass exactly one of --stack, --all, --preview"]);
        const policy = policyOf(cli);
        if (opts.preview) {
            const text = readInput(opts.preview, "preview");
            const resources = resourcesOfPreview(opts.preview, text);
            if (resources.length === 0) throw new ConfigError([`${opts.preview}: holds no resources to gate`]);
            const findings = locateInPreview(enforce(judgeResources(resources, policy.context), policy), opts.preview, text);
            return report(findings, format, { preview: opts.preview, resources: resources.length }, "clean", policy, { category: "airlock/gate/preview/" });
        }
        // Only the stack modes plan, and so load Pulumi.
        const { gateStack } = await import("../gate");
        const { listStacks } = await import("../offline");
        const stacks = opts.all ? listStacks(cli.stacksDir) : [opts.stack!];
        const results: ({ stack: string; findings: Finding[] } | { stack: string; error: string })[] = [];
        const errors: string[] = [];
        // With --all, a stack that cannot be planned is reported beside the others' results, never instead of them.
        for (const [i, stack] of stacks.entries()) {
            try {
                results.push(await step(stacks.length > 1 ? `gating ${stack} (${i + 1} of ${stacks.length})` : `gating ${stack}`, () => gateStack(cli.stacksDir, stack, policy, cli.outDir(stack))));
            } catch (err) {
                if (!(err instanceof ConfigError) || !opts.all) throw err;
                errors.push(...err.problems);
                results.push({ stack, error: err.problems.join("; ") });
            }
        }
        const findings = results.flatMap((r) => ("findings" in r ? r.findings.map((f) => ({ ...f, stack: r.stack })) : []));
        if (format === "text") {
            for (const r of results) {
                const verdict =
                    "error" in r ? status("fail", "not gated: bad input (below)") : failing(r.findings).length === 0 ? status("pass", "clean") : status("fail", `${failing(r.findings).length} violation(s)`);
                process.stdout.write(`${r.stack}: ${verdict}\n`);
            }
        }
        const summary = results.map((r) => ("findings" in r ? { stack: r.stack, violations: failing(r.findings).length } : { stack: r.stack, error: r.error }));
        // One code-scanning analysis per stack gated alone; `--all` is one analysis of every stack.
        const category = opts.all ? "airlock/gate/all/" : `airlock/gate/${stacks[0]}/`;
        const code = report(findings, format, { stacks: summary, ...(errors.length > 0 ? { errors } : {}) }, undefined, policy, { category });
        for (const line of errors) process.stderr.write(`${line}\n`);
        return errors.length > 0 ? EXIT.badInput : code;
    };
}
