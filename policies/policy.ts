import * as fs from "node:fs";
import * as path from "node:path";
import { ConfigError, ENV_NAME, FORBIDDEN_ENV } from "./contract";
import type { JudgeContext } from "./engine/context";
import { found } from "./engine/describeIssue";
import type { Finding, RuleInfo } from "./engine/finding";
import { PARSE_RULES, PREVIEW_PARSES } from "./engine/judge";
import { SUPPRESSION_RULE } from "./engine/suppressions";
import { RULES } from "./rules";

/**
 * The one policy: policies/config.json, in the format of
 * `pulumi preview --policy-pack-config` (`"all"` and per-policy enforcement levels,
 * and each policy's config). The pack, `plan`, `gate` and `check` all read it; a
 * stack's values are judged against it and never change it.
 */

export type EnforcementLevel = "mandatory" | "advisory" | "disabled";

export interface Policy {
    file: string;
    context: JudgeContext;
    levelOf(ruleId: string): EnforcementLevel;
}

/** Every policy the pack has: the rules, and the "can it be judged at all" checks. */
export const ALL_RULES: RuleInfo[] = [...RULES, ...PARSE_RULES, PREVIEW_PARSES, SUPPRESSION_RULE];

/**
 * policies/config.json beside this module; from the compiled copy (dist/policies/),
 * the one in the source tree.
 */
export const POLICY_FILE = [path.join(__dirname, "config.json"), path.join(__dirname, "..", "..", "policies", "config.json")].find((f) =>
    fs.existsSync(f),
) ?? path.join(__dirname, "config.json");

const LEVELS: EnforcementLevel[] = ["mandatory", "advisory", "disabled"];

/**
 * What each compared value may be; the same checks as the stack schema's. (Checked
 * by hand rather than with zod: loading zod costs as much as starting Node, and
 * `airlock check` reads this file on every run.)
 */
const CONTEXT_FIELDS: Record<keyof JudgeContext, (value: unknown, at: string) => string[]> = {
    agentUser: (value, at) => (typeof value === "string" && /^[a-z_][a-z0-9_-]{0,31}$/.test(value) ? [] : [`${at}: expected a user name, got ${found(value)}`]),
    envAllowlist: (value, at) => {
        if (!Array.isArray(value) || value.length === 0) return [`${at}: expected a list of at least 1 variable name, got ${found(value)}`];
        return value.flatMap((name, i) =>
            typeof name !== "string" || !ENV_NAME.test(name)
                ? [`${at}[${i}]: expected an exact variable name in upper case (no wildcards), got ${found(name)}`]
                : FORBIDDEN_ENV.test(name)
                  ? [`${at}[${i}]: this variable changes how programs run and may never be passed through`]
                  : [],
        );
    },
    retentionDays: (value, at) =>
        typeof value !== "number" ? [`${at}: expected a number, got ${found(value)}`] : Number.isInteger(value) && value >= 1 ? [] : [`${at}: expected a whole number of at least 1, got ${found(value)}`],
};

const levelProblems = (value: unknown, at: string) =>
    typeof value === "string" && (LEVELS as string[]).includes(value) ? [] : [`${at}: expected one of ${LEVELS.join(", ")}, got ${found(value)}`];

/** Problems with the file's shape, one line each (keyed like `policy.retentionDays`). */
function shapeProblems(raw: unknown): string[] {
    if (raw === null || typeof raw !== "object" || Array.isArray(raw)) return [`(top level): expected a mapping of policy names, got ${found(raw)}`];
    const problems: string[] = [];
    for (const [name, value] of Object.entries(raw)) {
        if (name === "all") {
            problems.push(...levelProblems(value, "all"));
            continue;
        }
        const rule = ALL_RULES.find((r) => r.id === name);
        if (!rule) {
            problems.push(`${name}: no such policy in the airlock pack`);
        } else if (typeof value === "string") {
            problems.push(...levelProblems(value, name));
        } else if (value === null || typeof value !== "object" || Array.isArray(value)) {
            problems.push(`${name}: expected an enforcement level or a mapping, got ${found(value)}`);
        } else {
            for (const [key, v] of Object.entries(value)) {
                if (key === "enforcementLevel") problems.push(...levelProblems(v, `${name}.${key}`));
                else if (rule.compares?.includes(key as keyof JudgeContext)) problems.push(...CONTEXT_FIELDS[key as keyof JudgeContext](v, `${name}.${key}`));
                else problems.push(`${name}: unknown key ${key}${rule.compares ? ` (it takes enforcementLevel, ${rule.compares.join(", ")})` : " (it takes only enforcementLevel)"}`);
            }
        }
    }
    return problems;
}

