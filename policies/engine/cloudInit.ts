import * as zlib from "node:zlib";
import * as YAML from "yaml";
import { flattenLines, linesOfNode } from "./sourceLines";
import { decodeUserData, UserDataDecodeError, UserDataEncoding } from "./userData";

/** A user_data document: cloud-config parsed, write_files decoded; or a plain script. */
export interface CloudInitDoc {
    text: string;
    /** The cloud-config mapping; undefined for a script. */
    data?: Record<string, any>;
    files: EmbeddedFile[];
    /** Top-level key -> line. */
    lines: Record<string, number>;
    /** Every key and list entry -> line, by dotted path (`runcmd.2`, `users.0.passwd`). */
    paths?: Record<string, number>;
    /** Set when judged beside its stash: why the files it installs from its host code bundle could not be judged. */
    bundleProblem?: string;
    /**
     * The string Hetzner receives, when it is known: an encoded document (base64, of gzip or not),
     * or a server's own user_data. A plain document without it is sent as airlock sends its own.
     */
    delivery?: { encoding: UserDataEncoding; length: number };
}

export interface EmbeddedFile {
    index: number;
    path: string;
    content: string;
    permissions?: string;
    /** Line of the write_files entry. */
    line?: number;
    /** Line of the content's first line, when the content is a literal block (`|`) stored as is. */
    contentLine?: number;
    /** Why the content cannot be read (it does not decode, or decodes to too much): nothing in it was judged. */
    undecodable?: string;
}

export class CloudInitParseError extends Error {
    constructor(message: string, readonly line?: number) {
        super(message);
    }
}

/** The most an embedded file may decompress to before it is judged unverifiable (a gzip bomb). */
export const MAX_DECODED_BYTES = 16 * 2 ** 20;

/**
 * user_data as cloud-init on a Hetzner server reads it (base64 decoded, then gunzipped:
 * see userData.ts), parsed. `sent`: this string is what the server is created with.
 */
export function parseUserData(text: string, sent = false): CloudInitDoc {
    let decoded;
    try {
        decoded = decodeUserData(text);
    } catch (err) {
        if (err instanceof UserDataDecodeError) throw new CloudInitParseError(err.message);
        throw err;
    }
    const doc = parseCloudInit(decoded.text);
    return sent || decoded.encoding !== "plain" ? { ...doc, delivery: { encoding: decoded.encoding, length: [...text].length } } : doc;
}

export function parseCloudInit(text: string): CloudInitDoc {
    // cloud-init does not skip a byte-order mark: it finds no type, and the host boots nothing.
    if (text.startsWith("\uFEFF")) throw new CloudInitParseError("user_data starts with a byte-order mark, which cloud-init does not skip: the host would boot none of it");
    // user_data.convert_string parses user_data as a MIME message when "mime-version:" is in its
    // first 4,096 bytes (any case), whatever its first line says; then only its parts boot. The
    // gate judges one document, so any mention of it is refused (also past 4 KiB: the window is
    // cloud-init's choice and may grow).
    if (/mime-version:/i.test(text)) throw new CloudInitParseError('user_data mentions "MIME-Version:", which makes cloud-init read it as a MIME message: only #cloud-config and scripts can be judged');
    const first = text.split("\n", 1)[0].trim();
    if (first.startsWith("#!")) return { text, files: [], lines: {} };
    if (first !== "#cloud-config") {
        throw new CloudInitParseError(
            `user_data starts with "${first.slice(0, 40)}"; only #cloud-config and scripts can be judged, plain or as base64 (of gzip) in one line (MIME and Jinja are not)`,
        );
    }
    const lineCounter = new YAML.LineCounter();
    // cloud-init (PyYAML) takes the last of duplicate keys, and so does this.
    const doc = YAML.parseDocument(text, { lineCounter, merge: true, uniqueKeys: false, logLevel: "error" });
    if (doc.errors.length > 0) throw new CloudInitParseError(`cloud-config: ${doc.errors[0].message.split("\n")[0]}`, doc.errors[0].linePos?.[0].line);
    let parsed: unknown;
    try {
        parsed = doc.toJS({ maxAliasCount: 10_000 });
    } catch (err) {
        throw new CloudInitParseError(`cloud-config: ${(err as Error).message.split("\n")[0]}`);
    }
    if (parsed !== null && parsed !== undefined && (typeof parsed !== "object" || Array.isArray(parsed))) {
        throw new CloudInitParseError(`cloud-config: expected a mapping of modules, got ${Array.isArray(parsed) ? "a list" : typeof parsed}`);
    }
    const data = (parsed ?? {}) as Record<string, any>;
    const lines: Record<string, number> = {};
    if (YAML.isMap(doc.contents)) {
        for (const item of doc.contents.items) {
            const key = item.key as YAML.Scalar | undefined;
            if (key?.range) lines[String(key.value)] = lineCounter.linePos(key.range[0]).line;
        }
    }
    const files = (Array.isArray(data.write_files) ? data.write_files : []).map((entry: any, index: number): EmbeddedFile => {
        const node = doc.getIn(["write_files", index], true) as YAML.Node | undefined;
        const content = YAML.isMap(node) ? (node.get("content", true) as YAML.Node | undefined) : undefined;
        const plain = entry?.encoding === undefined || /^(text\/plain)?$/i.test(String(entry.encoding));
        const decoded = decode(entry?.content, entry?.encoding);
        return {
            index,
            path: String(entry?.path ?? ""),
            content: decoded.text,
            ...(decoded.error ? { undecodable: decoded.error } : {}),
            permissions: entry?.permissions === undefined ? undefined : String(entry.permissions),
            line: node?.range ? lineCounter.linePos(node.range[0]).line : undefined,
            contentLine:
                plain && YAML.isScalar(content) && content.type === "BLOCK_LITERAL" && content.range ? lineCounter.linePos(content.range[0]).line + 1 : undefined,
        };
    });
    return { text, data, files, lines, paths: flattenLines(linesOfNode(doc.contents, undefined, doc, lineCounter)) };
}

