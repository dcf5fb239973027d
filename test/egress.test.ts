import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import * as YAML from "yaml";
import { gateStack } from "../cli/gate";
import { propose, withAllowlist } from "../cli/egress";
import { mergeEvidence, Query, readQueryLog, UNDECODABLE } from "../cli/querylog";
import { readStackFile } from "../components/config/load";
import { renderAdguardConfig } from "../components/workloads/compose";
import { airlock } from "./helpers/cli";
import { REPO, tempDir } from "./helpers/stacks";
import { docTranscript } from "./helpers/docs";
import { run, toolsAvailable } from "./helpers/tools";

/** From the resolver's query log to a reviewed allowlist change: grouped, counted, exfiltration flagged, a diff that applies and gates clean. */

const SAMPLE = path.join(REPO, "test/fixtures/adguard/querylog.sample.json");
const AGENT_LOG = path.join(REPO, "test/fixtures/adguard/querylog.agent.json");
/** AdGuard Home's own log, from the real v0.107.63: three lookups whose upstreams failed. */
const ADGUARD_LOG = path.join(REPO, "test/fixtures/adguard/adguardhome.log");
/** The gateway's capture of every DNS query (tcpdump's lines, beside the real AdGuard Home). */
const CAPTURE = path.join(REPO, "test/fixtures/adguard/dns-queries.log");

/** A working copy holding `stacks/` (copies of the shipped stacks), as a user's checkout would. */
function checkout(): string {
    const dir = tempDir("egress");
    fs.cpSync(path.join(REPO, "stacks"), path.join(dir, "stacks"), { recursive: true });
    fs.copyFileSync(path.join(REPO, "Pulumi.yaml"), path.join(dir, "Pulumi.yaml"));
    return dir;
}

/** Runs `fn` with the working directory at `dir` (the diff names files relative to it). */
function inDir<T>(dir: string, fn: () => T): T {
    const before = process.cwd();
    process.chdir(dir);
    try {
        return fn();
    } finally {
        process.chdir(before);
    }
}

describe("AdGuard Home's query log", () => {
    it("reads the real sample from AdGuard Home's repository", () => {
        const log = readQueryLog(SAMPLE);
        expect(log.unreadable).toBe(0);
        expect(log.queries.map((q) => [q.name, q.type, q.client, q.blocked])).toEqual([
            ["mtalk.google.com", "A", "192.168.0.0", false],
            ["example.org", "AAAA", "127.0.0.1", false],
            ["ad.doubleclick.net", "A", "127.0.0.1", false],
            ["ad.doubleclick.net", "A", "127.0.0.1", true],
            ["push.apple.com", "TXT", "192.168.0.15", false],
        ]);
        expect(log.queries[0].time.toISOString()).toBe("2020-08-31T13:43:37.724Z");
    });

    it("counts, and never trusts, lines it cannot read: not JSON, a bad time, an endless line", () => {
        const file = path.join(tempDir("querylog"), "querylog.json");
        const good = fs.readFileSync(SAMPLE, "utf8").split("\n")[1];
        fs.writeFileSync(file, [good, "{not json", '{"T":"yesterday","QH":"a.example.com","QT":"A","IP":"1.2.3.4"}', `{"QH":"${"a".repeat(200_000)}"}`, good, ""].join("\n"));
        const log = readQueryLog(file);
        expect(log.queries).toHaveLength(2);
        expect(log.unreadable).toBe(3);
    });
});

