import * as pulumi from "@pulumi/pulumi";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { B2Client, B2Error } from "../components/b2/client";
import { createHash } from "node:crypto";
import { B2ApplicationKey, B2Bucket, bucketProvider, fileProvider, keyProvider } from "../components/b2/resources";
import { renderBundle } from "../components/render/bundle";
import { CONTEXT } from "./policies/helpers";
import { judgeResources } from "../policies/engine/judge";
import { FakeB2, startFakeB2 } from "./helpers/fakeB2";

let b2: FakeB2;
const saved = { ...process.env };

beforeAll(async () => {
    b2 = await startFakeB2();
    process.env.B2_APPLICATION_KEY_ID = b2.master.applicationKeyId;
    process.env.B2_APPLICATION_KEY = b2.master.applicationKey;
    process.env.B2_AUTH_URL = b2.url;
});

afterAll(async () => {
    process.env = saved;
    await b2.close();
});

const HOST_CAPABILITIES = ["listBuckets", "listFiles", "readFiles", "writeFiles"];

describe("the B2 dynamic provider against the fake B2", () => {
    it("bucket: create, refresh, drift, update in place, replace on rename, idempotent delete", async () => {
        const inputs = { b2Kind: "bucket" as const, bucketName: "airlock-dev-sandbox-x1", retentionDays: 30 };
        const created = await bucketProvider.create(inputs);
        expect(b2.buckets.get(created.id)?.lifecycleRules).toEqual([{ fileNamePrefix: "", daysFromHidingToDeleting: 30, daysFromUploadingToHiding: null }]);
        expect(b2.buckets.get(created.id)?.bucketType).toBe("allPrivate");

        const read = await bucketProvider.read!(created.id, created.outs);
        expect(read.props).toMatchObject({ bucketName: inputs.bucketName, retentionDays: 30 });

        // Someone shortened retention in the B2 console: refresh sees it.
        (b2.buckets.get(created.id)!.lifecycleRules[0] as { daysFromHidingToDeleting: number }).daysFromHidingToDeleting = 1;
        expect((await bucketProvider.read!(created.id, created.outs)).props.retentionDays).toBe(1);

        expect(await bucketProvider.diff!(created.id, inputs, { ...inputs, retentionDays: 60 })).toMatchObject({ changes: true, replaces: [] });
        expect(await bucketProvider.diff!(created.id, inputs, { ...inputs, bucketName: "other" })).toMatchObject({ changes: true, replaces: ["bucketName"] });
        expect(await bucketProvider.diff!(created.id, inputs, { ...inputs })).toMatchObject({ changes: false });

        await bucketProvider.update!(created.id, inputs, { ...inputs, retentionDays: 60 });
        expect(b2.buckets.get(created.id)?.lifecycleRules).toEqual([{ fileNamePrefix: "", daysFromHidingToDeleting: 60, daysFromUploadingToHiding: null }]);

        await bucketProvider.delete!(created.id, created.outs);
        expect(b2.buckets.has(created.id)).toBe(false);
        await bucketProvider.delete!(created.id, created.outs); // already gone: no error
        expect(await bucketProvider.read!(created.id, created.outs)).toEqual({});
    });

    it("bucket: a destroy that deletes the data empties it first, page by page; a kept bucket that holds a version B2 refuses to delete", async () => {
        const inputs = { b2Kind: "bucket" as const, bucketName: "airlock-dev-gateway-e1", retentionDays: 30 };
        const versions = (bucketId: string, names: number, each: number) => {
            for (let n = 0; n < names; n++) {
                for (let v = 0; v < each; v++) b2.buckets.get(bucketId)!.versions.push({ fileId: `f-${bucketId}-${n}-${v}`, fileName: `snapshots/${n}`, action: v === each - 1 ? "hide" : "upload", content: "x" });
            }
        };
        const plain = await bucketProvider.create(inputs);
        versions(plain.id, 2, 2);
        await expect(bucketProvider.delete!(plain.id, plain.outs)).rejects.toThrow(/not empty/);
        expect(b2.buckets.get(plain.id)?.versions).toHaveLength(4);

        // Turning it on is an update, so `up` records it where destroy reads it; it never replaces the bucket.
        expect(await bucketProvider.diff!(plain.id, inputs, { ...inputs, emptyOnDelete: true })).toMatchObject({ changes: true, replaces: [] });
        const emptied = await bucketProvider.create({ ...inputs, bucketName: "airlock-dev-gateway-e2", emptyOnDelete: true });
        versions(emptied.id, 420, 3); // 1,260 versions: more than one page of the 1,000 the client asks for
        const listed = b2.calls.filter((c) => c === "b2_list_file_versions").length;
        await bucketProvider.delete!(emptied.id, emptied.outs);
        expect(b2.buckets.has(emptied.id)).toBe(false);
        // Two pages, then a pass that finds the bucket empty.
        expect(b2.calls.filter((c) => c === "b2_list_file_versions").length - listed).toBe(3);
    });

    it("bucket: emptying outlasts a host writing meanwhile (a version added is deleted too, one gone is no error), and gives up, naming the bucket, on one that never stops", async () => {
        const inputs = { b2Kind: "bucket" as const, bucketName: "airlock-dev-gateway-e3", retentionDays: 30, emptyOnDelete: true };
        const put = (bucketId: string, name: string) => b2.buckets.get(bucketId)!.versions.push({ fileId: `f-${bucketId}-${name}-${b2.calls.length}`, fileName: name, action: "upload", content: "x" });
        const racing = await bucketProvider.create(inputs);
        put(racing.id, "snapshots/b");
        put(racing.id, "snapshots/c");
        let deletes = 0;
        b2.onCall = (name) => {
            // As the first delete arrives (the listing done): a version that sorts before the listing's cursor,
            // and a listed one gone before its own delete.
            if (name === "b2_delete_file_version" && ++deletes === 1) {
                put(racing.id, "snapshots/a");
                const versions = b2.buckets.get(racing.id)!.versions;
                versions.splice(versions.findIndex((v) => v.fileName === "snapshots/c"), 1);
            }
        };
        try {
            await bucketProvider.delete!(racing.id, racing.outs);
            expect(b2.buckets.has(racing.id)).toBe(false);

            const endless = await bucketProvider.create({ ...inputs, bucketName: "airlock-dev-gateway-e4" });
            b2.onCall = (name) => name === "b2_list_file_versions" && put(endless.id, `snapshots/${b2.calls.length}`);
            await expect(bucketProvider.delete!(endless.id, endless.outs)).rejects.toThrow(`B2 bucket ${endless.id}: still not empty after 5 passes`);
            expect(b2.buckets.has(endless.id)).toBe(true);
        } finally {
            b2.onCall = undefined;
        }
    });

    it("key: create with its secret, refresh keeps it, any change replaces, idempotent delete", async () => {
        const bucket = await bucketProvider.create({ b2Kind: "bucket", bucketName: "airlock-dev-keys-x1", retentionDays: 30 });
        const inputs = { b2Kind: "applicationKey" as const, purpose: "host" as const, keyName: "airlock-dev-sandbox", capabilities: HOST_CAPABILITIES, bucketId: bucket.id };
        const created = await keyProvider.create(inputs);
        expect(created.outs.applicationKey).toMatch(/^[0-9a-f]{32}$/);
        expect(b2.keys.get(created.id)).toMatchObject({ capabilities: HOST_CAPABILITIES, bucketId: bucket.id });

        const read = await keyProvider.read!(created.id, created.outs);
        expect(read.props.applicationKey).toBe(created.outs.applicationKey);

        const diff = await keyProvider.diff!(created.id, inputs, { ...inputs, capabilities: [...HOST_CAPABILITIES, "deleteFiles"] });
        expect(diff).toMatchObject({ changes: true, replaces: ["capabilities"] });
        // A refresh that finds B2 listing the same capabilities in another order keeps the key.
        b2.keys.get(created.id)!.capabilities.reverse();
        const refreshed = await keyProvider.read!(created.id, created.outs);
        expect(refreshed.props.capabilities).not.toEqual(HOST_CAPABILITIES);
        expect(await keyProvider.diff!(created.id, refreshed.props, inputs)).toMatchObject({ changes: false, replaces: [] });

        await keyProvider.delete!(created.id, created.outs);
        expect(b2.keys.has(created.id)).toBe(false);
        await keyProvider.delete!(created.id, created.outs);
        expect(await keyProvider.read!(created.id, created.outs)).toEqual({});
    });
});

