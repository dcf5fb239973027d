import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { planStack, PlanOptions, StackPlan } from "../cli/offline";
import { JOIN_GENERATION_LABEL, PREVIEW_GENERATION } from "../components/joinGeneration";
import { decodeUserData } from "../policies/engine/userData";
import { deployedValues, editedStack, resourceNamed } from "./helpers/stacks";

/**
 * Join keys are single-use: each is good for the one server created with it. These plans
 * run the program as `pulumi up` does, with hcloud's getServers answering as the project
 * would, and check which key each server is created with.
 */

const SERVER = "hcloud:index/server:Server";
const KEY = "tailscale:index/tailnetKey:TailnetKey";
const DEV = path.join("stacks", "Pulumi.dev.yaml");

interface Existing {
    name: string;
    role: "gateway" | "sandbox";
    labels: Record<string, string>;
}

/** A Hetzner project holding these servers, as getServers answers a label selector (its own filter applied). */
const project = (servers: Existing[]): PlanOptions["calls"] => (token, inputs) => {
    if (token !== "hcloud:index/getServers:getServers") return undefined;
    const wanted = Object.fromEntries(String(inputs.withSelector).split(",").map((term) => term.split("=")));
    const matching = servers.filter((s) => Object.entries(wanted).every(([k, v]) => ({ ...s.labels, "airlock-role": s.role })[k] === v));
    return { servers: matching.map((s, i) => ({ id: 100 + i, name: s.name, labels: { ...s.labels, "airlock-role": s.role }, status: "running" })) };
};

const up = (servers: Existing[], stackFile = DEV, key?: string) =>
    planStack(stackFile, "dev", {
        mode: "up",
        deployed: (type, name) => ({ ...deployedValues!(type, name), ...(type === KEY && key ? { key } : {}) }),
        calls: project(servers),
    });

const generationOf = (plan: StackPlan, role: string) => (resourceNamed(plan, SERVER, `airlock-dev-${role}-server`).inputs.labels as Record<string, string>)[JOIN_GENERATION_LABEL];
const triggerOf = (plan: StackPlan, role: string) => resourceNamed(plan, KEY, `airlock-dev-${role}-join-key`).options.replacementTrigger as string;
const running = (role: "gateway" | "sandbox", generation: string): Existing => ({ name: `airlock-dev-${role}`, role, labels: { airlock: "airlock-dev", [JOIN_GENERATION_LABEL]: generation } });

describe("join keys: each server is created with a key minted for it", () => {
    it("an up with no server yet draws a new generation per host: an up after a failed one replaces the keys it minted", async () => {
        const first = await up([]);
        const retry = await up([]);
        for (const role of ["gateway", "sandbox"]) {
            expect(generationOf(first, role)).toMatch(/^[0-9a-f]{16}$/);
            expect(generationOf(retry, role), role).not.toBe(generationOf(first, role));
            expect(triggerOf(retry, role), role).not.toBe(triggerOf(first, role));
        }
        expect(generationOf(first, "gateway")).not.toBe(generationOf(first, "sandbox"));
    });

    it("a running server keeps its generation (its label), so its key stays as long as nothing recreates the server", async () => {
        const servers = [running("gateway", "0123456789abcdef"), running("sandbox", "fedcba9876543210")];
        const a = await up(servers);
        const b = await up(servers, DEV, ["tskey", "auth", "kOTHER0CNTRL", "another0key0value0of0the0same0sh"].join("-"));
        expect(generationOf(a, "gateway")).toBe("0123456789abcdef");
        expect(generationOf(a, "sandbox")).toBe("fedcba9876543210");
        expect(triggerOf(a, "gateway")).toBe("0123456789abcdef");
        // The trigger holds what creates the sandbox, never the key itself.
        expect(triggerOf(a, "sandbox")).toMatch(/^fedcba9876543210:[0-9a-f]{64}$/);
        expect(triggerOf(b, "sandbox")).toBe(triggerOf(a, "sandbox"));
        expect(decodeUserData(String(resourceNamed(b, SERVER, "airlock-dev-sandbox-server").inputs.userData))).not.toBe(
            decodeUserData(String(resourceNamed(a, SERVER, "airlock-dev-sandbox-server").inputs.userData)),
        );
    });

    it("what replaces the sandbox replaces its key; the gateway's key stays (its server reads its document once)", async () => {
        const servers = [running("gateway", "0123456789abcdef"), running("sandbox", "fedcba9876543210")];
        const before = await up(servers);
        const after = await up(servers, editedStack("dev", (c) => c["airlock:agent"].envAllowlist.push("TASK_ID")));
        expect(triggerOf(after, "sandbox")).not.toBe(triggerOf(before, "sandbox"));
        expect(triggerOf(after, "gateway")).toBe(triggerOf(before, "gateway"));
    });

    it("only this stack's server of that name and role counts: another's, or one without the label, is no memory", async () => {
        const others = [
            { name: "airlock-dev-gateway", role: "gateway" as const, labels: { airlock: "airlock-prod", [JOIN_GENERATION_LABEL]: "0123456789abcdef" } },
            { name: "someone-elses-sandbox", role: "sandbox" as const, labels: { airlock: "airlock-dev", [JOIN_GENERATION_LABEL]: "fedcba9876543210" } },
        ];
        const plan = await up(others);
        expect(generationOf(plan, "gateway")).not.toBe("0123456789abcdef");
        expect(generationOf(plan, "sandbox")).not.toBe("fedcba9876543210");
        const unlabelled = await up([{ name: "airlock-dev-sandbox", role: "sandbox", labels: { airlock: "airlock-dev" } }]);
        expect(generationOf(unlabelled, "sandbox")).toMatch(/^[0-9a-f]{16}$/);
    });

    it("a preview of a host with no server shows a placeholder generation, the same every run", async () => {
        const a = await planStack(DEV, "dev");
        const b = await planStack(DEV, "dev");
        for (const role of ["gateway", "sandbox"]) {
            expect(generationOf(a, role)).toBe(PREVIEW_GENERATION);
            expect(generationOf(b, role)).toBe(PREVIEW_GENERATION);
        }
    });
});
