import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { HOST_KEY_CAPABILITIES } from "../components/backupBucket";
import { B2Client } from "../components/b2/client";
import { OPERATOR_KEY_CAPABILITIES, operatorCapabilitiesFor, Needed } from "../components/b2/operatorKey";
import { bucketProvider, fileProvider, keyProvider } from "../components/b2/resources";
import { readStackFile } from "../components/config/load";
import type { StackConfig } from "../components/config/schema";
import { renderTailnetPolicy, TailnetPolicy } from "../components/render/tailnetPolicy";
import { MIN_PULUMI_CLI } from "../cli/doctor";
import { b2OperatorKeyCheck, tailnetPolicyCheck } from "../cli/doctorLive";
import { airlockAsync } from "./helpers/cli";
import { FakeB2, startFakeB2 } from "./helpers/fakeB2";
import { FakeTailscale, startFakeTailscale } from "./helpers/fakeTailscale";
import { editedStack, REPO, stackFile, tempDir, withOwnKeys } from "./helpers/stacks";

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
const deletingData = () => readStackFile(editedStack("dev", (c) => (c["airlock:deleteDataOnDestroy"] = true)));
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
    // A stack whose destroy deletes its backups: the bucket is emptied first.
    const doomed = await bucketProvider.create({ b2Kind: "bucket", bucketName: `airlock-doctor-doomed-${serial}`, retentionDays: 30, emptyOnDelete: true });
    await fileProvider.create({ b2Kind: "file", bucketId: doomed.id, fileName: "snapshots/1", contentType: "application/octet-stream", content, contentSha1: createHash("sha1").update(content).digest("hex") });
    await bucketProvider.delete!(doomed.id, doomed.outs);
}

describe("the operator key's capabilities: one list", () => {
    const all = OPERATOR_KEY_CAPABILITIES.map((c) => c.capability);

    it("is enough for everything the providers do (against the fake B2, which enforces each call's capability)", async () => {
        // What each stack that needs the most asks for, together: no capability of the list is left out.
        Object.assign(process.env, await keyEnv([...new Set([...operatorCapabilitiesFor(withObjectLock()), ...operatorCapabilitiesFor(deletingData())])]));
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
        expect(operatorCapabilitiesFor(prod())).not.toContain("listFiles");
        expect(operatorCapabilitiesFor(deletingData())).toEqual(expect.arrayContaining(["listFiles", "deleteFiles"]));
        const mirroredDeleting = readStackFile(editedStack("dev", (c) => Object.assign(c, { "airlock:hosts": { bundleUrl: "https://mirror.example.com/airlock" }, "airlock:deleteDataOnDestroy": true })));
        expect(operatorCapabilitiesFor(mirroredDeleting)).toEqual(expect.arrayContaining(["listFiles", "deleteFiles"]));
        expect(operatorCapabilitiesFor()).toEqual(all);
    });

    it("is the table docs/deploy.md shows, row for row", () => {
        const readme = fs.readFileSync(path.join(REPO, "docs/deploy.md"), "utf8");
        const table = readme.split("<!-- operator-key-capabilities -->\n")[1].split("\n\n")[0].split("\n").slice(2);
        const when: Record<Needed, string> = {
            always: "always",
            bundleUpload: "unless `airlock:hosts.bundleUrl` is set",
            objectLock: "when `airlock:backup.objectLockDays` is set",
            deleteData: "when `airlock:deleteDataOnDestroy` is true",
        };
        const rows = table.map((row) => row.split("|").slice(1, -1).map((cell) => cell.trim()));
        expect(rows).toEqual(OPERATOR_KEY_CAPABILITIES.map((c) => [`\`${c.capability}\``, c.calls.map((call) => `\`${call}\``).join(", "), c.needed.map((n) => when[n]).join(", or ")]));
    });
});

