import * as fs from "node:fs";
import * as path from "node:path";
import { BROKER_CLIENT_PATH, BROKER_PATH, BROKER_SOCKET_PATH, GATEWAY_KNOWN_HOSTS_PATH, RenderedHost, SANDBOX_WRAPPER_PATH, SSHD_TEMPLATE_PATH, withSandboxHostKey } from "../../components/render/hosts";
import { CHECKPOINT_CLIENT_PATH, CHECKPOINT_ENGINE_PATH } from "../../components/render/checkpoints";
import { brokerClient, checkpointClient, startBroker, TestBroker } from "./broker";
import { renderedFile } from "./stacks";
import { egressRulesFor } from "./egress";
import { inNamespace } from "./netns";
import { installFiles, run } from "./tools";
import { engineOnHostTools, hostSshd } from "./hostTools";

/** A new ed25519 key at `file`; returns its public half as "ssh-ed25519 AAAA...". */
export function newHostKey(file: string): string {
    if (run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", file]).status !== 0) throw new Error(`ssh-keygen ${file} failed`);
    return fs.readFileSync(`${file}.pub`, "utf8").trim().split(" ").slice(0, 2).join(" ");
}

/**
 * Installs the sandbox's rendered files under `root` (root-owned, for sshd's
 * StrictModes) with the sshd template's absolute paths moved into that tree and
 * a fresh host key, for the hosts' sshd (test/helpers/hostTools.ts); nothing else in the template changes. Returns the host key's
 * public half, for the gateway's pin.
 */
export function installSandboxSshd(sandbox: RenderedHost, root: string): string {
    fs.chmodSync(root, 0o755);
    installFiles(sandbox, root);
    const hostKey = path.join(root, "ssh_host_ed25519_key");
    const publicKey = newHostKey(hostKey);
    fs.mkdirSync("/run/sshd", { recursive: true, mode: 0o755 });
    // The hosts' sshd (hostSshd) first needs its own programs' paths; nothing else changes.
    const template = (hostSshd().configLines + renderedFile(sandbox, SSHD_TEMPLATE_PATH))
        .replace("HostKey /etc/ssh/ssh_host_ed25519_key", `HostKey ${hostKey}`)
        .replace("AuthorizedKeysFile /etc/ssh/authorized_keys/%u", `AuthorizedKeysFile ${root}/etc/ssh/authorized_keys/%u`)
        .replace(`ForceCommand ${SANDBOX_WRAPPER_PATH}`, `ForceCommand ${root}${SANDBOX_WRAPPER_PATH}`);
    fs.writeFileSync(path.join(root, SSHD_TEMPLATE_PATH), template, { mode: 0o600 });
    fs.writeFileSync(path.join(root, BROKER_CLIENT_PATH), brokerClient(sandbox, path.join(root, BROKER_SOCKET_PATH)), { mode: 0o644 });
    fs.writeFileSync(path.join(root, CHECKPOINT_CLIENT_PATH), checkpointClient(sandbox, root), { mode: 0o644 });
    fs.writeFileSync(path.join(root, CHECKPOINT_ENGINE_PATH), engineOnHostTools(renderedFile(sandbox, CHECKPOINT_ENGINE_PATH)));
    return publicKey;
}

/**
 * The root broker of a tree installed by installSandboxSshd; the agent's group may connect, as with the real
 * socket unit, and it signs the record's head with the rig's sshd host key, as the real broker does.
 */
export function startSandboxBroker(root: string, agentUser: string, env: Record<string, string> = {}): Promise<TestBroker> {
    const signing = { AIRLOCK_RECORD_SIGNING_KEY: path.join(root, "ssh_host_ed25519_key"), ...env };
    return startBroker(path.join(root, BROKER_PATH), path.join(root, BROKER_SOCKET_PATH), path.join(root, "var/lib/airlock/record"), agentUser, signing);
}

/** The gateway's rendered known_hosts, filled as at deploy with `publicKey`. */
export function pinnedKnownHosts(gateway: RenderedHost, publicKey: string): string {
    return withSandboxHostKey(renderedFile(gateway, GATEWAY_KNOWN_HOSTS_PATH), publicKey);
}

/**
 * As at boot on the sandbox: the rendered egress rules in force in the namespace
 * `netns` for the agent `uid` (the stack's own), and a default route out through
 * `via`, so that the rules, not a missing route, decide what the agent reaches.
 */
export function enforceEgress(netns: string, sandbox: RenderedHost, uid: number, via: string): void {
    const rules = path.join(fs.mkdtempSync("/run/airlock-egress-"), "egress.nft");
    fs.writeFileSync(rules, egressRulesFor(sandbox, uid, uid));
    for (const cmd of [["nft", "--file", rules], ["ip", "route", "add", "default", "via", via]]) {
        const result = inNamespace(netns, cmd);
        if (result.status !== 0) throw new Error(`${cmd.join(" ")}: ${result.stderr}`);
    }
    fs.rmSync(path.dirname(rules), { recursive: true, force: true });
}

/**
 * The gateway's side of an agent's ssh: its rendered config, then the test's address,
 * user, key, known hosts and control path (ssh keeps the first value of an option).
 */
export function agentSshArgs(o: { config: string; address: string; user: string; key: string; dir: string }): string[] {
    return ["-F", o.config, "-o", `HostName=${o.address}`, "-o", `User=${o.user}`, "-o", `IdentityFile=${o.key}`, "-o", `UserKnownHostsFile=${o.dir}/known_hosts`, "-o", `ControlPath=${o.dir}/cm-%C`, "-o", "ConnectTimeout=5"];
}
