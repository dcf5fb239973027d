import { ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { renderTailnetPolicy, tailnetPolicyText } from "../components/render/tailnetPolicy";
import { authKeysOf, buildTailscaleDeb, Coordinator, newAuthKey, startCoordinator, TAILSCALE_DEB_VERSION } from "../twin/tailscale";
import { readStackFile } from "../components/config/load";
import { inNamespace, spawnInNamespace } from "./helpers/netns";
import { BootedHost, bootRootfs, debianRootfs, extractRootfs } from "./helpers/nspawn";
import { renderHosts, stackFile } from "./helpers/stacks";
import { isRoot, run, toolsAvailable } from "./helpers/tools";

/**
 * The twin's Tailscale stand-in without QEMU: tailscaled and the CLI from
 * twin/tailscale/ run in network namespaces of the test's own, each with a veth to a
 * "public" bridge namespace where the coordinator listens as
 * controlplane.tailscale.com. The nodes join as airlock's scripts make them join
 * (templates/scripts/tailnet-join), WireGuard carries their traffic, and the
 * tailnet policy the plan renders decides who reaches which port.
 */

const canRun = isRoot() && toolsAvailable("the Tailscale stand-in in namespaces", ["ip", "wg", "wireguard-go", "nft", "socat", "ping", "dpkg-deb", "python3", "dnsmasq", "getent"]);
if (!isRoot()) console.warn("SKIPPED the Tailscale stand-in in namespaces: needs root (CI runs it as root)");

const TWIN = path.resolve(__dirname, "..", "twin", "tailscale");
const BRIDGE_NS = "al-ts-br";
const PUBLIC = "198.18.77";
const CONTROL = `${PUBLIC}.3`;
const UPSTREAM_RESOLVER = `${PUBLIC}.1`;
const GATEWAY_TAG = "tag:airlock-dev-gateway";
const SANDBOX_TAG = "tag:airlock-dev-sandbox";
const OTHER_TAG = "tag:airlock-dev-other";
const GATEWAY_HOST = "airlock-dev-gateway";
const SANDBOX_HOST = "airlock-dev-sandbox";

interface TestNode {
    ns: string;
    dir: string;
    daemon?: ChildProcess;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const ip = (...args: string[]) => {
    const result = run("ip", args);
    if (result.status !== 0) throw new Error(`ip ${args.join(" ")}: ${result.stderr}`);
};

describe.runIf(canRun)("the twin's Tailscale stand-in (namespaces, WireGuard, the rendered policy)", () => {
    let work: string;
    let coordinator: Coordinator;
    let dnsmasq: ChildProcess;
    const nodes: Record<"gateway" | "sandbox" | "other", TestNode> = {
        gateway: { ns: "al-ts-gw", dir: "" },
        sandbox: { ns: "al-ts-sb", dir: "" },
        other: { ns: "al-ts-ot", dir: "" },
    };
    const keys = { gateway: newAuthKey([GATEWAY_TAG]), sandbox: newAuthKey([SANDBOX_TAG]), other: newAuthKey([OTHER_TAG]) };
    const listeners: ChildProcess[] = [];

    const cli = (node: TestNode, args: string[], user?: string) =>
        inNamespace(node.ns, [...(user ? ["runuser", "-u", user, "--"] : []), path.join(TWIN, "tailscale"), `--socket=${node.dir}/tailscaled.sock`, ...args]);
    const tailnetIp = (node: TestNode, peer?: string) => cli(node, ["ip", "-4", ...(peer ? [peer] : [])]);
    const startDaemon = (node: TestNode) => {
        // wireguard-go (where the kernel has no WireGuard) keeps its control socket in
        // /run/wireguard: each node gets its own, in the mount namespace `ip netns exec` makes.
        node.daemon = spawnInNamespace(
            node.ns,
            `mkdir -p /run/wireguard && mount -t tmpfs -o mode=0700 tmpfs /run/wireguard && exec ${TWIN}/tailscaled --state=${node.dir}/tailscaled.state --socket=${node.dir}/tailscaled.sock`,
            path.join(node.dir, "tailscaled.log"),
        );
    };
    const stopDaemon = async (node: TestNode) => {
        const daemon = node.daemon;
        if (!daemon || daemon.exitCode !== null || daemon.signalCode !== null) return;
        const exited = new Promise((resolve) => daemon.once("exit", resolve));
        daemon.kill("SIGTERM");
        await Promise.race([exited, sleep(5000)]);
        if (daemon.exitCode === null && daemon.signalCode === null) daemon.kill("SIGKILL");
    };
    const waitForSocket = async (node: TestNode) => {
        for (let i = 0; i < 100; i++) {
            if (fs.existsSync(`${node.dir}/tailscaled.sock`)) return;
            await sleep(100);
        }
        throw new Error(`tailscaled in ${node.ns} did not start: ${fs.readFileSync(path.join(node.dir, "tailscaled.log"), "utf8")}`);
    };
    /** `tailscale up` as airlock-tailnet-join runs it, the key in a file. */
    const join = (node: TestNode, key: string, hostname: string, tag: string, acceptDns: boolean) => {
        const keyFile = path.join(node.dir, "tailnet-authkey");
        fs.writeFileSync(keyFile, `${key}\n`, { mode: 0o600 });
        return cli(node, ["up", `--auth-key=file:${keyFile}`, `--hostname=${hostname}`, `--advertise-tags=${tag}`, "--accept-routes=false", `--accept-dns=${acceptDns}`]);
    };
    /** A TCP connection from `from` to address:port that gets the listener's greeting. */
    const tcpReaches = (from: TestNode, address: string, port: number) =>
        inNamespace(from.ns, ["socat", "-T", "2", "-", `TCP:${address}:${port},connect-timeout=2`], { input: "" }).stdout.includes(`hello-${port}`);
    const udpReaches = (from: TestNode, address: string, port: number) =>
        inNamespace(from.ns, ["socat", "-T", "2", "-", `UDP:${address}:${port}`], { input: "ping\n" }).stdout.includes(`hello-${port}`);
    const listen = (node: TestNode, address: string, port: number, proto: "TCP" | "UDP" = "TCP") => {
        // A UDP listener reads the datagram before it answers (socat fails on an unread one).
        const [kind, answer] = proto === "TCP" ? [`TCP-LISTEN:${port},reuseaddr`, `echo hello-${port}`] : [`UDP-RECVFROM:${port}`, `read -r -t 1 _; echo hello-${port}`];
        listeners.push(spawnInNamespace(node.ns, `exec socat ${kind},bind=${address},fork SYSTEM:'${answer}'`, path.join(node.dir, "listeners.log")));
    };

    beforeAll(async () => {
        work = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-twin-tailscale-"));
        for (const ns of [BRIDGE_NS, ...Object.values(nodes).map((n) => n.ns)]) {
            run("ip", ["netns", "del", ns]);
            ip("netns", "add", ns);
            ip("-n", ns, "link", "set", "lo", "up");
        }
        ip("-n", BRIDGE_NS, "link", "add", "br0", "type", "bridge");
        ip("-n", BRIDGE_NS, "addr", "add", `${CONTROL}/24`, "dev", "br0");
        ip("-n", BRIDGE_NS, "addr", "add", `${UPSTREAM_RESOLVER}/24`, "dev", "br0");
        ip("-n", BRIDGE_NS, "link", "set", "br0", "up");
        let host = 10;
        for (const [role, node] of Object.entries(nodes)) {
            node.dir = path.join(work, role);
            fs.mkdirSync(node.dir);
            ip("link", "add", "eth0", "netns", node.ns, "type", "veth", "peer", "name", `p-${role}`, "netns", BRIDGE_NS);
            ip("-n", BRIDGE_NS, "link", "set", `p-${role}`, "master", "br0", "up");
            ip("-n", node.ns, "addr", "add", `${PUBLIC}.${host++}/24`, "dev", "eth0");
            ip("-n", node.ns, "link", "set", "eth0", "up");
            // What the twin's dnsmasq does for the guests: the control plane's name, a resolver.
            fs.mkdirSync(`/etc/netns/${node.ns}`, { recursive: true });
            fs.writeFileSync(`/etc/netns/${node.ns}/hosts`, `127.0.0.1 localhost\n${CONTROL} controlplane.tailscale.com\n`);
            fs.writeFileSync(`/etc/netns/${node.ns}/resolv.conf`, `nameserver ${UPSTREAM_RESOLVER}\n`);
        }
        dnsmasq = spawnInNamespace(
            BRIDGE_NS,
            `exec dnsmasq --keep-in-foreground --no-resolv --no-hosts --bind-interfaces --listen-address=${UPSTREAM_RESOLVER} --address=/upstream.test/${PUBLIC}.99 --pid-file=${work}/dnsmasq.pid`,
            path.join(work, "dnsmasq.log"),
        );
        const policyFile = path.join(work, "policy.hujson");
        // A device tagged for nothing the policy grants: its tag is defined (the coordinator refuses keys for undefined ones).
        const policy = renderTailnetPolicy({ gatewayTag: GATEWAY_TAG, sandboxTag: SANDBOX_TAG, tagOwners: ["autogroup:admin"], operators: ["autogroup:admin"] });
        fs.writeFileSync(policyFile, tailnetPolicyText({ ...policy, tagOwners: { ...policy.tagOwners, [OTHER_TAG]: ["autogroup:admin"] } }));
        coordinator = await startCoordinator({
            netns: BRIDGE_NS,
            address: CONTROL,
            port: 80,
            policyFile,
            authKeys: authKeysOf(...Object.values(keys)),
            logFile: path.join(work, "coordinator.log"),
            // Short, so the replaced-sandbox test need not wait the default 45 s.
            pollSeconds: 2,
            offlineSeconds: 5,
        });
        for (const node of Object.values(nodes)) startDaemon(node);
        for (const node of Object.values(nodes)) await waitForSocket(node);
    }, 60_000);

    afterAll(async () => {
        for (const listener of listeners) listener.kill("SIGKILL");
        for (const node of Object.values(nodes)) await stopDaemon(node);
        dnsmasq?.kill("SIGTERM");
        await coordinator?.stop();
        for (const ns of [BRIDGE_NS, ...Object.values(nodes).map((n) => n.ns)]) {
            run("ip", ["netns", "del", ns]);
            fs.rmSync(`/etc/netns/${ns}`, { recursive: true, force: true });
        }
        if (work) fs.rmSync(work, { recursive: true, force: true });
    }, 30_000);

    it("the sandbox joins first, alone: a 100.64.0.0/10 address on tailscale0, and no gateway to find yet", () => {
        const joined = join(nodes.sandbox, keys.sandbox.key, SANDBOX_HOST, SANDBOX_TAG, false);
        expect(joined.stderr).toBe("");
        expect(joined.status).toBe(0);
        const own = tailnetIp(nodes.sandbox);
        expect(own.status).toBe(0);
        expect(own.stdout.trim()).toMatch(/^100\.(6[4-9]|[7-9]\d|1[01]\d|12[0-7])\.\d+\.\d+$/);
        const link = inNamespace(nodes.sandbox.ns, ["ip", "-4", "-o", "addr", "show", "dev", "tailscale0"]).stdout;
        expect(link).toContain(`inet ${own.stdout.trim()}/32`);
        const gateway = tailnetIp(nodes.sandbox, GATEWAY_HOST);
        expect(gateway.status).toBe(1);
        expect(gateway.stdout).toBe("");
    });

    it("an auth key is good once: a reused key, an unknown key and tags the key does not carry are refused", () => {
        const reused = join(nodes.other, keys.sandbox.key, "intruder", SANDBOX_TAG, false);
        expect(reused.status).toBe(1);
        expect(reused.stderr).toMatch(/invalid key: .*already been used/);
        const unknown = join(nodes.other, newAuthKey([SANDBOX_TAG]).key, "intruder", SANDBOX_TAG, false);
        expect(unknown.status).toBe(1);
        expect(unknown.stderr).toMatch(/invalid key: .*does not exist/);
        const wrongTag = join(nodes.other, keys.other.key, "intruder", GATEWAY_TAG, false);
        expect(wrongTag.status).toBe(1);
        expect(wrongTag.stderr).toMatch(/requested tags .*tag:airlock-dev-gateway.* not permitted/);
        expect(tailnetIp(nodes.other).status).toBe(1);
        // The refused attempts did not burn the key: it still joins with its own tag.
        expect(join(nodes.other, keys.other.key, "other", OTHER_TAG, false).status).toBe(0);
        expect(join(nodes.other, keys.other.key, "other-again", OTHER_TAG, false).status).toBe(0); // already joined: no new node
    });

    it("a gateway that joins minutes later is the sandbox's peer within seconds, and WireGuard carries pings both ways", async () => {
        const joinedAt = Date.now();
        const joined = join(nodes.gateway, keys.gateway.key, GATEWAY_HOST, GATEWAY_TAG, true);
        expect(joined.stderr).toBe("");
        expect(joined.status).toBe(0);
        const gatewayIp = tailnetIp(nodes.gateway).stdout.trim();
        let seen = "";
        while (Date.now() - joinedAt < 10_000) {
            seen = tailnetIp(nodes.sandbox, GATEWAY_HOST).stdout.trim();
            if (seen) break;
            await sleep(200);
        }
        expect(seen).toBe(gatewayIp);
        const sandboxIp = tailnetIp(nodes.sandbox).stdout.trim();
        expect(tailnetIp(nodes.gateway, SANDBOX_HOST).stdout.trim()).toBe(sandboxIp);
        expect(inNamespace(nodes.gateway.ns, ["ping", "-c", "2", "-W", "3", sandboxIp]).status).toBe(0);
        expect(inNamespace(nodes.sandbox.ns, ["ping", "-c", "2", "-W", "3", gatewayIp]).status).toBe(0);
        // The peers' handshake as WireGuard itself reports it, over the public addresses.
        const status = JSON.parse(cli(nodes.gateway, ["status", "--json"]).stdout);
        const sandboxPeer = Object.values<any>(status.Peer).find((p) => p.HostName === SANDBOX_HOST);
        expect(sandboxPeer.LastHandshake).toBeGreaterThan(0);
        expect(sandboxPeer.CurAddr).toBe(`${PUBLIC}.11:41641`);
        // A tag the policy grants nothing reaches nobody, not even with a ping.
        expect(inNamespace(nodes.other.ns, ["ping", "-c", "1", "-W", "2", sandboxIp]).status).not.toBe(0);
    }, 30_000);

    it("enforces the rendered policy on tailscale0: the gateway reaches the sandbox's 22 and 9222 only, the sandbox the gateway's 53 only", () => {
        const gatewayIp = tailnetIp(nodes.gateway).stdout.trim();
        const sandboxIp = tailnetIp(nodes.sandbox).stdout.trim();
        for (const port of [22, 9222, 80]) listen(nodes.sandbox, sandboxIp, port);
        for (const port of [22, 53]) listen(nodes.gateway, gatewayIp, port);
        listen(nodes.gateway, gatewayIp, 53, "UDP");
        // Every listener answers on its own host before anything is asked across (a loaded machine
        // starts them slowly): what is refused below is refused by the filter.
        const local = [
            [tcpReaches, nodes.sandbox, sandboxIp, 22],
            [tcpReaches, nodes.sandbox, sandboxIp, 9222],
            [tcpReaches, nodes.sandbox, sandboxIp, 80],
            [tcpReaches, nodes.gateway, gatewayIp, 22],
            [tcpReaches, nodes.gateway, gatewayIp, 53],
            [udpReaches, nodes.gateway, gatewayIp, 53],
        ] as const;
        for (const [reaches, node, address, port] of local) {
            let up = false;
            for (let i = 0; i < 20 && !up; i++) up = reaches(node, address, port);
            expect(up, `${node.ns} ${address}:${port}`).toBe(true);
        }
        // An allowed path is asked up to three times (a datagram or a handshake lost under load is not a drop).
        const eventually = (reaches: () => boolean) => reaches() || reaches() || reaches();
        expect(eventually(() => tcpReaches(nodes.gateway, sandboxIp, 22))).toBe(true);
        expect(eventually(() => tcpReaches(nodes.gateway, sandboxIp, 9222))).toBe(true);
        expect(tcpReaches(nodes.gateway, sandboxIp, 80)).toBe(false);
        expect(eventually(() => tcpReaches(nodes.sandbox, gatewayIp, 53))).toBe(true);
        expect(eventually(() => udpReaches(nodes.sandbox, gatewayIp, 53))).toBe(true);
        expect(tcpReaches(nodes.sandbox, gatewayIp, 22)).toBe(false);
        expect(tcpReaches(nodes.other, sandboxIp, 22)).toBe(false);
        // In a table of its own, before NAT (the gateway redirects tailnet DNS), default deny.
        const ruleset = inNamespace(nodes.sandbox.ns, ["nft", "list", "table", "inet", "tailscale-twin"]).stdout;
        expect(ruleset).toMatch(/hook prerouting priority mangle/);
        expect(ruleset).toMatch(/counter packets [1-9]\d* bytes \d+ drop/);
    }, 60_000);

    it("MagicDNS with --accept-dns=true: tailnet names on 100.100.100.100, the rest to the resolver named before; the sandbox's resolv.conf untouched", () => {
        const sandboxIp = tailnetIp(nodes.sandbox).stdout.trim();
        expect(inNamespace(nodes.gateway.ns, ["cat", "/etc/resolv.conf"]).stdout).toMatch(/^nameserver 100\.100\.100\.100$/m);
        expect(inNamespace(nodes.gateway.ns, ["getent", "ahostsv4", SANDBOX_HOST]).stdout).toContain(sandboxIp);
        expect(inNamespace(nodes.gateway.ns, ["getent", "ahostsv4", "upstream.test"]).stdout).toContain(`${PUBLIC}.99`);
        expect(inNamespace(nodes.gateway.ns, ["getent", "ahostsv4", "nosuchnode.tailnet-twin.ts.net"]).status).not.toBe(0);
        expect(inNamespace(nodes.sandbox.ns, ["cat", "/etc/resolv.conf"]).stdout).toBe(`nameserver ${UPSTREAM_RESOLVER}\n`);
        // As on the real tailscale0, its only IPv4 address is the node's: the gateway's DNS rule
        // (`redirect`, which takes the interface's first address) lands on AdGuard Home's port,
        // not on MagicDNS's 100.100.100.100 (seen in the twin: every sandbox query refused).
        const gatewayIp = tailnetIp(nodes.gateway).stdout.trim();
        const onTun = inNamespace(nodes.gateway.ns, ["ip", "-4", "-o", "addr", "show", "dev", "tailscale0"]).stdout.trim().split("\n");
        expect(onTun.map((line) => line.split(/\s+/)[3])).toEqual([`${gatewayIp}/32`]);
    });

    it("the LocalAPI changes nothing for a user who is not root", () => {
        fs.chmodSync(work, 0o755);
        fs.chmodSync(nodes.sandbox.dir, 0o755);
        const down = cli(nodes.sandbox, ["down"], "nobody");
        expect(down.status).toBe(1);
        expect(down.stderr).toMatch(/access denied/);
        expect(tailnetIp(nodes.sandbox).status).toBe(0);
    });

    it("a restarted tailscaled comes back with its saved node key and address, no auth key needed", async () => {
        const before = tailnetIp(nodes.sandbox).stdout.trim();
        await stopDaemon(nodes.sandbox);
        expect(inNamespace(nodes.sandbox.ns, ["ip", "link", "show", "dev", "tailscale0"]).status).not.toBe(0);
        startDaemon(nodes.sandbox);
        await waitForSocket(nodes.sandbox);
        let after = "";
        for (let i = 0; i < 50 && !after; i++) {
            after = tailnetIp(nodes.sandbox).stdout.trim();
            if (!after) await sleep(200);
        }
        expect(after).toBe(before);
        expect(inNamespace(nodes.gateway.ns, ["ping", "-c", "1", "-W", "3", before]).status).toBe(0);
    }, 30_000);

    it("a replaced sandbox (a new server, a new key, the old one gone without a word) is NAME-1 while the old node keeps the name, as Tailscale names it; the gateway finds the new one by its tag and reaches it", async () => {
        const old = tailnetIp(nodes.sandbox).stdout.trim();
        // Destroyed, as a server is: no logout, no cleanup.
        nodes.sandbox.daemon!.kill("SIGKILL");
        await sleep(500);
        run("ip", ["netns", "del", nodes.sandbox.ns]);
        ip("netns", "add", nodes.sandbox.ns);
        ip("-n", nodes.sandbox.ns, "link", "set", "lo", "up");
        ip("link", "add", "eth0", "netns", nodes.sandbox.ns, "type", "veth", "peer", "name", "p-sandbox2", "netns", BRIDGE_NS);
        ip("-n", BRIDGE_NS, "link", "set", "p-sandbox2", "master", "br0", "up");
        ip("-n", nodes.sandbox.ns, "addr", "add", `${PUBLIC}.11/24`, "dev", "eth0");
        ip("-n", nodes.sandbox.ns, "link", "set", "eth0", "up");
        nodes.sandbox.dir = path.join(work, "sandbox-replacement");
        fs.mkdirSync(nodes.sandbox.dir);
        startDaemon(nodes.sandbox);
        await waitForSocket(nodes.sandbox);
        const replacementKey = newAuthKey([SANDBOX_TAG]);
        await coordinator.addAuthKey(replacementKey);
        await sleep(6000); // the old node is offline now (offlineSeconds: 5)
        const joined = join(nodes.sandbox, replacementKey.key, SANDBOX_HOST, SANDBOX_TAG, false);
        expect(joined.stderr).toBe("");
        const fresh = tailnetIp(nodes.sandbox).stdout.trim();
        expect(fresh).not.toBe(old);
        const sandboxes = (await coordinator.nodes()).filter((n) => n.tags.includes(SANDBOX_TAG));
        expect(sandboxes.map((n) => [n.name, n.online])).toEqual([[SANDBOX_HOST, false], [`${SANDBOX_HOST}-1`, true]]);
        // The name still leads to the old node; its tag, in the gateway's status, to the new one.
        expect(tailnetIp(nodes.gateway, SANDBOX_HOST).stdout.trim()).toBe(old);
        let seen = "";
        for (let i = 0; i < 50 && seen !== fresh; i++) {
            const peers = Object.values(JSON.parse(cli(nodes.gateway, ["status", "--json"]).stdout).Peer) as { Tags?: string[]; Online: boolean; TailscaleIPs: string[] }[];
            seen = peers.find((p) => p.Online && p.Tags?.includes(SANDBOX_TAG))?.TailscaleIPs[0] ?? "";
            if (seen !== fresh) await sleep(200);
        }
        expect(seen).toBe(fresh);
        expect(inNamespace(nodes.gateway.ns, ["ping", "-c", "1", "-W", "3", fresh]).status).toBe(0);
    }, 60_000);
});

describe.runIf(toolsAvailable("the stand-in's python", ["pyflakes3"]))("the stand-in's python", () => {
    it.each(["tailscaled", "tailscale", "coordinator"])("%s: isolated python3 from Debian, and pyflakes finds nothing", (name) => {
        const file = path.join(TWIN, name);
        expect(fs.readFileSync(file, "utf8").split("\n")[0]).toBe("#!/usr/bin/python3 -IS");
        const flakes = run("pyflakes3", [file]);
        expect(flakes.stdout + flakes.stderr).toBe("");
        expect(flakes.status).toBe(0);
    });
});


describe.runIf(toolsAvailable("the coordinator's packet filters", ["python3"]))("the coordinator's packet filters (no namespaces)", () => {
    type Rule = { srcs: string[]; proto: string; ports: [number, number][] };
    /** Each node's filter, one node per key (named after its first tag), against `policy`. */
    const filtersFor = (policy: string, keys: Record<string, string[]>) => {
        const result = run("python3", ["-B", path.join(__dirname, "fixtures", "twin-tailscale", "packet-filters.py"), path.join(TWIN, "coordinator"), JSON.stringify(keys)], { input: policy });
        expect(result.stderr).toBe("");
        const lines = result.stdout.trim().split("\n");
        return JSON.parse(lines[lines.length - 1]) as { addresses: Record<string, string[]>; filters: Record<string, Rule[]> };
    };
    const keys = { k1: ["tag:gw"], k2: ["tag:sb"], k3: ["tag:other"] };

    it("the rendered grants: the sandbox admits the gateway on tcp 22 and 9222, the gateway admits the sandbox on 53 udp and tcp, the rest nobody", () => {
        const policy = tailnetPolicyText(renderTailnetPolicy({ gatewayTag: "tag:gw", sandboxTag: "tag:sb", tagOwners: ["autogroup:admin"], operators: ["autogroup:admin"] }));
        const { addresses, filters } = filtersFor(policy, keys);
        expect(filters.sb).toEqual([
            { srcs: [...addresses.gw].sort(), proto: "tcp", ports: [[22, 22]] },
            { srcs: [...addresses.gw].sort(), proto: "tcp", ports: [[9222, 9222]] },
        ]);
        expect(filters.gw).toEqual([
            { srcs: [...addresses.sb].sort(), proto: "udp", ports: [[53, 53]] },
            { srcs: [...addresses.sb].sort(), proto: "tcp", ports: [[53, 53]] },
        ]);
        expect(filters.other).toEqual([]);
        for (const address of Object.values(addresses).flat()) expect(address).toMatch(/^(100\.(6[4-9]|[7-9]\d|1[01]\d|12[0-7])\.\d+\.\d+|fd7a:115c:a1e0::[0-9a-f:]+)$/);
    });

    it("legacy acls in HuJSON (comments, trailing commas): a port list per destination, the protocol when named, TCP/UDP/ICMP when not; no drop rules", () => {
        const policy = `{
  // airlock's policy as acls instead of grants
  "acls": [
    {"action": "accept", "src": ["tag:gw"], "dst": ["tag:sb:22,9000-9222"], },
    {"action": "accept", "src": ["tag:sb"], "proto": "udp", "dst": ["tag:gw:53"]}, /* only DNS */
    {"action": "drop", "src": ["*"], "dst": ["*:*"]},
  ],
}`;
        const { addresses, filters } = filtersFor(policy, keys);
        const gw = [...addresses.gw].sort();
        expect(filters.sb).toEqual(["tcp", "udp", "icmp"].map((proto) => ({ srcs: gw, proto, ports: [[22, 22], [9000, 9222]] })));
        expect(filters.gw).toEqual([{ srcs: [...addresses.sb].sort(), proto: "udp", ports: [[53, 53]] }]);
        expect(filters.other).toEqual([]);
    });

    it("selectors: * is the whole tailnet, a host alias or CIDR is itself, a user or group (no airlock node has one) admits nobody", () => {
        const policy = JSON.stringify({
            hosts: { monitor: "100.100.7.7" },
            grants: [
                { src: ["*"], dst: ["tag:sb"], ip: ["icmp:*"] },
                { src: ["monitor", "100.64.9.0/24"], dst: ["tag:sb"], ip: ["tcp:9100"] },
                { src: ["group:ops", "alice@example.com"], dst: ["tag:gw"], ip: ["*"] },
            ],
        });
        const { filters } = filtersFor(policy, keys);
        expect(filters.sb).toEqual([
            { srcs: ["100.64.0.0/10", "fd7a:115c:a1e0::/48"], proto: "icmp", ports: [[0, 65535]] },
            { srcs: ["100.100.7.7/32", "100.64.9.0/24"], proto: "tcp", ports: [[9100, 9100]] },
        ]);
        expect(filters.gw).toEqual([]);
    });
});

describe.runIf(toolsAvailable("the coordinator's keys and nodes", ["python3"]))("the coordinator's keys and nodes, as Tailscale's control plane keeps them (no namespaces)", () => {
    /** Runs `steps` (python, with `tailnet`, `register(key, hostname, tags)`, `clock` and `coordinator` in scope) against the rendered policy; prints its JSON result. */
    const scenario = (steps: string, keys: Record<string, unknown> = {}, operators = ["autogroup:admin"]) => {
        const policy = tailnetPolicyText(renderTailnetPolicy({ gatewayTag: GATEWAY_TAG, sandboxTag: SANDBOX_TAG, tagOwners: ["autogroup:admin"], operators }));
        const program = [
            "import importlib.machinery, importlib.util, json, sys, tempfile, time",
            `loader = importlib.machinery.SourceFileLoader("coordinator", ${JSON.stringify(path.join(TWIN, "coordinator"))})`,
            'spec = importlib.util.spec_from_loader("coordinator", loader); coordinator = importlib.util.module_from_spec(spec); loader.exec_module(coordinator)',
            "clock = [time.time()]",
            "coordinator.time.time = lambda: clock[0]",
            'f = tempfile.NamedTemporaryFile("w", suffix=".hujson", delete=False); f.write(sys.stdin.read()); f.close()',
            `tailnet = coordinator.Tailnet(coordinator.Policy(f.name), json.loads(${JSON.stringify(JSON.stringify(keys))}), "t.ts.net")`,
            'register = lambda key, hostname, tags: tailnet.register({"authKey": key, "hostname": hostname, "tags": tags, "publicKey": "A" * 43 + "="}, "10.0.0.1")',
            steps,
        ].join("\n");
        const result = run("python3", ["-I", "-B", "-c", program], { input: policy }); // -B: no bytecode beside the coordinator (twin/ files are sources of dist/)
        expect(result.stderr).toBe("");
        return JSON.parse(result.stdout.trim().split("\n").at(-1)!);
    };

    it("a key for a tag tagOwners does not define is refused when it is created, as Tailscale's API refuses it; on stdin, the coordinator does not start", () => {
        const refused = scenario(`print(json.dumps([tailnet.add_key("k1", {"tags": ["${OTHER_TAG}"]}), tailnet.add_key("k2", {"tags": ["${SANDBOX_TAG}"]})]))`);
        expect(refused).toEqual([`requested tags ['${OTHER_TAG}'] are invalid or not permitted`, null]);
        const policyFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "coordinator-")), "policy.hujson");
        fs.writeFileSync(policyFile, tailnetPolicyText(renderTailnetPolicy({ gatewayTag: GATEWAY_TAG, sandboxTag: SANDBOX_TAG, tagOwners: ["autogroup:admin"], operators: ["autogroup:admin"] })));
        const started = run(path.join(TWIN, "coordinator"), ["--listen", "127.0.0.1:0", "--policy", policyFile, "--admin-socket", `${policyFile}.sock`], { input: JSON.stringify({ authKeys: authKeysOf(newAuthKey([OTHER_TAG])) }) });
        expect(started.status).toBe(2);
        expect(started.stderr.trim()).toBe(`coordinator: an auth key on stdin: requested tags ['${OTHER_TAG}'] are invalid or not permitted`);
    });

    it("a key past its expiry is refused as an unknown one is; before it, it joins once", () => {
        const answers = scenario(
            [
                "clock[0] += 1799",
                "in_time = register('early', 'airlock-dev-sandbox', [])",
                "clock[0] += 2",
                "late = register('late', 'airlock-dev-gateway', [])",
                "again = register('early', 'airlock-dev-sandbox', [])",
                "print(json.dumps([in_time[0], late, again]))",
            ].join("\n"),
            { early: { tags: [SANDBOX_TAG], ephemeral: true, expirySeconds: 1800 }, late: { tags: [GATEWAY_TAG], expirySeconds: 1800 } },
        );
        expect(answers).toEqual([200, [401, { error: "invalid key: API key does not exist" }], [401, { error: "invalid key: API key has already been used" }]]);
    });

    it("a key without tags is its user's: the node is theirs (login, role), the policy's operators (a role autogroup, a login) reach the gateway's 22 from it and nothing of the sandbox; a tagged node is nobody's", () => {
        const users = { u: { tags: [], user: "alice@example.com", role: "admin" }, m: { tags: [], user: "bob@example.com", role: "member" }, t: { tags: [SANDBOX_TAG], user: "alice@example.com", role: "admin" }, g: { tags: [GATEWAY_TAG] } };
        const steps = [
            "refused = [tailnet.add_key('nouser', {'tags': []}), tailnet.add_key('badrole', {'tags': [], 'user': 'carol@example.com', 'role': 'superuser'})]",
            "nodes = {k: tailnet.nodes[register(k, h, [])[1]['nodeId']] for k, h in [('u', 'alice-laptop'), ('m', 'bob-laptop'), ('t', 'airlock-dev-sandbox'), ('g', 'airlock-dev-gateway')]}",
            "admitted = lambda dst: sorted(k for k, n in nodes.items() if any(r['proto'] == 'tcp' and (22, 22) in r['ports'] and n.addresses()[0] in r['srcs'] for r in tailnet.packet_filter(nodes[dst])))",
            "print(json.dumps([refused, nodes['u'].describe('t.ts.net')['user'], nodes['t'].describe('t.ts.net')['user'], admitted('g'), admitted('t')]))",
        ].join("\n");
        const byRole = scenario(steps, users);
        expect(byRole[0]).toEqual(["a key without tags needs the login of the user who made it", expect.stringMatching(/^role 'superuser' is not one of Tailscale's \(/)]);
        expect(byRole.slice(1)).toEqual(["alice@example.com", null, ["u"], ["g"]]);
        // By login: bob (a member) and nobody else; autogroup:member: every user's device, no tagged one.
        expect(scenario(steps, users, ["bob@example.com"]).slice(3)).toEqual([["m"], ["g"]]);
        expect(scenario(steps, users, ["autogroup:member"]).slice(3)).toEqual([["m", "u"], ["g"]]);
    });

    it("an ephemeral node offline for 30 minutes is removed; a non-ephemeral one stays; nodes say when they were created", () => {
        const names = scenario(
            [
                "register('s', 'airlock-dev-sandbox', []); register('g', 'airlock-dev-gateway', [])",
                "created = sorted(n.describe('t.ts.net')['created'] for n in tailnet.nodes.values())",
                "clock[0] += 1799; tailnet.sweep(); before = sorted(n.name for n in tailnet.nodes.values())",
                "clock[0] += 2; tailnet.sweep(); after = sorted(n.name for n in tailnet.nodes.values())",
                "print(json.dumps([before, after, created]))",
            ].join("\n"),
            { s: { tags: [SANDBOX_TAG], ephemeral: true }, g: { tags: [GATEWAY_TAG], ephemeral: false } },
        );
        expect(names[0]).toEqual(["airlock-dev-gateway", "airlock-dev-sandbox"]);
        expect(names[1]).toEqual(["airlock-dev-gateway"]);
        for (const at of names[2]) expect(at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    });
});

describe.runIf(canRun)("the tailscale .deb", () => {
    it("is the package Tailscale's repository would serve (name, dependencies, the binaries and unit where Tailscale puts them), built the same from the same sources", () => {
        const out = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-tailscale-deb-"));
        try {
            const deb = buildTailscaleDeb(out, "198.18.0.3");
            expect(path.basename(deb)).toBe(`tailscale_${TAILSCALE_DEB_VERSION}_all.deb`);
            const field = (name: string) => run("dpkg-deb", ["--field", deb, name]).stdout.trim();
            expect(field("Package")).toBe("tailscale");
            expect(field("Depends")).toMatch(/python3.*wireguard-tools.*nftables/);
            const contents = run("dpkg-deb", ["--contents", deb]).stdout;
            expect(contents).toMatch(/-rwxr-xr-x root\/root .* \.\/usr\/sbin\/tailscaled\n/);
            expect(contents).toMatch(/-rwxr-xr-x root\/root .* \.\/usr\/bin\/tailscale\n/);
            expect(contents).toMatch(/-rw-r--r-- root\/root .* \.\/lib\/systemd\/system\/tailscaled\.service\n/);
            expect(contents).toMatch(/-rw-r--r-- root\/root .* \.\/etc\/default\/tailscaled\n/);
            const again = buildTailscaleDeb(path.join(out, "again"), "198.18.0.3");
            expect(fs.readFileSync(again).equals(fs.readFileSync(deb))).toBe(true);
        } finally {
            fs.rmSync(out, { recursive: true, force: true });
        }
    });
});

/**
 * The package as a guest gets it: installed with dpkg into a Debian 12 root booted
 * under its own systemd (systemd-nspawn), airlock's drop-in in place, joined by the
 * rendered airlock-tailnet-join, its address read by the rendered airlock-tailnet-render,
 * with a peer (tailscaled run directly) on the same coordinator.
 */
const canBoot = canRun && toolsAvailable("the tailscale package under systemd-nspawn", ["systemd-nspawn", "mmdebstrap", "nsenter", "apt-get"]);

describe.runIf(canBoot)("the tailscale .deb, installed and run under systemd", () => {
    const bridgeNs = "al-tsb-br";
    const guestNs = "al-tsb-sb";
    const peerNs = "al-tsb-gw";
    const subnet = "198.18.78";
    const control = `${subnet}.3`;
    let work: string;
    let coordinator: Coordinator;
    let host: BootedHost | undefined;
    let peer: ChildProcess | undefined;
    const sandboxKey = newAuthKey([SANDBOX_TAG]);
    const gatewayKey = newAuthKey([GATEWAY_TAG]);
    const cfg = readStackFile(stackFile("dev"));
    const rendered = renderHosts(cfg).sandbox;
    const peerCli = (args: string[]) => inNamespace(peerNs, [path.join(TWIN, "tailscale"), `--socket=${work}/peer/tailscaled.sock`, ...args]);

    beforeAll(async () => {
        const tarball = debianRootfs();
        work = fs.mkdtempSync("/var/tmp/airlock-tailscale-boot-");
        const debs = path.join(work, "debs");
        buildTailscaleDeb(debs, control);
        // Its dependencies from Debian, as the twin's mirror carries them (wireguard-go for a
        // kernel without WireGuard, like this machine's; a guest's Debian kernel has it).
        const fetched = run("apt-get", ["download", "wireguard-tools", "wireguard-go"], { cwd: debs, timeout: 120_000 });
        if (fetched.status !== 0) throw new Error(`apt-get download: ${fetched.stderr}`);

        const root = path.join(work, "root");
        extractRootfs(tarball, root);
        fs.mkdirSync(path.join(root, "var/tmp/debs"), { recursive: true });
        for (const file of fs.readdirSync(debs)) fs.copyFileSync(path.join(debs, file), path.join(root, "var/tmp/debs", file));
        // What cloud-init writes before runcmd, as the plan renders it.
        for (const file of rendered.files.filter((f) => /tailnet-join|tailnet-render|tailscaled\.service\.d/.test(f.path))) {
            fs.mkdirSync(path.dirname(path.join(root, file.path)), { recursive: true });
            fs.writeFileSync(path.join(root, file.path), file.content, { mode: parseInt(file.permissions, 8) });
        }
        fs.mkdirSync(path.join(root, "etc/airlock"), { recursive: true });
        fs.writeFileSync(path.join(root, "etc/airlock/tailnet-authkey"), `${sandboxKey.key}\n`, { mode: 0o600 });
        // As on the sandbox before the tailnet is up, no resolver answers (its egress rules drop
        // DNS to anything but the gateway's): tailscaled finds its control server by bootstrap DNS.
        fs.writeFileSync(path.join(root, "etc/resolv.conf"), `nameserver ${subnet}.53\noptions timeout:1 attempts:1\n`);

        for (const ns of [bridgeNs, guestNs, peerNs]) {
            run("ip", ["netns", "del", ns]);
            ip("netns", "add", ns);
            ip("-n", ns, "link", "set", "lo", "up");
        }
        ip("-n", bridgeNs, "link", "add", "br0", "type", "bridge");
        ip("-n", bridgeNs, "addr", "add", `${control}/24`, "dev", "br0");
        ip("-n", bridgeNs, "link", "set", "br0", "up");
        for (const [ns, address] of [[guestNs, `${subnet}.11`], [peerNs, `${subnet}.10`]]) {
            ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", `name`, `p-${ns}`, "netns", bridgeNs);
            ip("-n", bridgeNs, "link", "set", `p-${ns}`, "master", "br0", "up");
            ip("-n", ns, "addr", "add", `${address}/24`, "dev", "eth0");
            ip("-n", ns, "link", "set", "eth0", "up");
        }
        fs.mkdirSync(`/etc/netns/${peerNs}`, { recursive: true });
        fs.writeFileSync(`/etc/netns/${peerNs}/hosts`, `127.0.0.1 localhost\n${control} controlplane.tailscale.com\n`);

        const policyFile = path.join(work, "policy.hujson");
        fs.writeFileSync(policyFile, tailnetPolicyText(renderTailnetPolicy({ gatewayTag: GATEWAY_TAG, sandboxTag: SANDBOX_TAG, tagOwners: ["autogroup:admin"], operators: ["autogroup:admin"] })));
        coordinator = await startCoordinator({
            netns: bridgeNs,
            address: control,
            port: 80,
            policyFile,
            authKeys: authKeysOf(sandboxKey),
            logFile: path.join(work, "coordinator.log"),
        });
        host = await bootRootfs(root, guestNs);
    }, 900_000);

    afterAll(async () => {
        peer?.kill("SIGTERM");
        await host?.stop();
        await coordinator?.stop();
        for (const ns of [bridgeNs, guestNs, peerNs]) run("ip", ["netns", "del", ns]);
        fs.rmSync(`/etc/netns/${peerNs}`, { recursive: true, force: true });
        if (work) fs.rmSync(work, { recursive: true, force: true });
    }, 60_000);

    it("dpkg installs it; like Tailscale's package its postinst enables and starts tailscaled, and install-tailscale's enable --now is a no-op", () => {
        const installed = host!.exec(["sh", "-c", "dpkg -i /var/tmp/debs/*.deb"], { timeout: 120_000 });
        expect(installed.stderr).not.toMatch(/dpkg: error|dependency problems/);
        expect(installed.status).toBe(0);
        expect(host!.exec(["dpkg-query", "-W", "-f=${Status} ${Version}", "tailscale"]).stdout).toBe(`install ok installed ${TAILSCALE_DEB_VERSION}`);
        expect(host!.exec(["systemctl", "is-enabled", "tailscaled.service"]).stdout.trim()).toBe("enabled");
        expect(host!.exec(["systemctl", "is-active", "tailscaled.service"]).stdout.trim()).toBe("active");
        expect(host!.exec(["systemctl", "enable", "--now", "tailscaled.service"]).status).toBe(0);
    }, 180_000);

    it("its LocalAPI socket is /run/tailscale/tailscaled.sock, in a directory only root can enter (airlock's drop-in)", () => {
        expect(host!.exec(["stat", "-c", "%a %U", "/run/tailscale"]).stdout.trim()).toBe("700 root");
        expect(host!.exec(["test", "-S", "/run/tailscale/tailscaled.sock"]).status).toBe(0);
        expect(JSON.parse(host!.exec(["tailscale", "status", "--json"]).stdout).BackendState).toBe("NeedsLogin");
        const asNobody = host!.exec(["runuser", "-u", "nobody", "--", "tailscale", "status", "--json"]);
        expect(asNobody.status).not.toBe(0);
        expect(asNobody.stderr).toMatch(/Permission denied/);
    });

    it("the rendered airlock-tailnet-join joins with the key file and shreds it; airlock-tailnet-render finds the gateway that joins later", async () => {
        const joined = host!.exec(["/usr/local/sbin/airlock-tailnet-join"], { timeout: 120_000 });
        expect(joined.stderr).toBe("");
        expect(joined.status).toBe(0);
        const own = joined.stdout.trim();
        expect(own).toMatch(/^100\.\d+\.\d+\.\d+$/);
        expect(host!.exec(["test", "-e", "/etc/airlock/tailnet-authkey"]).status).not.toBe(0);
        expect(host!.exec(["ip", "-4", "-o", "addr", "show", "dev", "tailscale0"]).stdout).toContain(`inet ${own}/32`);
        // No resolver answered: the control server's address came from bootstrap DNS.
        expect(host!.exec(["journalctl", "-u", "tailscaled.service", "--no-pager"]).stdout).toContain(`controlplane.tailscale.com: the system resolver failed`);
        expect(host!.exec(["journalctl", "-u", "tailscaled.service", "--no-pager"]).stdout).toContain(`bootstrap DNS answered ${control}`);

        // The gateway joins after the sandbox is up, as in a deploy where it boots later.
        const template = "listen @TAILNET_IPV4@\nresolver @RESOLVER_IPV4@\n";
        host!.exec(["sh", "-c", `printf '${template}' >/var/tmp/render.in`]);
        const rendering = host!.exec(["sh", "-c", `AIRLOCK_TAILNET_WAIT_SECONDS=60 /usr/local/sbin/airlock-tailnet-render --resolver ${cfg.hostnames.gateway} /var/tmp/render.in /var/tmp/render.out >/var/tmp/render.log 2>&1 &`]);
        expect(rendering.status).toBe(0);
        await coordinator.addAuthKey(gatewayKey);
        fs.mkdirSync(path.join(work, "peer"));
        peer = spawnInNamespace(peerNs, `exec ${TWIN}/tailscaled --state=${work}/peer/tailscaled.state --socket=${work}/peer/tailscaled.sock`, path.join(work, "peer.log"));
        for (let i = 0; i < 50 && !fs.existsSync(`${work}/peer/tailscaled.sock`); i++) await sleep(100);
        fs.writeFileSync(path.join(work, "peer", "key"), gatewayKey.key, { mode: 0o600 });
        const up = peerCli(["up", `--auth-key=file:${work}/peer/key`, `--hostname=${cfg.hostnames.gateway}`, `--advertise-tags=${GATEWAY_TAG}`, "--accept-routes=false", "--accept-dns=false"]);
        expect(up.stderr).toBe("");
        const gatewayIp = peerCli(["ip", "-4"]).stdout.trim();
        expect(await host!.waitFor(["test", "-s", "/var/tmp/render.out"], 20)).toBe(true);
        expect(host!.exec(["cat", "/var/tmp/render.log"]).stdout).toContain(`/var/tmp/render.out written for ${own} (resolver ${gatewayIp})`);
        expect(host!.exec(["cat", "/var/tmp/render.out"]).stdout).toBe(`listen ${own}\nresolver ${gatewayIp}\n`);
        expect(inNamespace(peerNs, ["ping", "-c", "2", "-W", "3", own]).status).toBe(0);
    }, 120_000);

    it("restarts with its state from /var/lib/tailscale, and its stop removes tailscale0 and its filter", async () => {
        const before = host!.exec(["tailscale", "ip", "-4"]).stdout.trim();
        expect(host!.exec(["systemctl", "restart", "tailscaled.service"]).status).toBe(0);
        expect(await host!.waitFor(["sh", "-c", `tailscale ip -4 | grep -qx ${before}`], 20)).toBe(true);
        expect(host!.exec(["systemctl", "stop", "tailscaled.service"]).status).toBe(0);
        expect(host!.exec(["ip", "link", "show", "dev", "tailscale0"]).status).not.toBe(0);
        expect(host!.exec(["nft", "list", "table", "inet", "tailscale-twin"]).status).not.toBe(0);
    }, 60_000);
});
