import { userDataLength } from "../policies/rules/cloud-init-within-hetzner-user-data-limit";
import { parseCloudInit } from "../policies/engine/cloudInit";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { Change, changesBetween, formatChanges, readPlannedResources } from "../cli/changes";
import { PlannedResource, planStack, StackPlan, UNKNOWN } from "../cli/offline";
import { previewText } from "../cli/plan";
import { editedStack, REPO, stackFile, tempDir } from "./helpers/stacks";
import { PROJECT } from "../components/config/load";
import { run } from "./helpers/tools";

/**
 * What a change to one stack setting does on the next `up`, decided from the plans
 * before and after the change (the providers' force-new inputs, the resources'
 * ignoreChanges and protect). The table in docs/day-two.md is this test's output.
 */

type Stack = "dev" | "prod";
interface Setting {
    setting: string;
    stack: Stack;
    edit: (config: Record<string, any>) => void;
    /** What an earlier airlock created, where it differs from what this one plans for the same stack. */
    created?: (resource: PlannedResource) => PlannedResource;
}

const SETTINGS: Setting[] = [
    { setting: "`gateway.serverType` (cx23 → cx33)", stack: "dev", edit: (c) => (c["airlock:gateway"].serverType = "cx33") },
    { setting: "`gateway.location`", stack: "dev", edit: (c) => (c["airlock:gateway"].location = "fsn1") },
    {
        // The schema takes debian-13 only: the change comes from a server an earlier airlock created.
        setting: "`gateway.image` (a server created on debian-12)",
        stack: "dev",
        edit: () => undefined,
        created: (r) => (r.name.endsWith("-gateway-server") ? { ...r, inputs: { ...r.inputs, image: "debian-12" } } : r),
    },
    { setting: "`gateway.agent.image`", stack: "dev", edit: (c) => (c["airlock:gateway"].agent.image = "nousresearch/hermes-agent:v2026.8.1") },
    { setting: "`sandbox.serverType` (cx23 → cx33)", stack: "dev", edit: (c) => (c["airlock:sandbox"].serverType = "cx33") },
    { setting: "`sandbox.location`", stack: "dev", edit: (c) => (c["airlock:sandbox"].location = "fsn1") },
    { setting: "`sandbox.location` in prod (its workspace `protect: true`)", stack: "prod", edit: (c) => (c["airlock:sandbox"].location = "nbg1") },
    { setting: "`sandbox.workspaceVolumeGb` (10 → 20)", stack: "dev", edit: (c) => (c["airlock:sandbox"].workspaceVolumeGb = 20) },
    { setting: "`sandbox.checkpoints.keep`", stack: "dev", edit: (c) => (c["airlock:sandbox"].checkpoints = { keep: 30 }) },
    { setting: "`agent.envAllowlist`", stack: "dev", edit: (c) => c["airlock:agent"].envAllowlist.push("TASK_ID") },
    { setting: "`dns.mode` (observe → allowlist)", stack: "dev", edit: (c) => (c["airlock:dns"] = { mode: "allowlist", allowlist: ["github.com"] }) },
    { setting: "`workloads.sandboxShell.image`", stack: "dev", edit: (c) => (c["airlock:workloads"].sandboxShell.image = "debian:trixie-slim") },
    { setting: "`tailnet.keyExpirySeconds`", stack: "dev", edit: (c) => (c["airlock:tailnet"].keyExpirySeconds = 3600) },
    { setting: "`backup.retentionDays` (30 → 60)", stack: "dev", edit: (c) => (c["airlock:backup"].retentionDays = 60) },
    {
        setting: "`breakGlassSshPublicKey` (a rotated key)",
        stack: "dev",
        edit: (c) => (c["airlock:breakGlassSshPublicKey"] = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIMx7R7HQ0DgG5nU2VSkD0m8sXhN1c8yZbqzB3hVwq0T1 break-glass-2027@example"),
    },
];

const WORDS: Record<Change["action"], string> = {
    create: "created",
    update: "updated in place",
    replace: "**replaced**",
    refused: "**refused** (protected: `up` fails)",
    kept: "kept",
    delete: "**deleted**",
    retained: "dropped from the stack, kept in the cloud",
};

const DOC = path.join(REPO, "docs", "day-two.md");
const BEGIN = "<!-- BEGIN changes table: test/day-two.test.ts writes it (AIRLOCK_WRITE_DOCS=1) -->";
const END = "<!-- END changes table -->";

const word = (c: Change) => (c.action === "kept" ? `kept (ignores its \`${c.ignored.join("`, `")}\`)` : WORDS[c.action]);
const cell = (changes: Change[]) => (changes.length === 0 ? "unchanged" : changes.map(word).join(", "));
const others = (changes: Change[], prefix: string) => (changes.length === 0 ? "nothing" : changes.map((c) => `${c.name.replace(`${prefix}-`, "")}: ${word(c)}`).join("; "));

describe("day two: what a change does on the next up", () => {
    const plans = new Map<Stack, Promise<StackPlan>>();
    const base = (stack: Stack) => {
        if (!plans.has(stack)) plans.set(stack, planStack(stackFile(stack), stack));
        return plans.get(stack)!;
    };

    it("a change to a host's files never replaces the gateway; the sandbox is replaced; docs/day-two.md's table is this run's", async () => {
        const rows: string[] = [];
        const verdicts = new Map<string, { gateway: Change[]; sandbox: Change[]; rest: Change[] }>();
        for (const { setting, stack, edit, created } of SETTINGS) {
            const before = await base(stack);
            const after = await planStack(editedStack(stack, edit), stack);
            const changes = changesBetween(created ? before.resources.map(created) : before.resources, after.resources);
            const server = (role: string) => changes.filter((c) => c.name === `${before.config.prefix}-${role}-server`);
            const verdict = { gateway: server("gateway"), sandbox: server("sandbox"), rest: changes.filter((c) => !c.name.endsWith("-server")) };
            verdicts.set(setting, verdict);
            rows.push(`| ${setting} | ${cell(verdict.gateway)} | ${cell(verdict.sandbox)} | ${others(verdict.rest, before.config.prefix)} |`);
        }
        // The consequences that matter most, asserted on their own.
        const of = (setting: string) => verdicts.get(SETTINGS.find((s) => s.setting.startsWith(setting))!.setting)!;
        for (const setting of ["`agent.envAllowlist`", "`dns.mode`", "`gateway.agent.image`", "`tailnet.keyExpirySeconds`"]) {
            expect(of(setting).gateway.map((c) => [c.action, c.ignored]), setting).toEqual([["kept", ["userData"]]]);
        }
        for (const setting of ["`agent.envAllowlist`", "`dns.mode`", "`tailnet.keyExpirySeconds`", "`sandbox.checkpoints.keep`"]) {
            expect(of(setting).sandbox.map((c) => c.action), setting).toEqual(["replace"]);
        }
        expect(of("`gateway.serverType`").gateway.map((c) => c.action)).toEqual(["update"]);
        // Pulumi would create a replacement from the ignored user_data's recorded value (the old
        // document and its used join key): the gateway ignores what would replace it.
        expect(of("`gateway.location`").gateway.map((c) => [c.action, c.ignored])).toEqual([["kept", ["location"]]]);
        expect(of("`gateway.image`").gateway.map((c) => [c.action, c.ignored])).toEqual([["kept", ["image"]]]);
        expect(of("`sandbox.location` in prod").rest.filter((c) => c.name.endsWith("-workspace")).map((c) => c.action)).toEqual(["refused"]);
        // A single-use key is good for one server: what replaces the sandbox replaces its key, nothing else does.
        for (const { setting } of SETTINGS) {
            const { sandbox, rest } = verdicts.get(setting)!;
            const key = rest.find((c) => c.name.endsWith("-sandbox-join-key"));
            expect(key?.action === "replace", setting).toBe(sandbox.some((c) => c.action === "replace"));
        }
        expect(of("`sandbox.workspaceVolumeGb`").rest.map((c) => [c.name, c.action])).toEqual([["airlock-dev-sandbox-workspace", "update"]]);
        expect(of("`backup.retentionDays`").rest.every((c) => c.action === "update")).toBe(true);
        // A rotated break-glass key re-targets no backup bucket and replaces no server.
        expect(of("`breakGlassSshPublicKey`").rest.map((c) => [c.name, c.action, c.ignored])).toEqual([
            ["airlock-dev-gateway-backups-bucket", "kept", ["bucketName"]],
            ["airlock-dev-sandbox-backups-bucket", "kept", ["bucketName"]],
            ["airlock-dev-break-glass", "replace", []],
            ["airlock-dev-bundle-bucket", "kept", ["bucketName"]],
        ]);
        expect([...of("`breakGlassSshPublicKey`").gateway, ...of("`breakGlassSshPublicKey`").sandbox].map((c) => [c.action, c.ignored])).toEqual([
            ["kept", ["sshKeys"]],
            ["kept", ["sshKeys"]],
        ]);

        const table = [BEGIN, "| Setting changed | Gateway server | Sandbox server | Other resources |", "|---|---|---|---|", ...rows, END].join("\n");
        const doc = fs.readFileSync(DOC, "utf8");
        const at = doc.indexOf(BEGIN);
        const end = doc.indexOf(END);
        expect(at, `${DOC} has no ${BEGIN}`).toBeGreaterThanOrEqual(0);
        const updated = `${doc.slice(0, at)}${table}${doc.slice(end + END.length)}`;
        if (process.env.AIRLOCK_WRITE_DOCS === "1") fs.writeFileSync(DOC, updated);
        expect(doc, "docs/day-two.md's table is stale: run this test with AIRLOCK_WRITE_DOCS=1").toBe(updated);
    });

    it("docs/day-two.md rebuilds the gateway by destroying the server the plan has, so the next up creates it and its key anew", async () => {
        const plan = await base("dev");
        const server = plan.resources.find((r) => r.name === "airlock-dev-gateway-server")!;
        const urn = server.urn;
        // As the engine qualifies it: every ancestor's type but the stack's (Pulumi's mock monitor keeps only the parent's).
        const byUrn = new Map(plan.resources.map((r) => [r.urn, r]));
        const types: string[] = [];
        for (let r: typeof server | undefined = server; r && r.type !== "pulumi:pulumi:Stack"; r = r.parent ? byUrn.get(r.parent) : undefined) types.unshift(r.type);
        expect(types).toEqual(["airlock:index:Deployment", "airlock:index:GatewayHost", "hcloud:index/server:Server"]);
        expect(fs.readFileSync(DOC, "utf8")).toContain(`pulumi destroy --target 'urn:pulumi:<stack>::${PROJECT}::${types.join("$")}::<prefix>-gateway-server'`);
        // Nothing else is built from the server: destroying it alone leaves the stack whole.
        expect(plan.resources.filter((r) => Object.values(r.propertyDependencies).some((urns) => urns.includes(urn))).map((r) => r.name)).toEqual([]);
    });

    it("pulumi destroy keeps the backup buckets and the workspace volume, and revokes the keys, unless deleteDataOnDestroy", async () => {
        const destroyed = (plan: StackPlan) => Object.fromEntries(changesBetween(plan.resources, []).map((c) => [c.name.replace(`${plan.config.prefix}-`, ""), c.action]));
        const kept = destroyed(await base("dev"));
        expect(kept).toMatchObject({ "gateway-backups-bucket": "retained", "sandbox-backups-bucket": "retained", "sandbox-workspace": "retained" });
        expect(kept).toMatchObject({ "gateway-backups-host-key": "delete", "sandbox-backups-host-key": "delete", "gateway-server": "delete", "sandbox-server": "delete" });
        expect(Object.entries(kept).filter(([, action]) => action === "retained").length).toBe(3);
        const deleting = await planStack(editedStack("dev", (c) => (c["airlock:deleteDataOnDestroy"] = true)), "dev");
        const gone = destroyed(deleting);
        expect(gone).toMatchObject({ "gateway-backups-bucket": "delete", "sandbox-backups-bucket": "delete", "sandbox-workspace": "delete" });
        // B2 deletes no bucket that holds a version: only a bucket whose data goes is emptied first.
        const emptied = (plan: StackPlan) => plan.resources.filter((r) => r.inputs.b2Kind === "bucket").map((r) => [r.name.replace(`${plan.config.prefix}-`, ""), r.inputs.emptyOnDelete === true]);
        expect(emptied(deleting)).toEqual([["gateway-backups-bucket", true], ["sandbox-backups-bucket", true], ["bundle-bucket", false]]);
        expect(emptied(await base("dev"))).toEqual([["gateway-backups-bucket", false], ["sandbox-backups-bucket", false], ["bundle-bucket", false]]);
        // prod protects its workspace: destroy is refused until that is lifted.
        expect(destroyed(await base("prod"))).toMatchObject({ "sandbox-workspace": "refused", "gateway-server": "refused", "gateway-backups-bucket": "retained" });
    });

    it("plan --against a previous preview.json prints the verdict, reading the file before the plan replaces it", async () => {
        const stacks = tempDir("against");
        fs.copyFileSync(stackFile("dev"), path.join(stacks, "Pulumi.dev.yaml"));
        const out = path.join(stacks, "out");
        const plan = (...extra: string[]) => run("node", [path.join(REPO, "cli/airlock.js"), "--stacks-dir", stacks, "plan", "--stack", "dev", "--out", out, ...extra]);
        const first = plan();
        expect(first.status).toBe(0);
        // Each host's user_data against Hetzner's limit, counted in the document the plan wrote.
        for (const role of ["gateway", "sandbox"]) {
            const chars = userDataLength(parseCloudInit(fs.readFileSync(path.join(out, role, "cloud-init.yaml"), "utf8")));
            expect(chars).toBeLessThan(16 * 1024);
            expect(first.stdout).toContain(`  user_data ${chars.toLocaleString("en")} characters as sent (base64 of its gzip), with its deploy-time values at their longest; Hetzner accepts 32,768\n`);
        }
        expect(plan("--against", path.join(out, "preview.json")).stdout).toContain(`changes against ${path.join(out, "preview.json")}: none\n`);
        fs.writeFileSync(path.join(stacks, "Pulumi.dev.yaml"), fs.readFileSync(editedStack("dev", (c) => c["airlock:agent"].envAllowlist.push("TASK_ID")), "utf8"));
        const changed = plan("--against", path.join(out, "preview.json"));
        expect(changed.stdout).toContain("airlock-dev-gateway-server (hcloud:index/server:Server): kept as it is");
        expect(changed.stdout).toContain("airlock-dev-sandbox-server (hcloud:index/server:Server): REPLACED (deleted, then created anew) [changed: userData]");
        const bad = plan("--against", path.join(stacks, "Pulumi.dev.yaml"));
        expect(bad.status).toBe(2);
        expect(bad.stderr.trim()).toBe(`${path.join(stacks, "Pulumi.dev.yaml")}: cannot read as a plan's preview.json: not JSON`);
    });

    it("the options that decide an up are in preview.json and read back as planned", async () => {
        const plan = await base("prod");
        const dir = tempDir("preview");
        fs.writeFileSync(path.join(dir, "preview.json"), previewText(plan));
        const read = readPlannedResources(path.join(dir, "preview.json"));
        expect(read.map((r) => [r.urn, r.options])).toEqual(plan.resources.map((r) => [r.urn, r.options]));
        const gateway = read.find((r) => r.name === "airlock-prod-gateway-server")!;
        expect(gateway.options).toMatchObject({ protect: true, deleteBeforeReplace: true, ignoreChanges: ["sshKeys", "userData", "image", "location"] });
        // Each join key's trigger: the gateway's generation; the sandbox's unknown until its host key exists.
        expect(read.find((r) => r.name === "airlock-prod-gateway-join-key")!.options.replacementTrigger).toBe("preview");
        expect(read.find((r) => r.name === "airlock-prod-sandbox-join-key")!.options.replacementTrigger).toBe(UNKNOWN);
        expect(read.find((r) => r.name === "airlock-prod-sandbox-server")!.options.ignoreChanges).toEqual(["sshKeys"]);
        expect(formatChanges(changesBetween(read, plan.resources), "x")).toBe("changes against x: none\n");
        // A step that only deletes carries its old state (as in `pulumi preview --json`): read as it was.
        const preview = JSON.parse(previewText(plan));
        preview.steps[0] = { op: "delete", urn: preview.steps[0].urn, oldState: preview.steps[0].newState };
        fs.writeFileSync(path.join(dir, "preview.json"), JSON.stringify(preview));
        expect(readPlannedResources(path.join(dir, "preview.json"))[0]).toEqual(read[0]);
    });
});
