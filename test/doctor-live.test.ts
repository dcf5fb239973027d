import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { HOST_KEY_CAPABILITIES } from "../components/backupBucket";
import { B2Client } from "../components/b2/client";
import { OPERATOR_KEY_CAPABILITIES, operatorCapabilitiesFor, Needed } from "../components/b2/operatorKey";
import { bucketProvider, fileProvider, keyProvider } from "../components/b2/resources";
import { readStackFile } from "../components/config/load";
import { FakeB2, startFakeB2 } from "./helpers/fakeB2";
import { FakeTailscale, startFakeTailscale } from "./helpers/fakeTailscale";
import { editedStack, REPO, stackFile } from "./helpers/stacks";

let b2: FakeB2;
let ts: FakeTailscale;
const saved = { ...process.env };

beforeAll(async () => {
    [b2, ts] = await Promise.all([startFakeB2(), startFakeTailscale()]);
});
afterAll(async () => {
    process.env = saved;
    await Promise.all([b2.close(), ts.close()]);
});

const prod = () => readStackFile(stackFile("prod"));
const withObjectLock = () => readStackFile(editedStack("prod", (c) => (c["airlock:backup"].objectLockDays = 30)));
const master = () => new B2Client({ ...b2.master, authUrl: b2.url });

/** A new key in the fake B2, as the environment doctor reads it. */
async function keyEnv(capabilities: string[], bucketId?: string, namePrefix?: string): Promise<NodeJS.ProcessEnv> {
    const key = await master().createKey("operator", capabilities, bucketId, namePrefix);
    return { B2_APPLICATION_KEY_ID: key.applicationKeyId, B2_APPLICATION_KEY: key.applicationKey, B2_AUTH_URL: b2.url };
}

let serial = 0;
/** What up, refresh, an update, replace and destroy do with the kit's B2 resources, through its own providers. */
async function fullLifecycle(): Promise<void> {
    serial++;
    const backups = await bucketProvider.create({ b2Kind: "bucket", bucketName: `airlock-doctor-backups-${serial}`, retentionDays: 30, objectLockDays: 7 });
    await bucketProvider.read!(backups.id, backups.outs);
    await bucketProvider.update!(backups.id, backups.outs, { ...backups.outs, retentionDays: 60 });
    const key = await keyProvider.create({ b2Kind: "applicationKey", purpose: "host", keyName: "host", capabilities: HOST_KEY_CAPABILITIES, bucketId: backups.id });
    await keyProvider.read!(key.id, key.outs);
    const bundles = await bucketProvider.create({ b2Kind: "bucket", bucketName: `airlock-doctor-bundles-${serial}`, retentionDays: 30, bucketType: "allPublic" });
    const content = "{}";
    const file = await fileProvider.create({ b2Kind: "file", bucketId: bundles.id, fileName: "airlock-bundle-x.json", contentType: "application/json", content, contentSha1: createHash("sha1").update(content).digest("hex") });
    await fileProvider.delete!(file.id, file.outs);
    await keyProvider.delete!(key.id, key.outs);
    await bucketProvider.delete!(bundles.id, bundles.outs);
    await bucketProvider.delete!(backups.id, backups.outs);
}

describe("the operator key's capabilities: one list", () => {
    const all = OPERATOR_KEY_CAPABILITIES.map((c) => c.capability);

    it("is enough for everything the providers do (against the fake B2, which enforces each call's capability)", async () => {
        Object.assign(process.env, await keyEnv(operatorCapabilitiesFor(withObjectLock())));
        await expect(fullLifecycle()).resolves.toBeUndefined();
    });

    it.each(all)("and needs %s: without it, up, refresh or destroy fails", async (capability) => {
        Object.assign(process.env, await keyEnv(all.filter((c) => c !== capability)));
        await expect(fullLifecycle()).rejects.toThrow(/B2 \w+: 401 unauthorized/);
    });

    it("asks writeBucketRetentions only with Object Lock, and writeFiles/deleteFiles only when the stack uploads the bundle", () => {
        expect(operatorCapabilitiesFor(prod())).not.toContain("writeBucketRetentions");
        expect(operatorCapabilitiesFor(withObjectLock())).toContain("writeBucketRetentions");
        const mirrored = readStackFile(editedStack("prod", (c) => (c["airlock:hosts"] = { bundleUrl: "https://mirror.example.com/airlock" })));
        expect(operatorCapabilitiesFor(mirrored)).not.toEqual(expect.arrayContaining(["writeFiles"]));
        expect(operatorCapabilitiesFor(mirrored)).not.toContain("deleteFiles");
        expect(operatorCapabilitiesFor()).toEqual(all);
    });

    it("is the table the README shows, row for row", () => {
        const readme = fs.readFileSync(path.join(REPO, "README.md"), "utf8");
        const table = readme.split("<!-- operator-key-capabilities -->\n")[1].split("\n\n")[0].split("\n").slice(2);
        const when: Record<Needed, string> = { always: "always", bundleUpload: "unless `airlock:hosts.bundleUrl` is set", objectLock: "when `airlock:backup.objectLockDays` is set" };
        const rows = table.map((row) => row.split("|").slice(1, -1).map((cell) => cell.trim()));
        expect(rows).toEqual(OPERATOR_KEY_CAPABILITIES.map((c) => [`\`${c.capability}\``, c.calls.map((call) => `\`${call}\``).join(", "), when[c.needed]]));
    });
});

describe("the Tailscale stand-in is as strict as Tailscale", () => {
    const post = (body: string, type: string) => fetch(`${ts.url}/api/v2/oauth/token`, { method: "POST", headers: { "Content-Type": type }, body });

    it("exchanges only form-encoded client credentials, and refuses a wrong secret", async () => {
        const { clientId, clientSecret } = ts.addOAuthClient(["policy_file:read"], []);
        expect((await post(JSON.stringify({ grant_type: "client_credentials", client_id: clientId, client_secret: clientSecret }), "application/json")).status).toBe(400);
        expect((await post(new URLSearchParams({ client_id: clientId, client_secret: clientSecret }).toString(), "application/x-www-form-urlencoded")).status).toBe(400);
        expect((await post(new URLSearchParams({ grant_type: "client_credentials", client_id: clientId, client_secret: `${clientSecret}x` }).toString(), "application/x-www-form-urlencoded")).status).toBe(401);
        const ok = await post(new URLSearchParams({ grant_type: "client_credentials", client_id: clientId, client_secret: clientSecret }).toString(), "application/x-www-form-urlencoded");
        expect(await ok.json()).toMatchObject({ token_type: "Bearer", expires_in: 3600, access_token: expect.stringMatching(/^tskey-api-/) });
    });

    it("answers 401 without a valid bearer token, and HuJSON unless JSON is asked for", async () => {
        const acl = `${ts.url}/api/v2/tailnet/-/acl`;
        expect((await fetch(acl)).status).toBe(401);
        expect((await fetch(acl, { headers: { Authorization: `Bearer ${ts.apiKey}x` } })).status).toBe(401);
        const hujson = await fetch(acl, { headers: { Authorization: `Bearer ${ts.apiKey}` } });
        expect(hujson.headers.get("content-type")).toBe("application/hujson");
        const text = await hujson.text();
        expect(() => JSON.parse(text)).toThrow();
    });
});
