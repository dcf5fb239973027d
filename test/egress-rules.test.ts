import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { EGRESS_RULES_PATH } from "../components/render/hosts";
import { AGENT_SUBORDINATE_IDS } from "../components/config/schema";
import { egressRulesFor, probeAsUid, probeIn, SANDBOX_INTERFACES } from "./helpers/egress";
import { editedStack, renderHosts, renderedFile, tempDir } from "./helpers/stacks";
import { isRoot, run, toolsAvailable } from "./helpers/tools";

/**
 * The sandbox's rendered egress rules, loaded into a kernel and attacked: a process
 * of the agent (here `nobody`, the rules' uid moved to it) and one of root send to
 * every kind of destination from a namespace shaped like the sandbox.
 */

const RESOLVER = "100.100.7.53";
const ALLOWED = "203.0.113.10";
const OTHER = "203.0.113.99";
const AGENT = "nobody";

const canRun = isRoot() && toolsAvailable("egress rules in the kernel", ["nft", "ip", "runuser"]);
if (!isRoot()) console.warn("SKIPPED egress rules in the kernel: needs root for a second uid (CI runs it as root)");

function rendered(mode: string) {
    const cfg = readStackFile(editedStack("dev", (c) => (c["airlock:dns"] = { mode, allowlist: ["github.com"] })));
    return { cfg, sandbox: renderHosts(cfg).sandbox };
}

describe.runIf(toolsAvailable("nft --check", ["nft"]) && isRoot())("nft --check", () => {
    it.each(["observe", "allowlist"])("%s: accepts the rendered rules", (mode) => {
        const file = path.join(tempDir("nft"), "egress.nft");
        fs.writeFileSync(file, renderedFile(rendered(mode).sandbox, EGRESS_RULES_PATH));
        const result = run("nft", ["--check", "--file", file]);
        expect(result.stderr, mode).toBe("");
        expect(result.status, mode).toBe(0);
    });
});

