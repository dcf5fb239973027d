import { createHash, randomBytes } from "node:crypto";
import * as http from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A local stand-in for the B2 native API (v3), on loopback only. It implements the
 * calls airlock's provider and a backup host make, and it ENFORCES capabilities the
 * way B2 does: a key without deleteFiles can upload and hide but never delete a file
 * version; a bucket-restricted key sees and touches only its bucket.
 */

interface Key {
    applicationKeyId: string;
    applicationKey: string;
    keyName: string;
    capabilities: string[];
    bucketId: string | null;
    namePrefix: string | null;
}

interface FileVersion {
    fileId: string;
    fileName: string;
    action: "upload" | "hide";
    content: string;
}

interface BucketState {
    bucketId: string;
    bucketName: string;
    bucketType: string;
    lifecycleRules: unknown[];
    fileLockConfiguration: unknown;
    versions: FileVersion[];
}

export interface FakeB2 {
    url: string;
    accountId: string;
    /** The account's master key: every capability. */
    master: { applicationKeyId: string; applicationKey: string };
    buckets: Map<string, BucketState>;
    keys: Map<string, Key>;
    /** The next responses to POST calls fail with this status (429, 503...). */
    failNext(status: number, count: number): void;
    /** Every call name received, in order. */
    calls: string[];
    /** Runs as each call arrives, before it is answered: another client acting meanwhile, in a test. */
    onCall?: (name: string) => void;
    close(): Promise<void>;
}

const ALL = ["listKeys", "writeKeys", "deleteKeys", "listBuckets", "writeBuckets", "deleteBuckets", "writeBucketRetentions", "listFiles", "readFiles", "shareFiles", "writeFiles", "deleteFiles"];

/** Which capability each call needs. */
const NEEDS: Record<string, string> = {
    b2_create_bucket: "writeBuckets",
    b2_update_bucket: "writeBuckets",
    b2_delete_bucket: "deleteBuckets",
    b2_list_buckets: "listBuckets",
    b2_create_key: "writeKeys",
    b2_delete_key: "deleteKeys",
    b2_list_keys: "listKeys",
    b2_get_upload_url: "writeFiles",
    b2_upload_file: "writeFiles",
    b2_hide_file: "writeFiles",
    b2_delete_file_version: "deleteFiles",
    b2_list_file_versions: "listFiles",
};

/**
 * The request fields each call takes, from B2's native API reference (v3, "Request
 * Parameters" of each call): B2 refuses a body with any other field
 * (400 bad_json, "unknown field in ...Request: <field>").
 */
const FIELDS: Record<string, string[]> = {
    b2_create_bucket: ["accountId", "bucketName", "bucketType", "bucketInfo", "corsRules", "fileLockEnabled", "lifecycleRules", "replicationConfiguration", "defaultServerSideEncryption"],
    b2_update_bucket: ["accountId", "bucketId", "bucketType", "bucketInfo", "corsRules", "defaultRetention", "defaultServerSideEncryption", "fileLockEnabled", "lifecycleRules", "replicationConfiguration", "ifRevisionIs"],
    b2_delete_bucket: ["accountId", "bucketId"],
    b2_list_buckets: ["accountId", "bucketId", "bucketName", "bucketTypes"],
    b2_create_key: ["accountId", "capabilities", "keyName", "validDurationInSeconds", "bucketId", "namePrefix"],
    b2_delete_key: ["applicationKeyId"],
    b2_list_keys: ["accountId", "maxKeyCount", "startApplicationKeyId"],
    b2_get_upload_url: ["bucketId"],
    b2_hide_file: ["bucketId", "fileName"],
    b2_delete_file_version: ["fileName", "fileId", "bypassGovernance"],
    b2_list_file_versions: ["bucketId", "startFileName", "startFileId", "maxFileCount", "prefix", "delimiter"],
};

/** Object Lock (fileLockEnabled, defaultRetention) takes writeBucketRetentions beside writeBuckets (B2's "Object Lock" guide). */
const RETENTION_CAPABILITY = "writeBucketRetentions";

const id = (prefix: string) => `${prefix}${randomBytes(12).toString("hex")}`;

