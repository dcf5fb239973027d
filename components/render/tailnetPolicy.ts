/**
 * The tailnet policy airlock needs: the gateway reaches the sandbox on ssh and CDP
 * only, the sandbox reaches the gateway on DNS only, nothing else. Its `tests`
 * make Tailscale itself reject any later edit that breaks that reachability.
 */

export interface TailnetPolicyArgs {
    gatewayTag: string;
    sandboxTag: string;
    tagOwners: string[];
}

export interface TailnetPolicy {
    tagOwners: Record<string, string[]>;
    grants: { src: string[]; dst: string[]; ip: string[] }[];
    tests: { src: string; proto?: string; accept?: string[]; deny?: string[] }[];
}

/** What the gateway may open on the sandbox: sshd and the browser's CDP endpoint. */
export const GATEWAY_TO_SANDBOX_PORTS = ["tcp:22", "tcp:9222"];
/** What the sandbox may open on the gateway: the AdGuard Home resolver. */
export const SANDBOX_TO_GATEWAY_PORTS = ["udp:53", "tcp:53"];

export function renderTailnetPolicy({ gatewayTag, sandboxTag, tagOwners }: TailnetPolicyArgs): TailnetPolicy {
    return {
        tagOwners: {
            [gatewayTag]: [...tagOwners],
            [sandboxTag]: [...tagOwners],
        },
        grants: [
            { src: [gatewayTag], dst: [sandboxTag], ip: [...GATEWAY_TO_SANDBOX_PORTS] },
            { src: [sandboxTag], dst: [gatewayTag], ip: [...SANDBOX_TO_GATEWAY_PORTS] },
        ],
        tests: [
            { src: gatewayTag, proto: "tcp", accept: [`${sandboxTag}:22`, `${sandboxTag}:9222`], deny: [`${sandboxTag}:80`, `${sandboxTag}:2375`] },
            { src: sandboxTag, proto: "udp", accept: [`${gatewayTag}:53`] },
            // The sandbox is a dead end: no ssh back to the gateway, nothing else on it,
            // and no lateral movement to other sandboxes.
            { src: sandboxTag, proto: "tcp", deny: [`${gatewayTag}:22`, `${gatewayTag}:443`, `${gatewayTag}:9222`, `${sandboxTag}:22`] },
        ],
    };
}

/** The HuJSON text Tailscale stores (plain JSON is valid HuJSON). */
export function tailnetPolicyText(policy: TailnetPolicy): string {
    return `${JSON.stringify(policy, null, 2)}\n`;
}
