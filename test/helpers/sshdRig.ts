import * as fs from "node:fs";
import * as path from "node:path";
import { GATEWAY_KNOWN_HOSTS_PATH, RenderedHost, SANDBOX_WRAPPER_PATH, SSHD_TEMPLATE_PATH, withSandboxHostKey } from "../../components/render/hosts";
import { renderedFile } from "./stacks";
import { installFiles, run } from "./tools";

/** A new ed25519 key at `file`; returns its public half as "ssh-ed25519 AAAA...". */
export function newHostKey(file: string): string {
    if (run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", file]).status !== 0) throw new Error(`ssh-keygen ${file} failed`);
    return fs.readFileSync(`${file}.pub`, "utf8").trim().split(" ").slice(0, 2).join(" ");
}

/**
 * Installs the sandbox's rendered files under `root` (root-owned, for sshd's
 * StrictModes) with the sshd template's absolute paths moved into that tree and
 * a fresh host key; nothing else in the template changes. Returns the host key's
 * public half, for the gateway's pin.
 */
export function installSandboxSshd(sandbox: RenderedHost, root: string): string {
    fs.chmodSync(root, 0o755);
    installFiles(sandbox, root);
    const hostKey = path.join(root, "ssh_host_ed25519_key");
    const publicKey = newHostKey(hostKey);
    fs.mkdirSync("/run/sshd", { recursive: true, mode: 0o755 });
    const template = renderedFile(sandbox, SSHD_TEMPLATE_PATH)
        .replace("HostKey /etc/ssh/ssh_host_ed25519_key", `HostKey ${hostKey}`)
        .replace("AuthorizedKeysFile /etc/ssh/authorized_keys/%u", `AuthorizedKeysFile ${root}/etc/ssh/authorized_keys/%u`)
        .replace(`ForceCommand ${SANDBOX_WRAPPER_PATH}`, `ForceCommand ${root}${SANDBOX_WRAPPER_PATH}`);
    fs.writeFileSync(path.join(root, SSHD_TEMPLATE_PATH), template, { mode: 0o600 });
    return publicKey;
}

/** The gateway's rendered known_hosts, filled as at deploy with `publicKey`. */
export function pinnedKnownHosts(gateway: RenderedHost, publicKey: string): string {
    return withSandboxHostKey(renderedFile(gateway, GATEWAY_KNOWN_HOSTS_PATH), publicKey);
}