describe("the host code bundle on B2", () => {
    const upload = async (bucketType?: "allPublic") => {
        const bucketName = `airlock-dev-bundles-${createHash("sha1").update(String(Math.random())).digest("hex").slice(0, 10)}`;
        const bucket = await bucketProvider.create({ b2Kind: "bucket", bucketName, retentionDays: 30, ...(bucketType ? { bucketType } : {}) });
        const bundle = renderBundle();
        const inputs = { b2Kind: "file" as const, bucketId: bucket.id, fileName: bundle.name, contentType: "application/json", content: bundle.text, contentSha1: createHash("sha1").update(bundle.text).digest("hex") };
        return { bundle, inputs, file: await fileProvider.create(inputs) };
    };

    it("is uploaded with its SHA-1 to a public bucket, and anyone downloads exactly it, by the URL B2's download host gives", async () => {
        const { bundle, file } = await upload("allPublic");
        expect(file.outs.url).toBe(`${b2.url}/file/${b2.buckets.get(file.outs.bucketId)!.bucketName}/${bundle.name}`);
        const response = await fetch(file.outs.url); // no Authorization header
        expect(response.status).toBe(200);
        expect(createHash("sha256").update(Buffer.from(await response.arrayBuffer())).digest("hex")).toBe(bundle.sha256);
    });

    it("a private bucket's file is refused without a key (the backups' buckets stay allPrivate)", async () => {
        const { file } = await upload();
        expect((await fetch(file.outs.url)).status).toBe(401);
    });

    it("an upload whose body does not match the SHA-1 sent is refused, as B2 refuses it", async () => {
        const client = new B2Client({ applicationKeyId: b2.master.applicationKeyId, applicationKey: b2.master.applicationKey, authUrl: b2.url });
        const bucket = await bucketProvider.create({ b2Kind: "bucket", bucketName: "airlock-dev-bundles-sha1", retentionDays: 30, bucketType: "allPublic" });
        const target = await client.call("b2_get_upload_url", { bucketId: bucket.id });
        const response = await fetch(target.uploadUrl, {
            method: "POST",
            headers: { Authorization: target.authorizationToken, "X-Bz-File-Name": "x.json", "Content-Type": "application/json", "X-Bz-Content-Sha1": "0".repeat(40) },
            body: "{}",
        });
        expect(response.status).toBe(400);
        expect(((await response.json()) as { message: string }).message).toBe("Sha1 did not match data received");
    });

    it("a new bundle is a new file; deleting one already gone is not an error", async () => {
        const { inputs, file } = await upload("allPublic");
        expect(await fileProvider.diff!(file.id, inputs, { ...inputs, content: `${inputs.content} ` })).toMatchObject({ changes: true, replaces: ["content"] });
        expect(await fileProvider.diff!(file.id, inputs, { ...inputs })).toMatchObject({ changes: false });
        await fileProvider.delete!(file.id, file.outs);
        expect((await fetch(file.outs.url)).status).toBe(404);
        await fileProvider.delete!(file.id, file.outs);
    });
});

