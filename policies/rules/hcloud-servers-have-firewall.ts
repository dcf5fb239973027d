import { AIRLOCK_ONLY } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { isUnknown, unverifiable } from "../engine/finding";
import { TYPES } from "../engine/resource";

export const hcloudServersHaveFirewall: Rule = {
    kind: "resource",
    types: [TYPES.server],
    id: "hcloud-servers-have-firewall",
    profiles: AIRLOCK_ONLY,
    description:
        "Every server is created with a firewall attached (firewallIds), so it never boots unprotected. " +
        "An id not known yet (a firewall created in the same update) counts as attached.",
    remediation: "Pass the firewall at creation: `firewallIds: [firewall.id.apply(Number)]`.",
    check(resource) {
        const ids = resource.inputs.firewallIds;
        if (isUnknown(ids)) return [unverifiable("the firewallIds list", resource.name)];
        if (!Array.isArray(ids) || ids.length === 0) return [{ message: `server ${resource.name} has no firewall attached at creation`, where: "firewallIds" }];
        if (resource.inputs.ignoreRemoteFirewallIds === true) {
            return [{ message: `server ${resource.name} ignores firewalls attached elsewhere (ignoreRemoteFirewallIds)`, where: "ignoreRemoteFirewallIds" }];
        }
        return [];
    },
};
