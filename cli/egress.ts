import * as fs from "node:fs";
import { isIP } from "node:net";
import * as path from "node:path";
import { createTwoFilesPatch } from "diff";
import { getDomain } from "tldts";
import * as YAML from "yaml";
import { readStackFile } from "../components/config/load";
import { ConfigError } from "../policies/contract";
import { mergeEvidence, NOT_KEPT, Query, readQueryLog, UNDECODABLE } from "./querylog";

/**
 * `airlock egress propose --stack S --from QUERYLOG`: from what the agent really
 * resolved (AdGuard Home's query log, in observe mode) to a reviewed
 * `airlock:dns.allowlist`. Names are grouped by registrable domain (the Public
 * Suffix List, private section included, so `user.github.io` is not all of
 * github.io); data-shaped names are flagged as possible DNS exfiltration instead
 * of proposed. The change is written as a diff of the stack file for a person to
 * review and apply; nothing is ever applied here.
 */

/** What makes names under one registrable domain look like data rather than hosts. */
export const EXFILTRATION = {
    /** A label this long with this much entropy (bits per character) is an encoding, not a name. */
    longLabel: 20,
    labelEntropyBits: 3.3,
    /** Any label this long, whatever it holds. */
    veryLongLabel: 40,
    /** This many distinct names under one registrable domain. */
    distinctNames: 30,
} as const;

/** The allowlist's own shape (the stack schema's), so a proposal always validates. */
const ALLOWLIST_ENTRY = /^(\*\.)?[a-z0-9-]+(\.[a-z0-9-]+)+$/;

export interface DomainUse {
    domain: string;
    queries: number;
    names: string[];
    blocked: number;
    /** Lookups whose upstream failed (SERVFAIL): the name still left the gateway. */
    failed: number;
    firstSeen: string;
    lastSeen: string;
}

export interface Flagged extends DomainUse {
    reasons: string[];
}

export interface Proposal {
    stack: string;
    stackFile: string;
    querylog: string;
    queries: number;
    unreadableLines: number;
    propose: DomainUse[];
    alreadyAllowed: DomainUse[];
    /** Domains the resolver's filter lists blocked at every lookup: never proposed. */
    blocked: DomainUse[];
    flagged: Flagged[];
    /** Names with no registrable domain (single labels, reverse lookups, .arpa). */
    skipped: string[];
    /** Packets to the resolver the capture could not decode as a plain query: tcpdump's text, each a lookup nothing is proposed from. */
    undecodable: string[];
    /** Queries over the capture's budget (a flood): counted per client and second, their names not kept. */
    notKept: { client: string; queries: number; seconds: number }[];
    /** The stack file's allowlist after the change: current entries first, then the proposals. */
    allowlist: string[];
    diff: string;
}

function entropy(label: string): number {
    const counts = new Map<string, number>();
    for (const c of label) counts.set(c, (counts.get(c) ?? 0) + 1);
    let bits = 0;
    for (const n of counts.values()) bits -= (n / label.length) * Math.log2(n / label.length);
    return bits;
}

/** Why the names under one domain look like data; empty when they do not. */
export function exfiltrationReasons(domain: string, names: string[]): string[] {
    const reasons: string[] = [];
    const labels = names.flatMap((name) => name.slice(0, -domain.length).split(".").filter(Boolean));
    const random = labels.filter((l) => l.length >= EXFILTRATION.veryLongLabel || (l.length >= EXFILTRATION.longLabel && entropy(l) >= EXFILTRATION.labelEntropyBits));
    if (random.length > 0) reasons.push(`long random-looking labels (${random.length}, e.g. ${random[0].slice(0, 24)}...)`);
    if (names.length >= EXFILTRATION.distinctNames) reasons.push(`${names.length} distinct names under one domain`);
    return reasons;
}

/** A name is allowed when an entry is the name or a parent of it (AdGuard's `@@||entry^`). */
function allowedBy(allowlist: string[], name: string): boolean {
    return allowlist.some((entry) => {
        const domain = entry.replace(/^\*\./, "");
        return name === domain || name.endsWith(`.${domain}`);
    });
}

export function group(queries: Query[]): { byDomain: Map<string, Query[]>; skipped: Set<string> } {
    const byDomain = new Map<string, Query[]>();
    const skipped = new Set<string>();
    for (const q of queries) {
        const domain = getDomain(q.name, { allowPrivateDomains: true });
        if (!domain || q.name.endsWith(".arpa") || !ALLOWLIST_ENTRY.test(domain)) {
            skipped.add(q.name);
            continue;
        }
        byDomain.set(domain, [...(byDomain.get(domain) ?? []), q]);
    }
    return { byDomain, skipped };
}

function use(domain: string, queries: Query[]): DomainUse {
    const times = queries.map((q) => q.time.getTime());
    return {
        domain,
        queries: queries.length,
        names: [...new Set(queries.map((q) => q.name))].sort(),
        blocked: queries.filter((q) => q.blocked).length,
        failed: queries.filter((q) => q.failed).length,
        firstSeen: new Date(Math.min(...times)).toISOString(),
        lastSeen: new Date(Math.max(...times)).toISOString(),
    };
}

