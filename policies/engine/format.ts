import type { Finding } from "./finding";

/** `a.yml:3 > /etc/x:2`: the files nested inside a finding's file. */
export function withinText(f: Finding): string {
    return (f.within ?? []).map((w) => `${w.file}${w.line ? `:${w.line}` : ""}`).join(" > ");
}

/** "file:line: ", then the resource and the nested files: where to look. */
export function locationOf(f: Finding): string {
    const inner = withinText(f);
    const context = [f.resource, inner ? `> ${inner}` : undefined].filter(Boolean).join(" ");
    return `${f.file ? `${f.file}:${f.line ?? 1}: ` : ""}${context ? `${context}: ` : ""}`;
}

/** How to fix this finding: its own hint when the rule gave one for the case, else the rule's. */
export const fixOf = (f: Finding) => f.fix ?? f.remediation;

/** One finding, one line: where, rule id, why, how to fix. */
export function formatFinding(f: Finding): string {
    return `${locationOf(f)}${f.rule}${f.advisory ? " (advisory)" : ""}: ${f.message}${f.where && !f.message.includes(f.where) ? ` [${f.where}]` : ""} -- fix: ${fixOf(f)}`;
}

/** What CrossGuard prints for a finding (its location is the resource already). */
export function formatForPolicy(f: Finding): string {
    const file = f.file ? ` (${[`${f.file}${f.line ? `:${f.line}` : ""}`, withinText(f)].filter(Boolean).join(" > ")})` : "";
    return `${f.message}${file}. Fix: ${fixOf(f)}`;
}
