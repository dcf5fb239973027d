import type {
    EnforcementLevel,
    PolicyResource,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
} from "@pulumi/policy";
import type { JudgeContext } from "./engine/context";
import type { Finding, RuleInfo } from "./engine/finding";
import { formatForPolicy } from "./engine/format";
import { judgeResource, PARSE_RULES } from "./engine/judge";
import type { PlannedResourceLike } from "./engine/resource";
import { loadPolicy, Policy } from "./policy";
import { RULES } from "./rules";

/**
 * The CrossGuard pack: one policy per rule id, a thin adapter over the same
 * judge functions `airlock check` and `airlock gate` use. Levels and the values
 * rules compare against come from policies/config.json - the file the workflow
 * also passes as --policy-pack-config - so with or without it the pack judges alike.
 */

const JSON_TYPES: Record<keyof JudgeContext, object> = {
    agentUser: { type: "string" },
    envAllowlist: { type: "array", items: { type: "string" } },
    retentionDays: { type: "integer", minimum: 1 },
};

/** A policy's config: the values its rule compares against, defaulting to the policy file's. */
function configSchema(rule: RuleInfo, policy: Policy) {
    const keys = rule.compares ?? [];
    if (keys.length === 0) return undefined;
    return { properties: Object.fromEntries(keys.map((key) => [key, { ...JSON_TYPES[key], default: policy.context[key] }])) } as any;
}

function contextOf(args: { getConfig<T extends object>(): T }, policy: Policy): JudgeContext {
    return { ...policy.context, ...args.getConfig<Partial<JudgeContext>>() };
}

/** @pulumi/policy wraps props in a proxy that throws on unknowns; rules want plain values with unknown sentinels. */
export function plainProps(props: Record<string, any>): Record<string, unknown> {
    const raw = (props as any).__getSpecialProxyTarget ?? props;
    const unwrap = (value: any): unknown => {
        if (Array.isArray(value)) return value.map(unwrap);
        if (value !== null && typeof value === "object") {
            // A Secret's plaintext is judged like any value; findings never echo secrets.
            if (value.constructor?.name === "Secret" && "value" in value) return unwrap(value.value);
            return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, unwrap(v)]));
        }
        return value;
    };
    return unwrap(raw) as Record<string, unknown>;
}

function asPlanned(r: { urn: string; type: string; name: string; props: Record<string, any>; parent?: PolicyResource }): PlannedResourceLike {
    return { urn: r.urn, type: r.type, name: r.name, parent: r.parent?.urn, inputs: plainProps(r.props) };
}

// Each resource is judged once per context (policies may be configured differently);
// every policy then reports its own rule's findings.
const judged = new WeakMap<object, Map<string, Finding[]>>();

function findingsFor(args: ResourceValidationArgs, policy: Policy): Finding[] {
    const ctx = contextOf(args, policy);
    const byContext = judged.get(args.props) ?? new Map<string, Finding[]>();
    judged.set(args.props, byContext);
    const key = JSON.stringify(ctx);
    let findings = byContext.get(key);
    if (!findings) {
        findings = judgeResource(asPlanned(args), ctx);
        byContext.set(key, findings);
    }
    return findings;
}

function report(findings: Finding[], ruleId: string, reportViolation: ReportViolation, urn?: string): void {
    for (const f of findings.filter((x) => x.rule === ruleId)) reportViolation(formatForPolicy(f), f.resource ?? urn);
}

export function airlockPolicies(policy: Policy = loadPolicy()): (ResourceValidationPolicy | StackValidationPolicy)[] {
    // A stack-file rule has no place in the pack: CrossGuard hands policies resources, never the stack file.
    const perResource = [...RULES.filter((r) => r.kind !== "stack" && r.kind !== "stack-file"), ...PARSE_RULES].map(
        (rule): ResourceValidationPolicy => ({
            name: rule.id,
            description: `${rule.description} Fix: ${rule.remediation}`,
            enforcementLevel: policy.levelOf(rule.id) as EnforcementLevel,
            configSchema: configSchema(rule, policy),
            validateResource: (args, reportViolation) => report(findingsFor(args, policy), rule.id, reportViolation, args.urn),
        }),
    );
    const perStack = RULES.filter((r) => r.kind === "stack").map(
        (rule): StackValidationPolicy => ({
            name: rule.id,
            description: `${rule.description} Fix: ${rule.remediation}`,
            enforcementLevel: policy.levelOf(rule.id) as EnforcementLevel,
            configSchema: configSchema(rule, policy),
            validateStack: (args: StackValidationArgs, reportViolation) => {
                if (rule.kind !== "stack") return;
                const problems = rule.check(args.resources.map(asPlanned), contextOf(args, policy));
                for (const p of problems) reportViolation(formatForPolicy({ ...p, rule: rule.id, remediation: rule.remediation }), p.where);
            },
        }),
    );
    return [...perResource, ...perStack];
}
