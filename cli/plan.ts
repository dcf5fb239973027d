import * as fs from "node:fs";
import * as path from "node:path";
import { artifactsOf, STASH_TYPE } from "../policies/contract";
import { parseCloudInit } from "../policies/engine/cloudInit";
import * as YAML from "yaml";
import { OFFLINE_DIGEST, PlannedResource, StackPlan } from "./offline";

/** `pulumi preview --json`, the parts airlock reads and writes. */
export interface PreviewJson {
    steps: {
        op: string;
        urn: string;
        newState: { type: string; urn: string; custom: boolean; parent?: string; inputs: Record<string, unknown> };
    }[];
}

export function toPreviewJson(plan: StackPlan): PreviewJson {
    return {
        steps: plan.resources.map((r) => ({
            op: "create",
            urn: r.urn,
            newState: { type: r.type, urn: r.urn, custom: r.custom, ...(r.parent ? { parent: r.parent } : {}), inputs: r.inputs },
        })),
    };
}

// A plan's resources never change once planned: collect its artifacts once.
const collected = new WeakMap<StackPlan, Map<string, Record<string, string>>>();

/**
 * Folder (under out/<stack>/) -> relative path -> content, from every artifact
 * Stash; a host's files are those its cloud-init.yaml writes.
 */
export function collectArtifacts(plan: StackPlan): Map<string, Record<string, string>> {
    const cached = collected.get(plan);
    if (cached) return cached;
    const folders = new Map<string, Record<string, string>>();
    for (const r of plan.resources) {
        const artifacts = r.type === STASH_TYPE ? artifactsOf(r.inputs) : undefined;
        if (!artifacts) continue;
        // "airlock-dev-sandbox-artifacts" -> "sandbox"
        const folder = r.name.replace(new RegExp(`^${plan.config.prefix}-`), "").replace(/-artifacts$/, "");
        const files = { ...artifacts };
        if (artifacts["cloud-init.yaml"] !== undefined) {
            for (const file of parseCloudInit(artifacts["cloud-init.yaml"]).files) files[file.path.replace(/^\//, "")] = file.content;
        }
        folders.set(folder, files);
    }
    collected.set(plan, folders);
    return folders;
}

/**
 * Writes preview.json and every artifact to `outDir`, atomically: a complete new
 * directory replaces the old one, so a failed run never leaves half a plan.
 */
export function writePlan(plan: StackPlan, outDir: string): string[] {
    const staging = `${outDir}.tmp-${process.pid}`;
    fs.rmSync(staging, { recursive: true, force: true });
    const written: string[] = [];
    const write = (relative: string, content: string) => {
        const file = path.join(staging, relative);
        fs.mkdirSync(path.dirname(file), { recursive: true });
        fs.writeFileSync(file, content);
        written.push(relative);
    };
    try {
        write("preview.json", `${JSON.stringify(toPreviewJson(plan), null, 2)}\n`);
        for (const [folder, artifacts] of collectArtifacts(plan)) {
            for (const relative of Object.keys(artifacts).sort()) write(path.join(folder, relative), artifacts[relative]);
        }
        fs.rmSync(outDir, { recursive: true, force: true });
        fs.mkdirSync(path.dirname(outDir), { recursive: true });
        fs.renameSync(staging, outDir);
    } catch (err) {
        fs.rmSync(staging, { recursive: true, force: true });
        throw err;
    }
    return written.sort();
}

export interface HostSummary {
    hostname: string;
    role: string;
    serverType: string;
    location: string;
    image: string;
    runs: string[];
    internetInbound: string[];
    tailnetInbound: string[];
}

export interface PlanSummary {
    stack: string;
    resources: number;
    tree: string[];
    hosts: HostSummary[];
    tailnetPolicy: "managed" | "rendered for the operator to merge";
    notes: string[];
}

/** What a reviewer wants to know, derived from the planned resources themselves. */
export function summarize(plan: StackPlan): PlanSummary {
    const cfg = plan.config;
    const byType = (type: string) => plan.resources.filter((r) => r.type === type);
    const firewallOf = (hostname: string) => byType("hcloud:index/firewall:Firewall").find((r) => r.inputs.name === `${hostname}-firewall`);
    const acl = byType("tailscale:index/acl:Acl")[0];
    const policyText = collectArtifacts(plan).get("tailnet")?.["policy.hujson"];
    const grants = (policyText ? JSON.parse(policyText).grants : []) as { src: string[]; dst: string[]; ip: string[] }[];

    const hosts = byType("hcloud:index/server:Server").map((server): HostSummary => {
        const hostname = String(server.inputs.name);
        const role = String((server.inputs.labels as Record<string, string>)["airlock-role"]);
        const tag = role === "gateway" ? cfg.tailnet.gatewayTag : cfg.tailnet.sandboxTag;
        const rules = ((firewallOf(hostname)?.inputs.rules ?? []) as { direction: string; protocol: string; port?: string }[])
            .filter((rule) => rule.direction === "in")
            .map((rule) => `${rule.protocol}${rule.port ? `/${rule.port}` : ""}`);
        const tailnetInbound = grants
            .filter((g) => g.dst.includes(tag))
            .map((g) => `${g.ip.join(", ")} from ${g.src.join(", ")}`);
        const runs =
            role === "sandbox"
                ? [
                      `tailscaled as ${tag} (ephemeral node)`,
                      `sshd on the tailnet address only, user ${cfg.agent.user}, keys only`,
                      `every command: ForceCommand wrapper -> docker exec agent-sandbox-shell (rootless Docker), in /workspace`,
                      `env passed into the container: ${cfg.agent.envAllowlist.join(", ")}`,
                      `/workspace on a ${cfg.sandbox.workspaceVolumeGb} GB hcloud Volume (btrfs): checkpoints (keep ${cfg.sandbox.checkpoints.keep}, ${cfg.sandbox.checkpoints.keepDays} days${cfg.sandbox.checkpoints.auto ? ", automatic before destructive commands" : ""}); sessions: ${cfg.sandbox.sessions.mode}`,
                      `containers: ${containersOf(plan, "sandbox").join(", ")}`,
                      `DNS through the gateway's AdGuard Home (${cfg.dns.mode}); nftables: DNS to it only, no metadata service for uid ${cfg.agent.uid}`,
                  ]
                : [
                      `tailscaled as ${tag}`,
                      `sshd on the tailnet address only, user ${cfg.gateway.adminUser}, keys only`,
                      `rootless Docker for ${cfg.agent.user}`,
                      `ssh client -> ${cfg.hostnames.sandbox} (ControlMaster, SendEnv ${cfg.agent.envAllowlist.join(" ")})`,
                      `containers: ${containersOf(plan, "gateway").join(", ")}`,
                      `backups: restic -> B2 for itself and the sandbox's /workspace${cfg.workloads.postgres.enabled ? " and database (hourly)" : ""}, pulled over ssh; weekly check; monthly restore drill`,
                  ];
        return {
            hostname,
            role,
            serverType: String(server.inputs.serverType),
            location: String(server.inputs.location),
            image: String(server.inputs.image),
            runs,
            internetInbound: rules,
            tailnetInbound,
        };
    });

    return {
        stack: plan.stack,
        resources: plan.resources.length,
        tree: resourceTree(plan.resources),
        hosts,
        tailnetPolicy: acl ? "managed" : "rendered for the operator to merge",
        notes: cfg.workloads.resolveDigests
            ? [`image tags are pinned to their registry digests at deploy time; this offline plan shows ${OFFLINE_DIGEST.slice(0, 16)}... placeholders`]
            : [],
    };
}

/** Service -> image, from a host's rendered compose file. */
function containersOf(plan: StackPlan, folder: string): string[] {
    const compose = collectArtifacts(plan).get(folder)?.["etc/airlock/compose.yml.in"];
    const services = compose ? (YAML.parse(compose).services as Record<string, { image: string }>) : {};
    return Object.entries(services).map(([name, s]) => `${name} (${s.image.replace(/@sha256:[0-9a-f]{64}$/, "@sha256:…")})`);
}

function resourceTree(resources: PlannedResource[]): string[] {
    const children = new Map<string, PlannedResource[]>();
    const roots: PlannedResource[] = [];
    for (const r of resources) {
        if (r.parent) children.set(r.parent, [...(children.get(r.parent) ?? []), r]);
        else roots.push(r);
    }
    const lines: string[] = [];
    const walk = (r: PlannedResource, prefix: string, childPrefix: string) => {
        lines.push(`${prefix}${r.type}  ${r.name}`);
        const kids = children.get(r.urn) ?? [];
        kids.forEach((kid, i) => {
            const last = i === kids.length - 1;
            walk(kid, `${childPrefix}${last ? "└─ " : "├─ "}`, `${childPrefix}${last ? "   " : "│  "}`);
        });
    };
    for (const root of roots) walk(root, "", "");
    return lines;
}

export function formatSummary(summary: PlanSummary, outDir: string): string {
    const lines = [`airlock plan: stack ${summary.stack}: ${summary.resources} resources, written to ${outDir}`, "", ...summary.tree, ""];
    for (const host of summary.hosts) {
        lines.push(`${host.hostname} (${host.role}): ${host.serverType} in ${host.location}, ${host.image}`);
        for (const item of host.runs) lines.push(`  runs      ${item}`);
        lines.push(`  internet  inbound ${host.internetInbound.join(", ") || "nothing"}`);
        lines.push(`  tailnet   inbound ${host.tailnetInbound.join("; ") || "nothing"}`);
    }
    lines.push("", `tailnet policy: ${summary.tailnetPolicy} (${path.join(outDir, "tailnet", "policy.hujson")})`);
    for (const note of summary.notes) lines.push(`note: ${note}`);
    return `${lines.join("\n")}\n`;
}
