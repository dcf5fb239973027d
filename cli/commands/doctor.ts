import type { Command } from "commander";
import { Cli, EXIT } from "../command";
import { runDoctor } from "../doctor";
import { stackFilePath } from "../stacks";
import { status } from "../style";

export function define(command: Command, cli: Cli) {
    command
        .option("--stack <name>", "also look for credentials in this stack's config", "dev")
        .option("--json", "machine-readable output");
    return (opts: { stack: string; json?: boolean }) => {
        const checks = runDoctor(process.env, stackFilePath(cli.stacksDir, opts.stack), opts.stack);
        const failed = checks.filter((c) => c.required && !c.ok);
        if (opts.json) process.stdout.write(`${JSON.stringify({ ok: failed.length === 0, checks }, null, 2)}\n`);
        else {
            for (const c of checks) {
                const mark = c.ok ? status("pass", "ok  ") : c.required ? status("fail", "FAIL") : status("manual", "warn");
                process.stdout.write(`${mark} ${c.name}: ${c.detail}${c.ok ? "" : `\n     fix: ${c.fix}`}\n`);
            }
        }
        return failed.length > 0 ? EXIT.violations : EXIT.clean;
    };
}
