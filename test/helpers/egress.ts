import { EGRESS_RULES_PATH, RenderedHost } from "../../components/render/hosts";
import { renderedFile } from "./stacks";
import { run } from "./tools";

/**
 * The sandbox's egress rules, exercised by the kernel: a network namespace of the
 * test's own with a "tailnet" and a "public" interface whose peers drop everything
 * they receive. A datagram a rule drops fails at once with EPERM; one that no rule
 * drops is sent (and goes nowhere off this machine).
 */

/** Shell commands that give the current (new, empty) network namespace its two interfaces. */
export const SANDBOX_INTERFACES = [
    "ip link set lo up",
    "ip link add eth0 type veth peer name eth0-void",
    "ip link add tailscale0 type veth peer name ts0-void",
    "ip link set eth0-void up",
    "ip link set ts0-void up",
    "ip addr add 10.9.0.2/24 dev eth0",
    "ip link set eth0 up",
    "ip route add default via 10.9.0.1",
    "ip addr add 100.100.7.1/32 dev tailscale0",
    "ip link set tailscale0 up",
    "ip route add 100.64.0.0/10 dev tailscale0",
    "ip -6 addr add fd7a:115c:a1e0::1/128 dev tailscale0 nodad",
    "ip -6 route add fd7a:115c:a1e0::/48 dev tailscale0",
].join(" && ");

/** The rendered rules with the agent's uid moved to `uid` (the test's stand-in for the agent); its subordinate ids stay. */
export function egressRulesFor(sandbox: RenderedHost, agentUid: number, uid: number): string {
    const rules = renderedFile(sandbox, EGRESS_RULES_PATH);
    const marker = `meta skuid { ${agentUid}, `;
    if (!rules.includes(marker)) throw new Error(`the egress rules no longer say "${marker}"`);
    return rules.replace(marker, `meta skuid { ${uid}, `);
}

/**
 * argv that runs `argv` as uid 0 of a new user and network namespace with the
 * sandbox's interfaces and, when given, the rules in `rulesFile` loaded. Needs no
 * privilege on the machine.
 */
export function inEgressNamespace(rulesFile: string | undefined, argv: string[]): string[] {
    const load = rulesFile ? ' && nft --file "$0"' : "";
    return ["unshare", "--user", "--map-root-user", "--net", "bash", "--norc", "--noprofile", "-c", `${SANDBOX_INTERFACES}${load} && exec "$@"`, rulesFile ?? "-", ...argv];
}

/** What happens to a datagram sent to `address`/`port` by the calling process: "blocked" (EPERM) or "sent". */
export const PROBE_SCRIPT = `if err="$(LC_ALL=C bash -c "printf x >/dev/udp/$0/$1" 2>&1)"; then echo sent; elif [[ "$err" == *"Operation not permitted"* ]]; then echo blocked; else echo "failed: $err"; fi`;

/** Probes from inside network namespace `netns`, as the numeric `uid` (no account needed). */
export function probeAsUid(netns: string, uid: number, address: string, port: number): string {
    const result = run("ip", ["netns", "exec", netns, "setpriv", `--reuid=${uid}`, `--regid=${uid}`, "--clear-groups", "--", "bash", "-c", PROBE_SCRIPT, address, String(port)]);
    return result.stdout.trim() || result.stderr.trim();
}

/** Probes from inside network namespace `netns`, as `user`. */
export function probeIn(netns: string, user: string, address: string, port: number): string {
    const result = run("ip", ["netns", "exec", netns, "runuser", "-u", user, "--", "bash", "-c", PROBE_SCRIPT, address, String(port)]);
    return result.stdout.trim() || result.stderr.trim();
}
