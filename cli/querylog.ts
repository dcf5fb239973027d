import * as fs from "node:fs";
import { StringDecoder } from "node:string_decoder";
import { ConfigError } from "../policies/contract";

/**
 * AdGuard Home's query log (`work/data/querylog.json`, rotated to `.json.1`): one
 * JSON object per line; the fields airlock reads are `T` (RFC 3339 time), `QH`
 * (the name asked), `QT` (type), `IP` (the client) and `Result.IsFiltered` (the
 * resolver blocked it). AdGuard calls the format unstable, so only these are read,
 * and the file is written by the agent user's container: every line is hostile,
 * capped in length, and a line that does not read is counted, not trusted.
 *
 * A lookup whose upstream fails never reaches that log (AdGuard answers SERVFAIL and
 * stops); AdGuard's own log (`work/data/adguardhome.log`, as airlock configures it)
 * names it: `2026/11/27 17:39:33.026915 [error] dnsproxy: exchange failed upstream=...
 * question=";name.\tIN\t A" ...`, in UTC, without the client. Lines of that log are
 * read too: a failure becomes a query with `failed` set (one per lookup, however many
 * upstreams were tried), and its other lines are not queries.
 *
 * And the gateway's capture of every DNS query from the tailnet (tcpdump's lines,
 * `/var/log/airlock/dns-queries.log`): `1795802757.277416 IP 100.100.7.1.51364 >
 * 100.100.7.2.53: 39088+ [1au] TXT? name.example. (65)`. It holds the lookups
 * AdGuard's logs miss (its ring buffer overwritten under load, a resolver that died);
 * `mergeEvidence` keeps one entry per lookup across the files.
 */
export interface Query {
    time: Date;
    /** The client's address; "" for a failed lookup (AdGuard's log does not name it; only tailnet clients are allowed). */
    client: string;
    name: string;
    type: string;
    blocked: boolean;
    /** Its upstream failed: AdGuard answered SERVFAIL, and the name left for the upstream. */
    failed: boolean;
    /** Seen only in the gateway's capture: neither of AdGuard's logs has it (whether it was answered is not known). */
    unlogged: boolean;
}

export const MAX_QUERYLOG_LINE = 64 * 1024;

export interface QueryLog {
    queries: Query[];
    /** Lines that were not a query this reader understands (or were too long). */
    unreadable: number;
}

export function readQueryLog(file: string): QueryLog {
    let fd: number;
    try {
        fd = fs.openSync(file, "r");
    } catch (err) {
        throw new ConfigError([`${file}: cannot read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`]);
    }
    const queries: Query[] = [];
    let unreadable = 0;
    const take = (line: string) => {
        if (line.trim() === "") return;
        const captured = CAPTURE_LINE.exec(line);
        if (captured) {
            const query = parseCaptured(captured);
            if (query) queries.push(query);
            return;
        }
        const notKept = CAPTURE_NOT_KEPT.exec(line);
        if (notKept) {
            // A flood's second: its count stands in for the queries not kept, as one entry.
            const [, seconds, micros, client, count] = notKept;
            queries.push({ time: new Date(Number(seconds) * 1000 + Math.floor(Number(micros) / 1000)), client, name: count, type: NOT_KEPT, blocked: false, failed: false, unlogged: true });
            return;
        }
        const logLine = ADGUARD_LOG_LINE.exec(line);
        if (logLine) {
            const failure = parseFailure(logLine);
            if (failure === "unreadable") unreadable++;
            else if (failure && !sameLookup(queries.at(-1), failure)) queries.push(failure);
            return;
        }
        const query = parseQuery(line);
        if (query) queries.push(query);
        else unreadable++;
    };
    try {
        const chunk = Buffer.alloc(1 << 16);
        const decoder = new StringDecoder("utf8"); // a character split across two reads stays whole
        let pending = "";
        let skipping = false; // inside a line longer than the cap
        for (let n = fs.readSync(fd, chunk); n > 0; n = fs.readSync(fd, chunk)) {
            const parts = (pending + decoder.write(chunk.subarray(0, n))).split("\n");
            pending = parts.pop()!;
            for (const part of parts) {
                if (skipping) skipping = false;
                else take(part);
            }
            if (pending.length > MAX_QUERYLOG_LINE) {
                if (!skipping) unreadable++;
                skipping = true;
                pending = "";
            }
        }
        if (!skipping) take(pending);
    } finally {
        fs.closeSync(fd);
    }
    return { queries, unreadable };
}

