import * as YAML from "yaml";
import { deployCredential, GITHUB_HIGH_IMPACT, GITHUB_MERGE_OR_ADMIN, highImpactEntry } from "../components/config/automation";
import type { Finding } from "../policies/engine/finding";
import { SANDBOX_SSH_CONFIG_PATH, SANDBOX_SSH_CONFIG_TEMPLATE } from "../components/render/hosts";
import { GATEWAY_AGENT_PATHS } from "../components/workloads/compose";
import { HERMES_RUNTIME } from "../policies/contract";
import { collectArtifacts } from "./plan";
import type { StackPlan } from "./offline";

/**
 * The pre-deployment checklist of a hardened agent deployment, evaluated from the
 * stack's offline plan where it can be, and `manual` with an instruction where it
 * cannot. An automatic item passes only with its evidence and no finding of its rules.
 */

export type Section = "architecture" | "secrets" | "containers" | "networking" | "automation boundaries" | "recovery";

export interface ChecklistItem {
    section: Section;
    id: string;
    title: string;
    status: "pass" | "fail" | "manual";
    /** What the plan shows (pass/fail), or what to do (manual). */
    detail: string;
}

interface AutomaticItem {
    section: Section;
    id: string;
    title: string;
    /** Gate rules whose findings fail this item. */
    rules: string[];
    /** What the plan must show; undefined when it does not show it. */
    evidence(plan: StackPlan): string | undefined;
    /** What the plan shows that breaks this item (beyond gate findings). */
    problems?(plan: StackPlan): string[];
    /** When the stack cannot show this item at all: what to do by hand instead. */
    manualUnless?(plan: StackPlan): string | undefined;
}

interface ManualItem {
    section: Section;
    id: string;
    title: string;
    instruction: string;
}

const byType = (plan: StackPlan, type: string) => plan.resources.filter((r) => r.type === type);
const artifact = (plan: StackPlan, host: string, file: string) => collectArtifacts(plan).get(host)?.[file];

/** The token minter's config as the gateway will get it (what the minter enforces). */
interface MinterConfig {
    appId: number;
    maxPermissions: Record<string, string>;
    approvalRequired: string[];
    repositories: string[];
}
const minterConfig = (plan: StackPlan): MinterConfig | undefined => {
    const text = artifact(plan, "gateway", "etc/airlock/github.json");
    return text ? (JSON.parse(text) as MinterConfig) : undefined;
};
/** Scopes of maxPermissions in `set` that the minter hands out without a human's approval. */
function unapproved(minter: MinterConfig, set: (name: string, level: string) => string | undefined): string[] {
    return Object.entries(minter.maxPermissions).flatMap(([name, level]) => {
        const entry = set(name, level);
        const approved = minter.approvalRequired.includes(`${name}:${level}`) || minter.approvalRequired.includes(`${name}:*`);
        return entry && !approved ? [`${name}:${level} (${GITHUB_HIGH_IMPACT[entry]}) is minted without a human's approval`] : [];
    });
}
const mergeOrAdmin = (name: string, level: string) => {
    const entry = highImpactEntry(name, level);
    return entry && GITHUB_MERGE_OR_ADMIN.includes(entry) ? entry : undefined;
};
const scopes = (m: MinterConfig) => Object.entries(m.maxPermissions).map(([n, l]) => `${n}:${l}`).join(", ");
const NO_GITHUB_APP =
    "The stack has no GitHub App (airlock:gateway.github), so it cannot show which tokens the agent gets. Configure one, or make sure every token the agent holds";

