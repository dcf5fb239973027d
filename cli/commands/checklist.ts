import type { Command } from "commander";
import { evaluateChecklist, formatChecklist } from "../checklist";
import { Cli, EXIT } from "../command";
import { gatePlan } from "../gate";
import { planStack } from "../offline";
import { existingStackFile } from "../stacks";
import { policyOf } from "../report";
import { paint, status, step } from "../style";

export function define(command: Command, cli: Cli) {
    command
        .requiredOption("--stack <name>", "stack name")
        .option("--json", "machine-readable output")
        .option("--markdown", "a Markdown checklist to paste into a ticket");
    return async (opts: { stack: string; json?: boolean; markdown?: boolean }) => {
        const policy = policyOf(cli);
        const plan = await step(`planning ${opts.stack}`, () => planStack(existingStackFile(cli.stacksDir, opts.stack), opts.stack));
        const items = evaluateChecklist(plan, gatePlan(plan, policy));
        const failed = items.filter((i) => i.status === "fail").length;
        if (opts.json) process.stdout.write(`${JSON.stringify({ stack: opts.stack, failed, items }, null, 2)}\n`);
        else {
            process.stdout.write(formatChecklist(items, opts.markdown === true, status));
            const counts = ["pass", "fail", "manual"].map((s) => `${items.filter((i) => i.status === s).length} ${s}`).join(", ");
            process.stdout.write(`\n${opts.markdown ? counts : paint("bold", counts)}\n`);
        }
        return failed > 0 ? EXIT.violations : EXIT.clean;
    };
}
