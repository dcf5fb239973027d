import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { CONTROL_ADDRESS, GUESTS, GuestRole, HOST_ADDRESS, METADATA_ADDRESS, REGISTRY_ADDRESS, TWIN_NAMES, TWIN_RUN_DIR, twinNetns } from "./contract";
import { fillTwinFile } from "./files";

/**
 * The twin's network: one namespace per stack with no route out of it. A bridge
 * is the guests' "public" network; the namespace itself plays the internet and
 * Hetzner's side of it (the host addresses, the metadata address); each guest
 * has a tap on the bridge; dnsmasq hands out fixed leases and answers only the
 * twin's names; the hcloud Firewall stand-in sits on the host side of each tap.
 */

export const BRIDGE = "twpub0";
export const tapOf = (role: GuestRole) => (role === "gateway" ? "twgw0" : "twsb0");
export const runDirOf = (stack: string) => path.join(TWIN_RUN_DIR, stack);

/** An hcloud firewall rule as the plan renders it (hcloud:index/firewall:Firewall inputs.rules[]). */
export interface FirewallRule {
    direction: string;
    protocol: string;
    port?: string;
    sourceIps?: string[];
    destinationIps?: string[];
    description?: string;
}

export class TwinError extends Error {}
/** A guest that booted but is not ready (cloud-init not done, workloads not running): exit 1, not 2. */
export class NotReadyError extends TwinError {}

function must(cmd: string, args: string[], input?: string): string {
    const result = spawnSync(cmd, args, { encoding: "utf8", input });
    if (result.error) throw new TwinError(`${cmd}: ${result.error.message}`);
    if (result.status !== 0) throw new TwinError(`${cmd} ${args.join(" ")}: ${(result.stderr || result.stdout).trim()}`);
    return result.stdout;
}

export const inNetns = (stack: string, cmd: string[]): string[] => ["ip", "netns", "exec", twinNetns(stack), ...cmd];

export function netnsExists(stack: string): boolean {
    return fs.existsSync(path.join("/run/netns", twinNetns(stack)));
}

/**
 * Creates the namespace, bridge, host addresses and taps, and starts dnsmasq.
 * `registryNames`: registries the stack's images come from, answered with the twin's registry.
 */
export function createNetwork(stack: string, registryNames: string[] = []): void {
    const ns = twinNetns(stack);
    const runDir = runDirOf(stack);
    fs.mkdirSync(runDir, { recursive: true });
    must("ip", ["netns", "add", ns]);
    try {
        const ip = (...args: string[]) => must("ip", ["-n", ns, ...args]);
        ip("link", "set", "lo", "up");
        ip("link", "add", BRIDGE, "type", "bridge");
        for (const address of [HOST_ADDRESS, REGISTRY_ADDRESS, CONTROL_ADDRESS]) ip("addr", "add", `${address}/24`, "dev", BRIDGE);
        ip("addr", "add", `${METADATA_ADDRESS}/32`, "dev", BRIDGE);
        ip("link", "set", BRIDGE, "up");
        for (const role of Object.keys(GUESTS) as GuestRole[]) addTap(stack, role);
        // Bridged IPv4 between the guests passes the inet hooks (the firewall's conntrack).
        must("ip", ["netns", "exec", ns, "sysctl", "-q", "-w", "net.bridge.bridge-nf-call-iptables=1"]);
        startDnsmasq(stack, registryNames);
    } catch (err) {
        destroyNetwork(stack);
        throw err;
    }
}

function addTap(stack: string, role: GuestRole): void {
    const ip = (...args: string[]) => must("ip", ["-n", twinNetns(stack), ...args]);
    ip("tuntap", "add", "dev", tapOf(role), "mode", "tap");
    ip("link", "set", tapOf(role), "master", BRIDGE);
    ip("link", "set", tapOf(role), "up");
}

