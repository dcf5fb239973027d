import type { Finding } from "./finding";

/** "file:line" / resource, for humans. */
export function locationOf(f: Finding): string {
    const file = f.file ? `${f.file}${f.line ? `:${f.line}` : ""}` : undefined;
    return [f.resource, file].filter(Boolean).join(" ") || "(artifact)";
}

/** One finding, one line: where, rule id, why, how to fix. */
export function formatFinding(f: Finding): string {
    return `${locationOf(f)}: ${f.rule}${f.advisory ? " (advisory)" : ""}: ${f.message}${f.where && !f.message.includes(f.where) ? ` [${f.where}]` : ""} -- fix: ${f.remediation}`;
}

/** What CrossGuard prints for a finding (its location is the resource already). */
export function formatForPolicy(f: Finding): string {
    const file = f.file ? ` (${f.file}${f.line ? `:${f.line}` : ""})` : "";
    return `${f.message}${file}. Fix: ${f.remediation}`;
}