type Entry = { enforcementLevel?: EnforcementLevel } & Partial<JudgeContext>;

const loaded = new Map<string, Policy>();

/** Reads and validates a policy file; bad input is a ConfigError naming the file and key path. */
export function loadPolicy(file: string = POLICY_FILE): Policy {
    const cached = loaded.get(file);
    if (cached) return cached;
    let text: string;
    try {
        text = fs.readFileSync(file, "utf8");
    } catch (err) {
        throw new ConfigError([`${file}: cannot read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`]);
    }
    let raw: unknown;
    try {
        raw = JSON.parse(text);
    } catch (err) {
        throw new ConfigError([`${file}: not JSON: ${(err as Error).message}`]);
    }
    const problems = shapeProblems(raw);
    if (problems.length > 0) throw new ConfigError(problems.map((p) => `${file}: ${p}`));
    const entries = Object.fromEntries(
        Object.entries(raw as Record<string, unknown>).map(([k, v]) => [k, typeof v === "string" && k !== "all" ? { enforcementLevel: v } : v]),
    ) as Record<string, Entry | undefined> & { all?: EnforcementLevel };
    const levelOf = (ruleId: string): EnforcementLevel => entries[ruleId]?.enforcementLevel ?? entries.all ?? "mandatory";
    const policy: Policy = { file, context: contextOf(file, entries, levelOf), levelOf };
    loaded.set(file, policy);
    return policy;
}

/**
 * One value per compared key: every enabled rule that compares against it must be
 * given it, and all must agree, so no rule quietly judges by another number.
 */
function contextOf(file: string, entries: Record<string, Entry | undefined>, levelOf: (id: string) => EnforcementLevel): JudgeContext {
    const problems: string[] = [];
    const context: Partial<JudgeContext> = {};
    for (const key of Object.keys(CONTEXT_FIELDS) as (keyof JudgeContext)[]) {
        const users = ALL_RULES.filter((rule) => rule.compares?.includes(key) && levelOf(rule.id) !== "disabled");
        let first: { rule: string; value: unknown } | undefined;
        for (const rule of users) {
            const value = entries[rule.id]?.[key];
            if (value === undefined) {
                problems.push(`${file}: ${rule.id}.${key}: missing (this policy compares against it)`);
                continue;
            }
            if (!first) first = { rule: rule.id, value };
            else if (JSON.stringify(value) !== JSON.stringify(first.value)) {
                problems.push(`${file}: ${rule.id}.${key}: ${JSON.stringify(value)} differs from ${first.rule}.${key} ${JSON.stringify(first.value)}`);
            }
        }
        // A value no enabled rule compares against is never used.
        (context as Record<string, unknown>)[key] = first?.value ?? (key === "envAllowlist" ? [] : key === "retentionDays" ? 0 : "");
    }
    if (problems.length > 0) throw new ConfigError(problems);
    return context as JudgeContext;
}

/** Applies enforcement levels: a disabled policy's findings go, an advisory one's are marked. */
export function enforce(findings: Finding[], policy: Policy): Finding[] {
    return findings.flatMap((f) => {
        const lvl = policy.levelOf(f.rule);
        return lvl === "disabled" ? [] : lvl === "advisory" ? [{ ...f, advisory: true }] : [f];
    });
}

/** Findings that fail a gate: the mandatory ones. */
export const failing = (findings: Finding[]) => findings.filter((f) => !f.advisory && !f.suppressed);
