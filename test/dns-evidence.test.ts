import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { formatProposal, propose } from "../cli/egress";
import { mergeEvidence, Query, readQueryLog, UNDECODABLE } from "../cli/querylog";
import { AUDIT_PROGRAM } from "../cli/audit";
import { readStackFile } from "../components/config/load";
import { renderHosts, renderedFile, REPO, stackFile, tempDir } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * The gateway's DNS capture against the packets red team 4 crafted to hide a lookup
 * from it or to bloat it (test/fixtures/dns-crafted/make-pcap): the real tcpdump reads
 * them, its lines go through the rendered capture writer, and both readers (`egress
 * propose`, airlock-audit) must keep one lookup per packet, from its client, at its
 * time: a packet tcpdump cannot print as a plain query is evidence too (UNDECODABLE),
 * never a line the readers merely count as unreadable.
 */

const CLIENT = "100.100.7.1";
const FIRST = 1795802933;
/** What each crafted packet must read as (make-pcap's order). */
const EXPECTED: [string, string | RegExp][] = [
    ["A", "github.com"],
    [UNDECODABLE, /<BAD PTR>/],
    ["NSAP-PTR", "x.evil.com"],
    ["HTTPS", "x.evil.com"],
    ["CAA", "x.evil.com"],
    [UNDECODABLE, /notify/],
    [UNDECODABLE, /CHAOS/],
    ["TXT", /^\^a\^a\^a\^aa{56}\.b{60}\.c{60}\.d{60}\.evil\.com$/],
    ["A", "github.com"],
    [UNDECODABLE, /prefix length\(28\) != length\(63\)/],
    ["NSAP-PTR", "data.z length 1 2+ a? www.github.com"],
    [UNDECODABLE, /\[189q\]/],
];

/** The crafted packets through the real tcpdump and the rendered writer, as on the gateway. */
function capture(): string {
    const dir = tempDir("dns-evidence");
    const pcap = path.join(dir, "crafted.pcap");
    expect(run(path.join(REPO, "test/fixtures/dns-crafted/make-pcap"), [pcap]).status).toBe(0);
    const writer = path.join(dir, "dns-capture");
    fs.writeFileSync(writer, renderedFile(renderHosts(readStackFile(stackFile("dev"))).gateway, "/usr/local/libexec/airlock/dns-capture"), { mode: 0o755 });
    const log = path.join(dir, "queries.log");
    const written = run("python3", [writer, log, String(64 * 1024 * 1024), "8", "--", "tcpdump", "-r", pcap, "-n", "-l", "-tt"]);
    expect(written.status, written.stderr).toBe(0);
    return log;
}

/** A one-command record from CLIENT spanning the crafted packets' first `seconds`, chained as the broker writes it. */
function recordDir(seconds: number): string {
    const dir = tempDir("dns-evidence-record");
    const at = (s: number) => new Date((FIRST + s) * 1000).toISOString();
    const entries = [
        { v: 1, seq: 0, prev: "", time: at(-60), kind: "chain", chain: "7".repeat(32), host: "sandbox" },
        { v: 1, seq: 1, prev: "", time: at(-0.5), kind: "begin", session: `${CLIENT}:40000`, source: CLIENT, uid: 1500, command: "dig github.com", env: [], image: null, image_id: null, checkpoint: null },
        { v: 1, seq: 2, prev: "", time: at(seconds - 0.5), kind: "end", of: 1, exit: 0, duration_ms: seconds * 1000, ended: "exited" },
    ];
    let prev = "0".repeat(64);
    const lines = entries.map((entry) => {
        const line = JSON.stringify({ ...entry, prev });
        prev = createHash("sha256").update(line).digest("hex");
        return line;
    });
    fs.writeFileSync(path.join(dir, `${"7".repeat(32)}.jsonl`), lines.map((l) => `${l}\n`).join(""));
    return dir;
}

