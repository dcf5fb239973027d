import * as fs from "node:fs";
import * as YAML from "yaml";
import type { ResourceValidationArgs } from "@pulumi/policy";
import { loadPolicy } from "../../policies/policy";
import type { Finding } from "../../policies/engine/finding";
import { judgeCloudInit, judgeCompose, judgeResources, judgeSshd } from "../../policies/engine/judge";
import type { PlannedResourceLike } from "../../policies/engine/resource";
import { airlockPolicies } from "../../policies/pack";

/** What the shipped policy (policies/config.json) has the rules compare against. */
export const CONTEXT = loadPolicy().context;

export const DIGEST = `sha256:${"ab12".repeat(16)}`;

/** A compose service that passes every container rule. */
export function hardenedService(): Record<string, any> {
    return {
        image: `registry.example/agent-shell:1.0@${DIGEST}`,
        cap_drop: ["ALL"],
        cap_add: ["CHOWN", "SETUID", "SETGID"],
        security_opt: ["no-new-privileges:true"],
        pids_limit: 256,
        mem_limit: "3g",
        read_only: true,
        tmpfs: ["/tmp", "/run"],
        volumes: ["./workspace:/workspace", "cache:/home/agent/.cache"],
        ports: ["127.0.0.1:8080:8080", "100.100.7.1:9222:9222"],
    };
}

export function composeText(services: Record<string, any>, extra: Record<string, any> = {}): string {
    return YAML.stringify({ services, ...extra });
}

export const ruleIds = (findings: Finding[]) => [...new Set(findings.map((f) => f.rule))].sort();

export const compose = (text: string, file?: string) => judgeCompose(text, CONTEXT, { file });
export const sshd = (text: string) => judgeSshd(text, CONTEXT, { file: "sshd_config" });
export const cloudInit = (text: string) => judgeCloudInit(text, CONTEXT, { file: "user-data" });
export const resources = (list: PlannedResourceLike[]) => judgeResources(list, CONTEXT);

export function resource(type: string, name: string, inputs: Record<string, unknown>, parent?: string): PlannedResourceLike {
    return { urn: `urn:pulumi:test::airlock::${type}::${name}`, type, name, inputs, parent };
}

/** Fake ResourceValidationArgs, as CrossGuard builds them, for one resource. */
export function validationArgs(r: PlannedResourceLike, config: Record<string, unknown> = {}): ResourceValidationArgs {
    return {
        type: r.type,
        props: r.inputs as Record<string, any>,
        urn: r.urn,
        name: r.name,
        opts: {} as any,
        stackTags: new Map(),
        isType: () => false,
        asType: () => undefined,
        getConfig: <T extends object>() => config as T,
        notApplicable: () => {
            throw new Error("notApplicable");
        },
    } as unknown as ResourceValidationArgs;
}

/**
 * The config CrossGuard hands one policy for `--policy-pack-config FILE`: the
 * policy's schema defaults, overridden by its entry in FILE.
 */
export function policyPackConfig(file: string): (policy: PolicyLike) => Record<string, unknown> {
    const entries = JSON.parse(fs.readFileSync(file, "utf8")) as Record<string, unknown>;
    return (policy) => {
        const defaults = Object.fromEntries(Object.entries(policy.configSchema?.properties ?? {}).map(([k, v]) => [k, (v as { default?: unknown }).default]));
        const entry = entries[policy.name];
        return { ...defaults, ...(entry !== null && typeof entry === "object" ? entry : {}) };
    };
}

type PolicyLike = { name: string; configSchema?: { properties?: Record<string, unknown> } };

/** Runs every resource policy of the pack on one resource; returns policy name -> messages. */
export async function runPack(
    r: PlannedResourceLike,
    config: Record<string, unknown> | ((policy: PolicyLike) => Record<string, unknown>) = {},
): Promise<Map<string, string[]>> {
    const reports = new Map<string, string[]>();
    for (const policy of airlockPolicies()) {
        if (!("validateResource" in policy) || !policy.validateResource) continue;
        const validations = Array.isArray(policy.validateResource) ? policy.validateResource : [policy.validateResource];
        const given = typeof config === "function" ? config(policy) : config;
        for (const validate of validations) {
            await validate(validationArgs(r, given), (message) => reports.set(policy.name, [...(reports.get(policy.name) ?? []), message]));
        }
    }
    return reports;
}
