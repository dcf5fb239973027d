import * as fs from "node:fs";
import * as path from "node:path";
import { artifactsOf, BUNDLE_NAME, ConfigError, STASH_TYPE } from "../policies/contract";
import { parseCloudInit } from "../policies/engine/cloudInit";
import { HETZNER_USER_DATA_LIMIT, userDataLength } from "../policies/rules/cloud-init-within-hetzner-user-data-limit";
import { filesFromBundle } from "../policies/engine/bundle";
import * as YAML from "yaml";
import type { Finding } from "../policies/engine/finding";
import { resourceLines } from "./check";
import { OFFLINE_DIGEST, PlannedResource, ResourceOptionsPlanned, StackPlan } from "./offline";

/** `pulumi preview --json`, the parts airlock reads and writes. */
export interface PreviewJson {
    steps: {
        op: string;
        urn: string;
        /**
         * protect and retainOnDelete as the engine's state has them; ignoreChanges,
         * deleteBeforeReplace and replaceOnChanges are airlock's additions (the engine
         * keeps them out of preview's JSON), for `plan --against`; propertyDependencies
         * as in the engine's state.
         */
        newState: { type: string; urn: string; custom: boolean; parent?: string; inputs: Record<string, unknown>; propertyDependencies?: Record<string, string[]> } & ResourceOptionsPlanned;
    }[];
}

export function toPreviewJson(plan: StackPlan): PreviewJson {
    return {
        steps: plan.resources.map((r) => ({
            op: "create",
            urn: r.urn,
            newState: {
                type: r.type,
                urn: r.urn,
                custom: r.custom,
                ...(r.parent ? { parent: r.parent } : {}),
                ...r.options,
                inputs: r.inputs,
                ...(Object.keys(r.propertyDependencies).length > 0 ? { propertyDependencies: r.propertyDependencies } : {}),
            },
        })),
    };
}

/** preview.json's text, exactly as `writePlan` writes it. */
export function previewText(plan: StackPlan): string {
    return `${JSON.stringify(toPreviewJson(plan), null, 2)}\n`;
}

/**
 * Findings located in the files `airlock plan` writes under `outDir`: an artifact's
 * finding at its own file and line (out/dev/sandbox/etc/airlock/compose.yml.in:12),
 * a resource's at its line in preview.json; the URN follows.
 */