describe("the B2 client", () => {
    it("a wrong key is one clear 401 line", async () => {
        const client = new B2Client({ applicationKeyId: "nope", applicationKey: "wrong", authUrl: b2.url });
        await expect(client.accountId()).rejects.toThrow(/^B2 b2_authorize_account: 401 bad_auth_token: unknown application key$/);
    });

    it("retries 429 and 503 with backoff, then succeeds", async () => {
        const client = new B2Client({ ...b2.master, authUrl: b2.url }, { attempts: 4, baseMs: 5 });
        await client.accountId();
        const before = b2.calls.length;
        b2.failNext(429, 2);
        const bucket = await client.createBucket("airlock-retry-x1", []);
        expect(b2.calls.slice(before)).toEqual(["b2_create_bucket", "b2_create_bucket", "b2_create_bucket"]);
        expect(bucket.bucketName).toBe("airlock-retry-x1");
    });

    it("gives up after its attempts, naming the call", async () => {
        const client = new B2Client({ ...b2.master, authUrl: b2.url }, { attempts: 2, baseMs: 5 });
        await client.accountId();
        b2.failNext(503, 5);
        await expect(client.findBucket("x")).rejects.toThrow(/^B2 b2_list_buckets: 503 service_unavailable/);
        b2.failNext(503, 0);
    });

    it("a call the key may not make is a 401 naming the capability", async () => {
        const operator = new B2Client({ ...b2.master, authUrl: b2.url });
        const key = await operator.createKey("read-only", ["listBuckets"]);
        const limited = new B2Client({ applicationKeyId: key.applicationKeyId, applicationKey: key.applicationKey!, authUrl: b2.url });
        const err = await limited.createBucket("airlock-nope-x1", []).catch((e) => e);
        expect(err).toBeInstanceOf(B2Error);
        expect(err.message).toBe("B2 b2_create_bucket: 401 unauthorized: writeBuckets is not allowed for this key");
    });

    it("Object Lock as B2 takes it: created with file lock, then its default retention set by b2_update_bucket, with writeBucketRetentions", async () => {
        const operator = new B2Client({ ...b2.master, authUrl: b2.url });
        const bucket = await operator.createBucket("airlock-lock-x1", [], 30);
        expect(b2.buckets.get(bucket.bucketId)?.fileLockConfiguration).toEqual({ value: { isFileLockEnabled: true, defaultRetention: { mode: "compliance", period: { duration: 30, unit: "days" } } } });
        // B2 knows no defaultRetention in b2_create_bucket (what the client sent in one call before).
        const oneCall = await operator
            .call("b2_create_bucket", { accountId: await operator.accountId(), bucketName: "airlock-lock-x2", bucketType: "allPrivate", fileLockEnabled: true, defaultRetention: { mode: "compliance", period: { duration: 30, unit: "days" } } })
            .catch((e) => e);
        expect(oneCall.message).toBe("B2 b2_create_bucket: 400 bad_json: unknown field in b2_create_bucket request: defaultRetention");
        // An operator key with writeBuckets but not writeBucketRetentions cannot lock a bucket.
        const key = await operator.createKey("no-retention", ["listBuckets", "writeBuckets"]);
        const limited = new B2Client({ applicationKeyId: key.applicationKeyId, applicationKey: key.applicationKey!, authUrl: b2.url });
        const refused = await limited.createBucket("airlock-lock-x3", [], 30).catch((e) => e);
        expect(refused.message).toBe("B2 b2_create_bucket: 401 unauthorized: writeBucketRetentions is not allowed for this key");
    });
});