export function dnsmasqConfig(runDir: string, registryNames: string[] = []): string {
    const names = { ...Object.fromEntries(registryNames.map((name) => [name, REGISTRY_ADDRESS])), ...TWIN_NAMES };
    return fillTwinFile("network/dnsmasq.conf", {
        bridge: BRIDGE,
        hostRecords: Object.entries(names)
            .map(([name, address]) => `host-record=${name},${address}`)
            .join("\n"),
        subnetStart: HOST_ADDRESS.replace(/\.\d+$/, ".0"),
        // No host name in the lease: cloud-init names the server, as on Hetzner.
        dhcpHosts: Object.values(GUESTS)
            .map((guest) => `dhcp-host=${guest.mac},${guest.address}`)
            .join("\n"),
        hostAddress: HOST_ADDRESS,
        leaseFile: path.join(runDir, "dnsmasq.leases"),
        logFile: path.join(runDir, "dnsmasq.log"),
    });
}

function startDnsmasq(stack: string, registryNames: string[]): void {
    const runDir = runDirOf(stack);
    const conf = path.join(runDir, "dnsmasq.conf");
    fs.writeFileSync(conf, dnsmasqConfig(runDir, registryNames));
    startDaemon(stack, "dnsmasq", ["dnsmasq", `--conf-file=${conf}`]);
}

/**
 * Starts a long-running process inside the stack's namespace, detached from the
 * caller (the twin outlives `twin up`), its pid in <run dir>/<name>.pid and its
 * output in <name>.out.
 */
export function startDaemon(stack: string, name: string, cmd: string[], env: NodeJS.ProcessEnv = process.env): number {
    const runDir = runDirOf(stack);
    const log = fs.openSync(path.join(runDir, `${name}.out`), "a");
    const [program, ...args] = inNetns(stack, cmd);
    const child = spawn(program, args, { detached: true, stdio: ["ignore", log, log], env });
    fs.closeSync(log);
    if (child.pid === undefined) throw new TwinError(`cannot start ${name}`);
    fs.writeFileSync(path.join(runDir, `${name}.pid`), `${child.pid}\n`);
    child.unref();
    return child.pid;
}

/** Stops a process startDaemon started (its pid file), waiting up to `waitMs` for it to go. */
export function stopDaemon(stack: string, name: string, waitMs = 5000): void {
    const pidFile = path.join(runDirOf(stack), `${name}.pid`);
    let pid: number;
    try {
        pid = Number(fs.readFileSync(pidFile, "utf8").trim());
    } catch {
        return;
    }
    if (pid > 1) {
        try {
            process.kill(pid, "SIGTERM");
            const until = Date.now() + waitMs;
            while (Date.now() < until && alive(pid)) spawnSync("sleep", ["0.1"]);
            if (alive(pid)) process.kill(pid, "SIGKILL");
        } catch {
            // already gone
        }
    }
    fs.rmSync(pidFile, { force: true });
}

export function alive(pid: number): boolean {
    try {
        process.kill(pid, 0);
        // A zombie still answers kill 0: a process that has exited is not alive.
        const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
        return !/^\d+ \(.*\) Z /.test(stat);
    } catch {
        return false;
    }
}

export function daemonRunning(stack: string, name: string): boolean {
    try {
        return alive(Number(fs.readFileSync(path.join(runDirOf(stack), `${name}.pid`), "utf8").trim()));
    } catch {
        return false;
    }
}

export function destroyNetwork(stack: string): void {
    stopDaemon(stack, "dnsmasq");
    if (netnsExists(stack)) spawnSync("ip", ["netns", "del", twinNetns(stack)]);
}

const protocols = new Set(["tcp", "udp", "icmp", "esp", "gre"]);

/** One hcloud inbound rule as nftables statements, for one address family. */
function ruleStatements(rule: FirewallRule, family: "ip" | "ip6", where: string): string[] {
    if (!protocols.has(rule.protocol)) throw new TwinError(`${where}: protocol ${rule.protocol} is not one hcloud knows`);
    const sources = (rule.sourceIps ?? []).filter((cidr) => cidr.includes(":") === (family === "ip6"));
    if (sources.length === 0) return [];
    const any = sources.some((cidr) => cidr === "0.0.0.0/0" || cidr === "::/0");
    const from = any ? "" : `${family} saddr { ${sources.join(", ")} } `;
    let match: string;
    if (rule.protocol === "icmp") match = family === "ip" ? "meta l4proto icmp" : "meta l4proto ipv6-icmp";
    else if (rule.protocol === "tcp" || rule.protocol === "udp") {
        const port = rule.port === undefined || rule.port === "any" ? "" : ` ${rule.protocol} dport ${rule.port}`;
        match = `meta l4proto ${rule.protocol}${port}`;
    } else match = `meta l4proto ${rule.protocol}`;
    return [`${from}${match} accept`];
}