/**
 * `querylogs`: AdGuard Home's query log, its own log (failed lookups) and the
 * gateway's capture of every query, in any order (one entry per lookup across them). A failed lookup names no client (AdGuard's log does not), so `client` keeps
 * it: only tailnet clients are allowed to the resolver at all.
 */
export function propose(stack: string, stackFile: string, querylogs: string[], client?: string): Proposal {
    if (client !== undefined && isIP(client) === 0) throw new ConfigError([`--client ${client}: expected an IP address (the sandbox's tailnet address)`]);
    const cfg = readStackFile(stackFile);
    const current = cfg.dns.allowlist;
    const logs = querylogs.map(readQueryLog);
    // A file none of whose lines reads is another file given by mistake, not an empty log.
    logs.forEach((log, i) => {
        if (log.queries.length === 0 && log.unreadable > 0) {
            throw new ConfigError([`${querylogs[i]}: not a query log: none of its ${log.unreadable} lines reads as AdGuard Home's querylog.json, its adguardhome.log or the gateway's capture`]);
        }
    });
    const all = mergeEvidence(logs.flatMap((l) => l.queries));
    const queries = client ? all.filter((q) => q.client === client || q.failed) : all;
    const { byDomain, skipped } = group(queries.filter((q) => q.type !== UNDECODABLE && q.type !== NOT_KEPT));
    const notKept = new Map<string, { client: string; queries: number; seconds: number }>();
    for (const q of queries.filter((q) => q.type === NOT_KEPT)) {
        const flood = notKept.get(q.client) ?? { client: q.client, queries: 0, seconds: 0 };
        flood.queries += Number(q.name);
        flood.seconds += 1;
        notKept.set(q.client, flood);
    }
    const proposal: Omit<Proposal, "allowlist" | "diff"> = {
        stack,
        stackFile,
        querylog: querylogs.join(", "),
        queries: queries.length,
        unreadableLines: logs.reduce((n, l) => n + l.unreadable, 0),
        propose: [],
        alreadyAllowed: [],
        blocked: [],
        flagged: [],
        skipped: [...skipped].sort(),
        undecodable: queries.filter((q) => q.type === UNDECODABLE).map((q) => `${q.time.toISOString()} ${q.client} ${q.name}`),
        notKept: [...notKept.values()],
    };
    for (const [domain, domainQueries] of [...byDomain].sort(([a], [b]) => a.localeCompare(b))) {
        const entry = use(domain, domainQueries);
        const reasons = exfiltrationReasons(domain, entry.names);
        if (reasons.length > 0) proposal.flagged.push({ ...entry, reasons });
        else if (entry.blocked === entry.queries) proposal.blocked.push(entry);
        else if (entry.names.every((name) => allowedBy(current, name))) proposal.alreadyAllowed.push(entry);
        else proposal.propose.push(entry);
    }
    const added = proposal.propose.map((p) => p.domain).filter((d) => !current.includes(d));
    const allowlist = [...current, ...added];
    const text = fs.readFileSync(stackFile, "utf8");
    const relative = path.relative(process.cwd(), stackFile);
    const diff = added.length === 0 ? "" : unifiedDiff(relative, text, withAllowlist(text, stackFile, added));
    return { ...proposal, allowlist, diff };
}

/**
 * The stack file's text with `added` appended to `airlock:dns.allowlist`, editing
 * only that spot (comments and the rest of the file stay byte for byte); checked by
 * parsing the result back.
 */
