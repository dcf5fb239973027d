import { describe, expect, it } from "vitest";
import { evaluateChecklist } from "../cli/checklist";
import { gatePlan } from "../cli/gate";
import { planStack } from "../cli/offline";
import { editedStack } from "./helpers/stacks";

/**
 * The checklist's "automation boundaries": automatic where the stack shows them (the
 * GitHub App's scopes, the runtime's secrets and terminal), manual with instructions
 * where it cannot. Each case changes ONE thing in dev and expects the matching item.
 */

type Edit = (c: Record<string, any>) => void;

const app = (github: Record<string, unknown>): Edit => (c) => (c["airlock:gateway"].github = { appId: 9, installationId: 8, repositories: ["acme/app"], ...github });
const secrets = (...names: string[]): Edit => (c) => (c["airlock:gateway"].agent.secrets = Object.fromEntries(names.map((n) => [n, { secure: "v1:x" }])));

async function itemsOf(...edits: Edit[]) {
    const plan = await planStack(editedStack("dev", (c) => edits.forEach((e) => e(c))), "dev");
    return Object.fromEntries(evaluateChecklist(plan, gatePlan(plan)).filter((i) => i.section === "automation boundaries").map((i) => [i.id, i]));
}

const LEAST = { maxPermissions: { contents: "read", pull_requests: "write" } };

describe("checklist: automation boundaries", () => {
    it("a least-privilege App, a runtime with model and chat keys: every automatic item passes with its evidence", async () => {
        const items = await itemsOf(app(LEAST), secrets("ANTHROPIC_API_KEY", "SLACK_BOT_TOKEN", "GITHUB_APP_PRIVATE_KEY"));
        expect(items["github-no-merge-or-admin"]).toMatchObject({ status: "pass", detail: "maxPermissions contents:read, pull_requests:write" });
        expect(items["high-impact-needs-approval"]).toMatchObject({ status: "pass", detail: "no high-impact scope can be minted" });
        expect(items["agent-tokens-are-scoped"]).toMatchObject({ status: "pass", detail: expect.stringContaining("for acme/app only") });
        expect(items["agent-no-deploy-credentials"]).toMatchObject({ status: "pass", detail: "agent secrets: ANTHROPIC_API_KEY, GITHUB_APP_PRIVATE_KEY, SLACK_BOT_TOKEN" });
        expect(items["runtime-commands-in-sandbox"]).toMatchObject({ status: "pass", detail: "Hermes's managed terminal: ssh to sandbox (airlock-dev-sandbox) as agent, cwd /workspace; started through airlock-hermes-preflight" });
        expect(items["default-branch-protected"].status).toBe("manual");
    });

    it.each<[string, Edit, string, string]>([
        ["merge-capable contents:write allowed without approval", app({ maxPermissions: { contents: "write" }, allowHighImpact: ["contents:write"] }), "github-no-merge-or-admin",
            "contents:write (can merge pull requests and push to any unprotected branch) is minted without a human's approval"],
        ["administration allowed without approval", app({ maxPermissions: { administration: "read" }, allowHighImpact: ["administration:*"] }), "github-no-merge-or-admin",
            "administration:read (changes settings, branch protection and collaborators) is minted without a human's approval"],
        ["actions:write (deploys) allowed without approval", app({ maxPermissions: { actions: "write" }, allowHighImpact: ["actions:write"] }), "high-impact-needs-approval",
            "actions:write (dispatches and re-runs workflows (deploys)) is minted without a human's approval"],
        ["a GitHub App with no repositories listed", app({ ...LEAST, repositories: [] }), "agent-tokens-are-scoped",
            "airlock:gateway.github.repositories lists no repository, so the minter mints nothing: list the repositories tasks may name (owner/name, or owner/* for all of one owner's)"],
        ["a cloud token among the agent's secrets", secrets("ANTHROPIC_API_KEY", "HCLOUD_TOKEN"), "agent-no-deploy-credentials", "HCLOUD_TOKEN (Hetzner Cloud)"],
        ["a long-lived GitHub token among the agent's secrets", secrets("GITHUB_TOKEN"), "agent-no-deploy-credentials", "GITHUB_TOKEN (a long-lived forge token (mint one per task instead))"],
    ])("fails when the stack has %s", async (_, edit, id, detail) => {
        const items = await itemsOf(edit);
        expect(items[id]).toMatchObject({ status: "fail", detail });
    });

    it("a merge-capable scope a human approves per task passes", async () => {
        const items = await itemsOf(app({ maxPermissions: { contents: "write" }, allowHighImpact: ["contents:write"], approvalRequired: ["contents:write"] }));
        expect(items["github-no-merge-or-admin"]).toMatchObject({ status: "pass", detail: "maxPermissions contents:write; contents:write only with approval" });
        expect(items["high-impact-needs-approval"]).toMatchObject({ status: "pass", detail: "approval required for contents:write" });
    });

    it("stays manual, with instructions, where the stack cannot show it", async () => {
        const noApp = await itemsOf();
        for (const id of ["github-no-merge-or-admin", "high-impact-needs-approval", "agent-tokens-are-scoped"]) {
            expect(noApp[id].status, id).toBe("manual");
            expect(noApp[id].detail, id).toMatch(/airlock:gateway\.github/);
        }
        const noRuntime = await itemsOf((c) => delete c["airlock:gateway"].agent);
        expect(noRuntime["agent-no-deploy-credentials"]).toMatchObject({ status: "manual" });
        expect(noRuntime["runtime-commands-in-sandbox"]).toMatchObject({ status: "manual" });
    });
});
