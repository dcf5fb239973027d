import { AIRLOCK_ONLY } from "../engine/profile";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { containsUnknown, unverifiable } from "../engine/finding";
import { isWideRange } from "../engine/net";
import { TYPES } from "../engine/resource";

export const hcloudFirewallNoPublicInboundTcp: Rule = {
    kind: "resource",
    types: [TYPES.firewall],
    id: "hcloud-firewall-no-public-inbound-tcp",
    profiles: AIRLOCK_ONLY,
    description:
        "No Hetzner firewall rule lets TCP in from the internet (0.0.0.0/0, ::/0, or any range of /16 (IPv4) or /32 (IPv6) or wider). " +
        "Hosts are reached over the tailnet, which needs only UDP 41641.",
    remediation: "Delete the inbound TCP rule; reach the service over the tailnet instead.",
    check(resource) {
        const rules = resource.inputs.rules;
        if (containsUnknown(rules)) return [unverifiable("the firewall rules", resource.name)];
        const problems: Problem[] = [];
        (Array.isArray(rules) ? rules : []).forEach((rule: any, i: number) => {
            if (String(rule?.direction) !== "in" || String(rule?.protocol).toLowerCase() !== "tcp") return;
            const sources: string[] = Array.isArray(rule.sourceIps) ? rule.sourceIps.map(String) : [];
            const wide = sources.filter(isWideRange);
            if (wide.length > 0 || sources.length === 0) {
                problems.push({ message: `rules[${i}] allows inbound tcp${rule.port ? `/${rule.port}` : ""} from ${wide.join(", ") || "anywhere"}`, where: `rules[${i}]` });
            }
        });
        return problems;
    },
};