describe("a host key cannot destroy its backups", () => {
    it("uploads and hides, but cannot delete a version, the bucket, or touch another bucket; a prune key can delete", async () => {
        const operator = new B2Client({ ...b2.master, authUrl: b2.url });
        const bucket = await operator.createBucket("airlock-dev-host-x1", []);
        const other = await operator.createBucket("airlock-dev-other-x1", []);
        const hostKey = await operator.createKey("host", HOST_CAPABILITIES, bucket.bucketId);
        const host = new B2Client({ applicationKeyId: hostKey.applicationKeyId, applicationKey: hostKey.applicationKey!, authUrl: b2.url });

        const { uploadUrl, authorizationToken } = await host.call("b2_get_upload_url", { bucketId: bucket.bucketId });
        const upload = await fetch(uploadUrl, { method: "POST", headers: { Authorization: authorizationToken, "X-Bz-File-Name": "snapshots/1", "Content-Type": "b2/x-auto", "X-Bz-Content-Sha1": "do_not_verify" }, body: "data" });
        const uploaded = (await upload.json()) as { action: string; fileId: string };
        expect(uploaded.action).toBe("upload");
        expect((await host.call("b2_hide_file", { bucketId: bucket.bucketId, fileName: "snapshots/1" })).action).toBe("hide");

        await expect(host.call("b2_delete_file_version", { fileName: "snapshots/1", fileId: uploaded.fileId })).rejects.toThrow(/401 unauthorized: deleteFiles is not allowed/);
        await expect(host.deleteBucket(bucket.bucketId)).rejects.toThrow(/401 unauthorized: deleteBuckets is not allowed/);
        await expect(host.call("b2_list_file_versions", { bucketId: other.bucketId })).rejects.toThrow(/restricted to another bucket/);
        expect(b2.buckets.get(bucket.bucketId)?.versions.map((v) => v.action)).toEqual(["upload", "hide"]);

        const pruneKey = await operator.createKey("prune", ["listBuckets", "listFiles", "deleteFiles"], bucket.bucketId);
        const prune = new B2Client({ applicationKeyId: pruneKey.applicationKeyId, applicationKey: pruneKey.applicationKey!, authUrl: b2.url });
        await prune.call("b2_delete_file_version", { fileName: "snapshots/1", fileId: uploaded.fileId });
        expect(b2.buckets.get(bucket.bucketId)?.versions.map((v) => v.action)).toEqual(["hide"]);
    });
});