function parseQuery(line: string): Query | undefined {
    if (line.length > MAX_QUERYLOG_LINE) return undefined;
    let q: unknown;
    try {
        q = JSON.parse(line);
    } catch {
        return undefined;
    }
    if (typeof q !== "object" || q === null || Array.isArray(q)) return undefined;
    const { T, QH, QT, IP, Result } = q as Record<string, unknown>;
    if (typeof T !== "string" || typeof QH !== "string" || typeof QT !== "string" || typeof IP !== "string") return undefined;
    // RFC 3339 with a zone; AdGuard writes nanoseconds, Date keeps milliseconds.
    if (!/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$/.test(T)) return undefined;
    const time = new Date(T.replace(/(\.\d{3})\d+/, "$1"));
    if (Number.isNaN(time.getTime())) return undefined;
    const name = QH.toLowerCase().replace(/\.$/, "");
    if (name.length === 0 || name.length > MAX_NAME) return undefined;
    const blocked = typeof Result === "object" && Result !== null && (Result as Record<string, unknown>).IsFiltered === true;
    return { time, client: IP, name, type: QT, blocked, failed: false, unlogged: false };
}

/** A line of AdGuard Home's own log: its UTC time, its level, the rest. */
const ADGUARD_LOG_LINE = /^(\d{4})\/(\d\d)\/(\d\d) (\d\d):(\d\d):(\d\d)(\.\d{1,9})? \[(\w+)\] (.*)$/;
/** dnsproxy's line for an upstream that did not answer (proxy/exchange.go): the question in Go's %q. */
const EXCHANGE_FAILED = /^dnsproxy: exchange failed upstream=\S+ question="((?:[^"\\]|\\.)*)"/;

/** A failed lookup from AdGuard's log; undefined for its other lines; "unreadable" for one that names a failure but does not read. */
function parseFailure(line: RegExpExecArray): Query | undefined | "unreadable" {
    const [, year, month, day, hour, minute, second, fraction, level, rest] = line;
    const failed = level === "error" ? EXCHANGE_FAILED.exec(rest) : null;
    if (!failed) return undefined;
    const time = new Date(`${year}-${month}-${day}T${hour}:${minute}:${second}${(fraction ?? "").slice(0, 4)}Z`);
    let question: string;
    try {
        question = JSON.parse(`"${failed[1]}"`) as string;
    } catch {
        return "unreadable";
    }
    // dns.Question's text: ";name.<TAB>IN<TAB> TYPE".
    const parts = /^;(.+?)\.?\tIN\t (\w+)$/.exec(question);
    const name = parts?.[1].toLowerCase() ?? "";
    if (Number.isNaN(time.getTime()) || !parts || name.length === 0 || name.length > MAX_NAME) return "unreadable";
    return { time, client: "", name, type: parts[2], blocked: false, failed: true, unlogged: false };
}

/** The same lookup again within seconds: dnsproxy logs a failure per upstream it tried. */
const sameLookup = (previous: Query | undefined, next: Query) =>
    previous?.failed === true && previous.name === next.name && previous.type === next.type && Math.abs(next.time.getTime() - previous.time.getTime()) <= 5000;

/** A line of the gateway's capture: its time (seconds since the epoch, UTC), the client, the rest. */
const CAPTURE_LINE = /^(\d{9,11})\.(\d{6}) IP (\d{1,3}(?:\.\d{1,3}){3})\.\d{1,5} > \d{1,3}(?:\.\d{1,3}){3}\.53: (.*)$/;
/** A TCP segment's header as tcpdump prints it (print-tcp.c), exactly: a name cannot pose as one. */
const TCP_SEGMENT = /^Flags \[[^\]]*\], (?:seq \d+(?::\d+)?, )?(?:ack \d+, )?win \d+, (?:urg \d+, )?(?:options \[[^\]]*\], )?length (\d+):? ?/;
/** The DNS query tcpdump prints (print-domain.c): id, flags, [options], TYPE? name. (size). */
const CAPTURED_QUERY = /^\d+\S* (?:\[[^\]]*\] )*([A-Za-z0-9_-]+)\? (.*)\. \(\d+\)$/;
/** tcpdump's names for types it does not know, as AdGuard (miekg/dns) names them. */
const TYPE_NAMES: Record<string, string> = { Type64: "SVCB", Type65: "HTTPS", Type257: "CAA", NSAP_PTR: "NSAP-PTR" };
/** The type of a captured packet that does not decode as one plain query (see parseCaptured). */
export const UNDECODABLE = "UNDECODABLE";
/** What the capture writes for a client's queries beyond its budget in one second (templates/scripts/dns-capture); the name is their count. */
const CAPTURE_NOT_KEPT = /^(\d{9,11})\.(\d{6}) airlock-dns-capture: (\d{1,3}(?:\.\d{1,3}){3}) sent (\d{1,9}) more queries this second, not kept$/;
export const NOT_KEPT = "NOT_KEPT";
/** The longest name kept: 255 octets on the wire, each up to 4 characters as the logs escape it. */
const MAX_NAME = 1024;

