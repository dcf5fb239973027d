import { Argument, Command, Option } from "commander";
import { Cli } from "../command";

export function define(command: Command, _cli: Cli) {
    command
        .addArgument(new Argument("<action>", "show: one entry per command; verify: check every chain, the first break exits 1").choices(["show", "verify"]))
        .requiredOption("--from <dir>", "a copy of the gateway's pulled records (airlock-audit where), from the gateway or a backup")
        .option("--querylog <file...>", "show: AdGuard Home query log(s) to join by time and source address")
        .option("--since <when>", "show: only commands since a time (2025-01-31T12:00) or an age (90m, 12h, 7d)")
        .option("--session <session>", "show: only this session (client address:port)")
        .addOption(new Option("--json", "machine-readable output"));
    return async (action: "show" | "verify", opts: { from: string; querylog?: string[]; since?: string; session?: string; json?: boolean }) => {
        const { recordsDir, runAudit } = await import("../audit");
        const args = ["--dir", recordsDir(opts.from), action];
        if (action === "show") {
            for (const log of opts.querylog ?? ["/dev/null"]) args.push("--querylog", log);
            if (opts.since) args.push("--since", opts.since);
            if (opts.session) args.push("--session", opts.session);
        }
        if (opts.json) args.push("--json");
        return runAudit(args);
    };
}
