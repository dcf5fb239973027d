import { ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as YAML from "yaml";
import { readStackFile } from "../components/config/load";
import { DNS_CAPTURE_LOG, DNS_CAPTURE_PER_CLIENT_SECOND, EGRESS_RULES_PATH } from "../components/render/hosts";
import { renderAdguardConfig, RESOLVER_RATELIMIT } from "../components/workloads/compose";
import { AUDIT_PROGRAM } from "../cli/audit";
import { propose } from "../cli/egress";
import { mergeEvidence, NOT_KEPT, readQueryLog } from "../cli/querylog";
import { buildGoTool } from "../twin/gotools";
import { createTestNet, inNamespace, TestNet } from "./helpers/netns";
import { REPO, renderHosts, renderedFile, stackFile, tempDir } from "./helpers/stacks";
import { isRoot, run, toolsAvailable } from "./helpers/tools";

/**
 * Allowlist mode closes DNS exfiltration, and every lookup is evidence. The real
 * AdGuard Home (the release the stacks pin, built from its Go module: twin/gotools.ts)
 * runs the rendered AdGuardHome.yaml with four keys moved into the test's network
 * namespaces (the address it binds, its upstreams, its web UI's port, the file of its
 * own log), in front of a fake upstream (dnsmasq) that logs every query it receives.
 * Unlisted names must come back NXDOMAIN and never reach the upstream. The sandbox side
 * loads the rendered nftables rules and cannot reach any other resolver.
 */

const UPSTREAM = "127.0.0.2";
/** An address where no resolver answers: an upstream that fails. */
const DEAD_UPSTREAM = "127.0.0.3";
/** A second resolver address on the server, running dev's (observe mode) rules. */
const OBSERVE_RESOLVER = "100.100.7.3";
/** A third, in observe mode, whose upstream fails. */
const FAILING_RESOLVER = "100.100.7.4";
const ANSWER = "192.0.2.10";

/** The rendered config with only what places it in the test moved: its address, upstreams, UI port and log file. */
function adguardConfig(rendered: string, listen: string, upstream: string, work: string, uiPort: number, edit: (c: Record<string, any>) => void = () => {}): string {
    const config = YAML.parse(rendered);
    Object.assign(config.dns, { bind_hosts: [listen], upstream_dns: [upstream], bootstrap_dns: [upstream] });
    config.http.address = `127.0.0.1:${uiPort}`;
    config.log.file = path.join(work, "data", "adguardhome.log");
    edit(config);
    return YAML.stringify(config);
}

const canRun = isRoot() && toolsAvailable("DNS allowlist in network namespaces", ["ip", "dnsmasq", "dig", "nft", "go", "tcpdump"]);
if (!isRoot()) console.warn("SKIPPED DNS allowlist e2e: needs root for network namespaces (CI runs it as root)");

describe.runIf(canRun)("the real AdGuard Home: unlisted names are blocked and never forwarded; every lookup is evidence", () => {
    let net: TestNet;
    let dir: string;
    let adguardHome: string;
    /** A resolver: how it is started, its process, and how that process ended (if it did). */
    interface Resolver {
        name: string;
        argv: string[];
        child: ChildProcess;
        exit?: string;
    }
    /** Each resolver by its address (a restarted one replaces the one that exited). */
    const resolvers = new Map<string, Resolver>();

    function launch(name: string, address: string, argv: string[]) {
        const stderr = fs.openSync(path.join(dir, `${name}.stderr`), "w");
        const child = spawn("ip", ["netns", "exec", net.server, ...argv], { stdio: ["ignore", "ignore", stderr] });
        fs.closeSync(stderr);
        const resolver: Resolver = { name, argv, child };
        child.once("exit", (code, signal) => (resolver.exit = `exited (${signal ?? code})`));
        resolvers.set(address, resolver);
    }

    function dnsmasq(conf: string, name: string, address: string) {
        const file = path.join(dir, `${name}.conf`);
        fs.writeFileSync(file, conf);
        launch(name, address, ["dnsmasq", "--keep-in-foreground", `--conf-file=${file}`, "--user=root", `--log-facility=${path.join(dir, `${name}.log`)}`]);
    }

    /** The work directory of the AdGuard Home named `name` (its query log and its own log are in data/). */
    const workOf = (name: string) => path.join(dir, name, "work");

    /** AdGuard Home on `address` with a stack's rendered config (placed by adguardConfig). */
    function adguard(name: string, address: string, stack: string, upstream: string, uiPort: number, edit?: (c: Record<string, any>) => void) {
        fs.mkdirSync(workOf(name), { recursive: true });
        const conf = path.join(dir, name, "AdGuardHome.yaml");
        fs.writeFileSync(conf, adguardConfig(renderAdguardConfig(readStackFile(stackFile(stack))), address, upstream, workOf(name), uiPort, edit));
        launch(name, address, [adguardHome, "-c", conf, "-w", workOf(name), "--no-check-update"]);
    }

    /** Why a resolver did not answer: its process, its stderr, what listens in the namespace. */
    function whyNotAnswering(address: string): string {
        const resolver = resolvers.get(address)!;
        const stderr = fs.readFileSync(path.join(dir, `${resolver.name}.stderr`), "utf8").trim().slice(-2000);
        const listening = inNamespace(net.server, ["ss", "-Hulnp"]).stdout.trim();
        return `the ${resolver.name} resolver on ${address} did not answer: ${resolver.exit ?? "running"}; stderr: ${stderr || "(none)"}; listening: ${listening || "(nothing)"}`;
    }

    /** Waits until the resolver on `address` answers (one that exited is started once more). */
    async function answering(address: string) {
        const until = Date.now() + 60_000;
        let restarted = false;
        while (lookup(net.server, address, "github.com").status === null) {
            const resolver = resolvers.get(address)!;
            if (resolver.exit && !restarted) {
                // Started once more, with what it said the first time kept in the error below.
                console.warn(whyNotAnswering(address));
                launch(resolver.name, address, resolver.argv);
                restarted = true;
            } else if (Date.now() > until || resolver.exit) {
                throw new Error(whyNotAnswering(address));
            }
            await new Promise((r) => setTimeout(r, 100));
        }
    }

    beforeAll(async () => {
        adguardHome = await buildGoTool("adguardhome", (line) => console.log(line));
        net = createTestNet("dns");
        dir = tempDir("dns");
        for (const address of [UPSTREAM, DEAD_UPSTREAM]) inNamespace(net.server, ["ip", "addr", "add", `${address}/8`, "dev", "lo"]);
        // The fake upstream answers every name, and logs every query it receives.
        dnsmasq(["no-resolv", "no-hosts", `listen-address=${UPSTREAM}`, "bind-interfaces", "port=53", "log-queries", `address=/#/${ANSWER}`].join("\n") + "\n", "upstream", UPSTREAM);
        // Another resolver the sandbox must not reach (the server's "public" address).
        dnsmasq(["no-resolv", "no-hosts", `listen-address=${net.serverPublic}`, "bind-interfaces", "port=53", `address=/#/${ANSWER}`].join("\n") + "\n", "other", net.serverPublic);
        const tailnetLink = inNamespace(net.server, ["ip", "-o", "-4", "addr", "show", "to", net.serverTailnet]).stdout.split(/\s+/)[1];
        for (const address of [OBSERVE_RESOLVER, FAILING_RESOLVER]) inNamespace(net.server, ["ip", "addr", "add", `${address}/24`, "dev", tailnetLink]);
        adguard("allowlist", net.serverTailnet, "prod", UPSTREAM, 3001);
        adguard("observe", OBSERVE_RESOLVER, "dev", UPSTREAM, 3002);
        adguard("failing", FAILING_RESOLVER, "dev", DEAD_UPSTREAM, 3003);
        // Every resolver answers before the first test (a busy CI machine starts them slowly),
        // and one that does not fails here with its reason.
        for (const address of [UPSTREAM, net.serverPublic, net.serverTailnet, OBSERVE_RESOLVER]) await answering(address);
    }, 600_000);

    afterAll(() => {
        for (const { child } of resolvers.values()) child.kill("SIGTERM");
        if (process.env.AIRLOCK_DEBUG) for (const f of fs.readdirSync(dir)) console.log(f, fs.readFileSync(path.join(dir, f), "utf8"));
        net?.close();
    });

    /** One lookup from a namespace: status (NOERROR, NXDOMAIN, ...) or null when nothing answered within a second. */
    function lookup(namespace: string, server: string, name: string, type = "A") {
        const result = inNamespace(namespace, ["dig", `@${server}`, name, type, "+tries=1", "+time=1"]);
        const status = /status: ([A-Z]+)/.exec(result.stdout)?.[1] ?? null;
        return { status, answer: /\tIN\tA\t(\S+)/.exec(result.stdout)?.[1], answers: Number(/ANSWER: (\d+)/.exec(result.stdout)?.[1] ?? "0") };
    }

    /**
     * A lookup from the sandbox namespace. One unanswered try is asked again, up to three
     * times, so a slow moment on a loaded machine is not read as a dropped packet; a
     * resolver the rules drop stays unanswered every time.
     */
    function dig(server: string, name: string, type = "A") {
        let result = lookup(net.client, server, name, type);
        for (let retry = 0; retry < 2 && result.status === null; retry++) result = lookup(net.client, server, name, type);
        return result;
    }

    const upstreamSaw = () => fs.readFileSync(path.join(dir, "upstream.log"), "utf8");

    it("answers allowlisted names and their subdomains through the upstream", () => {
        for (const name of ["github.com", "api.github.com", "registry.npmjs.org", "files.pythonhosted.org"]) {
            expect(dig(net.serverTailnet, name), name).toMatchObject({ status: "NOERROR", answer: ANSWER });
            expect(upstreamSaw(), name).toContain(`query[A] ${name} from`);
        }
    });

    it("blocks unlisted names and never forwards them: data in labels, look-alikes, parents of listed names", () => {
        const unlisted: [string, string][] = [
            ["mzxw6ytboi2ge3lbmq5gk4tlmvzhi.0.t.exfil-collector.net", "TXT"],
            ["s1b0.cdn-tracker.io", "A"],
            ["example.com", "A"],
            ["evilgithub.com", "A"],
            ["github.com.evil.net", "A"],
            ["npmjs.org", "A"],
            ["x.registry.npmjs.org.attacker.io", "AAAA"],
        ];
        // AdGuard Home answers a blocked A or AAAA with NXDOMAIN (blocking_mode), any other type
        // with an empty NOERROR (and its fake SOA): no answer either way.
        for (const [name, type] of unlisted) {
            const answer = dig(net.serverTailnet, name, type);
            if (type === "A" || type === "AAAA") expect(answer.status, name).toBe("NXDOMAIN");
            else expect([answer.status, answer.answers], name).toEqual(["NOERROR", 0]);
        }
        const seen = upstreamSaw();
        for (const [name] of unlisted) expect(seen, name).not.toContain(` ${name} from`);
        expect(seen).not.toMatch(/exfil-collector|cdn-tracker|attacker|evil/);
    });

    it("the same setup with observe mode's rules forwards them (so the assertion above can fail)", () => {
        const name = "nbswy3dpeb3w64tmmq.1.t.exfil-collector.net";
        expect(dig(OBSERVE_RESOLVER, name).status).toBe("NOERROR");
        expect(upstreamSaw()).toContain(`query[A] ${name} from`);
    });

    it("the sandbox, under its rendered nftables rules, reaches the resolver and no other", () => {
        const sandbox = renderHosts(readStackFile(stackFile("prod"))).sandbox;
        const rules = path.join(dir, "egress.nft");
        fs.writeFileSync(rules, renderedFile(sandbox, EGRESS_RULES_PATH));
        expect(dig(net.serverPublic, "github.com").status).toBe("NOERROR"); // reachable before the rules
        const loaded = inNamespace(net.client, ["nft", "--file", rules]);
        expect(loaded.stderr).toBe("");
        // Until the tailnet names the resolver, no DNS at all; then the resolver only.
        expect(dig(net.serverTailnet, "github.com").status).toBeNull();
        // What airlock-tailnet-config adds once the gateway answers (the rendered file, filled as at boot).
        const resolver = path.join(dir, "egress-resolver.nft");
        fs.writeFileSync(resolver, renderedFile(sandbox, "/etc/airlock/egress-resolver.nft.in").replaceAll("@RESOLVER_IPV4@", net.serverTailnet));
        expect(inNamespace(net.client, ["nft", "--file", resolver]).stderr).toBe("");
        expect(dig(net.serverPublic, "github.com").status).toBeNull();
        expect(dig(net.serverTailnet, "github.com").status).toBe("NOERROR");
    });

    /** Waits (up to `seconds`) for names in the reader's view of a log; the names it found. */
    async function inEvidence(files: string[], names: string[], seconds = 10): Promise<string[]> {
        const until = Date.now() + seconds * 1000;
        for (;;) {
            const seen = new Set(files.filter((f) => fs.existsSync(f)).flatMap((f) => readQueryLog(f).queries.map((q) => q.name)));
            const found = names.filter((n) => seen.has(n));
            if (found.length === names.length || Date.now() > until) return found;
            await new Promise((r) => setTimeout(r, 200));
        }
    }
    const queryLogOf = (name: string) => path.join(workOf(name), "data", "querylog.json");
    const ownLogOf = (name: string) => path.join(workOf(name), "data", "adguardhome.log");
    const tag = () => Math.random().toString(36).slice(2, 10);

    it("every lookup, answered or blocked, is in querylog.json within seconds, and a SIGKILL of the resolver loses none of them", async () => {
        const names = [`ev-${tag()}.github.com`, `ev-${tag()}.example.com`];
        const started = Date.now();
        expect(dig(net.serverTailnet, names[0]).status).toBe("NOERROR");
        expect(dig(net.serverTailnet, names[1]).status).toBe("NXDOMAIN");
        expect(await inEvidence([queryLogOf("allowlist")], names, 5)).toEqual(names);
        console.log(`both lookups in querylog.json ${Date.now() - started} ms after the first was asked`);
        // One more, then the resolver is killed at once: it was written before it was answered.
        const last = `ev-${tag()}.github.com`;
        expect(dig(net.serverTailnet, last).status).toBe("NOERROR");
        resolvers.get(net.serverTailnet)!.child.kill("SIGKILL");
        await new Promise((r) => setTimeout(r, 500));
        expect(await inEvidence([queryLogOf("allowlist")], [...names, last], 0)).toEqual([...names, last]);
        launch("allowlist", net.serverTailnet, resolvers.get(net.serverTailnet)!.argv);
        await answering(net.serverTailnet);
    });

    it("with the old size_memory (1000) lookups stay in memory, and a SIGKILL loses them (so the assertion above can fail)", async () => {
        const tailnetLink = inNamespace(net.server, ["ip", "-o", "-4", "addr", "show", "to", net.serverTailnet]).stdout.split(/\s+/)[1];
        inNamespace(net.server, ["ip", "addr", "add", "100.100.7.5/24", "dev", tailnetLink]);
        adguard("buffered", "100.100.7.5", "dev", UPSTREAM, 3005, (c) => (c.querylog.size_memory = 1000));
        await answering("100.100.7.5");
        const name = `buf-${tag()}.github.com`;
        // From the server's side: the sandbox's namespace holds the egress rules by now (resolver 100.100.7.1 only).
        expect(lookup(net.server, "100.100.7.5", name).status).toBe("NOERROR");
        expect(await inEvidence([queryLogOf("buffered")], [name], 3)).toEqual([]);
        resolvers.get("100.100.7.5")!.child.kill("SIGKILL");
        await new Promise((r) => setTimeout(r, 500));
        expect(await inEvidence([queryLogOf("buffered")], [name], 0)).toEqual([]);
    });

    it("under a flood AdGuard answers one client at its rate limit and drops the rest unlogged, the gateway's capture names its budget a second and counts the rest, and the readers take each lookup once; a SIGKILL costs none of them", async () => {
        // The gateway's capture as rendered, on the test's tailnet link instead of tailscale0.
        // As the unit runs it: the writer and tcpdump as tcpdump's user, with CAP_NET_RAW only.
        const gatewayHost = renderHosts(readStackFile(stackFile("prod"))).gateway;
        const unit = renderedFile(gatewayHost, "/etc/systemd/system/airlock-dns-capture.service");
        const execStart = /^ExecStart=(.+)$/m.exec(unit)![1].split(" ");
        const tailnetLink = inNamespace(net.server, ["ip", "-o", "-4", "addr", "show", "to", net.serverTailnet]).stdout.split(/\s+/)[1];
        const captureDir = fs.mkdtempSync("/run/airlock-capture-");
        run("chown", ["tcpdump:tcpdump", captureDir]);
        const captureFile = path.join(captureDir, "queries.log");
        const writer = path.join(captureDir, "dns-capture");
        fs.writeFileSync(writer, renderedFile(gatewayHost, execStart[0]), { mode: 0o755 });
        const local = execStart.map((arg, i) => (i === 0 ? writer : arg === DNS_CAPTURE_LOG ? captureFile : arg === "tailscale0" ? tailnetLink : arg));
        const asUnit = ["setpriv", "--reuid=tcpdump", "--regid=tcpdump", "--init-groups", "--inh-caps=+net_raw", "--ambient-caps=+net_raw", "--bounding-set=-all,+net_raw", "--no-new-privs"];
        const capture = spawn("ip", ["netns", "exec", net.server, ...asUnit, ...local], { stdio: ["ignore", "ignore", "ignore"] });
        try {
            await new Promise((r) => setTimeout(r, 1500));
            const flood = run("ip", ["netns", "exec", net.client, path.join(REPO, "test/fixtures/dns-flood"), net.serverTailnet, "3000"], { timeout: 180_000 });
            const [summary, , ...names] = flood.stdout.trim().split("\n");
            console.log(`flood: ${summary}`);
            expect(names).toHaveLength(3000);
            // The rendered rate limit holds: about RESOLVER_RATELIMIT answers a second, the rest dropped.
            const [, answered, seconds] = /^(\d+)\/3000 answered in ([\d.]+) s/.exec(summary)!.map(Number);
            expect(answered).toBeLessThan(3000);
            expect(answered).toBeLessThanOrEqual(RESOLVER_RATELIMIT * (Math.ceil(seconds) + 1));
            await new Promise((r) => setTimeout(r, 2000));
            const logged = new Set(readQueryLog(queryLogOf("allowlist")).queries.map((q) => q.name));
            const capturedQueries = readQueryLog(captureFile).queries;
            const captured = new Set(capturedQueries.filter((q) => q.type !== NOT_KEPT).map((q) => q.name));
            const counted = capturedQueries.filter((q) => q.type === NOT_KEPT).reduce((n, q) => n + Number(q.name), 0);
            const missingFromLog = names.filter((n) => !logged.has(n)).length;
            console.log(`of 3000 lookups: ${3000 - missingFromLog} in AdGuard's query log, ${names.filter((n) => captured.has(n)).length} named in the capture, ${counted} counted there`);
            // The capture names a client's budget a second and counts the rest: every lookup is accounted for.
            expect(names.filter((n) => captured.has(n)).length + counted).toBe(3000);
            expect(names.filter((n) => captured.has(n)).length).toBeLessThanOrEqual(DNS_CAPTURE_PER_CLIENT_SECOND * (Math.ceil(seconds) + 1));
            // Every lookup AdGuard answered is named in its log or the capture.
            const named = names.filter((n) => logged.has(n) || captured.has(n));
            expect(named.length).toBeGreaterThanOrEqual(answered);
            // The readers: one entry per named lookup across the files, none twice.
            const merged = mergeEvidence([queryLogOf("allowlist"), captureFile].flatMap((f) => readQueryLog(f).queries)).filter((q) => q.name.startsWith("flood"));
            expect(new Set(merged.map((q) => q.name)).size).toBe(named.length);
            expect(merged).toHaveLength(named.length);
            // What AdGuard dropped (or did not log) is there, marked or counted: seen only in the capture.
            const unlogged = merged.filter((q) => q.unlogged).length;
            console.log(`of 3000 lookups: ${answered} answered, ${unlogged} named only in the capture, ${counted} counted only there`);
            expect(unlogged + counted).toBeGreaterThanOrEqual(3000 - answered);
            // The resolver killed: the capture is its own process, and keeps everything.
            resolvers.get(net.serverTailnet)!.child.kill("SIGKILL");
            const name = `after-${tag()}.github.com`;
            lookup(net.client, net.serverTailnet, name);
            await new Promise((r) => setTimeout(r, 1500));
            expect(readQueryLog(captureFile).queries.map((q) => q.name)).toContain(name);
            // The capture itself is bounded: lines of at most 2 KiB, in files of the rendered size.
            expect(Math.max(...fs.readFileSync(captureFile, "utf8").split("\n").map((l) => l.length))).toBeLessThanOrEqual(2048 + 6);
            expect(fs.statSync(captureFile).uid).toBe(Number(run("id", ["-u", "tcpdump"]).stdout.trim()));
        } finally {
            capture.kill("SIGTERM");
            fs.rmSync(captureDir, { recursive: true, force: true });
            launch("allowlist", net.serverTailnet, resolvers.get(net.serverTailnet)!.argv);
            await answering(net.serverTailnet);
        }
    }, 300_000);

    it("a lookup whose upstream fails is answered SERVFAIL and never reaches the query log, but AdGuard's own log names it, and both readers take it", async () => {
        const name = `fail-${tag()}.exfil-collector.net`;
        expect(lookup(net.server, FAILING_RESOLVER, name, "TXT").status).toBe("SERVFAIL");
        expect(await inEvidence([ownLogOf("failing")], [name], 5)).toEqual([name]);
        expect(await inEvidence([queryLogOf("failing")], [name], 0)).toEqual([]);
        const failure = readQueryLog(ownLogOf("failing")).queries.find((q) => q.name === name)!;
        expect(failure).toMatchObject({ type: "TXT", failed: true, client: "" });
        expect(Math.abs(failure.time.getTime() - Date.now())).toBeLessThan(60_000);
        // The gateway's reader (airlock-audit show joins these with the command record).
        const readByAudit = run("/usr/bin/python3", ["-I", "-c", `import runpy, sys; q, n = runpy.run_path(sys.argv[1])["querylog"]([sys.argv[2]]); print([e[2:] for e in q], n)`, AUDIT_PROGRAM, ownLogOf("failing")]);
        expect(readByAudit.stderr).toBe("");
        expect(readByAudit.stdout).toContain(`('${name}', 'TXT', False, True, False)`);
        // And egress propose (this resolver answered nothing, so it has no query log yet).
        const proposal = propose("dev", stackFile("dev"), [ownLogOf("failing")]);
        expect([...proposal.propose, ...proposal.flagged].find((u) => u.domain === "exfil-collector.net")).toMatchObject({ failed: 1 });
    });
});
