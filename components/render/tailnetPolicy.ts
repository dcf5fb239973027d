/**
 * The tailnet policy airlock needs: the gateway reaches the sandbox on ssh and CDP
 * only, the sandbox reaches the gateway on DNS only, nothing else. Its `tests`
 * make Tailscale itself reject any later edit that breaks that reachability.
 */

export interface TailnetPolicyArgs {
    gatewayTag: string;
    sandboxTag: string;
    tagOwners: string[];
    /** Who may reach the gateway's sshd: the operator login (`airlock secrets push`, the backups' set-up). */
    operators: string[];
}

export interface TailnetPolicy {
    tagOwners: Record<string, string[]>;
    grants: { src: string[]; dst: string[]; ip: string[] }[];
    tests: { src: string; proto?: string; accept?: string[]; deny?: string[] }[];
}

/** What the gateway may open on the sandbox: sshd and the browser's CDP endpoint. */
export const GATEWAY_TO_SANDBOX_PORTS = ["tcp:22", "tcp:9222"];
/** What an operator may open on the gateway: its sshd. */
export const OPERATOR_TO_GATEWAY_PORTS = ["tcp:22"];
/** What the sandbox may open on the gateway: the AdGuard Home resolver. */
export const SANDBOX_TO_GATEWAY_PORTS = ["udp:53", "tcp:53"];

type Destination = (gatewayTag: string, sandboxTag: string) => string;
/**
 * The sandbox is a dead end: beyond the gateway's DNS it reaches nothing - not the
 * gateway's other ports (ssh, the resolver's published port, web, CDP), not
 * another sandbox, not any other device of the tailnet (sampled at both ends of
 * its address range). These are the policy's own tests, so Tailscale rejects an
 * edit that opens any of them.
 */
const SANDBOX_UNREACHABLE_TCP: Destination[] = [
    (gw) => `${gw}:22`, (gw) => `${gw}:80`, (gw) => `${gw}:443`, (gw) => `${gw}:9222`, (gw) => `${gw}:10053`,
    (_, sb) => `${sb}:22`, (_, sb) => `${sb}:9222`,
    () => "100.64.0.1:22", () => "100.127.255.254:443",
];
const SANDBOX_UNREACHABLE_UDP: Destination[] = [(gw) => `${gw}:123`, (gw) => `${gw}:10053`, (gw) => `${gw}:41641`, (_, sb) => `${sb}:53`, () => "100.64.0.1:53"];

export function renderTailnetPolicy({ gatewayTag, sandboxTag, tagOwners, operators }: TailnetPolicyArgs): TailnetPolicy {
    // A test runs as a user or a tag: an autogroup has none to run as.
    const testable = operators.filter((o) => !o.startsWith("autogroup:"));
    return {
        // Every tag the policy names has its owners (Tailscale refuses a policy with an undefined tag).
        tagOwners: Object.fromEntries([gatewayTag, sandboxTag, ...operators.filter((o) => o.startsWith("tag:"))].map((tag) => [tag, [...tagOwners]])),
        grants: [
            { src: [gatewayTag], dst: [sandboxTag], ip: [...GATEWAY_TO_SANDBOX_PORTS] },
            { src: [sandboxTag], dst: [gatewayTag], ip: [...SANDBOX_TO_GATEWAY_PORTS] },
            { src: [...operators], dst: [gatewayTag], ip: [...OPERATOR_TO_GATEWAY_PORTS] },
        ],
        tests: [
            { src: gatewayTag, proto: "tcp", accept: [`${sandboxTag}:22`, `${sandboxTag}:9222`], deny: [`${sandboxTag}:80`, `${sandboxTag}:2375`] },
            { src: sandboxTag, proto: "udp", accept: [`${gatewayTag}:53`], deny: SANDBOX_UNREACHABLE_UDP.map((d) => d(gatewayTag, sandboxTag)) },
            { src: sandboxTag, proto: "tcp", accept: [`${gatewayTag}:53`], deny: SANDBOX_UNREACHABLE_TCP.map((d) => d(gatewayTag, sandboxTag)) },
            // An operator reaches the gateway's sshd, and neither the sandbox nor the resolver's port.
            ...testable.map((src) => ({ src, proto: "tcp", accept: [`${gatewayTag}:22`], deny: [`${sandboxTag}:22`, `${sandboxTag}:9222`, `${gatewayTag}:10053`] })),
        ],
    };
}

/** The HuJSON text Tailscale stores (plain JSON is valid HuJSON). */
export function tailnetPolicyText(policy: TailnetPolicy): string {
    return `${JSON.stringify(policy, null, 2)}\n`;
}
