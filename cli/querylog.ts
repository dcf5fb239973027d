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
 */
export interface Query {
    time: Date;
    client: string;
    name: string;
    type: string;
    blocked: boolean;
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
    if (name.length === 0 || name.length > 253) return undefined;
    const blocked = typeof Result === "object" && Result !== null && (Result as Record<string, unknown>).IsFiltered === true;
    return { time, client: IP, name, type: QT, blocked };
}
