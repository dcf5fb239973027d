import * as path from "node:path";
import { pathToFileURL } from "node:url";
import type { Log, ReportingDescriptor, Result } from "sarif";
import type { Finding } from "../policies/engine/finding";
import { fixOf, withinText } from "../policies/engine/format";
import { ALL_RULES, EnforcementLevel, Policy } from "../policies/policy";

/**
 * Findings as SARIF 2.1.0, for GitHub code scanning and other SARIF viewers: one
 * run, every rule with its description and how to fix it, every result at a file
 * and line (and, for a resource, its URN as a logical location).
 */

const SARIF_LEVEL: Record<EnforcementLevel, "error" | "warning" | "none"> = { mandatory: "error", advisory: "warning", disabled: "none" };

/** "containers-no-docker-socket" -> "ContainersNoDockerSocket" (SARIF's rule name is an identifier). */
const ruleName = (id: string) => id.replace(/(^|-)([a-z0-9])/g, (_, __, c: string) => c.toUpperCase());

/** A path relative to the working directory when it is inside it (what code scanning expects), a file URI otherwise. */
function uriOf(file: string): string {
    const relative = path.relative(process.cwd(), path.resolve(file));
    return relative.startsWith("..") || path.isAbsolute(relative) ? pathToFileURL(path.resolve(file)).href : relative.split(path.sep).join("/");
}

/** `errors`: inputs that could not be judged (bad input), reported as the run's notifications. */
export function toSarif(findings: Finding[], policy: Policy, version: string, errors: string[] = []): Log {
    const rules: ReportingDescriptor[] = ALL_RULES.map((rule) => ({
        id: rule.id,
        name: ruleName(rule.id),
        shortDescription: { text: rule.description.split(/(?<=\.)\s/)[0] },
        fullDescription: { text: rule.description },
        help: { text: `Fix: ${rule.remediation}`, markdown: `**Fix:** ${rule.remediation}` },
        defaultConfiguration: { level: SARIF_LEVEL[policy.levelOf(rule.id)] },
        properties: { tags: ["security", rule.id.split("-")[0]] },
    }));
    const index = new Map(rules.map((r, i) => [r.id, i]));
    const results: Result[] = findings.map((f) => {
        const inner = withinText(f);
        return {
            ruleId: f.rule,
            ruleIndex: index.get(f.rule),
            level: f.advisory ? "warning" : "error",
            message: { text: `${f.message}${inner ? ` (in ${inner})` : ""}. Fix: ${fixOf(f)}` },
            locations: [
                {
                    ...(f.file ? { physicalLocation: { artifactLocation: { uri: uriOf(f.file) }, region: { startLine: f.line ?? 1 } } } : {}),
                    ...(f.resource ? { logicalLocations: [{ fullyQualifiedName: f.resource, kind: "resource" }] } : {}),
                },
            ],
            ...(f.unverifiable ? { properties: { unverifiable: true } } : {}),
        };
    });
    return {
        $schema: "https://json.schemastore.org/sarif-2.1.0.json",
        version: "2.1.0",
        runs: [
            {
                tool: { driver: { name: "airlock", version, rules } },
                invocations: [
                    {
                        executionSuccessful: errors.length === 0,
                        toolExecutionNotifications: errors.map((text) => ({ level: "error" as const, message: { text } })),
                    },
                ],
                results,
            },
        ],
    };
}