/**
 * A captured query; undefined for a TCP segment without data. A packet to the resolver
 * that tcpdump cannot print as one plain query (a forward compression pointer, a TCP
 * stream split oddly, an opcode or class of its own) is still a lookup from that client
 * at that time: it is kept, typed UNDECODABLE, with tcpdump's text as its name.
 */
function parseCaptured(line: RegExpExecArray): Query | undefined {
    const [, seconds, micros, client, rest] = line;
    const time = new Date(Number(seconds) * 1000 + Math.floor(Number(micros) / 1000));
    let dns = rest;
    if (rest.startsWith("Flags [")) {
        const tcp = TCP_SEGMENT.exec(rest);
        if (tcp && tcp[1] === "0") return undefined;
        if (tcp) dns = rest.slice(tcp[0].length);
    }
    const query = CAPTURED_QUERY.exec(dns);
    const name = query?.[2].toLowerCase() ?? "";
    if (!query || name.length === 0 || name.length > MAX_NAME) {
        return { time, client, name: rest.slice(0, 200), type: UNDECODABLE, blocked: false, failed: false, unlogged: true };
    }
    return { time, client, name, type: TYPE_NAMES[query[1]] ?? query[1].replace(/^Type(\d+)$/, "TYPE$1"), blocked: false, failed: false, unlogged: true };
}

/** How far apart the capture's time and AdGuard's may be for one lookup. */
const SAME_LOOKUP_MS = 2000;

/**
 * One entry per lookup, in time order: a captured query that AdGuard logged too (same
 * name and type, the same client or one AdGuard did not name, within 2 s) is that
 * entry, at the capture's time and client (the moment the packet arrived; AdGuard logs
 * after the upstream answered); the rest stay, marked `unlogged`. Both kinds are taken
 * in time order, each logged entry matched once: linear in the number of lookups.
 */
export function mergeEvidence(queries: Query[]): Query[] {
    const byTime = (a: Query, b: Query) => a.time.getTime() - b.time.getTime();
    const out = queries.filter((q) => !q.unlogged).sort(byTime);
    const buckets = new Map<string, { entries: Query[]; next: number }>();
    const key = (q: Query, client: string) => `${q.type}\t${client}\t${q.name}`;
    for (const q of out) {
        const bucket = buckets.get(key(q, q.client)) ?? { entries: [], next: 0 };
        bucket.entries.push(q);
        buckets.set(key(q, q.client), bucket);
    }
    /** The earliest entry of a bucket not yet matched and not more than 2 s before `at`. */
    const head = (bucket: { entries: Query[]; next: number } | undefined, at: number) => {
        if (!bucket) return undefined;
        while (bucket.next < bucket.entries.length && bucket.entries[bucket.next].time.getTime() < at - SAME_LOOKUP_MS) bucket.next++;
        const q = bucket.entries[bucket.next];
        return q && q.time.getTime() <= at + SAME_LOOKUP_MS ? { q, bucket } : undefined;
    };
    for (const captured of queries.filter((q) => q.unlogged).sort(byTime)) {
        const at = captured.time.getTime();
        const candidates = [head(buckets.get(key(captured, captured.client)), at), head(buckets.get(key(captured, "")), at)].filter((c) => c !== undefined);
        const best = candidates.sort((a, b) => Math.abs(a.q.time.getTime() - at) - Math.abs(b.q.time.getTime() - at))[0];
        if (best) {
            best.bucket.next++;
            Object.assign(best.q, { time: captured.time, client: captured.client });
        } else out.push(captured);
    }
    return out.sort(byTime);
}