describe.runIf(canRun).each(["observe", "allowlist"])("egress rules in the kernel (%s mode)", (mode) => {
    const netns = `al-egress-${mode}-${process.pid % 10000}`;
    const agentUid = Number(run("id", ["-u", AGENT]).stdout.trim());
    const probe = (user: string, address: string, port: number) => probeIn(netns, user, address, port);

    beforeAll(() => {
        const { cfg, sandbox } = rendered(mode);
        const rules = path.join(tempDir("egress"), "egress.nft");
        fs.writeFileSync(rules, egressRulesFor(sandbox, cfg.agent.uid, agentUid));
        run("ip", ["netns", "del", netns]);
        for (const step of [
            ["ip", ["netns", "add", netns]],
            ["ip", ["netns", "exec", netns, "bash", "-c", SANDBOX_INTERFACES]],
            ["ip", ["netns", "exec", netns, "nft", "--file", rules]],
            // What airlock-tailnet-config and airlock-egress-refresh add at boot.
            ["ip", ["netns", "exec", netns, "nft", `add element inet airlock resolver4 { ${RESOLVER} }`]],
            ["ip", ["netns", "exec", netns, "nft", `add element inet airlock allowed4 { ${ALLOWED} }`]],
        ] as const) {
            const result = run(step[0], [...step[1]]);
            if (result.status !== 0) throw new Error(`${step[1].join(" ")}: ${result.stderr}`);
        }
    });

    afterAll(() => {
        run("ip", ["netns", "del", netns]);
    });

    it("the agent never reaches the metadata service", () => {
        expect(probe(AGENT, "169.254.169.254", 80)).toBe("blocked");
    });

    it("on the tailnet, the agent reaches the resolver's port 53 and nothing else", () => {
        expect(probe(AGENT, RESOLVER, 53)).toBe("sent");
        expect(probe(AGENT, RESOLVER, 22)).toBe("blocked");
        expect(probe(AGENT, RESOLVER, 443)).toBe("blocked");
        expect(probe(AGENT, "100.100.8.9", 22)).toBe("blocked");
        expect(probe(AGENT, "100.100.8.9", 53)).toBe("blocked");
        expect(probe(AGENT, "fd7a:115c:a1e0::2", 22)).toBe("blocked");
    });

    it("a process the agent runs under one of its subordinate uids (unshare --map-auto) is still the agent", () => {
        for (const uid of [AGENT_SUBORDINATE_IDS.first, AGENT_SUBORDINATE_IDS.first + 1, AGENT_SUBORDINATE_IDS.last]) {
            expect(probeAsUid(netns, uid, "169.254.169.254", 80), String(uid)).toBe("blocked");
            expect(probeAsUid(netns, uid, "127.0.0.1", 8080), String(uid)).toBe("blocked");
            expect(probeAsUid(netns, uid, "100.100.8.9", 22), String(uid)).toBe("blocked");
        }
        // Just outside the range: another user, not confined.
        expect(probeAsUid(netns, AGENT_SUBORDINATE_IDS.last + 1, "127.0.0.1", 8080)).toBe("sent");
    });

    it("host loopback services are for other users only", () => {
        expect(probe(AGENT, "127.0.0.1", 8080)).toBe("blocked");
        expect(probe(AGENT, "::1", 8080)).toBe("blocked");
        expect(probe("root", "127.0.0.1", 8080)).toBe("sent");
    });

    it("DNS goes to the resolver only, for every user", () => {
        for (const user of [AGENT, "root"]) {
            expect(probe(user, "9.9.9.9", 53)).toBe("blocked");
            expect(probe(user, "9.9.9.9", 853)).toBe("blocked");
        }
        expect(probe("root", RESOLVER, 53)).toBe("sent");
    });

    it("judges only the agent's packets: the kernel's own (IPv6 neighbour discovery) and other users' IPv6 keep working", () => {
        // A neighbour on a link of its own (a second interface), in a namespace of its own, over IPv6.
        const neighbour = `${netns}-nb`;
        run("ip", ["netns", "del", neighbour]);
        try {
            for (const step of [
                ["ip", "netns", "add", neighbour],
                ["ip", "netns", "exec", netns, "ip", "link", "add", "eth1", "type", "veth", "peer", "name", "nb0", "netns", neighbour],
                ["ip", "netns", "exec", neighbour, "ip", "-6", "addr", "add", "fd00:9::2/64", "dev", "nb0", "nodad"],
                ["ip", "netns", "exec", neighbour, "ip", "link", "set", "nb0", "up"],
                ["ip", "netns", "exec", netns, "ip", "-6", "addr", "add", "fd00:9::1/64", "dev", "eth1", "nodad"],
                ["ip", "netns", "exec", netns, "ip", "link", "set", "eth1", "up"],
            ]) {
                const result = run(step[0], step.slice(1));
                if (result.status !== 0) throw new Error(`${step.join(" ")}: ${result.stderr}`);
            }
            // Root's ping needs the neighbour's link-layer address first: the kernel's solicitation has no socket of a user.
            const ping = run("ip", ["netns", "exec", netns, "ping", "-6", "-c", "1", "-W", "3", "fd00:9::2"]);
            expect(ping.status, ping.stdout + ping.stderr).toBe(0);
            expect(probe("root", "fd00:9::2", 443)).toBe("sent");
            // The agent's IPv6 is still judged: in allowlist mode nothing but the allowlist (IPv4) leaves.
            expect(probe(AGENT, "fd00:9::2", 443)).toBe(mode === "allowlist" ? "blocked" : "sent");
        } finally {
            run("ip", ["netns", "del", neighbour]);
        }
    });

    it(`the internet: ${mode === "allowlist" ? "allowlisted addresses on 80/443 only" : "open, and logged by the resolver"}`, () => {
        expect(probe(AGENT, ALLOWED, 443)).toBe("sent");
        expect(probe(AGENT, OTHER, 443)).toBe(mode === "allowlist" ? "blocked" : "sent");
        expect(probe(AGENT, ALLOWED, 22)).toBe(mode === "allowlist" ? "blocked" : "sent");
        // Other users are not confined.
        expect(probe("root", OTHER, 443)).toBe("sent");
    });
});