describe("AdGuard Home's own log: lookups whose upstream failed", () => {
    it("reads each failed lookup once (one line per upstream tried), in UTC, its name as data; its other lines are not queries", () => {
        const log = readQueryLog(ADGUARD_LOG);
        expect(log.unreadable).toBe(0);
        expect(log.queries.map((q) => [q.name, q.type, q.client, q.blocked, q.failed])).toEqual([
            ["mfrggzdfmztwq2lknnwg23tpobyxe43u.exfil-collector.net", "TXT", "", false, true],
            ["api.github.com", "TXT", "", false, true],
            ['we\\"ird\\\\name.example.org', "TXT", "", false, true],
        ]);
        expect(log.queries[0].time.toISOString()).toBe("2026-11-27T17:46:28.970Z");
    });

    it("counts a failure line that does not read, and keeps the lookups around it", () => {
        const file = path.join(tempDir("adguard-log"), "adguardhome.log");
        const lines = fs.readFileSync(ADGUARD_LOG, "utf8").split("\n");
        const failure = lines.find((l) => l.includes("api.github.com"))!;
        fs.writeFileSync(file, [failure, failure.replace(/question="[^"]*"/, 'question=";no-type.example.\\tIN"'), failure.replace("17:46:29", "17:46:59")].join("\n"));
        const log = readQueryLog(file);
        expect(log.unreadable).toBe(1);
        expect(log.queries.map((q) => q.time.toISOString())).toEqual(["2026-11-27T17:46:29.123Z", "2026-11-27T17:46:59.123Z"]);
    });

    it("propose takes both logs; a failed lookup stays with --client (its client is not named), marked as failed", () => {
        const p = inDir(checkout(), () => propose("dev", "stacks/Pulumi.dev.yaml", [AGENT_LOG, ADGUARD_LOG], "100.100.7.1"));
        expect(p.queries).toBe(173);
        expect(p.propose.find((u) => u.domain === "github.com")).toMatchObject({ queries: 48, failed: 1 });
        expect(p.flagged.find((f) => f.domain === "exfil-collector.net")).toMatchObject({ queries: 41, failed: 1 });
    });
});

describe("the gateway's capture of every DNS query", () => {
    it("reads each query (UDP and over TCP) with its client; TCP segments without data are not queries; names as data", () => {
        const log = readQueryLog(CAPTURE);
        expect(log.unreadable).toBe(0);
        expect(log.queries.map((q) => [q.name, q.type, q.client, q.unlogged])).toEqual([
            ["github.com", "A", "100.100.7.2", true],
            ["mfrggzdfmztwq2lknnwg23tpobyxe43u.exfil-collector.net", "TXT", "100.100.7.2", true],
            ["api.github.com", "AAAA", "100.100.7.2", true],
            ["a^ib.example.org", "A", "100.100.7.2", true],
        ]);
        expect(log.queries[0].time.toISOString()).toBe("2026-11-27T18:08:53.852Z");
    });

    it("a captured query that does not decode is still a lookup from its client, typed UNDECODABLE; a line that is not tcpdump's is unreadable", () => {
        const file = path.join(tempDir("capture"), "dns-queries.log");
        const line = fs.readFileSync(CAPTURE, "utf8").split("\n")[0];
        fs.writeFileSync(file, [line, line.replace(/: .*$/, ": 57671+ [|domain]"), "not a capture line", line].join("\n"));
        expect(readQueryLog(file)).toMatchObject({
            unreadable: 1,
            queries: [{ name: "github.com" }, { name: "57671+ [|domain]", type: UNDECODABLE, client: "100.100.7.2" }, { name: "github.com" }],
        });
    });

    it("merged with AdGuard's logs: one entry per lookup; what AdGuard logged keeps its verdict, a failure gets its client, the rest is marked unlogged", () => {
        const at = (iso: string) => new Date(iso);
        const q = (time: string, name: string, fields: Partial<Query> = {}): Query => ({ time: at(time), client: "100.100.7.1", name, type: "A", blocked: false, failed: false, unlogged: false, ...fields });
        const merged = mergeEvidence([
            q("2026-01-01T00:00:00.100Z", "github.com", { unlogged: true }),
            q("2026-01-01T00:00:00.400Z", "github.com"),
            q("2026-01-01T00:00:01.000Z", "evil.example", { blocked: true }),
            q("2026-01-01T00:00:00.900Z", "evil.example", { unlogged: true }),
            q("2026-01-01T00:00:05.000Z", "x.exfil.net", { type: "TXT", client: "", failed: true }),
            q("2026-01-01T00:00:04.500Z", "x.exfil.net", { type: "TXT", unlogged: true }),
            q("2026-01-01T00:00:09.000Z", "lost.example", { unlogged: true }),
            // The same name again, later: another lookup.
            q("2026-01-01T00:00:30.000Z", "github.com", { unlogged: true }),
            // Another client's lookup is not this one's.
            q("2026-01-01T00:00:00.200Z", "github.com", { client: "100.100.7.9", unlogged: true }),
        ]);
        // In time order, a matched lookup at its capture's time (AdGuard logs after the upstream answered).
        expect(merged.map((m) => [m.name, m.client, m.blocked, m.failed, m.unlogged])).toEqual([
            ["github.com", "100.100.7.1", false, false, false],
            ["github.com", "100.100.7.9", false, false, true],
            ["evil.example", "100.100.7.1", true, false, false],
            ["x.exfil.net", "100.100.7.1", false, true, false],
            ["lost.example", "100.100.7.1", false, false, true],
            ["github.com", "100.100.7.1", false, false, true],
        ]);
    });
});

describe("airlock egress propose", () => {
    it("refuses a file that is not a query log, and a --client that is not an address (exit 2, nothing written)", () => {
        const dir = checkout();
        fs.writeFileSync(path.join(dir, "notes.txt"), "these are my notes\nnot a log at all\n");
        const bad = airlock(["--stacks-dir", path.join(dir, "stacks"), "egress", "propose", "--stack", "dev", "--from", path.join(dir, "notes.txt"), "--out", path.join(dir, "out.diff")]);
        expect(bad.status).toBe(2);
        expect(bad.stderr.trim()).toBe(`${path.join(dir, "notes.txt")}: not a query log: none of its 2 lines reads as AdGuard Home's querylog.json, its adguardhome.log or the gateway's capture`);
        const client = airlock(["--stacks-dir", path.join(dir, "stacks"), "egress", "propose", "--stack", "dev", "--from", AGENT_LOG, "--client", "999.1.1.1", "--out", path.join(dir, "out.diff")]);
        expect(client.status).toBe(2);
        expect(client.stderr.trim()).toBe("--client 999.1.1.1: expected an IP address (the sandbox's tailnet address)");
        expect(fs.existsSync(path.join(dir, "out.diff"))).toBe(false);
        // An empty log is a log with nothing in it.
        fs.writeFileSync(path.join(dir, "empty.json"), "");
        expect(inDir(dir, () => propose("dev", "stacks/Pulumi.dev.yaml", [path.join(dir, "empty.json")])).queries).toBe(0);
    });

    it("groups the real sample by registrable domain", () => {
        const p = inDir(checkout(), () => propose("dev", "stacks/Pulumi.dev.yaml", [SAMPLE]));
        expect(p.propose.map((u) => [u.domain, u.queries, u.blocked])).toEqual([
            ["apple.com", 1, 0],
            ["doubleclick.net", 2, 1],
            ["example.org", 1, 0],
            ["google.com", 1, 0],
        ]);
        expect(p.flagged).toEqual([]);
    });

    it("on an agent's day: the expected domains with counts and first/last seen, exfiltration-shaped names flagged, not proposed", () => {
        const p = inDir(checkout(), () => propose("dev", "stacks/Pulumi.dev.yaml", [AGENT_LOG], "100.100.7.1"));
        expect(p.queries).toBe(170);
        expect(p.unreadableLines).toBe(2);
        expect(p.propose.map((u) => [u.domain, u.queries])).toEqual([
            ["debian.org", 3],
            ["github.com", 47],
            ["npmjs.org", 20],
            ["objects.githubusercontent.com", 8],
            ["octo-user.github.io", 2],
            ["pypi.org", 4],
            ["pythonhosted.org", 6],
        ]);
        const github = p.propose.find((u) => u.domain === "github.com")!;
        expect(github.names).toEqual(["api.github.com", "codeload.github.com", "github.com"]);
        expect(github.firstSeen).toMatch(/^2025-03-01T09:00:07\.\d{3}Z$/);
        expect(Date.parse(github.lastSeen)).toBeGreaterThan(Date.parse(github.firstSeen));
        // Blocked at every lookup (a filter list's): never proposed, listed apart.
        expect(p.blocked.map((u) => [u.domain, u.queries, u.blocked])).toEqual([["vendor-analytics.com", 3, 3]]);
        expect(p.flagged.map((f) => [f.domain, f.queries])).toEqual([
            ["cdn-tracker.io", 35],
            ["exfil-collector.net", 40],
        ]);
        expect(p.flagged[0].reasons).toEqual(["35 distinct names under one domain"]);
        expect(p.flagged[1].reasons[0]).toMatch(/^long random-looking labels \(40, e\.g\. /);
        expect(p.skipped).toEqual(["1.7.100.100.in-addr.arpa", "localhost"]);
        expect(p.diff).not.toMatch(/exfil-collector|cdn-tracker/);
        // The other client's query is left out with --client.
        expect(inDir(checkout(), () => propose("dev", "stacks/Pulumi.dev.yaml", [AGENT_LOG])).propose.find((u) => u.domain === "github.com")!.queries).toBe(48);
    });

    it.runIf(toolsAvailable("diff application", ["git", "patch"]))("the diff applies cleanly (git apply, patch -p1), changes only the allowlist, and the stack passes the gate", async () => {
        for (const stack of ["dev", "prod"]) {
            const dir = checkout();
            const original = fs.readFileSync(path.join(dir, "stacks", `Pulumi.${stack}.yaml`), "utf8");
            const p = inDir(dir, () => propose(stack, `stacks/Pulumi.${stack}.yaml`, [AGENT_LOG], "100.100.7.1"));
            // Proposing never applies.
            expect(fs.readFileSync(path.join(dir, "stacks", `Pulumi.${stack}.yaml`), "utf8")).toBe(original);
            const diff = path.join(dir, "proposal.diff");
            fs.writeFileSync(diff, p.diff);
            expect(run("patch", ["-p1", "--dry-run", "--input", diff], { cwd: dir }).status, stack).toBe(0);
            const applied = run("git", ["apply", "--verbose", diff], { cwd: dir });
            expect(applied.stderr, stack).toMatch(/Applied patch stacks\/Pulumi\.\w+\.yaml cleanly/);
            expect(applied.status).toBe(0);

            const cfg = readStackFile(path.join(dir, "stacks", `Pulumi.${stack}.yaml`));
            expect(cfg.dns.allowlist).toEqual(p.allowlist);
            const before = YAML.parse(original);
            const after = YAML.parse(fs.readFileSync(path.join(dir, "stacks", `Pulumi.${stack}.yaml`), "utf8"));
            before.config["airlock:dns"].allowlist = p.allowlist;
            expect(after).toEqual(before);
            const gate = await gateStack(path.join(dir, "stacks"), stack);
            expect(gate.findings, stack).toEqual([]);
            if (stack === "prod") {
                // prod is in allowlist mode already: only what it lacks is proposed, and AdGuard would allow it.
                expect(p.propose.map((u) => u.domain)).toEqual(["octo-user.github.io"]);
                expect(p.alreadyAllowed.map((u) => u.domain)).toEqual(["debian.org", "github.com", "npmjs.org", "objects.githubusercontent.com", "pypi.org", "pythonhosted.org"]);
                expect(renderAdguardConfig(cfg)).toContain('"@@||octo-user.github.io^"');
            }
        }
    }, 120_000);

    it("the docs' sample is what the CLI prints", () => {
        const command = "airlock egress propose --stack dev --from test/fixtures/adguard/querylog.agent.json --client 100.100.7.1";
        const dir = checkout();
        fs.mkdirSync(path.join(dir, "test/fixtures/adguard"), { recursive: true });
        fs.copyFileSync(AGENT_LOG, path.join(dir, "test/fixtures/adguard/querylog.agent.json"));
        const result = airlock(command.split(" ").slice(1), { cwd: dir });
        expect(result.stdout).toBe(docTranscript(command));
        expect(fs.existsSync(path.join(dir, "out/dev/dns-allowlist.diff"))).toBe(true);
    }, 60_000);

    it("edits only the allowlist, in whatever shape the stack file has it, comments kept", () => {
        const cases: [string, string, string][] = [
            ["block list", "config:\n  airlock:dns:\n    allowlist:\n      - a.com # ours\n  # next\n  airlock:x: 1\n", "config:\n  airlock:dns:\n    allowlist:\n      - a.com # ours\n      - b.com\n  # next\n  airlock:x: 1\n"],
            ["flow list", "config:\n  airlock:dns:\n    allowlist: [a.com]\n", "config:\n  airlock:dns:\n    allowlist: [a.com, b.com]\n"],
            ["empty flow list", "config:\n  airlock:dns:\n    allowlist: []\n", "config:\n  airlock:dns:\n    allowlist: [b.com]\n"],
            ["no allowlist", "config:\n  airlock:dns:\n    mode: observe\n  airlock:y: 2\n", "config:\n  airlock:dns:\n    mode: observe\n    allowlist:\n      - b.com\n  airlock:y: 2\n"],
            ["flow dns", "config:\n  airlock:dns: {mode: observe}\n", "config:\n  airlock:dns: {mode: observe, allowlist: [b.com]}\n"],
            ["no dns", "config:\n  airlock:prefix: x\n", "config:\n  airlock:prefix: x\n  airlock:dns:\n    allowlist:\n      - b.com\n"],
            ["no final newline", "config:\n  airlock:dns:\n    allowlist:\n      - a.com", "config:\n  airlock:dns:\n    allowlist:\n      - a.com\n      - b.com\n"],
        ];
        for (const [what, before, after] of cases) expect(withAllowlist(before, "x.yaml", ["b.com"]), what).toBe(after);
    });

    it("a hostile query log cannot reach the diff or the terminal: odd names are skipped, text is escaped", () => {
        const dir = checkout();
        const log = path.join(dir, "querylog.json");
        const line = (name: string) => JSON.stringify({ T: "2025-03-01T09:00:00.1+00:00", QH: name, QT: "A", IP: "100.100.7.1", Result: {} });
        fs.writeFileSync(log, [line("evil.com\n    - attacker.com"), line("x\u001b[2K.example.com"), line("good.example.com")].join("\n"));
        const result = airlock(["egress", "propose", "--stack", "dev", "--from", log], { cwd: dir });
        expect(result.status).toBe(0);
        expect(result.stdout).not.toMatch(/\x1b/);
        expect(result.stdout).toContain("\\u{1b}");
        const diff = fs.readFileSync(path.join(dir, "out/dev/dns-allowlist.diff"), "utf8");
        expect(diff).not.toContain("attacker");
        expect(diff.split("\n").filter((l) => l.startsWith("+      - "))).toEqual(["+      - example.com"]);
    }, 60_000);
});