export function locateInPlan(findings: Finding[], plan: StackPlan, outDir: string): Finding[] {
    if (findings.length === 0) return findings;
    const folders = new Map(plan.resources.filter((r) => r.type === STASH_TYPE && collectArtifacts(plan).has(folderOf(plan, r))).map((r) => [r.urn, folderOf(plan, r)]));
    const lines = resourceLines(previewText(plan));
    return findings.map((f) => {
        const urn = f.resource ?? (f.where?.startsWith("urn:") ? f.where : undefined);
        // A finding on a real file already (the stack file) stays where it is.
        if (!urn && f.file) return f;
        const folder = urn ? folders.get(urn) : undefined;
        if (folder && f.file) {
            const deepest = f.within?.[f.within.length - 1];
            const { within: _, ...rest } = f;
            return { ...rest, file: path.join(outDir, folder, (deepest?.file ?? f.file).replace(/^\//, "")), line: deepest ? deepest.line : f.line };
        }
        const within = [...(f.file ? [{ file: f.file, ...(f.line ? { line: f.line } : {}) }] : []), ...(f.within ?? [])];
        return { ...f, file: path.join(outDir, "preview.json"), line: (urn && lines.get(urn)) || 1, ...(within.length > 0 ? { within } : {}) };
    });
}

/** "airlock-dev-sandbox-artifacts" -> "sandbox": a Stash's folder under out/<stack>/. */
const folderOf = (plan: StackPlan, r: PlannedResource) => r.name.replace(new RegExp(`^${plan.config.prefix}-`), "").replace(/-artifacts$/, "");

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
    const stashed = plan.resources.flatMap((r) => {
        const artifacts = r.type === STASH_TYPE ? artifactsOf(r.inputs) : undefined;
        return artifacts ? [{ folder: folderOf(plan, r), artifacts }] : [];
    });
    for (const { folder, artifacts } of stashed) {
        const files: Record<string, string> = {};
        for (const [name, text] of Object.entries(artifacts)) {
            // A host's bundle goes to out/<stack>/bundle/ (what a mirror serves), once.
            if (BUNDLE_NAME.test(name)) folders.set("bundle", { ...folders.get("bundle"), [name]: text });
            else files[name] = text;
        }
        if (artifacts["cloud-init.yaml"] !== undefined) {
            const written = parseCloudInit(artifacts["cloud-init.yaml"]).files;
            for (const file of written) files[file.path.replace(/^\//, "")] = file.content;
            for (const file of bundledFilesOf(written, artifacts)) files[file.path.replace(/^\//, "")] = file.content;
        }
        folders.set(folder, files);
    }
    collected.set(plan, folders);
    return folders;
}

/** The files a host's installer writes from the bundle its user_data names (none when it names none). */
function bundledFilesOf(written: { path: string; content: string }[], artifacts: Record<string, string>): { path: string; content: string }[] {
    const bundled = filesFromBundle(written, artifacts);
    if (bundled && "problem" in bundled) throw new Error(`the host code bundle its user_data names is not in the plan: ${bundled.problem}`);
    return bundled?.files ?? [];
}

/** Marks a folder as airlock plan output: only such a folder is ever replaced. */
export const PLAN_MARKER = ".airlock-plan";
/** What a plan writes at its top level (also in plans from before the marker existed). */
const PLAN_ENTRIES = new Set([PLAN_MARKER, "preview.json", "gateway", "sandbox", "tailnet", "bundle"]);

const failure = (err: unknown) => (err as NodeJS.ErrnoException).code ?? String(err);

/** Whether `dir` (an existing directory) may be replaced: empty, or a previous plan's output. */
function isReplaceable(dir: string): boolean {
    const entries = fs.readdirSync(dir);
    if (entries.length === 0 || entries.includes(PLAN_MARKER)) return true;
    if (!entries.every((e) => PLAN_ENTRIES.has(e)) || !entries.includes("preview.json")) return false;
    try {
        return Array.isArray(JSON.parse(fs.readFileSync(path.join(dir, "preview.json"), "utf8")).steps);
    } catch {
        return false;
    }
}

/**
 * Creates `dir` and its missing parents one level at a time (Node's recursive mkdir
 * never returns on some pseudo-filesystems, such as /proc).
 */
/** Creates `dir` and its missing parents; returns the folders it created, outermost first. */
function createDirectory(dir: string): string[] {
    const missing: string[] = [];
    for (let at = path.resolve(dir); !fs.existsSync(at); at = path.dirname(at)) missing.unshift(at);
    for (const level of missing) {
        try {
            fs.mkdirSync(level);
        } catch (err) {
            removeCreated(missing.slice(0, missing.indexOf(level)));
            throw new ConfigError([`${dir}: cannot create ${level}: ${failure(err)}`]);
        }
    }
    return missing;
}

/**
 * Checks, before anything is planned, that `outDir` may receive a plan: it does not
 * exist, is empty, or holds a previous plan; a file, a symbolic link or someone
 * else's folder is refused (exit 2), and a parent that cannot be created fails now.
 * Returns the existing folder's stats, if any.
 */
export function usableOutDir(outDir: string): { existing?: fs.Stats; created: string[] } {
    let existing: fs.Stats | undefined;
    try {
        existing = fs.lstatSync(outDir);
    } catch (err) {
        if (failure(err) !== "ENOENT") throw new ConfigError([`${outDir}: cannot use as the plan's output folder: ${failure(err)}`]);
    }
    if (existing?.isSymbolicLink()) throw new ConfigError([`${outDir}: is a symbolic link; pass the folder it points to, or a new folder`]);
    if (existing && !existing.isDirectory()) throw new ConfigError([`${outDir}: exists and is not a folder; refusing to replace it with the plan`]);
    if (existing && !isReplaceable(outDir)) {
        throw new ConfigError([`${outDir}: is not empty and is not an airlock plan output (no ${PLAN_MARKER}); refusing to replace it - pass a new or empty folder`]);
    }
    return { existing, created: createDirectory(path.dirname(path.resolve(outDir))) };
}

/** Removes the folders usableOutDir created, deepest first, each only while it is empty. */
export function removeCreated(created: string[]): void {
    for (const dir of [...created].reverse()) {
        try {
            fs.rmdirSync(dir);
        } catch {
            return; // not empty (or gone): what is above it stays too
        }
    }
}

/**
 * What a plan killed while writing `outDir` (kill -9, a power cut) left beside it: its
 * staging folder and, when it died between its two renames, the previous plan, which
 * goes back in place. Only folders of this shape whose process is gone are touched; a
 * plan still running keeps its own.
 */
export function sweepAbandoned(outDir: string): void {
    const parent = path.dirname(path.resolve(outDir));
    const shape = new RegExp(`^\\.${path.basename(outDir).replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}\\.airlock-plan-(\\d+)-[A-Za-z0-9]{6}(-previous)?$`);
    let entries: string[];
    try {
        entries = fs.readdirSync(parent);
    } catch {
        return;
    }
    const gone = (pid: number) => {
        try {
            process.kill(pid, 0);
            return false;
        } catch (err) {
            return (err as NodeJS.ErrnoException).code === "ESRCH";
        }
    };
    for (const name of entries.sort((a, b) => Number(b.endsWith("-previous")) - Number(a.endsWith("-previous")))) {
        const match = shape.exec(name);
        if (!match || !gone(Number(match[1]))) continue;
        const folder = path.join(parent, name);
        if (match[2] && !fs.existsSync(outDir) && isReplaceable(folder)) fs.renameSync(folder, outDir);
        else if (isReplaceable(folder)) fs.rmSync(folder, { recursive: true, force: true });
    }
}

/**
 * Writes preview.json and every artifact to `outDir`, atomically: a complete new
 * directory replaces the old one, so a failed run never leaves half a plan. It never
 * deletes what it did not write: see usableOutDir.
 */
export function writePlan(plan: StackPlan, outDir: string): string[] {
    sweepAbandoned(outDir);
    const { existing } = usableOutDir(outDir);
    const parent = path.dirname(path.resolve(outDir));
    let staging: string;
    try {
        staging = fs.mkdtempSync(path.join(parent, `.${path.basename(outDir)}.airlock-plan-${process.pid}-`));
    } catch (err) {
        throw new ConfigError([`${outDir}: cannot write in ${parent}: ${failure(err)}`]);
    }
    const written: string[] = [];
    const write = (relative: string, content: string) => {
        const file = path.join(staging, relative);
        fs.mkdirSync(path.dirname(file), { recursive: true });
        fs.writeFileSync(file, content);
        written.push(relative);
    };
    const previous = `${staging}-previous`;
    try {
        fs.writeFileSync(path.join(staging, PLAN_MARKER), `written by airlock plan --stack ${plan.stack}; the next plan replaces this whole folder\n`);
        write("preview.json", previewText(plan));
        for (const [folder, artifacts] of collectArtifacts(plan)) {
            for (const relative of Object.keys(artifacts).sort()) write(path.join(folder, relative), artifacts[relative]);
        }
        if (existing) fs.renameSync(outDir, previous);
        fs.renameSync(staging, outDir);
    } catch (err) {
        if (existing && !fs.existsSync(outDir) && fs.existsSync(previous)) fs.renameSync(previous, outDir);
        fs.rmSync(staging, { recursive: true, force: true });
        throw err;
    }
    fs.rmSync(previous, { recursive: true, force: true });
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
    /** Characters of the rendered cloud-init document with each deploy-time value at its longest (the gate's count). */
    userDataChars: number;
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
                      ...runtimeSummary(cfg),
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
            userDataChars: userDataLength(parseCloudInit(collectArtifacts(plan).get(role)?.["cloud-init.yaml"] ?? "#cloud-config\n")),
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

/** The agent runtime in a line or two: where its state and secrets live, where its tokens come from. */
function runtimeSummary(cfg: StackPlan["config"]): string[] {
    const runtime = cfg.gateway.agent;
    if (!runtime) return [];
    const github = cfg.gateway.github;
    return [
        `agent runtime: state on a ${runtime.stateGb} GB filesystem${runtime.memoryDb.enabled ? ", memory database on an internal network" : ""}; secrets at run time (airlock secrets push): ${runtime.secrets.join(", ") || "none declared"}`,
        ...(github ? [`GitHub tokens per task (airlock-github-token) from App ${github.appId}, at most ${Object.entries(github.maxPermissions).map(([n, l]) => `${n}:${l}`).join(", ")}`] : []),
    ];
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
        const over = host.userDataChars - HETZNER_USER_DATA_LIMIT;
        lines.push(
            `  user_data ${host.userDataChars.toLocaleString("en")} characters as sent (base64 of its gzip), with its deploy-time values at their longest; Hetzner accepts ${HETZNER_USER_DATA_LIMIT.toLocaleString("en")}${over > 0 ? ` (over by ${over.toLocaleString("en")}: Hetzner refuses the server)` : ""}`,
        );
    }
    lines.push("", `tailnet policy: ${summary.tailnetPolicy} (${path.join(outDir, "tailnet", "policy.hujson")})`);
    for (const note of summary.notes) lines.push(`note: ${note}`);
    return `${lines.join("\n")}\n`;
}
