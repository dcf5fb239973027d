import * as fs from "node:fs";
import * as path from "node:path";
import { z } from "zod";
import { ConfigError, ENV_NAME, FORBIDDEN_ENV } from "./contract";
import type { JudgeContext } from "./engine/context";
import { describeIssue, keyPath } from "./engine/describeIssue";
import type { Finding, RuleInfo } from "./engine/finding";
import { PARSE_RULES } from "./engine/judge";
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
export const ALL_RULES: RuleInfo[] = [...RULES, ...PARSE_RULES];

/**
 * policies/config.json beside this module; from the compiled copy (dist/policies/),
 * the one in the source tree.
 */
export const POLICY_FILE = [path.join(__dirname, "config.json"), path.join(__dirname, "..", "..", "policies", "config.json")].find((f) =>
    fs.existsSync(f),
) ?? path.join(__dirname, "config.json");

const level = z.enum(["mandatory", "advisory", "disabled"]);

/** What each compared value may be; the same checks as the stack schema's. */
const CONTEXT_FIELDS = {
    agentUser: z.string().regex(/^[a-z_][a-z0-9_-]{0,31}$/, "expected a user name"),
    envAllowlist: z
        .array(
            z
                .string()
                .regex(ENV_NAME, "expected an exact variable name in upper case (no wildcards)")
                .refine((name) => !FORBIDDEN_ENV.test(name), { message: "this variable changes how programs run and may never be passed through" }),
        )
        .min(1),
    retentionDays: z.number().int().min(1),
} satisfies Record<keyof JudgeContext, z.ZodType>;

/** A policy's entry: a level, or an object with a level and the values its rule compares against. */
function entrySchema(rule: RuleInfo) {
    const fields = Object.fromEntries((rule.compares ?? []).map((key) => [key, CONTEXT_FIELDS[key].optional()]));
    return z.preprocess(
        (value) => (typeof value === "string" ? { enforcementLevel: value } : value),
        z.strictObject({ enforcementLevel: level.optional(), ...fields }),
    );
}

const policySchema = z.strictObject({
    all: level.optional(),
    ...Object.fromEntries(ALL_RULES.map((rule) => [rule.id, entrySchema(rule).optional()])),
});

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
    const result = policySchema.safeParse(raw, { reportInput: true });
    if (!result.success) {
        throw new ConfigError(
            result.error.issues.map((issue) =>
                issue.code === "unrecognized_keys" && issue.path.length === 0
                    ? `${file}: ${issue.keys.join(", ")}: no such policy in the airlock pack`
                    : `${file}: ${keyPath(issue.path) || "(top level)"}: ${describeIssue(issue)}`,
            ),
        );
    }
    const entries = result.data as Record<string, Entry | undefined> & { all?: EnforcementLevel };
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
export const failing = (findings: Finding[]) => findings.filter((f) => !f.advisory);
