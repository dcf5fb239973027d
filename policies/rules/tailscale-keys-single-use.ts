import { AIRLOCK_ONLY } from "../engine/profile";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { isUnknown, unverifiable } from "../engine/finding";
import { TYPES } from "../engine/resource";

const isSandboxKey = (name: string, tags: unknown) =>
    /sandbox/i.test(name) || (Array.isArray(tags) && tags.some((t) => /sandbox/i.test(String(t))));

export const tailscaleKeysSingleUse: Rule = {
    kind: "resource",
    types: [TYPES.tailnetKey],
    id: "tailscale-keys-single-use",
    profiles: AIRLOCK_ONLY,
    description:
        "Tailnet join keys are single-use (not reusable), pre-authorized and tagged; a sandbox's key is also ephemeral, so a " +
        "destroyed sandbox leaves the tailnet. A leaked used key is then worthless.",
    remediation: "Set `reusable: false`, `preauthorized: true`, `tags: [<host tag>]`, and `ephemeral: true` for sandboxes.",
    check(resource) {
        const { reusable, ephemeral, preauthorized, tags } = resource.inputs;
        const problems: Problem[] = [];
        for (const [field, value] of Object.entries({ reusable, ephemeral, preauthorized, tags })) {
            if (isUnknown(value)) problems.push(unverifiable(field, resource.name));
        }
        if (problems.length > 0) return problems;
        if (reusable !== false) problems.push({ message: `key ${resource.name} is reusable`, where: "reusable" });
        if (preauthorized !== true) problems.push({ message: `key ${resource.name} is not pre-authorized`, where: "preauthorized" });
        if (!Array.isArray(tags) || tags.length === 0) problems.push({ message: `key ${resource.name} carries no tag`, where: "tags" });
        if (isSandboxKey(resource.name, tags) && ephemeral !== true) problems.push({ message: `sandbox key ${resource.name} is not ephemeral`, where: "ephemeral" });
        return problems;
    },
};
