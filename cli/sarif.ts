import { pathToFileURL } from "node:url";
import type { Log, ReportingDescriptor, Result } from "sarif";
import type { Finding } from "../policies/engine/finding";
import { fixOf, withinText } from "../policies/engine/format";
import { fingerprints } from "../policies/engine/suppressions";
import { ALL_RULES, EnforcementLevel, Policy } from "../policies/policy";
import { relativeToRepository, repositoryRoot, STDIN_NAME } from "./report";

/**
 * Findings as SARIF 2.1.0, for GitHub code scanning and other SARIF viewers: one
 * run, every rule with its description, how to fix it, its severity and precision,
 * every result at a file (relative to the repository's root, %SRCROOT%) and line
 * (and, for a resource, its URN as a logical location), with a fingerprint that
 * survives edits elsewhere in the file, and suppressed findings marked as such.
 */

const SARIF_LEVEL: Record<EnforcementLevel, "error" | "warning" | "none"> = { mandatory: "error", advisory: "warning", disabled: "none" };

/**
 * GitHub ranks alerts by `security-severity` (0-10: 9+ critical, 7+ high, 4+ medium):
 * a mandatory rule's finding fails the gate (high), an advisory one's does not (medium).
 */
const SECURITY_SEVERITY: Record<EnforcementLevel, string> = { mandatory: "8.0", advisory: "5.0", disabled: "0.0" };

/** Rules that read a heuristic (secret shapes, download-and-run lines) may be wrong; the rest read structure. */
const precisionOf = (id: string) => (/-no-secrets$|-no-pipe-to-shell$/.test(id) ? "medium" : "high");

/** "containers-no-docker-socket" -> "ContainersNoDockerSocket" (SARIF's rule name is an identifier). */
const ruleName = (id: string) => id.replace(/(^|-)([a-z0-9])/g, (_, __, c: string) => c.toUpperCase());

/** The key GitHub keeps our fingerprints under, versioned in case what they cover changes. */
export const FINGERPRINT_KEY = "airlockFinding/v1";

/**
 * `errors`: inputs that could not be judged (bad input), reported as the run's notifications.
 * `category`: the run's automationDetails id (GitHub keeps one analysis per category).
 */
export function toSarif(findings: Finding[], policy: Policy, version: string, errors: string[] = [], category = "airlock/"): Log {
    const rules: ReportingDescriptor[] = ALL_RULES.map((rule) => ({
        id: rule.id,
        name: ruleName(rule.id),
        shortDescription: { text: rule.description.split(/(?<=\.)\s/)[0] },
        fullDescription: { text: rule.description },
        help: { text: `Fix: ${rule.remediation}`, markdown: `**Fix:** ${rule.remediation}` },
        defaultConfiguration: { level: SARIF_LEVEL[policy.levelOf(rule.id)] },
        properties: { tags: ["security", rule.id.split("-")[0]], precision: precisionOf(rule.id), "security-severity": SECURITY_SEVERITY[policy.levelOf(rule.id)] },
    }));
    const index = new Map(rules.map((r, i) => [r.id, i]));
    const prints = fingerprints(findings, relativeToRepository);
    const results: Result[] = findings.map((f, i) => {
        const inner = withinText(f);
        const file = f.file ? relativeToRepository(f.file) : undefined;
        const inRepository = file !== undefined && file !== STDIN_NAME && !file.startsWith("/");
        return {
            ruleId: f.rule,
            ruleIndex: index.get(f.rule),
            level: f.advisory ? "warning" : "error",
            message: { text: `${f.message}${inner ? ` (in ${inner})` : ""}. Fix: ${fixOf(f)}` },
            locations: [
                {
                    ...(file && file !== STDIN_NAME
                        ? {
                              physicalLocation: {
                                  artifactLocation: inRepository ? { uri: encodeURI(file), uriBaseId: "%SRCROOT%" } : { uri: pathToFileURL(file).href },
                                  region: { startLine: f.line ?? 1 },
                              },
                          }
                        : {}),
                    ...(f.resource ? { logicalLocations: [{ fullyQualifiedName: f.resource, kind: "resource" }] } : {}),
                },
            ],
            partialFingerprints: { [FINGERPRINT_KEY]: prints[i] },
            ...(f.suppressed ? { suppressions: [{ kind: f.suppressed.kind, justification: f.suppressed.justification }] } : {}),
            ...(f.unverifiable ? { properties: { unverifiable: true } } : {}),
        };
    });
    return {
        $schema: "https://json.schemastore.org/sarif-2.1.0.json",
        version: "2.1.0",
        runs: [
            {
                tool: { driver: { name: "airlock", version, rules } },
                automationDetails: { id: category },
                originalUriBaseIds: { "%SRCROOT%": { uri: `${pathToFileURL(repositoryRoot()).href.replace(/\/?$/, "/")}` } },
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
