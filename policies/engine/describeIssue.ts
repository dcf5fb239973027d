import type { z } from "zod";

/**
 * One zod issue as a person reads it: what was expected and what was found
 * ("expected a number, got the string \"ten\""), or "missing". Parse with
 * `{ reportInput: true }` so the issue carries what was found.
 */
export function describeIssue(issue: z.core.$ZodIssue): string {
    const missing = !("input" in issue) || issue.input === undefined;
    switch (issue.code) {
        case "invalid_type":
            return missing ? `missing (expected ${article(issue.expected)})` : `expected ${article(issue.expected)}, got ${found(issue.input)}`;
        case "invalid_value":
            return missing ? `missing (expected one of ${issue.values.map(String).join(", ")})` : `expected one of ${issue.values.map(String).join(", ")}, got ${found(issue.input)}`;
        case "invalid_key":
            // A mapping's key (a variable name, a permission): what is wrong with it.
            return issue.issues[0] ? describeIssue(issue.issues[0]) : issue.message;
        case "unrecognized_keys":
            return `unknown key${issue.keys.length > 1 ? "s" : ""} ${issue.keys.join(", ")}`;
        case "too_small":
        case "too_big": {
            const bound = issue.code === "too_small" ? (issue.minimum as number | bigint) : (issue.maximum as number | bigint);
            const word = issue.code === "too_small" ? "at least" : "at most";
            const what = issue.origin === "array" ? ` item${Number(bound) === 1 ? "" : "s"}` : issue.origin === "string" ? ` character${Number(bound) === 1 ? "" : "s"}` : "";
            return `expected ${word} ${bound}${what}${missing ? "" : `, got ${found(issue.input)}`}`;
        }
        default:
            // What was found, when it is the value itself (a refinement of a whole mapping says enough).
            return `${issue.message.split("\n")[0].trim()}${missing || (issue.input !== null && typeof issue.input === "object") ? "" : `, got ${found(issue.input)}`}`;
    }
}

const ARTICLES: Record<string, string> = {
    number: "a number",
    int: "a whole number",
    string: "a string",
    boolean: "true or false",
    array: "a list",
    object: "a mapping",
    record: "a mapping",
};

function article(expected: string): string {
    return ARTICLES[expected] ?? expected;
}

/** What the user wrote, described without echoing much of it. */
export function found(value: unknown): string {
    if (value === null) return "null (an empty value)";
    if (Array.isArray(value)) return `a list of ${value.length}`;
    switch (typeof value) {
        case "string":
            // Short values only: a long one may be a pasted secret.
            return value.length > 40 ? `a string of ${value.length} characters` : `the string ${JSON.stringify(value)}`;
        case "number":
        case "bigint":
            return `the number ${value}`;
        case "boolean":
            return String(value);
        case "object":
            return "a mapping";
        default:
            return typeof value;
    }
}