export function withAllowlist(text: string, file: string, added: string[]): string {
    const doc = YAML.parseDocument(text);
    const config = doc.get("config", true);
    if (!YAML.isMap(config) || !config.range) throw new ConfigError([`${file}: config: expected a mapping of airlock:* keys`]);
    const dns = config.get("airlock:dns", true);
    const lineIndent = (offset: number) => text.slice(text.lastIndexOf("\n", offset - 1) + 1, offset);
    const atLineStart = (offset: number) => (offset > 0 && text[offset - 1] !== "\n" ? "\n" : "");
    let edited: string;
    if (dns === undefined) {
        const indent = lineIndent((config.items[0].key as YAML.Scalar).range![0]);
        const at = config.range[1];
        const block = `${indent}airlock:dns:\n${indent}  allowlist:\n${added.map((d) => `${indent}    - ${d}\n`).join("")}`;
        edited = text.slice(0, at) + atLineStart(at) + block + text.slice(at);
    } else if (!YAML.isMap(dns) || !dns.range) {
        throw new ConfigError([`${file}: airlock:dns: expected a mapping`]);
    } else {
        const list = dns.get("allowlist", true);
        if (list === undefined) {
            if (dns.flow) {
                const close = dns.range[1] - 1;
                edited = `${text.slice(0, close)}, allowlist: [${added.join(", ")}]${text.slice(close)}`;
            } else {
                const indent = lineIndent((dns.items[0].key as YAML.Scalar).range![0]);
                const at = dns.range[1];
                edited = text.slice(0, at) + atLineStart(at) + `${indent}allowlist:\n${added.map((d) => `${indent}  - ${d}\n`).join("")}` + text.slice(at);
            }
        } else if (!YAML.isSeq(list) || !list.range) {
            throw new ConfigError([`${file}: airlock:dns.allowlist: expected a list of domains`]);
        } else if (list.flow) {
            const close = list.range[1] - 1;
            edited = `${text.slice(0, close)}${list.items.length > 0 ? ", " : ""}${added.join(", ")}${text.slice(close)}`;
        } else {
            const indent = lineIndent(list.range[0]);
            const at = list.range[1];
            edited = text.slice(0, at) + atLineStart(at) + added.map((d) => `${indent}- ${d}\n`).join("") + text.slice(at);
        }
    }
    // The edit must change the allowlist, exactly, and nothing else.
    const before = doc.toJS() as { config: Record<string, any> };
    const after = YAML.parse(edited) as { config: Record<string, any> };
    const expected = structuredClone(before);
    expected.config["airlock:dns"] = { ...(expected.config["airlock:dns"] ?? {}), allowlist: [...(expected.config["airlock:dns"]?.allowlist ?? []), ...added] };
    if (JSON.stringify(after) !== JSON.stringify(expected)) throw new Error(`${file}: the allowlist edit did not come out as intended; nothing written`);
    return edited;
}

/** A unified diff with a/ and b/ prefixes, for `git apply` or `patch -p1` from the working directory. */
function unifiedDiff(file: string, before: string, after: string): string {
    return createTwoFilesPatch(`a/${file}`, `b/${file}`, before, after, undefined, undefined, { context: 3 }).replace(/^=+\n/, "");
}

/** Escapes anything outside printable ASCII: names come from the agent's resolver log. */
const printable = (text: string) => text.replace(/[^\x20-\x7e]/g, (c) => `\\u{${c.codePointAt(0)!.toString(16)}}`);

/** A name as a person reads it in a list: escaped, and cut when it is data-sized. */
const short = (name: string) => printable(name.length > 48 ? `${name.slice(0, 45)}...` : name);

export function formatProposal(p: Proposal, diffFile: string | undefined): string {
    const out: string[] = [];
    const day = (iso: string) => iso.replace(/\.\d{3}Z$/, "Z");
    const row = (u: DomainUse) =>
        `  ${printable(u.domain).padEnd(32)} ${String(u.queries).padStart(6)} queries  ${day(u.firstSeen)} .. ${day(u.lastSeen)}${u.blocked ? `  (${u.blocked} blocked)` : ""}${u.failed ? `  (${u.failed} failed upstream)` : ""}\n      ${u.names.slice(0, 3).map(short).join(", ")}${u.names.length > 3 ? `, and ${u.names.length - 3} more` : ""}`;
    out.push(`${p.querylog}: ${p.queries} queries${p.unreadableLines ? `, ${p.unreadableLines} unreadable lines` : ""}`);
    out.push(p.propose.length ? `propose for airlock:dns.allowlist of ${p.stack}:` : `nothing new to propose for ${p.stack}`);
    for (const u of p.propose) out.push(row(u));
    if (p.alreadyAllowed.length) out.push("already allowed:", ...p.alreadyAllowed.map(row));
    if (p.blocked.length) out.push("blocked at every lookup by the resolver's filter lists (not proposed):", ...p.blocked.map(row));
    if (p.flagged.length) {
        out.push("flagged as possible DNS exfiltration (not proposed):");
        for (const f of p.flagged) out.push(row(f), `      why: ${f.reasons.map(printable).join("; ")}`);
    }
    if (p.undecodable.length) {
        out.push(`flagged: ${p.undecodable.length} quer${p.undecodable.length === 1 ? "y" : "ies"} the capture could not decode (a name hidden from tcpdump's decoder, or a query of an odd shape; nothing proposed from them):`);
        out.push(...p.undecodable.slice(0, 5).map((u) => `      ${printable(u.slice(0, 120))}`));
        if (p.undecodable.length > 5) out.push(`      and ${p.undecodable.length - 5} more`);
    }
    for (const f of p.notKept) {
        out.push(`flagged: ${f.queries} quer${f.queries === 1 ? "y" : "ies"} from ${printable(f.client)} over the capture's budget in ${f.seconds} second${f.seconds === 1 ? "" : "s"} (a flood; counted, names not kept, nothing proposed from them)`);
    }
    if (p.skipped.length) out.push(`skipped (no registrable domain): ${p.skipped.slice(0, 5).map(printable).join(", ")}${p.skipped.length > 5 ? `, and ${p.skipped.length - 5} more` : ""}`);
    if (diffFile) out.push(`wrote ${diffFile}: review it, then \`git apply ${diffFile}\` (nothing was changed)`);
    return `${out.join("\n")}\n`;
}
