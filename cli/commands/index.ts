import type { CommandModule } from "../command";

/**
 * Every `airlock` command: name -> [one-line summary, its module]. A module is
 * loaded only when its command runs, so `airlock check` never loads Pulumi.
 * To add a command: write cli/commands/<name>.ts (see ../command.ts) and add ONE line here.
 */
export const COMMANDS: Record<string, [summary: string, load: () => Promise<CommandModule>]> = {
    plan: ["run the real program offline (Pulumi mocks), write every rendered artifact and preview.json, then gate it", () => import("./plan")],
    check: ["lint artifacts (compose, sshd config, cloud-init, preview JSON) with the policy rules", () => import("./check")],
    gate: ["the policy gate: a stack's offline plan, every stack, or a real `pulumi preview --json`", () => import("./gate")],
    fork: ["derive a new customer stack from an existing one: unique names, no secrets, gated before it is written", () => import("./fork")],
    checklist: ["the pre-deployment checklist, evaluated from the stack's offline plan where it can be", () => import("./checklist")],
    audit: ["the sandbox's command record: show it (with the DNS names each command resolved) or verify its hash chain, on a copy of the gateway's records", () => import("./audit")],
    egress: ["learn the DNS allowlist from what the agent really resolved: a diff of the stack file to review, never applied", () => import("./egress")],
    secrets: ["the agent runtime's secrets on the gateway: push (from Pulumi or --stdin JSON, restarts the runtime) or status; names only, never values", () => import("./secrets")],
    twin: ["the stack's gateway and sandbox as local QEMU guests from their rendered cloud-init, with stand-ins for Hetzner, Tailscale and the registries: up, status, exec, agent, replace, firewall, down", () => import("./twin")],
    doctor: ["check this machine for a real deployment: pulumi, backend, credentials, ssh; with credentials exported, the B2 key's capabilities and the tailnet policy (never prints a secret)", () => import("./doctor")],
};
