import { execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as https from "node:https";
import type { AddressInfo } from "node:net";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { forkStack } from "../cli/fork";
import { planStack, StackPlan } from "../cli/offline";
import { collectArtifacts } from "../cli/plan";
import { readStackFile } from "../components/config/load";
import { BUNDLE_FILES_PATH, BUNDLE_SOURCE_PATH, BundledFile, installedFiles, renderBundle } from "../components/render/bundle";
import { parseCloudInit, parseUserData } from "../policies/engine/cloudInit";
import { decodeUserData } from "../policies/engine/userData";
import { HETZNER_USER_DATA_LIMIT, userDataLength } from "../policies/rules/cloud-init-within-hetzner-user-data-limit";
import { debianRootfs, extractRootfs } from "./helpers/nspawn";
import { DEPLOYED_BUNDLE_URL, deployedValues, editedStack, fakeTailnetKey, REPO, renderHosts, SHIPPED_STACKS, stackFile, tempDir, testHostKey } from "./helpers/stacks";
import { isRoot, toolsAvailable } from "./helpers/tools";

/**
 * Hetzner refuses user_data over 32,768 characters, so the host code travels as one
 * bundle named by its sha256 (components/render/bundle.ts): the same for every stack,
 * with no per-stack value; user_data keeps each bundled file's template and values.
 */

const SERVER = "hcloud:index/server:Server";
const DYNAMIC = "pulumi-nodejs:dynamic:Resource";

/** A stack unlike the shipped ones in every value a stack sets: none of them may reach the bundle. */
const ODD = {
    prefix: "zq-odd-7x",
    adminUser: "opsodd7x",
    agentUser: "agodd7x",
    uid: 1777,
    env: "ODD7X_TOKEN",
    domain: "odd7x.example.org",
    tag: "tag:odd7x-gw",
};
const oddStack = () =>
    editedStack("prod", (c) => {
        c["airlock:prefix"] = ODD.prefix;
        c["airlock:gateway"].adminUser = ODD.adminUser;
        c["airlock:agent"] = { ...c["airlock:agent"], user: ODD.agentUser, uid: ODD.uid, envAllowlist: ["GITHUB_TOKEN", ODD.env] };
        c["airlock:dns"] = { ...c["airlock:dns"], allowlist: [...(c["airlock:dns"]?.allowlist ?? []), ODD.domain] };
        c["airlock:tailnet"].gatewayTag = ODD.tag;
    });

const upPlan = (file: string, stack: string) => planStack(file, stack, { mode: "up", deployed: deployedValues });

describe("the host code bundle", () => {
    let forkFile: string;
    const plans = new Map<string, StackPlan>();

    beforeAll(async () => {
        const dir = tempDir("bundle-fork");
        for (const stack of SHIPPED_STACKS) fs.copyFileSync(stackFile(stack), path.join(dir, `Pulumi.${stack}.yaml`));
        forkFile = (await forkStack({ stacksDir: dir, customer: "acme", from: "dev" })).file;
        for (const [name, file, stack] of [["dev", stackFile("dev"), "dev"], ["prod", stackFile("prod"), "prod"], ["fork", forkFile, "acme"], ["odd", oddStack(), "prod"]]) {
            plans.set(name, await upPlan(file, stack));
        }
    }, 240_000);

    const uploaded = (plan: StackPlan) => {
        const files = plan.resources.filter((r) => r.type === DYNAMIC && r.inputs.b2Kind === "file");
        expect(files).toHaveLength(1);
        return files[0].inputs as { fileName: string; content: string; contentSha1: string };
    };

    it("is the same object for every stack (the shipped ones, a fresh fork, one unlike them in every value), and holds none of their values", () => {
        // The bucket it goes to is the stack's own; the object is the same.
        const objects = [...plans.values()].map(uploaded).map(({ fileName, content, contentSha1 }) => ({ fileName, content, contentSha1 }));
        for (const object of objects) expect(object).toEqual(objects[0]);
        const { text } = renderBundle();
        expect(objects[0].content).toBe(text);
        expect(objects[0].contentSha1).toBe(createHash("sha1").update(text).digest("hex"));
        for (const value of [ODD.prefix, ODD.adminUser, ODD.agentUser, String(ODD.uid), ODD.env, ODD.domain, ODD.tag, "acme"]) expect(text, value).not.toContain(value);
        // Nor any deploy-time secret: the join key and the sandbox's host key.
        expect(text).not.toContain(fakeTailnetKey());
        expect(text).not.toContain(testHostKey().privateKeyOpenssh.split("\n")[1]);
    });

    it("is named by its sha256 in each server's user_data, which stays under 16 KiB (Hetzner accepts 32,768 characters) with every deploy-time value in it", () => {
        const sizes: string[] = [];
        for (const [name, plan] of plans) {
            const object = uploaded(plan);
            for (const server of plan.resources.filter((r) => r.type === SERVER)) {
                const userData = String(server.inputs.userData);
                const doc = parseUserData(userData, true);
                const source = JSON.parse(doc.files.find((f) => f.path === BUNDLE_SOURCE_PATH)!.content);
                expect(source).toEqual({ url: DEPLOYED_BUNDLE_URL, sha256: createHash("sha256").update(object.content).digest("hex") });
                expect(object.fileName).toBe(`airlock-bundle-${source.sha256}.json`);
                expect(decodeUserData(userData).text).toContain(fakeTailnetKey());
                sizes.push(`${name} ${server.name}: ${[...userData].length}`);
                expect([...userData].length, `${name} ${server.name}`).toBeLessThanOrEqual(16 * 1024);
                expect(16 * 1024).toBeLessThan(HETZNER_USER_DATA_LIMIT);
            }
        }
        console.log(`user_data sizes with deploy-time values:\n  ${sizes.join("\n  ")}`);
        // What `airlock plan` prints (each deploy-time value at its longest) is never less than what a deploy sends.
        const atMost = (name: string, role: string) => userDataLength(parseCloudInit(collectArtifacts(plans.get(name)!).get(role)!["cloud-init.yaml"]));
        for (const [name, plan] of plans) {
            for (const role of ["gateway", "sandbox"]) {
                const sent = String(plan.resources.find((r) => r.type === SERVER && r.name.endsWith(`-${role}-server`))!.inputs.userData);
                expect([...sent].length, `${name} ${role}`).toBeLessThanOrEqual(atMost(name, role));
            }
        }
        // docs/deploy.md's numbers are the plan's, to the nearest hundred: the bundle's sha256 is in the
        // document, and each new bundle moves its gzip by a few characters either way.
        const readme = fs.readFileSync(path.join(REPO, "docs/deploy.md"), "utf8").replace(/\s+/g, " ");
        const said = /come to about ([\d,]+) \(dev gateway\), ([\d,]+) \(dev sandbox\), ([\d,]+) and ([\d,]+) \(prod\) characters at most/.exec(readme);
        expect(said, "docs/deploy.md should say: come to about N (dev gateway), N (dev sandbox), N and N (prod) characters at most").not.toBeNull();
        const measured = [atMost("dev", "gateway"), atMost("dev", "sandbox"), atMost("prod", "gateway"), atMost("prod", "sandbox")];
        const rounded = measured.map((n) => (Math.round(n / 100) * 100).toLocaleString("en")).join(", ");
        for (const [i, n] of measured.entries()) expect(Math.abs(Number(said![i + 1].replace(/,/g, "")) - n), `docs/deploy.md's numbers should be about ${rounded}; the plan says ${measured.join(", ")}`).toBeLessThanOrEqual(100);
    });

    it("with the files user_data names, installs exactly what the hosts render (the plan writes them out)", () => {
        for (const stack of SHIPPED_STACKS) {
            const rendered = renderHosts(readStackFile(stackFile(stack)));
            for (const role of ["gateway", "sandbox"] as const) {
                const doc = parseCloudInit(rendered[role].cloudInit);
                const whole = doc.files.map((f) => f.path);
                const bundled = installedFiles(JSON.parse(doc.files.find((f) => f.path === BUNDLE_FILES_PATH)!.content) as BundledFile[], renderBundle().text);
                // Every file once: whole in user_data, or from the bundle.
                expect(bundled.filter((f) => whole.includes(f.path))).toEqual([]);
                const installed = new Map([...doc.files.map((f) => [f.path, f.content] as const), ...bundled.map((f) => [f.path, f.content] as const)]);
                for (const file of rendered[role].files) expect(installed.get(file.path), `${stack} ${role} ${file.path}`).toBe(file.content);
            }
        }
    });

    it("a stack that names its own mirror uploads nothing and points the hosts at the mirror", async () => {
        const plan = await upPlan(
            editedStack("dev", (c) => (c["airlock:hosts"] = { bundleUrl: "https://mirror.example.com/airlock/" })),
            "dev",
        );
        expect(plan.resources.filter((r) => r.type === DYNAMIC && ["file"].includes(String(r.inputs.b2Kind)))).toEqual([]);
        const server = plan.resources.find((r) => r.type === SERVER)!;
        const source = JSON.parse(parseUserData(String(server.inputs.userData)).files.find((f) => f.path === BUNDLE_SOURCE_PATH)!.content);
        expect(source.url).toBe(`https://mirror.example.com/airlock/${renderBundle().name}`);
        // What the operator puts on the mirror: the plan writes it.
        expect(collectArtifacts(plan).get("bundle")).toEqual({ [renderBundle().name]: renderBundle().text });
    });
});

/**
 * airlock-bundle-install itself, as first boot runs it: in a Debian 12 root filesystem
 * (chroot, its own python3), fetching over HTTPS from a local server whose CA it is given.
 */
const canRun = isRoot() && toolsAvailable("the bundle installer in a Debian root", ["mmdebstrap", "openssl", "chroot"]);
if (!isRoot()) console.warn("SKIPPED the bundle installer in a Debian root: needs root (chroot)");

describe.runIf(canRun)("airlock-bundle-install in a Debian 12 root", () => {
    let root: string;
    let server: https.Server;
    let served = "";
    let port = 0;
    let requests = 0;
    let cutShort = 0;
    const sandbox = () => parseCloudInit(renderHosts(readStackFile(stackFile("dev"))).sandbox.cloudInit);

    beforeAll(async () => {
        const dir = tempDir("bundle-install");
        root = path.join(dir, "root");
        extractRootfs(debianRootfs(), root);
        // A certificate for 127.0.0.1, which the installer's python trusts through SSL_CERT_FILE.
        execFileSync("openssl", ["req", "-x509", "-newkey", "ed25519", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", path.join(dir, "key.pem"), "-out", path.join(dir, "cert.pem")], { stdio: "ignore" });
        fs.copyFileSync(path.join(dir, "cert.pem"), path.join(root, "tmp", "ca.pem"));
        server = https.createServer({ key: fs.readFileSync(path.join(dir, "key.pem")), cert: fs.readFileSync(path.join(dir, "cert.pem")) }, (req, res) => {
            requests++;
            if (req.url !== `/${renderBundle().name}`) res.writeHead(404).end();
            else if (cutShort > 0) {
                // The connection drops a few bytes in: the body is shorter than its Content-Length.
                cutShort--;
                res.writeHead(200, { "Content-Type": "application/json", "Content-Length": String(Buffer.byteLength(served)) });
                res.write(served.slice(0, 100), () => res.destroy());
            } else res.writeHead(200, { "Content-Type": "application/json" }).end(served);
        });
        await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
        port = (server.address() as AddressInfo).port;
        // What cloud-init writes before runcmd: the user_data's whole files, the bundle's URL filled as at deploy.
        for (const file of sandbox().files) {
            const target = path.join(root, file.path);
            fs.mkdirSync(path.dirname(target), { recursive: true });
            const content = file.path === BUNDLE_SOURCE_PATH ? file.content.replace("@BUNDLE_URL@", `https://127.0.0.1:${port}/${renderBundle().name}`) : file.content;
            fs.writeFileSync(target, content, { mode: parseInt(file.permissions ?? "0644", 8) });
        }
    }, 600_000);

    afterAll(() => server?.close());

    // Not spawnSync: the server answering it lives in this process.
    const install = () =>
        new Promise<{ status: number | null; stderr: string }>((resolve) => {
            const child = spawn("chroot", [root, "/usr/bin/env", "SSL_CERT_FILE=/tmp/ca.pem", "/usr/local/sbin/airlock-bundle-install"], { stdio: ["ignore", "ignore", "pipe"], timeout: 120_000 });
            let stderr = "";
            child.stderr.on("data", (chunk) => (stderr += chunk));
            child.on("close", (status) => resolve({ status, stderr }));
        });
    const bundled = () => installedFiles(JSON.parse(sandbox().files.find((f) => f.path === BUNDLE_FILES_PATH)!.content) as BundledFile[], renderBundle().text);

    it("refuses a bundle changed by one byte (after trying three times), says why on stderr, and writes nothing", async () => {
        const { text, sha256 } = renderBundle();
        served = text.replace('"format"', '"formaT"');
        const state = () => bundled().map((file) => [file.path, fs.existsSync(path.join(root, file.path)) ? fs.readFileSync(path.join(root, file.path), "utf8") : undefined]);
        const before = state();
        requests = 0;
        const result = await install();
        expect(result.status).toBe(1);
        expect(requests).toBe(3);
        const found = createHash("sha256").update(served).digest("hex");
        expect(result.stderr).toContain(`airlock-bundle-install: refusing to install the host code: https://127.0.0.1:${port}/${renderBundle().name} has sha256 ${found}, user_data names ${sha256}`);
        // Untouched: the Debian image's own /etc/pam.d/sshd is still Debian's, the kit's programs absent.
        expect(state()).toEqual(before);
        expect(before.filter(([, content]) => content !== undefined).map(([p]) => p)).toEqual(["/etc/pam.d/sshd"]);
        expect(fs.existsSync(path.join(root, "var/lib/airlock/bundle/installed"))).toBe(false);
    }, 120_000);

    it("installs every bundled file as the plan renders it (content, mode, root's), and again the same", async () => {
        served = renderBundle().text;
        for (const attempt of [1, 2]) {
            const result = await install();
            expect(result.status, `${attempt}: ${result.stderr}`).toBe(0);
            expect(result.stderr).toContain(`installed ${bundled().length} files from bundle ${renderBundle().sha256}`);
        }
        for (const file of bundled()) {
            const target = path.join(root, file.path);
            expect(fs.readFileSync(target, "utf8"), file.path).toBe(file.content);
            const stat = fs.statSync(target);
            expect((stat.mode & 0o7777).toString(8).padStart(4, "0"), file.path).toBe(file.permissions);
            expect([stat.uid, stat.gid]).toEqual([0, 0]);
        }
        expect(fs.readFileSync(path.join(root, "var/lib/airlock/bundle/installed"), "utf8")).toBe(`${renderBundle().sha256}\n`);
    });

    it.each([
        ["NaN, which the gate cannot read", (text: string) => text.replace(/\n}\n$/, ',\n "n": NaN\n}\n'), "NaN is not JSON"],
        ["a key twice (the gate would read the last)", (text: string) => text.replace(/\n}\n$/, `,\n "sha256": "${"e".repeat(64)}"\n}\n`), "a key is repeated"],
    ])("refuses a bundle.json with %s, as the gate does", async (_, change, why) => {
        const file = path.join(root, "etc/airlock/bundle.json");
        const original = fs.readFileSync(file, "utf8");
        fs.writeFileSync(file, change(original));
        try {
            const result = await install();
            expect(result.status).toBe(1);
            expect(result.stderr).toContain(why);
        } finally {
            fs.writeFileSync(file, original);
        }
    });

    it("a download cut short is tried again, not refused", async () => {
        fs.rmSync(path.join(root, "var/lib/airlock/bundle", `${renderBundle().sha256}.json`));
        served = renderBundle().text;
        cutShort = 1;
        requests = 0;
        const result = await install();
        expect(result.status, result.stderr).toBe(0);
        expect(requests).toBe(2);
    }, 120_000);

    it("keeps the verified bundle: a later run needs no network, and a kept copy altered on disk is fetched again", async () => {
        const kept = path.join(root, "var/lib/airlock/bundle", `${renderBundle().sha256}.json`);
        served = "";
        expect((await install()).status).toBe(0);
        fs.appendFileSync(kept, " ");
        served = renderBundle().text;
        expect((await install()).status).toBe(0);
        expect(createHash("sha256").update(fs.readFileSync(kept)).digest("hex")).toBe(renderBundle().sha256);
    });
});

// The installer is the one piece of host code user_data carries whole: it is the template's text.
it("user_data carries the installer as templates/scripts/bundle-install", () => {
    const doc = parseCloudInit(renderHosts(readStackFile(stackFile("dev"))).gateway.cloudInit);
    expect(doc.files.find((f) => f.path === "/usr/local/sbin/airlock-bundle-install")?.content).toBe(fs.readFileSync(path.join(REPO, "templates/scripts/bundle-install"), "utf8"));
});