/**
 * The nftables ruleset for the guests' firewalls: role -> the inbound rules of the
 * firewall the plan attaches to it. An outbound rule (hcloud: then everything else
 * outbound is dropped) is not modelled, and says so.
 */
export function firewallRuleset(rulesByRole: Partial<Record<GuestRole, FirewallRule[]>>): string {
    const dispatch: string[] = [];
    const dispatch6: string[] = [];
    const chains: string[] = [];
    const chains6: string[] = [];
    for (const [role, rules] of Object.entries(rulesByRole) as [GuestRole, FirewallRule[]][]) {
        const where = `the ${role}'s firewall`;
        const outbound = rules.filter((r) => r.direction !== "in");
        if (outbound.length > 0) throw new TwinError(`${where}: outbound rules are not modelled by the twin's firewall stand-in`);
        dispatch.push(`\t\tip daddr ${GUESTS[role].address} jump ${role}_in`);
        dispatch6.push(`\t\toifname "${tapOf(role)}" ether type ip6 jump ${role}_in6`);
        chains.push(
            [
                `\tchain ${role}_in {`,
                "\t\tct state established,related accept",
                // Hetzner's own DHCP is not filtered by a cloud firewall; the twin's dnsmasq is its stand-in.
                `\t\tip saddr ${HOST_ADDRESS} udp sport 67 udp dport 68 accept`,
                ...rules.flatMap((rule, i) => ruleStatements(rule, "ip", `${where}, rule ${i}`)).map((s) => `\t\t${s}`),
                "\t\tdrop",
                "\t}",
            ].join("\n"),
        );
        chains6.push(
            [
                `\tchain ${role}_in6 {`,
                // Neighbour discovery: without it no IPv6 works at all (Hetzner does not filter it either).
                "\t\ticmpv6 type { nd-neighbor-solicit, nd-neighbor-advert, nd-router-advert } accept",
                ...rules.flatMap((rule, i) => ruleStatements(rule, "ip6", `${where}, rule ${i}`)).map((s) => `\t\t${s}`),
                "\t\tdrop",
                "\t}",
            ].join("\n"),
        );
    }
    return fillTwinFile("network/firewall.nft", {
        dispatch: dispatch.join("\n"),
        guestChains: chains.join("\n"),
        dispatch6: dispatch6.join("\n"),
        guestChains6: chains6.join("\n"),
    });
}

const FIREWALL_FILE = "firewall.nft";

/** Loads (on) or removes (off) the firewall stand-in; the ruleset is written by writeFirewall. */
export function setFirewall(stack: string, on: boolean): void {
    const ns = twinNetns(stack);
    spawnSync("ip", ["netns", "exec", ns, "nft", "delete", "table", "inet", "airlock_twin_firewall"]);
    spawnSync("ip", ["netns", "exec", ns, "nft", "delete", "table", "bridge", "airlock_twin_firewall6"]);
    if (on) must("ip", ["netns", "exec", ns, "nft", "--file", path.join(runDirOf(stack), FIREWALL_FILE)]);
}

export function writeFirewall(stack: string, rulesByRole: Partial<Record<GuestRole, FirewallRule[]>>): void {
    fs.writeFileSync(path.join(runDirOf(stack), FIREWALL_FILE), firewallRuleset(rulesByRole));
}

export function firewallOn(stack: string): boolean {
    const result = spawnSync("ip", ["netns", "exec", twinNetns(stack), "nft", "list", "table", "inet", "airlock_twin_firewall"], { encoding: "utf8" });
    return result.status === 0;
}
