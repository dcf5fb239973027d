import type { JudgeContext } from "./context";
import type { Profile } from "./profile";

/** What every rule returns, and what every front end (pack, check, gate) prints. */

export interface Problem {
    message: string;
    /** 1-based line in the artifact, where known. */
    line?: number;
    /** The service, keyword, key path or resource the problem is about. */
    where?: string;
    /** The line where `where` itself is written (a service's name), when `line` is a key inside it: a suppression there covers the finding too. */
    subjectLine?: number;
    /** The rule needed a value it could not see: fail closed. */
    unverifiable?: boolean;
    /** A fix for this case, when the rule's general remediation would be wrong or vague for it. */
    fix?: string;
    /** This finding belongs to fewer profiles than its rule (a stricter reading of the same rule). */
    profiles?: readonly Profile[];
}

/** A file inside the one judged: a write_files entry, a Stash's cloud-init.yaml. */
export interface InnerLocation {
    file: string;
    line?: number;
}

export interface Finding extends Problem {
    rule: string;
    remediation: string;
    /** The file `line` is in: the file checked, or the artifact's name inside a resource (front ends set a real path). */
    file?: string;
    /** Files nested inside `file`, outermost first, down to the one the problem is in. */
    within?: InnerLocation[];
    /** URN of the resource the artifact came from (gate, pack). */
    resource?: string;
    /** Set by the policy's enforcement level: an advisory finding is reported but does not fail. */
    advisory?: boolean;
    /** Accepted on purpose (an inline suppression, a baseline): reported, never failing. */
    suppressed?: { kind: "inSource" | "external"; justification: string };
}

export interface RuleInfo {
    /** Kebab-case, named for what it asserts. */
    id: string;
    /** One or two sentences a reviewer understands. */
    description: string;
    /** How to fix a finding. */
    remediation: string;
    /** The profiles that judge with it (see profile.ts): every rule is in `airlock`, the general hardening also in `generic`. */
    profiles: readonly Profile[];
    /** What this rule compares against, from policies/config.json. */
    compares?: (keyof JudgeContext)[];
}

/** Values Pulumi uses for "not known yet" (engine and @pulumi/policy sentinels). */
const UNKNOWN_SENTINELS = new Set([
    "04da6b54-80e4-46f7-96ec-b56ff0331ba9",
    "1c4a061d-8072-4f0a-a4cb-0ff528b18fe7",
    "3eeb2bf0-c639-47a8-9e75-3b44932eb421",
    "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2",
    "030794c1-ac77-496b-92df-f27374a8bd58",
    "e48ece36-62e2-4504-bad9-02848725956a",
    "dd056dcd-154b-4c76-9bd3-c8f88648b5ff",
]);

export function isUnknown(value: unknown): boolean {
    return typeof value === "string" && UNKNOWN_SENTINELS.has(value);
}

/** How `pulumi preview --json` and `pulumi stack export` print a secret they do not reveal. */
export const REDACTED_SECRET = "[secret]";

/** Not visible to a rule: unknown, or a secret the output redacted. */
export function isHidden(value: unknown): boolean {
    return isUnknown(value) || value === REDACTED_SECRET;
}

/** True when the value or anything inside it is unknown. */
export function containsUnknown(value: unknown): boolean {
    if (isUnknown(value)) return true;
    if (Array.isArray(value)) return value.some(containsUnknown);
    if (value !== null && typeof value === "object") return Object.values(value).some(containsUnknown);
    return false;
}

export function unverifiable(what: string, where?: string): Problem {
    return { message: `unverifiable: ${what} is not known, so this rule cannot pass`, where, unverifiable: true };
}
