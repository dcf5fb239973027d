import { createHash } from "node:crypto";
import type { Finding, RuleInfo } from "./finding";
import { GENERIC } from "./profile";

/**
 * Silencing a finding on purpose, as linters allow, without ever hiding it: an inline
 * comment with a reason (`# airlock: ignore[rule-id] why`), or a baseline of the
 * findings a repository already had. A suppressed finding is still reported (marked,
 * and in SARIF as suppressed); it only stops failing the check.
 */

export const SUPPRESSION_RULE: RuleInfo = {
    id: "suppressions-give-a-reason",
    profiles: GENERIC,
    description: "An inline suppression (`# airlock: ignore[rule-id] reason`) names rules that exist and says why the finding is accepted.",
    remediation: "Write the reason after the bracket (`# airlock: ignore[containers-no-devices] the scanner needs /dev/kvm`), and name the rule exactly as the finding does.",
};

/** `# airlock: ignore[rule-a, rule-b] reason`: a whole comment. */
const COMMENT = /^#\s*airlock:\s*ignore\[([^\]]*)\](.*)$/;

/** A comment of the file, as its consumer reads comments: never text inside a value. */
export interface Comment {
    line: number;
    text: string;
    /** Alone on its line (nothing before it): then it speaks for the line below. */
    alone: boolean;
}

interface Suppression {
    /** The lines it covers: its own, and the next when it is alone on its line. */
    lines: number[];
    line: number;
    rules: string[];
    reason: string;
}

/** The inline suppressions among a file's comments. */
export function inlineSuppressions(comments: Comment[]): Suppression[] {
    return comments.flatMap(({ line, text, alone }) => {
        const m = COMMENT.exec(text.trim());
        if (!m) return [];
        const rules = m[1]
            .split(",")
            .map((r) => r.trim())
            .filter(Boolean);
        return [{ line, lines: alone ? [line, line + 1] : [line], rules, reason: m[2].trim() }];
    });
}

/**
 * Findings of `file` with its inline suppressions applied: a finding on a suppression's
 * line (or the line below, when the comment is alone on its line), or inside the service
 * written there, of a rule it names,
 * about one subject, is suppressed when the suppression gives a reason; a suppression without a reason, or naming no rule that exists, is a
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
    // A finding inside an embedded file (a write_files entry) is never suppressed from the outer
    // file: one comment there would accept all of a file the reviewer cannot read beside it.
    const covers = (s: Suppression, f: Finding) => f.file === file && !f.within?.length && f.line !== undefined && !f.suppressed && (s.lines.includes(f.line) || (f.subjectLine !== undefined && s.lines.includes(f.subjectLine))) && s.rules.includes(f.rule);
    const by = new Map<Finding, Suppression>();
    for (const s of valid) {
        const covered = findings.filter((f) => covers(s, f));
        // One suppression accepts what one service (or keyword, or entry) does, never several at once.
        const subjects = new Set(covered.map((f) => f.where ?? ""));
        if (subjects.size > 1) {
            problems.push({ rule: SUPPRESSION_RULE.id, remediation: SUPPRESSION_RULE.remediation, file, line: s.line, message: `the suppression covers findings of ${subjects.size} services or entries (${[...subjects].join(", ")}), so it suppresses nothing: give each its own line` });
        } else for (const f of covered) by.set(f, s);
    }
    const applied = findings.map((f) => {
        const s = by.get(f);
        return s ? { ...f, suppressed: { kind: "inSource" as const, justification: s.reason } } : f;
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

/** What a baseline entry says it accepts, beside its fingerprint: what a reviewer reads. */
export interface BaselineLabel {
    rule: string;
    file: string;
}

/**
 * Findings in the baseline are suppressed (external), with the baseline named as the
 * reason: their fingerprint, and the rule and file the entry shows a reviewer (an entry
 * labelled as one rule never accepts a finding of another).
 */
export function applyBaseline(findings: Finding[], prints: string[], baseline: Map<string, BaselineLabel>, baselineFile: string, relative: (file: string) => string): Finding[] {
    return findings.map((f, i) => {
        const entry = baseline.get(prints[i]);
        const matches = entry !== undefined && entry.rule === f.rule && entry.file === (f.file ? relative(f.file) : "");
        return f.suppressed || !matches ? f : { ...f, suppressed: { kind: "external" as const, justification: `in the baseline ${baselineFile}` } };
    });
}
