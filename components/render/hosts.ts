import * as YAML from "yaml";
import type { StackConfig } from "../config/schema";
import {
    adguardDataDir,
    renderAdguardConfig,
    renderEgressRules,
    renderGatewayCompose,
    renderSandboxCompose,
    ResolvedImages,
} from "../workloads/compose";
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

/** Where each host keeps its sshd template; airlock-tailnet-render writes the live config from it. */
export const SSHD_TEMPLATE_PATH = "/etc/airlock/sshd_config.in";
/** The compose template; airlock-tailnet-render writes /etc/airlock/compose.yml from it. */
export const COMPOSE_TEMPLATE_PATH = "/etc/airlock/compose.yml.in";
const RENDER = "/usr/local/sbin/airlock-tailnet-render";
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

/**
 * Files both hosts carry: tailnet join, tailnet-only sshd, rootless Docker running
 * the host's compose file, and the unit that renders tailnet-addressed files.
 */
function commonFiles(cfg: StackConfig, role: HostRole, compose: string, tailnetConfig: string[], userUnitsAfter: string[], workloadsPre: string[]): HostFile[] {
    return [
        script("/usr/local/sbin/airlock-install-tailscale", "scripts/install-tailscale"),
        script("/usr/local/sbin/airlock-tailnet-join", "scripts/tailnet-join", {
            hostname: cfg.hostnames[role],
            tag: role === "gateway" ? cfg.tailnet.gatewayTag : cfg.tailnet.sandboxTag,
            // The sandbox resolves through the gateway's AdGuard Home, never through MagicDNS.
            acceptDns: role === "gateway" ? "true" : "false",
        }),
        script(RENDER, "scripts/tailnet-render"),
        config("/etc/systemd/system/ssh.service.d/10-airlock-tailnet.conf", "systemd/ssh.service.d/10-airlock-tailnet.conf"),
        script("/usr/local/sbin/airlock-setup-rootless-docker", "scripts/setup-rootless-docker", {
            agentUser: cfg.agent.user,
        }),
        config("/etc/systemd/user/docker.service", "systemd/user/docker.service"),
        { path: COMPOSE_TEMPLATE_PATH, content: compose, permissions: "0644" },
        config("/etc/systemd/system/airlock-tailnet-config.service", "systemd/airlock-tailnet-config.service", {
            execStart: tailnetConfig.map((line) => `ExecStart=${line}`).join("\n"),
        }),
        config("/etc/systemd/user/airlock-workloads.service", "systemd/user/airlock-workloads.service", {
            execStartPre: workloadsPre.map((line) => `ExecStartPre=${line}\n`).join(""),
        }),
        config("/etc/systemd/system/user@.service.d/10-airlock.conf", "systemd/user@.service.d/10-airlock.conf", {
            units: userUnitsAfter.join(" "),
        }),
    ];
}

const renderCompose = `${RENDER} --mode 0644 ${COMPOSE_TEMPLATE_PATH} /etc/airlock/compose.yml /usr/bin/docker-compose --log-level ERROR config --quiet --file`;

export function renderSandbox(cfg: StackConfig, images: ResolvedImages): RenderedHost {
    const user = cfg.agent.user;
    const resolver = `--resolver ${cfg.hostnames.gateway}`;
    const dockerConfigDir = `/home/${user}/.config/docker`;
    const tailnetConfig = [
        renderCompose,
        `${RENDER} --mode 0644 ${resolver} /etc/airlock/resolv.conf.in /etc/resolv.conf`,
        // The agent's Docker daemon resolves through the same resolver.
        `/usr/bin/install -d -o ${user} -g ${user} ${dockerConfigDir}`,
        `${RENDER} --mode 0644 ${resolver} /etc/airlock/docker-daemon.json.in ${dockerConfigDir}/daemon.json`,
        `${RENDER} ${resolver} /etc/airlock/egress.nft.in /etc/airlock/egress.nft /usr/sbin/nft --check --file`,
        "/usr/sbin/nft --file /etc/airlock/egress.nft",
    ];
    const files: HostFile[] = [
        ...commonFiles(cfg, "sandbox", renderSandboxCompose(cfg, images), tailnetConfig, ["airlock-workspace.service", "airlock-tailnet-config.service"], []),
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
        { path: "/etc/airlock/resolv.conf.in", content: "# airlock: the gateway's AdGuard Home is the only resolver.\nnameserver @RESOLVER_IPV4@\noptions edns0\n", permissions: "0644" },
        { path: "/etc/airlock/egress.nft.in", content: renderEgressRules(cfg), permissions: "0600" },
        { path: "/etc/airlock/docker-daemon.json.in", content: '{ "dns": ["@RESOLVER_IPV4@"] }\n', permissions: "0644" },
        script("/usr/local/sbin/airlock-egress-refresh", "scripts/egress-refresh", { allowlist: cfg.dns.allowlist.map((d) => `"${d}"`).join(" ") }),
        config("/etc/systemd/system/airlock-egress-refresh.service", "systemd/airlock-egress-refresh.service"),
        config("/etc/systemd/system/airlock-egress-refresh.timer", "systemd/airlock-egress-refresh.timer"),
    ];
    return assemble(cfg, "sandbox", files, { agentUser: user, agentUid: String(cfg.agent.uid) });
}

export function renderGateway(cfg: StackConfig, images: ResolvedImages): RenderedHost {
    const { adminUser } = cfg.gateway;
    const user = cfg.agent.user;
    const adguard = adguardDataDir(cfg);
    // The rendered AdGuard config replaces the live one at every start: this stack is the source of truth.
    const workloadsPre = [`/usr/bin/install -D -m 0600 /etc/airlock/adguard/AdGuardHome.yaml ${adguard}/conf/AdGuardHome.yaml`, `/usr/bin/mkdir -p ${adguard}/work`];
    const files: HostFile[] = [
        ...commonFiles(cfg, "gateway", renderGatewayCompose(cfg, images), [renderCompose], ["airlock-tailnet-config.service"], workloadsPre),
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
        { path: "/etc/airlock/adguard/AdGuardHome.yaml", content: renderAdguardConfig(cfg), permissions: "0644" },
        // Rootless Docker publishes AdGuard's port 53 as the agent user.
        { path: "/etc/sysctl.d/60-airlock-dns-port.conf", content: "# airlock: let the agent's rootless Docker publish DNS (53) on the tailnet address.\nnet.ipv4.ip_unprivileged_port_start = 53\n", permissions: "0644" },
    ];
    return assemble(cfg, "gateway", files, { adminUser, agentUser: user, agentUid: String(cfg.agent.uid) });
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

/** Fills the built sandbox-shell image reference (only a digest-pinned reference is accepted). */
export function withBuiltImage(cloudInit: string, placeholder: string, reference: string): string {
    if (!/^[a-z0-9./:_-]+@sha256:[0-9a-f]{64}$/.test(reference)) throw new Error(`built image reference ${reference} is not pinned by digest`);
    return cloudInit.split(placeholder).join(reference);
}
