import type { Command } from "commander";
import { Cli, EXIT } from "../command";
import { runDoctor } from "../doctor";
import { runLiveChecks } from "../doctorLive";
import { stackFilePath } from "../stacks";
import { status } from "../style";

export function define(command: Command, cli: Cli) {
    command
        .option("--stack <name>", "also look for credentials in this stack's config", "dev")
        .option("--json", "machine-readable output");
    return async (opts: { stack: string; json?: boolean }) => {
        const stackFile = stackFilePath(cli.stacksDir, opts.stack);
        const checks = [...runDoctor(process.env, stackFile, opts.stack), ...(await runLiveChecks(process.env, stackFile, opts.stack))];
        const failed = checks.filter((c) => c.required && !c.ok);
        if (opts.json) process.stdout.write(`${JSON.stringify({ ok: failed.length === 0, checks }, null, 2)}\n`);
        else {
            for (const c of checks) {
                const mark = c.skipped ? status("manual", "skip") : c.ok ? status("pass", "ok  ") : c.required ? status("fail", "FAIL") : status("manual", "warn");
                const findings = (c.findings ?? []).map((f) => `\n     - ${f}`).join("");
                process.stdout.write(`${mark} ${c.name}: ${c.detail}${findings}${c.ok ? "" : `\n     fix: ${c.fix}`}\n`);
            }
        }
        return failed.length > 0 ? EXIT.violations : EXIT.clean;
    };
}