describe("B2 resources in a Pulumi program", () => {
    it("register with b2Kind and the gate judges them: a host key with deleteFiles fails, a short retention fails", async () => {
        const registered: { urn: string; type: string; name: string; inputs: Record<string, unknown> }[] = [];
        await pulumi.runtime.setMocks(
            {
                newResource: (args) => {
                    registered.push({ urn: `urn:pulumi:test::airlock::${args.type}::${args.name}`, type: args.type, name: args.name, inputs: args.inputs });
                    return { id: `${args.name}-id`, state: args.inputs };
                },
                call: (args) => args.inputs,
            },
            "airlock",
            "test",
            true,
        );
        await pulumi.runtime.runInPulumiStack(async () => {
            const bucket = new B2Bucket("sandbox-backups", { bucketName: "airlock-test-sandbox-x1", retentionDays: 7 });
            new B2ApplicationKey("sandbox-host-key", { purpose: "host", keyName: "sandbox", capabilities: [...HOST_CAPABILITIES, "deleteFiles"], bucketId: bucket.bucketId });
            new B2ApplicationKey("prune-key", { purpose: "operator", keyName: "prune", capabilities: ["deleteFiles", "listFiles"] });
            return {};
        });
        // Registrations finish asynchronously; wait for them like the offline runner does.
        await (require("@pulumi/pulumi/runtime/settings") as { waitForRPCs(): Promise<void> }).waitForRPCs();
        const dynamic = registered.filter((r) => r.type === "pulumi-nodejs:dynamic:Resource");
        expect(dynamic.map((r) => r.inputs.b2Kind).sort()).toEqual(["applicationKey", "applicationKey", "bucket"]);
        const findings = judgeResources(dynamic, { ...CONTEXT, retentionDays: 30 });
        expect(findings.map((f) => `${f.rule} ${f.resource?.split("::").pop()}`).sort()).toEqual([
            "b2-buckets-retain-hidden-versions sandbox-backups",
            "b2-host-keys-least-privilege sandbox-host-key",
        ]);
    });
});