const AUTOMATIC: AutomaticItem[] = [
    {
        section: "architecture",
        id: "separate-hosts",
        title: "The agent's loop (gateway) and its commands (sandbox) run on separate hosts",
        rules: [],
        evidence: (plan) => {
            const roles = byType(plan, "hcloud:index/server:Server").map((s) => (s.inputs.labels as Record<string, string>)["airlock-role"]);
            return roles.includes("gateway") && roles.includes("sandbox") ? `servers: ${roles.join(", ")}` : undefined;
        },
    },
    {
        section: "architecture",
        id: "sandbox-is-disposable",
        title: "The sandbox is cattle: ephemeral tailnet node, work kept on a separate volume",
        rules: ["tailscale-keys-single-use"],
        evidence: (plan) => {
            const volume = byType(plan, "hcloud:index/volume:Volume")[0];
            const key = byType(plan, "tailscale:index/tailnetKey:TailnetKey").find((k) => /sandbox/.test(k.name));
            return volume && key?.inputs.ephemeral === true ? `volume ${volume.inputs.name} (${volume.inputs.size} GB), ephemeral join key` : undefined;
        },
    },
    {
        section: "secrets",
        id: "no-secrets-at-rest",
        title: "No secret in user_data but the single-use join key and the sandbox's host key",
        rules: ["cloud-init-no-secrets", "cloud-init-parses", "hcloud-servers-user-data-verifiable"],
        evidence: (plan) => (artifact(plan, "sandbox", "cloud-init.yaml") && artifact(plan, "gateway", "cloud-init.yaml") ? "both hosts' cloud-init judged" : undefined),
    },
    {
        section: "secrets",
        id: "per-command-secrets",
        title: "Secrets travel per command (SendEnv) and only the allowlist reaches the container",
        rules: ["sshd-accept-env-allowlist", "sshd-no-user-environment"],
        evidence: (plan) => {
            const sendEnv = /^\s*SendEnv (.+)$/m.exec(artifact(plan, "gateway", SANDBOX_SSH_CONFIG_TEMPLATE.slice(1)) ?? "")?.[1];
            const acceptEnv = /^AcceptEnv (.+)$/m.exec(artifact(plan, "sandbox", "etc/airlock/sshd_config.in") ?? "")?.[1];
            return sendEnv && sendEnv === acceptEnv ? `SendEnv = AcceptEnv = ${sendEnv}` : undefined;
        },
    },
    {
        section: "containers",
        id: "containers-hardened",
        title: "Every container: no capabilities beyond the allowed five, no-new-privileges, limits, no socket, no host secrets",
        rules: [
            "containers-drop-all-capabilities", "containers-add-only-allowed-capabilities", "containers-not-privileged",
            "containers-no-new-privileges", "containers-no-unconfined-profiles", "containers-no-host-namespaces", "containers-no-devices",
            "containers-no-docker-socket", "containers-no-host-secret-mounts", "containers-resource-limits", "containers-browser-no-workspace",
            "compose-parses",
        ],
        evidence: (plan) => {
            const names = ["sandbox", "gateway"].flatMap((h) => Object.keys(YAML.parse(artifact(plan, h, "etc/airlock/compose.yml.in") ?? "{}")?.services ?? {}));
            return names.length > 0 ? `services: ${names.join(", ")}` : undefined;
        },
    },
    {
        section: "containers",
        id: "images-pinned",
        title: "Every image is pinned by digest",
        rules: ["containers-images-pinned-by-digest"],
        evidence: (plan) => (artifact(plan, "sandbox", "etc/airlock/compose.yml.in") ? "images judged in both compose files" : undefined),
    },
    {
        section: "networking",
        id: "no-public-inbound",
        title: "No inbound TCP from the internet; every server has its firewall from creation; container ports on loopback or tailnet only",
        rules: ["hcloud-firewall-no-public-inbound-tcp", "hcloud-servers-have-firewall", "containers-ports-private-only"],
        evidence: (plan) => {
            const firewalls = byType(plan, "hcloud:index/firewall:Firewall");
            return firewalls.length >= 2 ? `firewalls: ${firewalls.map((f) => f.inputs.name).join(", ")}` : undefined;
        },
    },
    {
        section: "networking",
        id: "ssh-tailnet-only",
        title: "sshd listens on the tailnet address only, keys only, no root",
        rules: ["sshd-listen-tailnet-only", "sshd-no-password-auth", "sshd-no-root-login", "sshd-parses"],
        evidence: (plan) => (artifact(plan, "sandbox", "etc/airlock/sshd_config.in") && artifact(plan, "gateway", "etc/airlock/sshd_config.in") ? "both sshd configs judged" : undefined),
    },
    {
        section: "networking",
        id: "tailnet-least-privilege",
        title: "The tailnet policy grants gateway->sandbox 22/9222 and sandbox->gateway 53, no wildcards",
        rules: ["tailnet-acl-no-wildcards"],
        evidence: (plan) => (artifact(plan, "tailnet", "policy.hujson") ? `policy ${byType(plan, "tailscale:index/acl:Acl").length > 0 ? "managed by airlock" : "rendered for merging"}` : undefined),
    },
    {
        section: "networking",
        id: "dns-and-egress",
        title: "DNS only through AdGuard Home (query log on); metadata service blocked for the agent",
        rules: [],
        evidence: (plan) => {
            const nft = artifact(plan, "sandbox", "etc/airlock/egress.nft") ?? "";
            const adguard = artifact(plan, "gateway", "etc/airlock/adguard/AdGuardHome.yaml") ?? "";
            const ok = /th dport 53 ip daddr != @resolver4 drop/.test(nft) && /ip daddr 169\.254\.169\.254 counter drop/.test(nft) && YAML.parse(adguard || "{}")?.querylog?.enabled === true;
            return ok ? `egress mode ${/mode: (\w+)/.exec(nft)?.[1]}` : undefined;
        },
    },
    {
        section: "networking",
        id: "sandbox-host-key-pinned",
        title: "The gateway pins the sandbox's host key (no trust on first use)",
        rules: [],
        evidence: (plan) => {
            const sshConfig = artifact(plan, "gateway", SANDBOX_SSH_CONFIG_TEMPLATE.slice(1)) ?? "";
            return /StrictHostKeyChecking yes/.test(sshConfig) && artifact(plan, "gateway", "etc/airlock/known_hosts") ? "StrictHostKeyChecking yes, known_hosts from the stack" : undefined;
        },
    },
    {
        section: "automation boundaries",
        id: "every-command-through-the-wrapper",
        title: "Every agent command goes through the ForceCommand wrapper; no forwarding, tunnels or PTYs",
        rules: ["sshd-agent-force-command", "sshd-forwarding-disabled", "sshd-no-tunnel", "sshd-no-x11-forwarding", "cloud-init-no-tailscale-ssh"],
        evidence: (plan) => /^\s*ForceCommand \S+/m.exec(artifact(plan, "sandbox", "etc/airlock/sshd_config.in") ?? "")?.[0].trim(),
    },
    {
        section: "automation boundaries",
        id: "agent-unprivileged",
        title: "The agent has no sudo and no root-equivalent group; nothing is piped from the internet into a shell",
        rules: ["cloud-init-no-passwordless-sudo-for-agent", "cloud-init-no-pipe-to-shell", "cloud-init-ssh-password-auth-off"],
        evidence: (plan) => (artifact(plan, "sandbox", "cloud-init.yaml") ? `agent uid ${plan.config.agent.uid}` : undefined),
    },
    {
        section: "automation boundaries",
        id: "runtime-commands-in-sandbox",
        title: "The agent runtime sends every command to the sandbox (Hermes's terminal backend is ssh through the wrapper, pinned in its managed scope, checked before it starts)",
        rules: ["agent-runtime-commands-on-sandbox", "sshd-agent-force-command"],
        manualUnless: (plan) =>
            plan.config.gateway.agent
                ? undefined
                : `The stack runs no agent runtime (airlock:gateway.agent): give yours an ssh terminal to the sandbox alias of ${SANDBOX_SSH_CONFIG_PATH}, and check that it never falls back to running commands itself.`,
        evidence: (plan) => {
            const agent = YAML.parse(artifact(plan, "gateway", "etc/airlock/compose.yml.in") ?? "{}")?.services?.agent;
            const terminal = YAML.parse(artifact(plan, "gateway", GATEWAY_AGENT_PATHS.hermesConfig.slice(1)) ?? "{}")?.terminal;
            const managed = (agent?.volumes ?? []).some((v: string) => v === `${GATEWAY_AGENT_PATHS.hermesConfig}:${HERMES_RUNTIME.managedConfig}:ro`);
            return managed && terminal?.backend === "ssh" && agent?.command?.[0] === HERMES_RUNTIME.preflight
                ? `Hermes's managed terminal: ssh to ${terminal.ssh_host} (${plan.config.hostnames.sandbox}) as ${terminal.ssh_user}, cwd ${terminal.cwd}; started through airlock-hermes-preflight`
                : undefined;
        },
    },
    {
        section: "automation boundaries",
        id: "github-no-merge-or-admin",
        title: "GitHub tokens for the agent cannot merge, administer or change workflows (unless a human approves the task)",
        rules: [],
        manualUnless: (plan) => (minterConfig(plan) ? undefined : `${NO_GITHUB_APP} has no merge, administration or workflow permission.`),
        problems: (plan) => unapproved(minterConfig(plan)!, mergeOrAdmin),
        evidence: (plan) => {
            const minter = minterConfig(plan)!;
            const gated = Object.entries(minter.maxPermissions).filter(([n, l]) => mergeOrAdmin(n, l)).map(([n, l]) => `${n}:${l}`);
            return `maxPermissions ${scopes(minter)}${gated.length > 0 ? `; ${gated.join(", ")} only with approval` : ""}`;
        },
    },
    {
        section: "automation boundaries",
        id: "high-impact-needs-approval",
        title: "Every high-impact GitHub scope the stack allows needs a human's approval per task",
        rules: [],
        manualUnless: (plan) => (minterConfig(plan) ? undefined : `${NO_GITHUB_APP} carries no high-impact scope a human has not approved.`),
        problems: (plan) => unapproved(minterConfig(plan)!, highImpactEntry),
        evidence: (plan) => {
            const minter = minterConfig(plan)!;
            return minter.approvalRequired.length > 0 ? `approval required for ${minter.approvalRequired.join(", ")}` : "no high-impact scope can be minted";
        },
    },
    {
        section: "automation boundaries",
        id: "agent-tokens-are-scoped",
        title: "The agent's GitHub token is per task, short-lived and repository-scoped",
        rules: [],
        manualUnless: (plan) =>
            minterConfig(plan) ? undefined : "Mint a fine-grained or GitHub App token per task and pass it as GITHUB_TOKEN on that ssh command only (airlock:gateway.github does it for you).",
        problems: (plan) =>
            minterConfig(plan)!.repositories.length === 0
                ? ["airlock:gateway.github.repositories lists no repository, so the minter mints nothing: list the repositories tasks may name (owner/name, or owner/* for all of one owner's)"]
                : [],
        evidence: (plan) =>
            artifact(plan, "gateway", "usr/local/bin/airlock-github-token")
                ? `airlock-github-token: App ${minterConfig(plan)!.appId}, for ${minterConfig(plan)!.repositories.join(", ")} only, at most 60 min, the key readable by root only`
                : undefined,
    },
    {
        section: "automation boundaries",
        id: "agent-no-deploy-credentials",
        title: "The agent holds no deploy credentials (cloud, registry, infrastructure or long-lived forge tokens)",
        rules: [],
        manualUnless: (plan) =>
            plan.config.gateway.agent ? undefined : "The stack runs no agent runtime (airlock:gateway.agent): check by hand that your runtime's environment holds no deploy credential.",
        problems: (plan) => plan.config.gateway.agent!.secrets.flatMap((name) => (deployCredential(name) ? [`${name} (${deployCredential(name)})`] : [])),
        evidence: (plan) => {
            const names = plan.config.gateway.agent!.secrets;
            return names.length > 0 ? `agent secrets: ${names.join(", ")}` : "no agent secrets declared";
        },
    },
    {
        section: "recovery",
        id: "backups-off-host",
        title: "Backups run off-host, one B2 bucket per machine, with keys that cannot delete and hidden versions kept",
        rules: ["b2-host-keys-least-privilege", "b2-buckets-retain-hidden-versions"],
        evidence: (plan) => {
            const buckets = plan.resources.filter((r) => r.inputs.b2Kind === "bucket");
            const timers = Object.keys(collectArtifacts(plan).get("gateway") ?? {}).filter((f) => /airlock-(backup|restore-drill)[\w-]*\.timer$/.test(f));
            return buckets.length >= 2 && timers.length >= 3 ? `${buckets.length} buckets, timers: ${timers.map((t) => t.split("/").pop()).join(", ")}` : undefined;
        },
    },
];