describe("doctor: the B2 operator key", () => {
    it("passes a key with every capability the stack needs", async () => {
        const env = await keyEnv(operatorCapabilitiesFor(prod()));
        const check = await b2OperatorKeyCheck(env, prod());
        expect(check).toMatchObject({ ok: true, required: true });
        expect(JSON.stringify(check)).not.toContain(env.B2_APPLICATION_KEY);
    });

    it("fails a key lacking one, naming it and the call that needs it", async () => {
        const env = await keyEnv(operatorCapabilitiesFor(prod()).filter((c) => c !== "deleteKeys"));
        const check = await b2OperatorKeyCheck(env, prod());
        expect(check).toMatchObject({ ok: false, required: true, findings: ["lacks deleteKeys (b2_delete_key)"] });
        expect(check.fix).toContain("b2 key create airlock-operator listBuckets,writeBuckets,deleteBuckets,listKeys,writeKeys,deleteKeys,writeFiles,deleteFiles");
        expect(JSON.stringify(check)).not.toContain(env.B2_APPLICATION_KEY);
    });

    it("fails a key without writeBucketRetentions for a stack with Object Lock only", async () => {
        const env = await keyEnv(operatorCapabilitiesFor(prod()));
        expect((await b2OperatorKeyCheck(env, prod())).ok).toBe(true);
        expect((await b2OperatorKeyCheck(env, withObjectLock())).findings).toEqual(["lacks writeBucketRetentions (b2_create_bucket, b2_update_bucket)"]);
    });

    it.each([
        ["a bucket", true, undefined, /^restricted to the bucket airlock-doctor-only: it cannot create the stack's buckets/],
        ["a name prefix", false, "backups/", /^restricted to file names starting with "backups\/": it cannot create the stack's buckets/],
    ])("fails a key restricted to %s, every capability or not", async (_, toBucket, prefix, finding) => {
        const bucket = toBucket ? await master().createBucket(`airlock-doctor-only`, []) : undefined;
        const check = await b2OperatorKeyCheck(await keyEnv(operatorCapabilitiesFor(prod()), bucket?.bucketId, prefix), prod());
        expect(check.ok).toBe(false);
        expect(check.findings).toEqual([expect.stringMatching(finding)]);
    });

    it("fails a key B2 does not know, and is not run without one", async () => {
        const unknown = await b2OperatorKeyCheck({ B2_APPLICATION_KEY_ID: "K005unknown", B2_APPLICATION_KEY: ["K005", "x".repeat(27)].join(""), B2_AUTH_URL: b2.url }, prod());
        expect(unknown).toMatchObject({ ok: false, required: true, detail: "B2 did not authorize the key: B2 b2_authorize_account: 401 bad_auth_token: unknown application key" });
        expect(await b2OperatorKeyCheck({}, prod())).toMatchObject({ ok: false, required: false, skipped: true, detail: expect.stringMatching(/^not run: /), fix: expect.stringContaining("export B2_APPLICATION_KEY_ID") });
        // Before the key exists: the line that makes one with what this stack needs.
        expect((await b2OperatorKeyCheck({}, deletingData())).fix).toContain("b2 key create airlock-operator listBuckets,writeBuckets,deleteBuckets,listKeys,writeKeys,deleteKeys,writeFiles,listFiles,deleteFiles)");
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

describe("doctor: the tailnet policy when airlock does not manage it", () => {
    let cfg: StackConfig;
    let rendered: TailnetPolicy;
    let gatewayTag: string;
    let sandboxTag: string;
    const env = () => ({ TAILSCALE_API_KEY: ts.apiKey, TAILSCALE_TAILNET: ts.tailnet, TAILSCALE_BASE_URL: ts.url });
    const check = (environment: NodeJS.ProcessEnv = env(), config = cfg) => tailnetPolicyCheck(environment, config, stackFile("prod"), "prod");

    /** A company policy with the stack's rendered policy merged in. */
    const merged = () => ({
        groups: { "group:eng": ["alice@example.com"] },
        tagOwners: { "tag:corp-web": ["group:eng"], ...structuredClone(rendered.tagOwners) } as Record<string, string[]>,
        grants: [{ src: ["group:eng"], dst: ["tag:corp-web"], ip: ["tcp:443"] }, ...structuredClone(rendered.grants)],
        tests: [{ src: "alice@example.com", accept: ["tag:corp-web:443"] }, ...structuredClone(rendered.tests)],
    });

    beforeAll(() => {
        cfg = prod();
        ({ gatewayTag, sandboxTag } = cfg.tailnet);
        rendered = renderTailnetPolicy(cfg.tailnet);
    });
    beforeEach(() => {
        ts.policy = merged();
    });

    it("is a pass for a policy that merged the rendered one (API key)", async () => {
        expect(await check()).toMatchObject({ ok: true, required: true, detail: `the live policy of ${ts.tailnet} has the stack's tags, grants and tests` });
    });

    it.each<[string, (p: ReturnType<typeof merged>) => void, string]>([
        ["a tag missing from tagOwners", (p) => delete p.tagOwners[sandboxTag], "tagOwners has no tag:airlock-prod-sandbox (Tailscale refuses a key or a rule for an undefined tag)"],
        ["a tag without the stack's owners", (p) => (p.tagOwners[gatewayTag] = ["group:eng"]), `tagOwners["tag:airlock-prod-gateway"] lacks autogroup:admin`],
        ["a grant missing", (p) => p.grants.splice(1, 1), "no grant gives tag:airlock-prod-gateway -> tag:airlock-prod-sandbox tcp:22"],
        ["a test missing", (p) => p.tests.splice(2, 1), "tests lack, for tag:airlock-prod-sandbox (udp): accept tag:airlock-prod-gateway:53; deny tag:airlock-prod-gateway:123"],
        ["a grant opening sandbox -> gateway:22", (p) => p.grants.push({ src: ["tag:airlock-prod-sandbox"], dst: ["tag:airlock-prod-gateway"], ip: ["tcp:22"] }), "grants[4] lets tag:airlock-prod-sandbox reach tag:airlock-prod-gateway:22 (tcp), which the stack's tests deny"],
        ["a wildcard grant", (p) => p.grants.push({ src: ["*"], dst: ["*"], ip: ["*"] }), "grants[4] lets tag:airlock-prod-sandbox reach tag:airlock-prod-gateway:22, tag:airlock-prod-gateway:80"],
        ["a legacy ACL opening the tailnet's addresses", (p) => Object.assign(p, { acls: [{ action: "accept", src: ["tag:airlock-prod-sandbox"], dst: ["100.64.0.0/10:*"] }] }), "acls[0] lets tag:airlock-prod-sandbox reach 100.64.0.1:22, 100.127.255.254:443 (tcp)"],
    ])("fails %s, saying so", async (_, edit, finding) => {
        const policy = merged();
        edit(policy);
        ts.policy = policy;
        const result = await check();
        expect(result).toMatchObject({ ok: false, required: true });
        expect(result.findings).toEqual(expect.arrayContaining([expect.stringContaining(finding)]));
        expect(result.fix).toBe("merge out/prod/tailnet/policy.hujson (airlock plan --stack prod writes it) into the tailnet policy file: its tagOwners, grants and tests");
    });

    it("passes an OAuth client that may mint keys for both tags, through a tag that owns them", async () => {
        const policy = merged();
        for (const tag of [gatewayTag, sandboxTag]) policy.tagOwners[tag].push("tag:airlock-ci");
        ts.policy = policy;
        const client = ts.addOAuthClient(["auth_keys", "policy_file:read"], ["tag:airlock-ci"]);
        const oauth = { TAILSCALE_OAUTH_CLIENT_ID: client.clientId, TAILSCALE_OAUTH_CLIENT_SECRET: client.clientSecret, TAILSCALE_TAILNET: ts.tailnet, TAILSCALE_BASE_URL: ts.url };
        expect(await check(oauth)).toMatchObject({ ok: true });
        expect(ts.calls.slice(-3)).toEqual(["POST /api/v2/oauth/token", `GET /api/v2/tailnet/${ts.tailnet}/acl`, `GET /api/v2/tailnet/${ts.tailnet}/keys/${client.clientId}`]);
    });

    it("fails an OAuth client that cannot tag the sandbox's key, or lacks auth_keys", async () => {
        const client = ts.addOAuthClient(["policy_file:read"], [gatewayTag]);
        const result = await check({ TAILSCALE_OAUTH_CLIENT_ID: client.clientId, TAILSCALE_OAUTH_CLIENT_SECRET: client.clientSecret, TAILSCALE_TAILNET: ts.tailnet, TAILSCALE_BASE_URL: ts.url });
        expect(result.findings).toEqual([
            "the OAuth client lacks the auth_keys scope the hosts' join keys are made with",
            `the OAuth client cannot mint join keys for ${sandboxTag}: its tags are ${gatewayTag}, and none of them is ${sandboxTag} or owns it in tagOwners`,
        ]);
        expect(JSON.stringify(result)).not.toContain(client.clientSecret);
    });

    it("fails when the policy cannot be read: an OAuth client without policy_file:read, a wrong key", async () => {
        const client = ts.addOAuthClient(["auth_keys"], [gatewayTag, sandboxTag]);
        const scoped = await check({ TAILSCALE_OAUTH_CLIENT_ID: client.clientId, TAILSCALE_OAUTH_CLIENT_SECRET: client.clientSecret, TAILSCALE_TAILNET: ts.tailnet, TAILSCALE_BASE_URL: ts.url });
        expect(scoped).toMatchObject({ ok: false, required: true, detail: `cannot read the live tailnet policy: Tailscale GET /api/v2/tailnet/${ts.tailnet}/acl: 403 calling actor does not have enough permissions to perform this function` });
        const wrong = await check({ ...env(), TAILSCALE_API_KEY: `${ts.apiKey}x` });
        expect(wrong.detail).toBe(`cannot read the live tailnet policy: Tailscale GET /api/v2/tailnet/${ts.tailnet}/acl: 401 API token invalid`);
        expect(JSON.stringify(wrong)).not.toContain(ts.apiKey);
    });

    it("is skipped when airlock manages the policy, and not run without credentials; neither calls Tailscale", async () => {
        const before = ts.calls.length;
        expect(await check(env(), readStackFile(stackFile("dev")))).toEqual({
            name: "tailnet policy readiness",
            ok: true,
            required: false,
            skipped: true,
            detail: "not needed: airlock:tailnet.manageAcl is true, so airlock manages the tailnet policy itself",
        });
        expect(await check({})).toMatchObject({ ok: false, required: false, skipped: true, fix: expect.stringContaining("export TAILSCALE_API_KEY") });
        expect(ts.calls.length).toBe(before);
    });
});

describe("airlock doctor --json with the live checks", () => {
    /** Everything the local checks want, so the exit code is the live checks'. */
    async function readyEnv(): Promise<NodeJS.ProcessEnv> {
        const bin = tempDir("bin");
        fs.writeFileSync(path.join(bin, "pulumi"), `#!/bin/sh\ncase "$1" in version) echo v${MIN_PULUMI_CLI.join(".")} ;; whoami) echo ops ;; esac\n`, { mode: 0o755 });
        fs.symlinkSync("/usr/bin/ssh", path.join(bin, "ssh"));
        const hcloud = ["hc", "DOCTORTEST", "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdef"].join("_");
        return { PATH: `${path.dirname(process.execPath)}:${bin}`, HCLOUD_TOKEN: hcloud, TAILSCALE_API_KEY: ts.apiKey, TAILSCALE_TAILNET: ts.tailnet, TAILSCALE_BASE_URL: ts.url, ...(await keyEnv(operatorCapabilitiesFor(prod()))) };
    }
    const prodPolicy = () => renderTailnetPolicy(prod().tailnet);
    /** The repository's prod with keys of this run's own, so only the live checks decide. */
    const ownProd = () => {
        const dir = tempDir("doctor-stacks");
        editedStack("prod", withOwnKeys, dir);
        return ["--stacks-dir", dir];
    };

    it("exits 0 when the key and the live policy are ready, and reports both checks", async () => {
        const stacks = ownProd();
        ts.policy = prodPolicy();
        const env = await readyEnv();
        const result = await airlockAsync([...stacks, "doctor", "--stack", "prod", "--json"], { env });
        expect(result.status, result.stderr).toBe(0);
        const report = JSON.parse(result.stdout);
        expect(report.ok).toBe(true);
        const byName = Object.fromEntries(report.checks.map((c: { name: string }) => [c.name, c]));
        expect(byName["B2 operator key capabilities"]).toMatchObject({ ok: true, required: true });
        expect(byName["tailnet policy readiness"]).toMatchObject({ ok: true, required: true });
        for (const value of [env.B2_APPLICATION_KEY!, ts.apiKey, env.HCLOUD_TOKEN!]) expect(result.stdout + result.stderr).not.toContain(value);
    });

    it("exits 1 naming what is missing, in --json and in text", async () => {
        const stacks = ownProd();
        const policy = prodPolicy();
        policy.tests.pop();
        ts.policy = policy;
        const env = { ...(await readyEnv()), ...(await keyEnv(operatorCapabilitiesFor(prod()).filter((c) => c !== "deleteKeys"))) };
        const json = await airlockAsync([...stacks, "doctor", "--stack", "prod", "--json"], { env });
        expect(json.status).toBe(1);
        const failed = JSON.parse(json.stdout).checks.filter((c: { ok: boolean }) => !c.ok);
        expect(failed.map((c: { name: string; findings: string[] }) => [c.name, c.findings.length])).toEqual([
            ["B2 operator key capabilities", 1],
            ["tailnet policy readiness", 1],
        ]);
        const text = await airlockAsync([...stacks, "doctor", "--stack", "prod"], { env });
        expect(text.status).toBe(1);
        expect(text.stdout).toContain("FAIL B2 operator key capabilities: the key cannot do everything the stack's up, refresh and destroy do\n     - lacks deleteKeys (b2_delete_key)\n");
        expect(text.stdout).toMatch(/^FAIL tailnet policy readiness: .*\n {5}- tests lack, for /m);
    });

    it("does not fail a machine that only lacks the live checks' credentials", async () => {
        const { B2_APPLICATION_KEY_ID: _id, B2_APPLICATION_KEY: _key, TAILSCALE_API_KEY: _ts, ...env } = await readyEnv();
        const dir = tempDir("doctor-stacks");
        editedStack("prod", (c) => {
            withOwnKeys(c);
            c["tailscale:apiKey"] = { secure: "x" };
        }, dir);
        const result = await airlockAsync(["--stacks-dir", dir, "doctor", "--stack", "prod", "--json"], { env: { ...env, B2_APPLICATION_KEY_ID: "", B2_APPLICATION_KEY: "" } });
        const checks = JSON.parse(result.stdout).checks;
        // The existing check fails for the missing B2 credentials; the live checks are skipped, not failed.
        expect(checks.filter((c: { ok: boolean; required: boolean }) => c.required && !c.ok).map((c: { name: string }) => c.name)).toEqual(["B2 credentials (operator)"]);
        expect(checks.filter((c: { skipped?: boolean }) => c.skipped).map((c: { name: string }) => c.name)).toEqual(["B2 operator key capabilities", "tailnet policy readiness"]);
        expect(result.status).toBe(1);
    });
});
