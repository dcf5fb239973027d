import { createHash } from "node:crypto";
import * as zlib from "node:zlib";
import { gzipSync } from "fflate";

/**
 * user_data as a Hetzner server receives it and as cloud-init reads it there.
 *
 * Hetzner's API takes user_data as a string of at most 32,768 characters and stores
 * no binary. cloud-init's Hetzner datasource (DataSourceHetzner.py, since cloud-init
 * 20.3: "Hetzner cloud does not support binary user-data. So here, do a base64 decode
 * of the data if we can") passes it through `util.maybe_b64decode`, which is Python's
 * `b64decode(data, validate=True)`: any character outside the base64 alphabet (a
 * newline too) or wrong padding leaves the data as it came. Then `user_data.convert_string`
 * runs `util.decomp_gzip` once: gzip bytes are decompressed, anything else is kept.
 * airlock sends every host's document as base64 of its gzip: about a third of its
 * plain length, and what a reviewer reads is the plain document the plan writes out.
 */

export type UserDataEncoding = "plain" | "base64" | "base64+gzip";

export interface DecodedUserData {
    /** The document cloud-init reads. */
    text: string;
    encoding: UserDataEncoding;
}

/** Canonical base64 only: Python's validate=True refuses other characters and bad padding (a subset of what it takes is safe: anything else stays undecoded, as text). */
const STRICT_BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** The most a compressed document may expand to before it is refused as unreadable (a gzip bomb). */
export const MAX_USER_DATA_BYTES = 16 * 2 ** 20;

export class UserDataDecodeError extends Error {}

/** What cloud-init on a Hetzner server reads from this user_data string. */
export function decodeUserData(sent: string): DecodedUserData {
    if (sent.length === 0 || !STRICT_BASE64.test(sent)) return { text: sent, encoding: "plain" };
    const bytes = Buffer.from(sent, "base64");
    const gzipped = bytes.length >= 2 && bytes[0] === 0x1f && bytes[1] === 0x8b;
    let inner: Buffer = bytes;
    if (gzipped) {
        let consumed: number;
        try {
            const { buffer, engine } = zlib.gunzipSync(bytes, { maxOutputLength: MAX_USER_DATA_BYTES, info: true }) as unknown as { buffer: Buffer; engine: zlib.Gunzip };
            inner = buffer;
            consumed = engine.bytesWritten;
        } catch (err) {
            const why = (err as NodeJS.ErrnoException).code === "ERR_BUFFER_TOO_LARGE" || err instanceof RangeError ? `decompresses to more than ${MAX_USER_DATA_BYTES / 2 ** 20} MiB` : "is base64 of a gzip stream that does not decompress";
            throw new UserDataDecodeError(`user_data ${why}`);
        }
        // Node stops at NUL bytes after a member (padding to it); Python's gzip, which
        // cloud-init's util.decomp_gzip uses, skips them and reads on: another member, or
        // garbage that makes it keep the data undecoded (the host boots nothing). Either way
        // the two read different documents, so anything after the stream is refused.
        if (consumed < bytes.length) throw new UserDataDecodeError(`user_data has ${bytes.length - consumed} bytes after its gzip stream, which cloud-init reads differently from this gate`);
    }
    let text: string;
    try {
        text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(inner); // a BOM kept, as cloud-init keeps it
    } catch {
        throw new UserDataDecodeError(`user_data is base64 of${gzipped ? " gzipped" : ""} bytes that are not UTF-8 text`);
    }
    return { text, encoding: gzipped ? "base64+gzip" : "base64" };
}

/**
 * The string airlock sends: base64 of the document's gzip. Compressed by a pinned
 * pure-JavaScript deflate with no timestamp, so one document always gives the same
 * user_data (Hetzner replaces a server whose user_data changes; Node's own zlib may
 * compress differently on another CPU or Node release).
 */
export function encodeUserData(document: string): string {
    return Buffer.from(gzipSync(Buffer.from(document, "utf8"), { level: 9, mtime: 0 })).toString("base64");
}

/**
 * A stand-in of `length` characters for a value a deploy fills in: random-looking
 * (keys are), so it compresses as badly as the real one; the same every run.
 */
export function incompressibleFiller(length: number, seed: string): string {
    const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let out = "";
    for (let block = 0; out.length < length; block++) {
        for (const byte of createHash("sha256").update(`${seed}/${block}`).digest()) out += alphabet[byte % alphabet.length];
    }
    return out.slice(0, length);
}
