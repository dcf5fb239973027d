import * as YAML from "yaml";
import type { StackConfig } from "../config/schema";
import { renderTemplate } from "./templates";

/**
 * Pure rendering of everything a host runs: the files cloud-init writes, and the
 * cloud-init document itself. No Pulumi here, so it is tested without mocks and
 * reused by the CLI.
 */

export type HostRole = "gateway" | "sandbox";

export interface HostFile {
    /** Absolute path on the host. */
    path: string;
    content: string;
    /** Octal mode, as cloud-init's write_files takes it. */
    permissions: string;
}

export interface RenderedHost {
    role: HostRole;
    hostname: string;
    files: HostFile[];
    /**
     * The cloud-init document with TAILNET_AUTH_KEY_PLACEHOLDER where the join key
     * goes: fully known at preview, so policies judge exactly what will boot.
     */
    cloudInit: string;
}

/** Filled at deploy time with the TailnetKey's value; the single secret in user_data. */
export const TAILNET_AUTH_KEY_PLACEHOLDER = "@TAILNET_AUTH_KEY@";
export const TAILNET_AUTH_KEY_PATH = "/etc/airlock/tailnet-authkey";

/** Where each host keeps its sshd template; airlock-sshd-config renders the live config from it. */
export const SSHD_TEMPLATE_PATH = "/etc/airlock/sshd_config.in";
export const SANDBOX_WRAPPER_PATH = "/usr/local/libexec/airlock/sandbox-shell";

const script = (path: string, template: string, vars: Record<string, string> = {}): HostFile => ({
    path,
    content: renderTemplate(template, vars),
    permissions: "0755",
});

const config = (path: string, template: string, vars: Record<string, string> = {}): HostFile => ({
    path,
    content: renderTemplate(template, vars),
    permissions: "0644",
});

/** Files both hosts carry: tailnet join, tailnet-only sshd, rootless Docker. */
function commonFiles(cfg: StackConfig, role: HostRole): HostFile[] {
    return [
        script("/usr/local/sbin/airlock-install-tailscale", "scripts/install-tailscale"),
        script("/usr/local/sbin/airlock-tailnet-join", "scripts/tailnet-join", {
            hostname: cfg.hostnames[role],
            tag: role === "gateway" ? cfg.tailnet.gatewayTag : cfg.tailnet.sandboxTag,
        }),
        script("/usr/local/sbin/airlock-sshd-config", "scripts/airlock-sshd-config"),
        config("/etc/systemd/system/ssh.service.d/10-airlock-tailnet.conf", "systemd/ssh.service.d/10-airlock-tailnet.conf"),
        script("/usr/local/sbin/airlock-setup-rootless-docker", "scripts/setup-rootless-docker", {
            agentUser: cfg.agent.user,
        }),
        config("/etc/systemd/user/docker.service", "systemd/user/docker.service"),
    ];
}

export function renderSandbox(cfg: StackConfig): RenderedHost {
    const user = cfg.agent.user;
    const files: HostFile[] = [
        ...commonFiles(cfg, "sandbox"),
        {
            path: SSHD_TEMPLATE_PATH,
            content: renderTemplate("sshd/sandbox.sshd_config", {
                agentUser: user,
                acceptEnv: cfg.agent.envAllowlist.join(" "),
            }),
            permissions: "0600",
        },
        {
            // `restrict` turns off forwarding, PTYs and ~/.ssh/rc for these keys too.
            path: `/etc/ssh/authorized_keys/${user}`,
            content: cfg.agent.authorizedKeys.map((key) => `restrict ${key}\n`).join(""),
            permissions: "0644",
        },
        script(SANDBOX_WRAPPER_PATH, "scripts/sandbox-shell", {
            envAllowlist: cfg.agent.envAllowlist.join(" "),
        }),
        script("/usr/local/sbin/airlock-mount-workspace", "scripts/mount-workspace", { agentUser: user }),
        config("/etc/systemd/system/airlock-workspace.service", "systemd/airlock-workspace.service"),
        config("/etc/systemd/system/user@.service.d/10-airlock-workspace.conf", "systemd/user@.service.d/10-airlock-workspace.conf"),
    ];
    return assemble(cfg, "sandbox", files, { agentUser: user });
}

export function renderGateway(cfg: StackConfig): RenderedHost {
    const { adminUser } = cfg.gateway;
    const user = cfg.agent.user;
    const files: HostFile[] = [
        ...commonFiles(cfg, "gateway"),
        {
            path: SSHD_TEMPLATE_PATH,
            content: renderTemplate("sshd/gateway.sshd_config", { adminUser }),
            permissions: "0600",
        },
        {
            path: `/etc/ssh/authorized_keys/${adminUser}`,
            content: cfg.gateway.adminSshKeys.map((key) => `${key}\n`).join(""),
            permissions: "0644",
        },
        config("/etc/ssh/ssh_config.d/20-airlock-sandbox.conf", "ssh/sandbox.ssh_config", {
            sandboxHost: cfg.hostnames.sandbox,
            agentUser: user,
            sendEnv: cfg.agent.envAllowlist.join(" "),
        }),
        script("/usr/local/sbin/airlock-gateway-agent-key", "scripts/gateway-agent-key", { agentUser: user }),
    ];
    return assemble(cfg, "gateway", files, { adminUser, agentUser: user });
}

/** The cloud-init template plus every file as a write_files entry, and the join key file last. */
function assemble(cfg: StackConfig, role: HostRole, files: HostFile[], vars: Record<string, string>): RenderedHost {
    const hostname = cfg.hostnames[role];
    const yamlVars = Object.fromEntries(
        Object.entries({ ...vars, hostname }).map(([name, value]) => [name, JSON.stringify(value)]),
    );
    const doc = YAML.parseDocument(renderTemplate(`cloud-init/${role}.yaml`, yamlVars));
    const writeFiles = [
        ...files.map((file) => ({ ...file, owner: "root:root" })),
        { path: TAILNET_AUTH_KEY_PATH, content: TAILNET_AUTH_KEY_PLACEHOLDER, permissions: "0600", owner: "root:root" },
    ];
    doc.set("write_files", doc.createNode(writeFiles));
    const cloudInit = doc.toString({ lineWidth: 0, blockQuote: "literal" });
    return { role, hostname, files, cloudInit };
}

/** The user_data the server boots with: the rendered document plus the join key. */
export function withTailnetKey(cloudInit: string, key: string): string {
    const parts = cloudInit.split(TAILNET_AUTH_KEY_PLACEHOLDER);
    if (parts.length !== 2) throw new Error(`expected exactly one ${TAILNET_AUTH_KEY_PLACEHOLDER} in cloud-init`);
    if (!/^[A-Za-z0-9_-]+$/.test(key)) throw new Error("tailnet auth key has unexpected characters");
    return parts.join(key);
}