const MANUAL: ManualItem[] = [
    {
        section: "secrets",
        id: "provider-credentials-are-secrets",
        title: "Provider credentials are stack secrets or CI secrets, never files in the repository",
        instruction: "Set hcloud:token and the Tailscale credentials with `pulumi config set --secret`; `npm run -s airlock -- doctor` checks they are there.",
    },
    {
        section: "automation boundaries",
        id: "default-branch-protected",
        title: "The repositories' default branches require a human review before merge",
        instruction: "In each repository the agent works on: a branch protection rule or ruleset on the default branch requiring an approving review, and the GitHub App not on its bypass list (the stack cannot see GitHub's settings).",
    },
    {
        section: "automation boundaries",
        id: "runtime-asks-before-high-impact",
        title: "The agent runtime asks a human before high-impact actions of its own (messages to customers, payments, deletions)",
        instruction: "Turn on the runtime's own approval settings for such tools; airlock confines where commands run and which tokens exist, not what the agent decides to do with them.",
    },
    {
        section: "recovery",
        id: "backup-credentials-delivered",
        title: "The gateway holds its backup credentials, each repository is initialised once and its id pinned (password and id kept elsewhere too)",
        instruction: "Deliver /etc/airlock/backup/{gateway,sandbox}.env and run `sudo airlock-backup-init gateway` and `... sandbox` as docs/backups.md shows; keep each restic password and repository id in your password manager.",
    },
    {
        section: "recovery",
        id: "restore-drill-done",
        title: "A restore has been rehearsed",
        instruction: "Run `sudo airlock-restore-drill` on the gateway once - and `sudo airlock-memory-drill` when the runtime has a memory database (both also run monthly) - and record the date here.",
    },
];

