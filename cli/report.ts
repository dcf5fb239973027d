import type { Finding } from "../policies/engine/finding";
import { formatFinding } from "../policies/engine/format";
import { failing, loadPolicy, Policy } from "../policies/policy";
import { Cli, EXIT } from "./command";

/** The policy every judging command uses: --policy, or the shipped policies/config.json. */
export function policyOf(cli: Cli): Policy {
    return cli.policyFile === undefined ? loadPolicy() : loadPolicy(cli.policyFile);
}

/** Prints findings for humans or machines; returns the exit code (advisory findings do not fail). */
export function report(findings: Finding[], json: boolean | undefined, extra: Record<string, unknown> = {}): number {
    const violations = failing(findings).length;
    if (json) process.stdout.write(`${JSON.stringify({ ...extra, violations, findings }, null, 2)}\n`);
    else if (findings.length > 0) {
        for (const f of findings) process.stdout.write(`${formatFinding(f)}\n`);
        process.stdout.write(`${violations} violation${violations === 1 ? "" : "s"}${findings.length > violations ? `, ${findings.length - violations} advisory` : ""}\n`);
    }
    return violations > 0 ? EXIT.violations : EXIT.clean;
}
