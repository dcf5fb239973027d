import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import * as YAML from "yaml";
import { COMPOSE_TEMPLATE_PATH, GATEWAY_KNOWN_HOSTS_PATH, SANDBOX_SSH_ALIAS, SANDBOX_SSH_CONFIG_PATH, SANDBOX_SSH_CONFIG_TEMPLATE } from "../components/render/hosts";
import { AGENT_SERVICE, GATEWAY_AGENT_PATHS } from "../components/workloads/compose";
import { renderedFile, renderHosts, stackFile, tempDir } from "./helpers/stacks";
import { run, TEST_TAILNET_DOMAIN, TEST_TAILNET_IPV4, toolsAvailable } from "./helpers/tools";

/**
 * The rendered airlock-tailnet-render against a `tailscale` that answers as the real CLI
 * does (`ip -4`, `status --json` with its MagicDNSSuffix) and an `ip` that lists the
 * address as local. The stand-in tailscaled's CLI drives it in test/twin-tailscale.test.ts.
 */
describe.runIf(toolsAvailable("airlock-tailnet-render", ["jq", "bash"]))("airlock-tailnet-render", () => {
    let dir: string;
    let script: string;
    const gateway = renderHosts(readStackFile(stackFile("dev"))).gateway;

    beforeAll(() => {
        dir = tempDir("tailnet-render");
        script = path.join(dir, "airlock-tailnet-render");
        fs.writeFileSync(script, renderedFile(gateway, "/usr/local/sbin/airlock-tailnet-render"), { mode: 0o755 });
        fs.mkdirSync(path.join(dir, "bin"));
        fs.writeFileSync(path.join(dir, "bin", "ip"), `#!/bin/sh\necho "3: tailscale0    inet ${TEST_TAILNET_IPV4}/32 scope global tailscale0"\n`, { mode: 0o755 });
    });

    /** Renders `template` with a tailscale whose status names `suffix` as the tailnet's domain and these peers. */
    function render(template: string, suffix: unknown, options: { peers?: Record<string, unknown>[]; args?: string[]; target?: string } = {}) {
        const bin = fs.mkdtempSync(path.join(dir, "case-"));
        const status = JSON.stringify({ BackendState: "Running", MagicDNSSuffix: suffix, Peer: Object.fromEntries((options.peers ?? []).map((p, i) => [`nodekey:${i}`, p])) });
        fs.writeFileSync(path.join(bin, "status.json"), status);
        fs.writeFileSync(
            path.join(bin, "tailscale"),
            `#!/bin/sh\ncase "$1" in\nip) echo ${TEST_TAILNET_IPV4} ;;\nstatus) cat ${path.join(bin, "status.json")} ;;\n*) exit 1 ;;\nesac\n`,
            { mode: 0o755 },
        );
        const input = path.join(bin, "template.in");
        const output = options.target ?? path.join(bin, "rendered");
        fs.writeFileSync(input, template);
        const result = run(script, [...(options.args ?? []), input, output], { env: { PATH: `${bin}:${path.join(dir, "bin")}:/usr/bin:/bin`, AIRLOCK_TAILNET_WAIT_SECONDS: "2" } });
        return { ...result, written: fs.existsSync(output) && fs.statSync(output).isFile() ? fs.readFileSync(output, "utf8") : undefined, leftovers: fs.readdirSync(bin).filter((f) => f.startsWith("rendered")) };
    }

    /** The sandbox's ssh config as the gateway renders it (its own and the runtime's), with `peers` in the tailnet. */
    const sandboxConfig = (peers: Record<string, unknown>[], options: { args?: string[]; target?: string } = {}) =>
        render(renderedFile(gateway, SANDBOX_SSH_CONFIG_TEMPLATE), TEST_TAILNET_DOMAIN, { peers, ...options, args: ["--sandbox", "tag:airlock-dev-sandbox", "airlock-dev-sandbox", ...(options.args ?? [])] });
    const peer = (ip: string, tags: string[], online: boolean, created: string, hostName = "airlock-dev-sandbox") => ({ HostName: hostName, DNSName: `${hostName}.${TEST_TAILNET_DOMAIN}.`, TailscaleIPs: [ip, "fd7a:115c:a1e0::1"], Tags: tags, Online: online, Created: created });

    it("names the sandbox in the gateway's and the runtime's ssh config by the address of its node, found by its tag, not its name", () => {
        // What a replaced sandbox leaves: the old node offline with the name, the new one online as NAME-1.
        const result = sandboxConfig([
            peer("100.100.7.2", ["tag:airlock-dev-sandbox"], false, "2026-12-01T10:00:00Z"),
            peer("100.100.7.3", ["tag:airlock-dev-sandbox"], true, "2026-12-06T10:00:00Z", "airlock-dev-sandbox-1"),
            peer("100.100.7.4", [], true, "2026-12-07T10:00:00Z"), // a person's laptop named like it, untagged
            peer("100.100.7.5", ["tag:airlock-dev-gateway"], true, "2026-12-07T10:00:00Z"),
        ]);
        expect(result.stderr).toBe("");
        expect(result.status).toBe(0);
        expect(result.written).not.toMatch(/@[A-Z_]+@/);
        expect(result.written).toMatch(/^\tHostName 100\.100\.7\.3$/m);
        // The pin stays on the short name the stack's known_hosts line carries, in the file the gateway pins it in.
        expect(result.written).toMatch(/^\tHostKeyAlias airlock-dev-sandbox$/m);
        expect(result.written).toContain(`\tUserKnownHostsFile ${GATEWAY_KNOWN_HOSTS_PATH}\n`);
        expect(result.written).toContain(`\nHost ${SANDBOX_SSH_ALIAS} airlock-dev-sandbox\n`);
        expect(result.stdout).toContain("(sandbox 100.100.7.3)");
        // Both configs come from this one template.
        const gatewayFiles = gateway.files.map((f) => f.path);
        expect(gatewayFiles).toContain(SANDBOX_SSH_CONFIG_TEMPLATE);
        expect(gatewayFiles).not.toContain(SANDBOX_SSH_CONFIG_PATH);
        expect(gatewayFiles).not.toContain(GATEWAY_AGENT_PATHS.sshConfig);
    });

    it("takes only a node named NAME or NAME-N in this tailnet's domain: a tag owner may tag another device", () => {
        const result = sandboxConfig([
            peer("100.100.7.3", ["tag:airlock-dev-sandbox"], true, "2026-12-06T10:00:00Z", "airlock-dev-sandbox-1"),
            peer("100.100.7.8", ["tag:airlock-dev-sandbox"], true, "2026-12-07T10:00:00Z", "laptop"),
            peer("100.100.7.9", ["tag:airlock-dev-sandbox"], true, "2026-12-07T10:00:00Z", "airlock-dev-sandbox-x"),
            { ...peer("100.100.7.10", ["tag:airlock-dev-sandbox"], true, "2026-12-07T10:00:00Z"), DNSName: "airlock-dev-sandbox.other-tailnet.ts.net." },
        ]);
        expect(result.status, result.stderr).toBe(0);
        expect(result.written).toMatch(/^\tHostName 100\.100\.7\.3$/m);
    });

    it("refuses a target that is a folder, rather than writing into it", () => {
        const folder = fs.mkdtempSync(path.join(dir, "folder-target-"));
        const result = sandboxConfig([peer("100.100.7.3", ["tag:airlock-dev-sandbox"], true, "2026-12-06T10:00:00Z")], { target: folder });
        expect(result.status).not.toBe(0);
        expect(fs.readdirSync(folder)).toEqual([]);
    });

    it("takes no sharee node (another tailnet's device we shared to, which may carry a tag of that name), as tailscale status hides them", () => {
        // ipnstate.PeerStatus.ShareeNode: "owned by a shared-to user ... should be hidden by tailscale status".
        const result = sandboxConfig([
            peer("100.100.7.3", ["tag:airlock-dev-sandbox"], true, "2026-12-06T10:00:00Z"),
            { ...peer("100.100.7.8", ["tag:airlock-dev-sandbox"], true, "2026-12-07T10:00:00Z", "airlock-dev-sandbox-2"), ShareeNode: true },
        ]);
        expect(result.status, result.stderr).toBe(0);
        expect(result.written).toMatch(/^\tHostName 100\.100\.7\.3$/m);
    });

    it("names it by its full MagicDNS name while no node carries the tag (the gateway joined first), and prefers an online node to a newer offline one", () => {
        const none = sandboxConfig([peer("100.100.7.4", [], true, "2026-12-07T10:00:00Z")]);
        expect(none.status, none.stderr).toBe(0);
        expect(none.written).toMatch(new RegExp(`^\tHostName airlock-dev-sandbox\.${TEST_TAILNET_DOMAIN.replaceAll(".", "\\.")}$`, "m"));
        const online = sandboxConfig([peer("100.100.7.2", ["tag:airlock-dev-sandbox"], true, "2026-12-01T10:00:00Z"), peer("100.100.7.3", ["tag:airlock-dev-sandbox"], false, "2026-12-06T10:00:00Z")]);
        expect(online.written).toMatch(/^\tHostName 100\.100\.7\.2$/m);
    });

    it.each([
        ["outside 100.64.0.0/10", "192.0.2.7"],
        ["a sed expression", "100.100.7.2/g;s/x"],
        ["with a second line (an ssh option)", "100.100.7.2\n\tProxyCommand touch /tmp/airlock-owned"],
        ["with a second line escaped for sed", "100.100.7.2\n\\\n\tProxyCommand touch /tmp/airlock-owned"],
        ["with a second line and sed's own newline", "100.100.7.2\n\tProxyCommand touch /tmp/airlock-owned\\"],
        // ssh reads a leading zero as octal: 100.064.1.1 is 100.52.1.1, a public address.
        ["with a leading zero (octal to ssh)", "100.064.1.1"],
        ["with a leading zero in the last octet", "100.64.0.08"],
    ])("refuses a sandbox address %s and writes nothing", (_, ip) => {
        const result = sandboxConfig([peer(ip, ["tag:airlock-dev-sandbox"], true, "2026-12-06T10:00:00Z")]);
        expect(result.status).toBe(1);
        expect(result.stderr).toMatch(/^airlock-tailnet-render: the sandbox's tailnet address is not in 100\.64\.0\.0\/10 \('[^\n]*'\); \S+ not written\n$/);
        expect(result.leftovers).toEqual([]);
    });

    it("--if-changed leaves an identical file alone, and replaces a changed one by a rename", () => {
        const target = path.join(fs.mkdtempSync(path.join(dir, "target-")), "ssh_config");
        const peers = [peer("100.100.7.3", ["tag:airlock-dev-sandbox"], true, "2026-12-06T10:00:00Z")];
        expect(sandboxConfig(peers, { target }).status).toBe(0);
        const before = fs.statSync(target);
        const same = sandboxConfig(peers, { target, args: ["--if-changed"] });
        expect(same.status, same.stderr).toBe(0);
        expect(same.stdout).toBe("");
        expect(fs.statSync(target).mtimeMs).toBe(before.mtimeMs);
        const moved = sandboxConfig([...peers, peer("100.100.7.9", ["tag:airlock-dev-sandbox"], true, "2026-12-06T11:00:00Z")], { target, args: ["--if-changed"] });
        expect(moved.status, moved.stderr).toBe(0);
        expect(fs.statSync(target).ino).not.toBe(before.ino);
        expect(fs.readFileSync(target, "utf8")).toMatch(/^\tHostName 100\.100\.7\.9$/m);
        expect(fs.readdirSync(path.dirname(target))).toEqual(["ssh_config"]);
    });

    it("a reader of the runtime's ssh config never sees it empty or half-written while the sandbox moves (a rename in its folder)", () => {
        // Hermes's ssh reads the file whenever it connects; one it reads empty names no pinned host key.
        const folder = fs.mkdtempSync(path.join(dir, "runtime-ssh-"));
        const target = path.join(folder, "ssh_config");
        const at = (ip: string) => [peer(ip, ["tag:airlock-dev-sandbox"], true, "2026-12-06T10:00:00Z")];
        expect(sandboxConfig(at("100.100.7.3"), { target }).status).toBe(0);
        const whole = (text: string) => /^\tHostName 100\.100\.7\.[39]$/m.test(text) && text.endsWith("\n") && text.length > 100;
        const seen = path.join(folder, "..", `${path.basename(folder)}.seen`);
        const reader = spawn("bash", ["-c", `while :; do c="$(cat ${target} 2>/dev/null; echo .)"; case "$c" in *"HostKeyAlias"*) ;; *) printf 'torn\\n' >>${seen} ;; esac; done`], { stdio: "ignore" });
        try {
            for (let i = 0; i < 60; i++) {
                const moved = sandboxConfig(at(i % 2 ? "100.100.7.3" : "100.100.7.9"), { target, args: ["--if-changed"] });
                expect(moved.status, moved.stderr).toBe(0);
            }
        } finally {
            reader.kill("SIGKILL");
        }
        expect(whole(fs.readFileSync(target, "utf8"))).toBe(true);
        expect(fs.existsSync(seen) ? fs.readFileSync(seen, "utf8").split("\n").filter(Boolean).length : 0, "reads that found no whole config").toBe(0);
        expect(fs.readdirSync(folder)).toEqual(["ssh_config"]);
    });

    it("the compose file and the runtime's container need no tailnet domain", () => {
        // The runtime's container gets no search domain: a short name is never completed by one.
        const compose = renderedFile(gateway, COMPOSE_TEMPLATE_PATH);
        expect(compose).not.toContain("@TAILNET_DOMAIN@");
        expect(YAML.parse(compose).services[AGENT_SERVICE].dns_search).toBeUndefined();
    });

    it.each([
        ["no domain (a status without MagicDNSSuffix)", null],
        ["an empty domain", ""],
        ["a domain with a slash (sed's delimiter)", "tail7e57.ts.net/g;s/x"],
        ["a domain with a newline (a second search line)", "tail7e57.ts.net\nnameserver 192.0.2.1"],
        ["a label longer than 63 characters", `${"a".repeat(64)}.ts.net`],
        ["upper case or an underscore", "Tail_7e57.ts.net"],
    ])("refuses %s and writes nothing", (_, suffix) => {
        const result = render("search @TAILNET_DOMAIN@\n", suffix);
        expect(result.status).toBe(1);
        expect(result.stderr).toMatch(/^airlock-tailnet-render: the tailnet's MagicDNS domain is not a DNS name \('[^\n]*'\); \S+ not written\n$/);
        expect(result.leftovers).toEqual([]);
    });

    it("takes a single label (a Headscale base domain may be one)", () => {
        const result = render("search @TAILNET_DOMAIN@\n", "tailnet");
        expect(result.status, result.stderr).toBe(0);
        expect(result.written).toBe("search tailnet\n");
    });

    it("does not ask for the domain where the template has no place for it", () => {
        const result = render("listen @TAILNET_IPV4@\n", null);
        expect(result.status, result.stderr).toBe(0);
        expect(result.written).toBe(`listen ${TEST_TAILNET_IPV4}\n`);
    });
});
