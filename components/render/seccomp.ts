import * as YAML from "yaml";
import { z } from "zod";
import { renderTemplate } from "./templates";

/**
 * The seccomp profile of the sandbox's containers: Docker's default profile
 * (templates/docker/seccomp-default.json, unchanged: the hosts' Docker's, Debian 13's 26.1) with ioctl allowed for every
 * request but the `ioctls` of templates/docker/seccomp-denied.yaml, and its
 * `syscalls` refused with their errno.
 *
 * Why ioctl is built this way (each seen on a real dockerd, runc and libseccomp):
 * an unconditional ALLOW of ioctl wins over any conditional ERRNO rule for it,
 * and a rule with two comparisons of the same argument does not enforce both. So
 * ioctl leaves the unconditional list and comes back as several ALLOW rules of one
 * masked comparison each, which together match exactly the requests not denied;
 * a denied request matches none and gets the profile's default action (EPERM).
 */

export const SANDBOX_SECCOMP_PROFILE_PATH = "/etc/airlock/docker-seccomp.json";

const REQUEST_BITS = 32;

const deniedOperations = z
    .object({
        ioctls: z.array(z.object({ name: z.string().min(1), request: z.number().int().min(0).max(2 ** REQUEST_BITS - 1) }).strict()).min(1),
        syscalls: z.array(
            z
                .object({
                    name: z.string().regex(/^[a-z0-9_]+$/),
                    errno: z.number().int().min(1).max(4095),
                    /** Docker's profile names it in no rule (its default action refuses it): only the errno changes. */
                    refusedByDocker: z.boolean().optional(),
                })
                .strict(),
        ),
    })
    .strict();

const syscallRule = z.looseObject({
    names: z.array(z.string()),
    action: z.string(),
    args: z.array(z.unknown()).nullish(),
    includes: z.record(z.string(), z.unknown()).optional(),
    excludes: z.record(z.string(), z.unknown()).optional(),
});
const dockerProfile = z.looseObject({ defaultAction: z.literal("SCMP_ACT_ERRNO"), syscalls: z.array(syscallRule) });

/** A masked comparison of ioctl's request: allowed when (request & mask) === value. */
export interface RequestPattern {
    mask: number;
    value: number;
}

/**
 * "Every 32-bit request but these" as masked comparisons: walk the bits from the
 * top; a branch no denied request takes is one pattern, a branch that ends at a
 * denied request is none. (Seven denied requests: 116 patterns.)
 */
export function allowedRequestPatterns(denied: number[]): RequestPattern[] {
    const patterns: RequestPattern[] = [];
    const cover = (bit: number, mask: number, value: number, inBranch: number[]) => {
        if (inBranch.length === 0) return void patterns.push({ mask, value });
        if (bit < 0) return;
        const flag = 2 ** bit;
        for (const set of [0, 1]) cover(bit - 1, mask + flag, value + set * flag, inBranch.filter((request) => (Math.floor(request / flag) % 2) === set));
    };
    cover(REQUEST_BITS - 1, 0, 0, [...new Set(denied)]);
    return patterns;
}

export function renderSandboxSeccompProfile(): string {
    const deny = deniedOperations.parse(YAML.parse(renderTemplate("docker/seccomp-denied.yaml", {})));
    const profile = dockerProfile.parse(JSON.parse(renderTemplate("docker/seccomp-default.json", {})));
    const withIoctl = profile.syscalls.filter((rule) => rule.names.includes("ioctl"));
    const [allowAll] = withIoctl;
    const unconditional = (rule: typeof allowAll) =>
        rule.action === "SCMP_ACT_ALLOW" && !rule.args?.length && Object.keys(rule.includes ?? {}).length === 0 && Object.keys(rule.excludes ?? {}).length === 0;
    if (withIoctl.length !== 1 || !unconditional(allowAll)) {
        throw new Error("templates/docker/seccomp-default.json: expected ioctl in exactly one rule, an unconditional ALLOW");
    }
    const refused = new Set(deny.syscalls.map((s) => s.name));
    if (refused.has("ioctl")) throw new Error("templates/docker/seccomp-denied.yaml: ioctl is narrowed by its requests (ioctls), not refused whole");
    // A name in no rule of Docker's profile is a typo unless it says Docker refuses it; one that says so must be in none.
    for (const { name, refusedByDocker } of deny.syscalls) {
        const named = profile.syscalls.some((rule) => rule.names.includes(name));
        if (!named && !refusedByDocker) throw new Error(`templates/docker/seccomp-denied.yaml: ${name} is in no rule of Docker's profile`);
        if (named && refusedByDocker) throw new Error(`templates/docker/seccomp-denied.yaml: ${name} is in a rule of Docker's profile, though refusedByDocker says it is in none`);
    }
    const ioctlRules = allowedRequestPatterns(deny.ioctls.map((d) => d.request)).map(({ mask, value }) => ({
        names: ["ioctl"],
        action: "SCMP_ACT_ALLOW",
        args: [{ index: 1, value: mask, valueTwo: value, op: "SCMP_CMP_MASKED_EQ" }],
    }));
    const syscalls = [
        ...profile.syscalls.flatMap((rule) => {
            // ioctl is in allowAll alone (checked above): it comes back as ioctlRules.
            const kept = { ...rule, names: rule.names.filter((name) => !refused.has(name) && name !== "ioctl") };
            return [...(kept.names.length > 0 ? [kept] : []), ...(rule === allowAll ? ioctlRules : [])];
        }),
        ...deny.syscalls.map(({ name, errno }) => ({ names: [name], action: "SCMP_ACT_ERRNO", errnoRet: errno })),
    ];
    // One rule per line: readable with grep, and a third of the size indented JSON takes in user_data.
    const { syscalls: _replaced, ...rest } = profile;
    return `${JSON.stringify(rest).slice(0, -1)},"syscalls":[\n${syscalls.map((rule) => JSON.stringify(rule)).join(",\n")}\n]}\n`;
}