/**
 * The line a string leaf (as stringLeaves names it: `runcmd[2]`, `users[0].passwd`,
 * `write_files[1] /etc/x`) is written on: its own entry, else the nearest key above it.
 */
export function lineOfLeaf(doc: CloudInitDoc, leafPath: string): number | undefined {
    const file = /^write_files\[(\d+)\] /.exec(leafPath);
    if (file) return doc.files.find((f) => f.index === Number(file[1]))?.line ?? doc.lines.write_files;
    const segments = leafPath.replace(/\[(\d+)\]/g, ".$1").split(".").filter(Boolean);
    for (let n = segments.length; n > 0; n--) {
        const line = doc.paths?.[segments.slice(0, n).join(".")];
        if (line !== undefined) return line;
    }
    return undefined;
}

/** write_files content as cloud-init writes it: text, `!!binary` bytes, base64 and/or gzip. */
function decode(content: unknown, encoding: unknown): { text: string; error?: string } {
    const bytes = content instanceof Uint8Array ? Buffer.from(content) : undefined;
    const text = bytes ? bytes.toString("utf8") : content === undefined || content === null ? "" : String(content);
    const gunzip = (data: Buffer) => zlib.gunzipSync(data, { maxOutputLength: MAX_DECODED_BYTES }).toString("utf8");
    const kind = String(encoding ?? "").toLowerCase();
    try {
        switch (kind) {
            case "b64":
            case "base64":
                return { text: (bytes ?? Buffer.from(text, "base64")).toString("utf8") };
            case "gz":
            case "gzip":
                // cloud-init needs bytes here: `content: !!binary |` holding the gzip stream.
                return { text: gunzip(bytes ?? Buffer.from(text, "latin1")) };
            case "gz+b64":
            case "gzip+base64":
            case "gz+base64":
            case "gzip+b64":
                return { text: gunzip(bytes ?? Buffer.from(text, "base64")) };
            case "":
            case "text/plain":
                return { text };
            default:
                return { text: "", error: `unknown encoding ${JSON.stringify(String(encoding))}` };
        }
    } catch (err) {
        const why = (err as NodeJS.ErrnoException).code === "ERR_BUFFER_TOO_LARGE" || err instanceof RangeError ? `decompresses to more than ${MAX_DECODED_BYTES / 2 ** 20} MiB` : `does not decode as ${kind}`;
        return { text: "", error: why };
    }
}

// Several rules walk the same document: walk it once.
const leavesOf = new WeakMap<CloudInitDoc, { path: string; value: string }[]>();

/** Every string in the document with its key path (`runcmd[2]`, `write_files[0].content`). */
export function stringLeaves(doc: CloudInitDoc): { path: string; value: string }[] {
    const cached = leavesOf.get(doc);
    if (cached) return cached;
    const leaves = collectLeaves(doc);
    leavesOf.set(doc, leaves);
    return leaves;
}

function collectLeaves(doc: CloudInitDoc): { path: string; value: string }[] {
    if (!doc.data) return [{ path: "(script)", value: doc.text }];
    const out: { path: string; value: string }[] = [];
    const walk = (value: unknown, at: string) => {
        if (typeof value === "string") out.push({ path: at, value });
        else if (Array.isArray(value)) {
            // A runcmd/bootcmd entry may be an argv list: judge it as the command line too.
            if (/\]$/.test(at) && value.every((v) => typeof v === "string") && value.length > 1) out.push({ path: at, value: value.join(" ") });
            value.forEach((v, i) => walk(v, `${at}[${i}]`));
        } else if (value !== null && typeof value === "object") {
            for (const [k, v] of Object.entries(value)) walk(v, at ? `${at}.${k}` : k);
        }
    };
    walk({ ...doc.data, write_files: undefined }, "");
    for (const file of doc.files) out.push({ path: `write_files[${file.index}] ${file.path}`, value: file.content });
    return out;
}