export async function startFakeB2(): Promise<FakeB2> {
    const accountId = id("acct");
    const master: Key = { applicationKeyId: accountId, applicationKey: randomBytes(16).toString("hex"), keyName: "master", capabilities: ALL, bucketId: null, namePrefix: null };
    const keys = new Map<string, Key>();
    const buckets = new Map<string, BucketState>();
    const tokens = new Map<string, Key>();
    const calls: string[] = [];
    let failures: { status: number; count: number } = { status: 0, count: 0 };
    const fake = {} as FakeB2;

    const server = http.createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on("data", (c) => chunks.push(c));
        req.on("end", () => {
            const send = (status: number, body: unknown) => {
                res.writeHead(status, { "Content-Type": "application/json", ...(status === 429 || status === 503 ? { "Retry-After": "0" } : {}) });
                res.end(JSON.stringify(body));
            };
            const fail = (status: number, code: string, message: string) => send(status, { status, code, message });
            const url = new URL(req.url ?? "/", "http://fake");
            // b2_download_file_by_name: GET <downloadUrl>/file/<bucketName>/<fileName>. Its reference: the
            // Authorization header is "not required if the bucket is public"; a private bucket's file without it
            // is refused (401); a name with no uploaded version is 404 not_found; a hidden file is not found either.
            const download = /^\/file\/([^/]+)\/(.+)$/.exec(url.pathname);
            if (req.method === "GET" && download) {
                calls.push("b2_download_file_by_name");
                const bucket = [...buckets.values()].find((b) => b.bucketName === download[1]);
                const fileName = decodeURIComponent(download[2]);
                if (!bucket) return fail(404, "not_found", `bucket ${download[1]} does not exist`);
                if (bucket.bucketType !== "allPublic" && !tokens.has(req.headers.authorization ?? "")) return fail(401, "unauthorized", "");
                const latest = bucket.versions.filter((v) => v.fileName === fileName).pop();
                if (!latest || latest.action !== "upload") return fail(404, "not_found", `File with such name does not exist: ${fileName}`);
                res.writeHead(200, { "Content-Type": "application/octet-stream", "X-Bz-Content-Sha1": createHash("sha1").update(latest.content).digest("hex") });
                return res.end(latest.content);
            }
            const name = url.pathname.split("/").pop() ?? "";
            calls.push(name);
            fake.onCall?.(name);

            if (name === "b2_authorize_account") {
                const [keyId, secret] = Buffer.from((req.headers.authorization ?? "").replace(/^Basic /, ""), "base64").toString().split(":");
                const key = keyId === master.applicationKeyId ? master : keys.get(keyId);
                if (!key || key.applicationKey !== secret) return fail(401, "bad_auth_token", "unknown application key");
                const token = id("tok");
                tokens.set(token, key);
                const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
                // b2_authorize_account v3 (https://www.backblaze.com/apidocs/b2-authorize-account): what the key may do
                // is in apiInfo.storageApi - capabilities, and bucketId, bucketName (null when that bucket is gone) and
                // namePrefix, each null for a key that is not restricted.
                const allowed = { capabilities: key.capabilities, bucketId: key.bucketId, bucketName: key.bucketId ? (buckets.get(key.bucketId)?.bucketName ?? null) : null, namePrefix: key.namePrefix };
                return send(200, { accountId, authorizationToken: token, apiInfo: { storageApi: { apiUrl: base, downloadUrl: base, ...allowed } } });
            }
            if (failures.count > 0) {
                failures.count--;
                return fail(failures.status, failures.status === 429 ? "too_many_requests" : "service_unavailable", "injected");
            }
            const key = tokens.get(req.headers.authorization ?? "");
            if (!key) return fail(401, "bad_auth_token", "unknown token");
            const needed = NEEDS[name];
            if (!needed) return fail(400, "bad_request", `unknown call ${name}`);
            if (!key.capabilities.includes(needed)) return fail(401, "unauthorized", `${needed} is not allowed for this key`);

            let body: any = {};
            if (name !== "b2_upload_file") {
                try {
                    body = JSON.parse(Buffer.concat(chunks).toString() || "{}");
                } catch {
                    return fail(400, "bad_request", "body is not JSON");
                }
            }
            const unknown = Object.keys(body).find((field) => !(FIELDS[name] ?? []).includes(field));
            if (unknown) return fail(400, "bad_json", `unknown field in ${name} request: ${unknown}`);
            if ((body.fileLockEnabled !== undefined || body.defaultRetention !== undefined) && !key.capabilities.includes(RETENTION_CAPABILITY)) {
                return fail(401, "unauthorized", `${RETENTION_CAPABILITY} is not allowed for this key`);
            }
            const bucketIdOf = () => (name === "b2_upload_file" ? url.searchParams.get("bucketId") : body.bucketId);
            const bucketId = bucketIdOf();
            if (key.bucketId && bucketId && bucketId !== key.bucketId) return fail(401, "unauthorized", "this key is restricted to another bucket");

            switch (name) {
                case "b2_create_bucket": {
                    if ([...buckets.values()].some((b) => b.bucketName === body.bucketName)) return fail(400, "duplicate_bucket_name", "bucket name already in use");
                    const bucket: BucketState = {
                        bucketId: id("b"),
                        bucketName: body.bucketName,
                        bucketType: body.bucketType,
                        lifecycleRules: body.lifecycleRules ?? [],
                        fileLockConfiguration: { value: { isFileLockEnabled: body.fileLockEnabled === true, defaultRetention: { mode: null, period: null } } },
                        versions: [],
                    };
                    buckets.set(bucket.bucketId, bucket);
                    return send(200, publicBucket(bucket));
                }
                case "b2_update_bucket": {
                    const bucket = buckets.get(body.bucketId);
                    if (!bucket) return fail(400, "bad_request", "no such bucket");
                    bucket.lifecycleRules = body.lifecycleRules ?? bucket.lifecycleRules;
                    if (body.defaultRetention !== undefined) {
                        const lock = (bucket.fileLockConfiguration as { value: { isFileLockEnabled: boolean; defaultRetention: unknown } }).value;
                        // A default retention needs Object Lock, which is turned on at creation (or later), never off.
                        if (!lock.isFileLockEnabled && body.fileLockEnabled !== true) return fail(400, "bad_request", "file lock is not enabled on this bucket");
                        lock.isFileLockEnabled = true;
                        lock.defaultRetention = body.defaultRetention;
                    }
                    return send(200, publicBucket(bucket));
                }
                case "b2_delete_bucket": {
                    const bucket = buckets.get(body.bucketId);
                    if (!bucket) return fail(400, "bad_bucket_id", "no such bucket");
                    if (bucket.versions.length > 0) return fail(400, "cannot_delete_non_empty_bucket", "bucket is not empty");
                    buckets.delete(body.bucketId);
                    return send(200, publicBucket(bucket));
                }
                case "b2_list_buckets": {
                    const visible = [...buckets.values()].filter((b) => (!key.bucketId || b.bucketId === key.bucketId) && (!body.bucketId || b.bucketId === body.bucketId));
                    return send(200, { buckets: visible.map(publicBucket) });
                }
                case "b2_create_key": {
                    const created: Key = { applicationKeyId: id("K"), applicationKey: randomBytes(16).toString("hex"), keyName: body.keyName, capabilities: body.capabilities, bucketId: body.bucketId ?? null, namePrefix: body.namePrefix ?? null };
                    keys.set(created.applicationKeyId, created);
                    return send(200, created);
                }
                case "b2_delete_key": {
                    const existing = keys.get(body.applicationKeyId);
                    if (!existing) return fail(400, "bad_request", "no such key");
                    keys.delete(body.applicationKeyId);
                    return send(200, { ...existing, applicationKey: undefined });
                }
                case "b2_list_keys":
                    return send(200, { keys: [...keys.values()].map((k) => ({ ...k, applicationKey: undefined })), nextApplicationKeyId: null });
                case "b2_get_upload_url":
                    if (!buckets.has(body.bucketId)) return fail(400, "bad_request", "no such bucket");
                    return send(200, { bucketId: body.bucketId, uploadUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/b2api/v3/b2_upload_file?bucketId=${body.bucketId}`, authorizationToken: req.headers.authorization });
                case "b2_upload_file": {
                    const bucket = buckets.get(bucketId!);
                    if (!bucket) return fail(400, "bad_request", "no such bucket");
                    // b2_upload_file's reference: X-Bz-File-Name, Content-Type and X-Bz-Content-Sha1 are required, and a
                    // body whose SHA-1 is not the one sent is refused (400 bad_request, "Sha1 did not match data received").
                    for (const header of ["x-bz-file-name", "content-type", "x-bz-content-sha1"]) {
                        if (!req.headers[header]) return fail(400, "bad_request", `missing header ${header}`);
                    }
                    const sha1 = String(req.headers["x-bz-content-sha1"]);
                    if (sha1 !== "do_not_verify" && sha1 !== createHash("sha1").update(Buffer.concat(chunks)).digest("hex")) return fail(400, "bad_request", "Sha1 did not match data received");
                    const version: FileVersion = { fileId: id("f"), fileName: decodeURIComponent(String(req.headers["x-bz-file-name"])), action: "upload", content: Buffer.concat(chunks).toString() };
                    bucket.versions.push(version);
                    return send(200, { fileId: version.fileId, fileName: version.fileName, action: "upload" });
                }
                case "b2_hide_file": {
                    const bucket = buckets.get(body.bucketId);
                    if (!bucket) return fail(400, "bad_request", "no such bucket");
                    const version: FileVersion = { fileId: id("f"), fileName: body.fileName, action: "hide", content: "" };
                    bucket.versions.push(version);
                    return send(200, { fileId: version.fileId, fileName: version.fileName, action: "hide" });
                }
                case "b2_delete_file_version": {
                    for (const bucket of buckets.values()) {
                        if (key.bucketId && bucket.bucketId !== key.bucketId) continue;
                        const index = bucket.versions.findIndex((v) => v.fileId === body.fileId && v.fileName === body.fileName);
                        if (index >= 0) {
                            bucket.versions.splice(index, 1);
                            return send(200, { fileId: body.fileId, fileName: body.fileName });
                        }
                    }
                    return fail(400, "file_not_present", "no such file version");
                }
                case "b2_list_file_versions": {
                    const bucket = buckets.get(body.bucketId);
                    if (!bucket) return fail(400, "bad_request", "no such bucket");
                    // https://www.backblaze.com/apidocs/b2-list-file-versions: names in alphabetical order, each
                    // name's versions newest first; maxFileCount 100 unless given (0 too), at most 10000; a page
                    // starts at the pair startFileName/startFileId (or the first name at or after startFileName)
                    // and names the next page's first version in nextFileName/nextFileId.
                    const max = body.maxFileCount === undefined || body.maxFileCount === 0 ? 100 : Number(body.maxFileCount);
                    if (!Number.isInteger(max) || max < 1 || max > 10000) return fail(400, "bad_request", `maxFileCount out of range: ${body.maxFileCount}`);
                    if (body.startFileId !== undefined && body.startFileName === undefined) return fail(400, "bad_request", "startFileName is required with startFileId");
                    const ordered = bucket.versions
                        .map((v, uploaded) => ({ v, uploaded }))
                        .sort((a, b) => (a.v.fileName < b.v.fileName ? -1 : a.v.fileName > b.v.fileName ? 1 : b.uploaded - a.uploaded))
                        .map(({ v }) => v);
                    let from = 0;
                    if (body.startFileName !== undefined) {
                        const exact = body.startFileId === undefined ? -1 : ordered.findIndex((v) => v.fileName === body.startFileName && v.fileId === body.startFileId);
                        from = exact >= 0 ? exact : ordered.findIndex((v) => v.fileName >= body.startFileName);
                        if (from < 0) from = ordered.length;
                    }
                    const page = ordered.slice(from, from + max);
                    const next = ordered[from + max];
                    return send(200, { files: page.map(({ content: _content, ...v }) => v), nextFileName: next?.fileName ?? null, nextFileId: next?.fileId ?? null });
                }
            }
            return fail(400, "bad_request", `unhandled ${name}`);
        });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    Object.assign(fake, {
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        accountId,
        master: { applicationKeyId: master.applicationKeyId, applicationKey: master.applicationKey },
        buckets,
        keys,
        calls,
        failNext: (status: number, count: number) => (failures = { status, count }),
        close: () => new Promise<void>((resolve) => server.close(() => resolve())),
    });
    return fake;
}

function publicBucket(b: BucketState) {
    return { accountId: undefined, bucketId: b.bucketId, bucketName: b.bucketName, bucketType: b.bucketType, lifecycleRules: b.lifecycleRules, fileLockConfiguration: b.fileLockConfiguration };
}
