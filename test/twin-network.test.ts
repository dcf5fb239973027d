import { spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { GUESTS, TWIN_NAMES } from "../twin/contract";
import { dnsmasqConfig, firewallRuleset, TwinError } from "../twin/network";
import { isRoot, toolsAvailable } from "./helpers/tools";

/**
 * The twin's network configuration as rendered (e2e-twin.test.ts probes it live):
 * dnsmasq answers only the twin's names and forwards nothing; the hcloud Firewall
 * stand-in is the plan's rules and refuses what it cannot model.
 */

const PLAN_RULES = [
    { direction: "in", protocol: "udp", port: "41641", sourceIps: ["0.0.0.0/0", "::/0"] },
    { direction: "in", protocol: "icmp", sourceIps: ["0.0.0.0/0", "::/0"] },
];

describe("the twin's network", () => {
    it("dnsmasq: fixed leases per guest, the twin's names only, no upstream", () => {
        const conf = dnsmasqConfig("/run/airlock-twin/x");
        for (const guest of Object.values(GUESTS)) expect(conf).toContain(`dhcp-host=${guest.mac},${guest.address}\n`);
        for (const [name, address] of Object.entries(TWIN_NAMES)) expect(conf).toContain(`host-record=${name},${address}\n`);
        expect(conf).toMatch(/^no-resolv$/m);
        expect(conf).toMatch(/^address=\/#\/$/m);
        expect(conf).not.toMatch(/^server=/m);
        expect(conf).toMatch(/^dhcp-range=10\.77\.0\.0,static,/m);
        expect(conf).toMatch(/^dhcp-ignore-names$/m);
    });

    it("the firewall stand-in: the plan's inbound rules per guest, conntrack, then drop", () => {
        const rules = firewallRuleset({ gateway: PLAN_RULES, sandbox: [PLAN_RULES[0], { direction: "in", protocol: "tcp", port: "80-90", sourceIps: ["192.0.2.0/24"] }] });
        expect(rules).toContain(`ip daddr ${GUESTS.gateway.address} jump gateway_in`);
        const chain = (name: string) => new RegExp(`chain ${name} \\{\n([\\s\\S]*?)\n\\t\\}`).exec(rules)![1];
        const sandbox = chain("sandbox_in");
        expect(sandbox.trim().split("\n").map((l) => l.trim())).toEqual([
            "ct state established,related accept",
            "ip saddr 10.77.0.1 udp sport 67 udp dport 68 accept",
            "meta l4proto udp udp dport 41641 accept",
            "ip saddr { 192.0.2.0/24 } meta l4proto tcp tcp dport 80-90 accept",
            "drop",
        ]);
        // No TCP rule for the gateway: port 22 falls through to drop.
        expect(chain("gateway_in")).not.toMatch(/tcp/);
    });

    it("refuses what it does not model", () => {
        expect(() => firewallRuleset({ gateway: [{ direction: "out", protocol: "tcp", port: "443", destinationIps: ["0.0.0.0/0"] }] })).toThrow(TwinError);
        expect(() => firewallRuleset({ gateway: [{ direction: "in", protocol: "sctp", sourceIps: ["0.0.0.0/0"] }] })).toThrow(/sctp/);
    });

    const canCheck = isRoot() && toolsAvailable("the twin's firewall ruleset (nft --check)", ["nft", "ip"]);
    it.runIf(canCheck)("nft accepts the ruleset", () => {
        const ns = `airlock-twin-nftcheck-${process.pid}`;
        spawnSync("ip", ["netns", "add", ns]);
        try {
            const result = spawnSync("ip", ["netns", "exec", ns, "nft", "--check", "--file", "-"], { input: firewallRuleset({ gateway: PLAN_RULES, sandbox: PLAN_RULES }), encoding: "utf8" });
            expect(result.stderr).toBe("");
            expect(result.status).toBe(0);
        } finally {
            spawnSync("ip", ["netns", "del", ns]);
        }
    });
});