describe.runIf(toolsAvailable("DNS evidence against crafted packets", ["tcpdump", "python3"]))("DNS evidence: what the capture keeps of crafted packets", () => {
    it("each crafted packet is one lookup from its client at its time, in both readers; none is only an unreadable line", () => {
        const log = capture();
        const lines = fs.readFileSync(log, "utf8").split("\n").filter(Boolean);
        // The 189-question datagram printed ~190 KB; the writer kept 2 KiB of it.
        expect(Math.max(...lines.map((l) => l.length))).toBeLessThanOrEqual(2048 + " [cut]".length);
        const { queries, unreadable } = readQueryLog(log);
        expect(unreadable).toBe(0);
        const read = (q: Query) => [q.type, q.name] as const;
        expect(queries).toHaveLength(EXPECTED.length);
        queries.forEach((q, i) => {
            expect(q.client, `packet ${i}`).toBe(CLIENT);
            expect(q.time.getTime(), `packet ${i}`).toBe((FIRST + i) * 1000);
            expect(read(q)[0], `packet ${i}`).toBe(EXPECTED[i][0]);
            expect(read(q)[1], `packet ${i}`).toMatch(typeof EXPECTED[i][1] === "string" ? new RegExp(`^${(EXPECTED[i][1] as string).replace(/[.?+]/g, "\\$&")}$`) : EXPECTED[i][1]);
        });
        // The forged TCP line is not read as the lookup its name pretends to be.
        expect(queries.some((q) => q.type === "A" && q.name === "www.github.com")).toBe(false);

        // airlock-audit (the gateway's reader): the same lookups, joined to the command running then, or outside it.
        const shown = run("/usr/bin/python3", ["-IS", AUDIT_PROGRAM, "--config", "-", "--dir", recordDir(6), "show", "--json", "--dns-slack", "0", "--querylog", log]);
        expect(shown.status, shown.stderr).toBe(0);
        const { records, outside, querylogUnreadableLines } = JSON.parse(shown.stdout);
        expect(querylogUnreadableLines).toBe(0);
        const python = [...records[0].dns, ...outside];
        expect(python.map((q: { type: string }) => q.type)).toEqual(EXPECTED.map(([type]) => type));
        expect(records[0].dns).toHaveLength(6);
        expect(outside).toHaveLength(6);
        expect(outside.every((q: { client: string }) => q.client === CLIENT)).toBe(true);
        const text = run("/usr/bin/python3", ["-IS", AUDIT_PROGRAM, "--config", "-", "--dir", recordDir(6), "show", "--dns-slack", "0", "--querylog", log]).stdout;
        expect(text).toContain("(a query the capture could not decode: 4660+ [1au] TXT? <BAD PTR> [|domain])");
        expect(text).toMatch(/^outside any command:\n {2}2026-11-27T18:00Z {2}6 lookups: /m);
        expect(text).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f]/);
        // None of them reached AdGuard's logs here: each is counted as seen only in the capture.
        expect(text).toMatch(/^\(12 lookups only in the gateway's capture: AdGuard Home dropped them/m);
    });

    it("egress propose flags the packets it could not decode, proposes nothing from them, and still counts each lookup", () => {
        const proposal = propose("dev", path.join(REPO, "stacks/Pulumi.dev.yaml"), [capture()]);
        expect(proposal.queries).toBe(EXPECTED.length);
        expect(proposal.undecodable).toHaveLength(EXPECTED.filter(([type]) => type === UNDECODABLE).length);
        expect(proposal.propose.map((p) => p.domain)).not.toContain("<bad ptr>");
        expect(formatProposal(proposal, undefined)).toMatch(/^flagged: 5 queries the capture could not decode/m);
    });

    it("merging is linear: a logged lookup takes the capture's time and client, and each is matched once", () => {
        const at = (ms: number) => new Date(FIRST * 1000 + ms);
        const q = (ms: number, client: string, unlogged: boolean, failed = false): Query => ({ time: at(ms), client, name: "a.example", type: "A", blocked: false, failed, unlogged });
        // AdGuard lost the first of two lookups of one name (its ring buffer); both captures stay, each once.
        const merged = mergeEvidence([q(0, CLIENT, true), q(1000, CLIENT, true), q(1300, CLIENT, false)]);
        expect(merged.map((m) => [m.time.getTime() - FIRST * 1000, m.unlogged])).toEqual([
            [0, false],
            [1000, true],
        ]);
        // A failure (no client in AdGuard's log) takes the capture's client.
        expect(mergeEvidence([q(500, "", false, true), q(0, CLIENT, true)])).toEqual([{ ...q(0, CLIENT, false, true) }]);
    });
});
