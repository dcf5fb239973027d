import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { ConfigError } from "../policies/contract";
import { airlockPolicies } from "../policies/pack";
import { loadPolicy, POLICY_FILE } from "../policies/policy";
import { airlock } from "./helpers/cli";
import { editedStack, REPO, SHIPPED_STACKS, tempDir } from "./helpers/stacks";

/** A policy file: the shipped one with `edit` applied. */
function policyFile(edit: (policy: Record<string, any>) => void): string {
    const policy = JSON.parse(fs.readFileSync(POLICY_FILE, "utf8"));
    edit(policy);
    const file = path.join(tempDir("policy"), "config.json");
    fs.writeFileSync(file, JSON.stringify(policy));
    return file;
}

function problemsOf(file: string): string[] {
    try {
        loadPolicy(file);
    } catch (err) {
        if (err instanceof ConfigError) return err.problems;
        throw err;
    }
    throw new Error(`${file} was accepted`);
}

const UNPINNED = "services:\n  web:\n    image: nginx:1.27\n    cap_drop: [ALL]\n    security_opt: [no-new-privileges:true]\n    pids_limit: 100\n    mem_limit: 1g\n";

describe("one policy: policies/config.json", () => {
    it("is what the workflow passes to `pulumi preview --policy-pack-config`", () => {
        const workflow = YAML.parse(fs.readFileSync(path.join(REPO, ".github/workflows/preview.yml"), "utf8"));
        const commands = Object.values(workflow.jobs as Record<string, { steps: { run?: string }[] }>).flatMap((job) => job.steps.map((s) => s.run ?? ""));
        const packRuns = commands.filter((run) => run.includes("--policy-pack "));
        expect(packRuns.length).toBeGreaterThan(0);
        for (const run of packRuns) expect(run).toMatch(/--policy-pack policies --policy-pack-config policies\/config\.json(\s|$)/);
        expect(fs.existsSync(path.join(REPO, "policies/config.example.json"))).toBe(false);
        expect(POLICY_FILE).toBe(path.join(REPO, "policies/config.json"));
    });

    it("gives every rule its values, and the pack declares the same levels and defaults", () => {
        const policy = loadPolicy();
        const raw = JSON.parse(fs.readFileSync(POLICY_FILE, "utf8"));
        expect(policy.context).toEqual({
            agentUser: raw["sshd-agent-force-command"].agentUser,
            envAllowlist: raw["sshd-accept-env-allowlist"].envAllowlist,
            retentionDays: raw["b2-buckets-retain-hidden-versions"].retentionDays,
        });
        const b2 = airlockPolicies().find((p) => p.name === "b2-buckets-retain-hidden-versions")!;
        expect((b2.configSchema as any).properties.retentionDays.default).toBe(raw["b2-buckets-retain-hidden-versions"].retentionDays);
        expect(airlockPolicies(loadPolicy(policyFile((p) => (p["containers-no-devices"] = "advisory")))).find((p) => p.name === "containers-no-devices")!.enforcementLevel).toBe("advisory");
    });

    it("a stack cannot lower it: a retention below the policy's fails plan, gate and gate --preview alike", () => {
        const dir = tempDir("lower");
        editedStack("dev", (c) => (c["airlock:backup"].retentionDays = 7), dir);
        const out = path.join(dir, "out");
        const plan = airlock(["--stacks-dir", dir, "plan", "--stack", "dev", "--out", out, "--json"]);
        expect(plan.status).toBe(1);
        const rules = JSON.parse(plan.stdout).findings.map((f: { rule: string }) => f.rule);
        expect(new Set(rules)).toEqual(new Set(["b2-buckets-retain-hidden-versions"]));
        for (const args of [["gate", "--stack", "dev"], ["gate", "--preview", path.join(out, "preview.json")], ["gate", "--preview", path.join(out, "preview.json"), "--stack", "dev"], ["check", path.join(out, "preview.json")]]) {
            const result = airlock(["--stacks-dir", dir, ...args, "--json"]);
            expect(result.status, args.join(" ")).toBe(1);
            expect(JSON.parse(result.stdout).findings.map((f: { rule: string }) => f.rule), args.join(" ")).toEqual(rules);
        }
    });

    it.each(SHIPPED_STACKS)("the shipped %s stack passes the shipped policy", (stack) => {
        expect(airlock(["gate", "--stack", stack]).status).toBe(0);
    });

    it("enforcement levels apply to check and gate: advisory findings are shown and do not fail; disabled ones go", () => {
        const file = path.join(tempDir("levels"), "compose.yml");
        fs.writeFileSync(file, UNPINNED);
        const mandatory = airlock(["check", "--profile", "airlock", file]);
        expect(mandatory.status).toBe(1);
        expect(mandatory.stdout).toContain("containers-images-pinned-by-digest");

        const advisory = airlock(["--policy", policyFile((p) => (p["containers-images-pinned-by-digest"] = "advisory")), "check", "--profile", "airlock", file]);
        expect(advisory.status).toBe(0);
        expect(advisory.stdout).toMatch(/containers-images-pinned-by-digest \(advisory\)/);
        expect(advisory.stdout).toMatch(/^0 violations, 1 advisory$/m);

        const disabled = airlock(["--policy", policyFile((p) => (p["containers-images-pinned-by-digest"] = { enforcementLevel: "disabled" })), "check", "--profile", "airlock", file]);
        expect(disabled.status).toBe(0);
        expect(disabled.stdout).not.toContain("containers-images-pinned-by-digest");

        const allAdvisory = airlock(["--policy", policyFile((p) => (p.all = "advisory")), "check", "--profile", "airlock", file, "--json"]);
        expect(allAdvisory.status).toBe(0);
        expect(JSON.parse(allAdvisory.stdout)).toMatchObject({ violations: 0 });
    });

    it.each<[string, (p: Record<string, any>) => void, string]>([
        ["a wrong type", (p) => (p["b2-buckets-retain-hidden-versions"].retentionDays = "ten"), 'b2-buckets-retain-hidden-versions.retentionDays: expected a number, got the string "ten"'],
        ["a missing value", (p) => delete p["b2-buckets-retain-hidden-versions"].retentionDays, "b2-buckets-retain-hidden-versions.retentionDays: missing (this policy compares against it)"],
        ["two values for one thing", (p) => (p["cloud-init-no-passwordless-sudo-for-agent"].agentUser = "bob"), 'sshd-agent-force-command.agentUser: "agent" differs from cloud-init-no-passwordless-sudo-for-agent.agentUser "bob"'],
        ["an unknown policy", (p) => (p["containers-no-dockr-socket"] = "advisory"), "containers-no-dockr-socket: no such policy in the airlock pack"],
        ["an unknown level", (p) => (p.all = "strict"), 'all: expected one of mandatory, advisory, disabled, got the string "strict"'],
        ["a value a policy does not take", (p) => (p["containers-no-devices"] = { retentionDays: 3 }), "containers-no-devices: unknown key retentionDays"],
        ["a forbidden variable", (p) => p["sshd-accept-env-allowlist"].envAllowlist.push("LD_PRELOAD"), "sshd-accept-env-allowlist.envAllowlist[2]: this variable changes how programs run"],
    ])("a policy file with %s is refused with one line naming the key (exit 2)", (_, edit, message) => {
        const file = policyFile(edit);
        expect(problemsOf(file)).toEqual([`${file}: ${message}`].map((m) => expect.stringContaining(m)));
        const result = airlock(["--policy", file, "check", path.join(REPO, "stacks/Pulumi.dev.yaml"), "--kind", "compose"]);
        expect(result.status).toBe(2);
        expect(result.stderr.trim()).toContain(`${file}: ${message}`);
        expect(result.stderr.trim().split("\n")).toHaveLength(1);
    });

    it("a disabled rule needs no value", () => {
        const file = policyFile((p) => (p["b2-buckets-retain-hidden-versions"] = "disabled"));
        expect(loadPolicy(file).levelOf("b2-buckets-retain-hidden-versions")).toBe("disabled");
    });
});
