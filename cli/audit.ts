import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { ConfigError } from "../policies/contract";
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

/** A folder of pulled records (a copy of the gateway's `airlock-audit where`), or bad input. */
export function recordsDir(dir: string): string {
    if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) throw new ConfigError([`${dir}: not a directory of pulled records (airlock-audit where, on the gateway)`]);
    return dir;
}
