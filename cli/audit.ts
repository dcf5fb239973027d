import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import type { Command } from "commander";
import { ConfigError } from "../components/config/load";
import { TEMPLATES_DIR } from "../components/render/templates";

/**
 * `airlock audit show|verify --from DIR`: the gateway's airlock-audit, on an
 * operator's copy of the pulled records (from the gateway or a backup). It runs the
 * very program the gateway runs (templates/audit/airlock-audit, python3), so the
 * chain is checked by one implementation only.
 */
export const AUDIT_PROGRAM = path.join(TEMPLATES_DIR, "audit", "airlock-audit");

export function runAudit(args: string[]): number {
    const result = spawnSync("python3", ["-IS", AUDIT_PROGRAM, "--config", "-", ...args], { stdio: "inherit" });
    if (result.error) throw new ConfigError([`airlock audit: cannot run python3 (${(result.error as NodeJS.ErrnoException).code}); the record is checked by the gateway's own airlock-audit, which needs python3`]);
    return result.status ?? 3;
}

function fromDir(dir: string): string {
    if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) throw new ConfigError([`${dir}: not a directory of pulled records (airlock-audit where, on the gateway)`]);
    return dir;
}

/** Adds `audit show` and `audit verify` to the CLI; the exit code goes to `setExit`. */
export function registerAudit(program: Command, setExit: (code: number) => void): void {
    const audit = program.command("audit").description("the sandbox's command record: show it, or verify its hash chain (on a copy of the gateway's records)");
    audit
        .command("show")
        .description("one entry per command: time, session, exit status, duration, variable names, and the DNS names it resolved")
        .requiredOption("--from <dir>", "a copy of the gateway's pulled records (airlock-audit where)")
        .option("--querylog <file...>", "AdGuard Home query log(s) to join by time and source address")
        .option("--since <when>", "only commands since a time (2025-01-31T12:00) or an age (90m, 12h, 7d)")
        .option("--session <session>", "only this session (client address:port)")
        .option("--json", "machine-readable output")
        .action((opts: { from: string; querylog?: string[]; since?: string; session?: string; json?: boolean }) => {
            const args = ["--dir", fromDir(opts.from), "show"];
            for (const log of opts.querylog ?? []) args.push("--querylog", log);
            if (opts.querylog === undefined) args.push("--querylog", "/dev/null");
            if (opts.since) args.push("--since", opts.since);
            if (opts.session) args.push("--session", opts.session);
            if (opts.json) args.push("--json");
            setExit(runAudit(args));
        });
    audit
        .command("verify")
        .description("check every chain; report the first break and exit 1")
        .requiredOption("--from <dir>", "a copy of the gateway's pulled records")
        .option("--json", "machine-readable output")
        .action((opts: { from: string; json?: boolean }) => {
            setExit(runAudit(["--dir", fromDir(opts.from), "verify", ...(opts.json ? ["--json"] : [])]));
        });
}
