import { createHash } from "node:crypto";
import type { Finding, RuleInfo } from "./finding";

/**
 * Silencing a finding on purpose, as linters allow, without ever hiding it: an inline
 * comment with a reason (`# airlock: ignore[rule-id] why`), or a baseline of the
 * findings a repository already had. A suppressed finding is still reported (marked,
 * and in SARIF as suppressed); it only stops failing the check.
 */

export const SUPPRESSION_RULE: RuleInfo = {
    id: "suppressions-give-a-reason",
    description: "An inline suppression (`# airlock: ignore[rule-id] reason`) names rules that exist and says why the finding is accepted.",
    remediation: "Write the reason after the bracket (`# airlock: ignore[containers-no-devices] the scanner needs /dev/kvm`), and name the rule exactly as the finding does.",
};

/** `# airlock: ignore[rule-a, rule-b] reason`: a whole comment. */
const COMMENT = /^#\s*airlock:\s*ignore\[([^\]]*)\](.*)$/;

/** A comment of the file, as its consumer reads comments: never text inside a value. */
export interface Comment {
    line: number;
    text: string;
}

interface Suppression {
    line: number;
    rules: string[];
    reason: string;
}

/** The inline suppressions among a file's comments; each covers its own line and the line below. */
export function inlineSuppressions(comments: Comment[]): Suppression[] {
    return comments.flatMap(({ line, text }) => {
        const m = COMMENT.exec(text.trim());
        if (!m) return [];
        const rules = m[1]
            .split(",")
            .map((r) => r.trim())
            .filter(Boolean);
        return [{ line, rules, reason: m[2].trim() }];
    });
}

/**
 * Findings of `file` with its inline suppressions applied: a finding on a suppression's
 * line or the line below it, of a rule it names, is suppressed when the suppression
 * gives a reason; a suppression without a reason, or naming no rule that exists, is a
 * finding itself (and suppresses nothing).
 */
export function applyInlineSuppressions(findings: Finding[], file: string, comments: Comment[], ruleIds: Set<string>): Finding[] {
    const suppressions = inlineSuppressions(comments);
    if (suppressions.length === 0) return findings;
    const problems: Finding[] = [];
    const valid: Suppression[] = [];
    for (const s of suppressions) {
        const unknown = s.rules.filter((r) => !ruleIds.has(r));
        const problem =
            s.rules.length === 0
                ? "names no rule"
                : unknown.length > 0
                  ? `names ${unknown.map((r) => `'${r}'`).join(", ")}, which ${unknown.length === 1 ? "is not a rule" : "are not rules"}`
                  : s.reason === ""
                    ? "gives no reason"
                    : undefined;
        if (problem) problems.push({ rule: SUPPRESSION_RULE.id, remediation: SUPPRESSION_RULE.remediation, file, line: s.line, message: `the suppression ${problem}, so it suppresses nothing` });
        else valid.push(s);
    }
    const applied = findings.map((f) => {
        const line = f.line;
        if (f.file !== file || line === undefined || f.suppressed) return f;
        const by = valid.find((s) => (s.line === line || s.line === line - 1) && s.rules.includes(f.rule));
        return by ? { ...f, suppressed: { kind: "inSource" as const, justification: by.reason } } : f;
    });
    return [...applied, ...problems];
}

/**
 * A finding's identity across runs: its rule, its file (relative to the repository's
 * root), what it is about and its message, never its line, so moving it or editing an
 * unrelated line keeps it; `occurrence` tells identical findings in one file apart.
 */
export function fingerprintOf(f: Finding, relativeFile: string, occurrence: number): string {
    const inner = (f.within ?? []).map((w) => w.file).join(">");
    return createHash("sha256").update([f.rule, relativeFile, f.resource ?? "", inner, f.where ?? "", f.message, String(occurrence)].join("\0")).digest("hex").slice(0, 32);
}

/** Each finding's fingerprint, in order, with occurrences counted per identical finding. */
export function fingerprints(findings: Finding[], relative: (file: string) => string): string[] {
    const seen = new Map<string, number>();
    return findings.map((f) => {
        const file = f.file ? relative(f.file) : "";
        const base = fingerprintOf(f, file, 0);
        const n = seen.get(base) ?? 0;
        seen.set(base, n + 1);
        return n === 0 ? base : fingerprintOf(f, file, n);
    });
}

/** Findings whose fingerprint is in the baseline are suppressed (external), with the baseline named as the reason. */
export function applyBaseline(findings: Finding[], prints: string[], baseline: Set<string>, baselineFile: string): Finding[] {
    return findings.map((f, i) => (f.suppressed || !baseline.has(prints[i]) ? f : { ...f, suppressed: { kind: "external" as const, justification: `in the baseline ${baselineFile}` } }));
}