export function evaluateChecklist(plan: StackPlan, findings: Finding[]): ChecklistItem[] {
    const automatic = AUTOMATIC.map((item): ChecklistItem => {
        const instruction = item.manualUnless?.(plan);
        if (instruction !== undefined) return { section: item.section, id: item.id, title: item.title, status: "manual", detail: instruction };
        const hits = findings.filter((f) => item.rules.includes(f.rule));
        if (hits.length > 0) {
            const rules = [...new Set(hits.map((f) => f.rule))].join(", ");
            return { section: item.section, id: item.id, title: item.title, status: "fail", detail: `${hits.length} finding(s): ${rules}` };
        }
        const problems = item.problems?.(plan) ?? [];
        if (problems.length > 0) return { section: item.section, id: item.id, title: item.title, status: "fail", detail: problems.join("; ") };
        const evidence = item.evidence(plan);
        if (evidence === undefined) return { section: item.section, id: item.id, title: item.title, status: "fail", detail: "the plan does not show it" };
        return { section: item.section, id: item.id, title: item.title, status: "pass", detail: evidence };
    });
    const manual = MANUAL.map((item): ChecklistItem => ({ section: item.section, id: item.id, title: item.title, status: "manual", detail: item.instruction }));
    const order: Section[] = ["architecture", "secrets", "containers", "networking", "automation boundaries", "recovery"];
    return [...automatic, ...manual].sort((a, b) => order.indexOf(a.section) - order.indexOf(b.section));
}

export function formatChecklist(items: ChecklistItem[], markdown: boolean, mark: (status: ChecklistItem["status"], text: string) => string): string {
    const lines: string[] = [];
    let section: Section | undefined;
    for (const item of items) {
        if (item.section !== section) {
            section = item.section;
            lines.push(markdown ? `\n### ${section}\n` : `\n${section}`);
        }
        if (markdown) {
            const box = item.status === "pass" ? "[x]" : "[ ]";
            lines.push(`- ${box} **${item.title}** (${item.status}): ${item.detail}`);
        } else {
            lines.push(`  ${mark(item.status, item.status.padEnd(6))} ${item.title}\n         ${item.detail}`);
        }
    }
    return `${lines.join("\n").replace(/^\n/, "")}\n`;
}
