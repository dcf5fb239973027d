import { ChildProcess, spawn } from "node:child_process";
import { generateKeyPairSync, KeyObject } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { GITHUB_STATE_DIR } from "../components/render/hosts";
import { GATEWAY_AGENT_PATHS } from "../components/workloads/compose";
import { FakeGitHub, startFakeGitHub } from "./helpers/fakeGitHub";
import { docShBlock } from "./helpers/docs";
import { editedStack, renderedFile, renderHosts, tempDir } from "./helpers/stacks";
import { hasCommand, toolsAvailable } from "./helpers/tools";

/**
 * The gateway's rendered airlock-github-token against a loopback fake of GitHub's
 * API that verifies the App's JWT and records the scope asked for. Only the tool's
 * file paths move into a temp dir; the minter, the client and the approvals are the
 * rendered code.
 */

const APP_ID = 424242;
const INSTALLATION_ID = 777;

const canRun = toolsAvailable("GitHub token minter", ["python3", "openssl"]);

interface Ran {
    code: number | null;
    stdout: string;
    stderr: string;
}

/** Async, so the fake GitHub in this process can answer while the tool waits. */
function runTool(args: string[], input = "", env: NodeJS.ProcessEnv = process.env): Promise<Ran> {
    return new Promise((resolve) => {
        const child = spawn(args[0], args.slice(1), { env, stdio: ["pipe", "pipe", "pipe"] });
        let stdout = "";
        let stderr = "";
        child.stdout.on("data", (c: Buffer) => (stdout += c));
        child.stderr.on("data", (c: Buffer) => (stderr += c));
        child.on("close", (code) => resolve({ code, stdout, stderr }));
        // A tool that exits before reading its stdin closes the pipe; its exit code says why.
        child.stdin.on("error", () => {});
        child.stdin.end(input);
    });
}


/** The docs' approval command, without its sudo. */
const readmeApproval = () => docShBlock("sudo airlock-github-token --approve").trim().split(/\s+/).slice(2);

const pem = (key: KeyObject) => key.export({ type: "pkcs1", format: "pem" }).toString();

describe.runIf(canRun)("airlock-github-token against a fake GitHub", () => {
    const app = generateKeyPairSync("rsa", { modulusLength: 2048 });
    let github: FakeGitHub;
    let dir: string;
    let tool: string;
    let secretsFile: string;
    let configFile: string;

    /** The minter's config as the stack renders it, pointed at the fake. */
    function configure(github_: Record<string, unknown>) {
        const cfg = readStackFile(
            editedStack("dev", (c) => {
                c["airlock:gateway"].github = { appId: APP_ID, installationId: INSTALLATION_ID, repositories: ["acme/*"], ...github_ };
            }),
        );
        const rendered = JSON.parse(renderedFile(renderHosts(cfg).gateway, GATEWAY_AGENT_PATHS.githubConfig));
        fs.writeFileSync(configFile, JSON.stringify({ ...rendered, apiUrl: github.url }));
    }

    function storeKey(key: string | undefined) {
        const secrets = { ANTHROPIC_API_KEY: { value: "x", updated: 1 }, ...(key ? { GITHUB_APP_PRIVATE_KEY: { value: key, updated: 1 } } : {}) };
        fs.writeFileSync(secretsFile, JSON.stringify({ version: 1, secrets }), { mode: 0o600 });
    }

    const serve = async (request: unknown) => {
        const ran = await runTool([tool, "--serve"], `${typeof request === "string" ? request : JSON.stringify(request)}\n`);
        expect(ran.code).toBe(0);
        return { reply: JSON.parse(ran.stdout) as { ok: boolean; token?: string; error?: string }, log: ran.stderr };
    };

    const ask = (repositories: string[], permissions: Record<string, string>, ttlMinutes = 30) => serve({ repositories, permissions, ttlMinutes });

    beforeAll(async () => {
        github = await startFakeGitHub({ appId: APP_ID, installationId: INSTALLATION_ID, publicKey: app.publicKey });
        dir = tempDir("github-token");
        secretsFile = path.join(dir, "secrets.json");
        configFile = path.join(dir, "github.json");
        const cfg = readStackFile(editedStack("dev", (c) => (c["airlock:gateway"].github = { appId: APP_ID, installationId: INSTALLATION_ID, maxPermissions: { contents: "read" } })));
        tool = path.join(dir, "airlock-github-token");
        fs.writeFileSync(
            tool,
            renderedFile(renderHosts(cfg).gateway, GATEWAY_AGENT_PATHS.githubTokenClient)
                .replace(JSON.stringify(GATEWAY_AGENT_PATHS.githubConfig), JSON.stringify(configFile))
                .replace(JSON.stringify(GATEWAY_AGENT_PATHS.secrets), JSON.stringify(secretsFile))
                .replace(JSON.stringify(GITHUB_STATE_DIR), JSON.stringify(path.join(dir, "state"))),
            { mode: 0o755 },
        );
    });

    afterAll(async () => github?.close());

    afterEach(() => {
        github.requests.length = 0;
        github.mints.length = 0;
        github.clockOffset = 0;
        github.grantExtra = undefined;
    });

    describe("the scope", () => {
        beforeAll(() => {
            configure({ maxPermissions: { contents: "read", pull_requests: "write", issues: "write" }, repositories: ["acme/app", "acme/lib", "acme/docs"] });
            storeKey(pem(app.privateKey));
        });

        it("refuses a repository the stack does not list, before any request to GitHub (red team 3: a private repository read, issues written on a public one)", async () => {
            for (const [repositories, error] of [
                [["acme/private-data"], "acme/private-data is not in airlock:gateway.github.repositories (acme/app, acme/lib, acme/docs)"],
                [["acme/app", "acme/public-dropbox"], "acme/public-dropbox is not in airlock:gateway.github.repositories (acme/app, acme/lib, acme/docs)"],
            ] as const) {
                const { reply, log } = await ask([...repositories], { contents: "read" });
                expect(reply).toEqual({ ok: false, error });
                expect(log).toContain(`refused for uid`);
            }
            expect(github.requests).toEqual([]);
            // GitHub's names are case-insensitive; the list is too.
            expect((await ask(["ACME/App"], { contents: "read" })).reply.ok).toBe(true);
        });

        it("owner/* lists every repository of that owner, and no other owner's", async () => {
            configure({ maxPermissions: { contents: "read" }, repositories: ["acme/*"] });
            try {
                expect((await ask(["acme/anything"], { contents: "read" })).reply.ok).toBe(true);
                expect((await ask(["evil/anything"], { contents: "read" })).reply).toEqual({ ok: false, error: "evil/anything is not in airlock:gateway.github.repositories (acme/*)" });
            } finally {
                configure({ maxPermissions: { contents: "read", pull_requests: "write", issues: "write" }, repositories: ["acme/app", "acme/lib", "acme/docs"] });
            }
        });

        it("a stack that lists no repositories mints nothing", async () => {
            configure({ maxPermissions: { contents: "read" }, repositories: [] });
            try {
                expect((await ask(["acme/app"], { contents: "read" })).reply).toEqual({ ok: false, error: "airlock:gateway.github.repositories lists no repository: the minter mints nothing" });
                expect(github.requests).toEqual([]);
            } finally {
                configure({ maxPermissions: { contents: "read", pull_requests: "write", issues: "write" }, repositories: ["acme/app", "acme/lib", "acme/docs"] });
            }
        });

        it("asks GitHub for exactly the repositories and permissions requested, with a valid RS256 App JWT", async () => {
            const { reply, log } = await ask(["acme/app", "acme/lib"], { contents: "read", pull_requests: "write" });
            expect(reply.ok).toBe(true);
            expect(reply.token).toMatch(/^ghs_/);
            expect(github.mints).toHaveLength(1);
            const [mint] = github.mints;
            expect(mint.body).toEqual({ repositories: ["app", "lib"], permissions: { contents: "read", pull_requests: "write" } });
            expect(mint.installationId).toBe(String(INSTALLATION_ID));
            const now = Math.floor(Date.now() / 1000);
            expect(mint.claims.iss).toBe(String(APP_ID));
            expect(Number(mint.claims.iat)).toBeLessThanOrEqual(now - 30);
            expect(Number(mint.claims.exp) - Number(mint.claims.iat)).toBeLessThanOrEqual(600);
            // The journal gets who asked for what scope, never the token.
            expect(log).toMatch(/^airlock-github-token: minted for uid \d+ pid \d+: acme\/app acme\/lib contents:read,pull_requests:write ttl 30m\n$/);
            expect(log).not.toContain(reply.token!);
        });

        it.each<[string, Record<string, string>, string]>([
            ["a level above the maximum", { contents: "write" }, "contents:write is beyond airlock:gateway.github.maxPermissions (contents: read)"],
            ["a permission the stack never allows", { administration: "read" }, "administration:read is beyond airlock:gateway.github.maxPermissions (no administration)"],
            ["workflows, with an allowed one beside it", { issues: "write", workflows: "write" }, "workflows:write is beyond airlock:gateway.github.maxPermissions (no workflows)"],
        ])("refuses %s before any request to GitHub", async (_, permissions, error) => {
            const { reply, log } = await ask(["acme/app"], permissions);
            expect(reply).toEqual({ ok: false, error });
            expect(github.requests).toEqual([]);
            expect(log).toMatch(new RegExp(`^airlock-github-token: refused for uid \\d+ pid \\d+: ${error.replace(/[()]/g, "\\$&")}\n$`));
        });

        it.each<[string, unknown]>([
            ["not JSON", "{repositories"],
            ["an extra key", { repositories: ["acme/app"], permissions: { contents: "read" }, ttlMinutes: 5, installationId: 1 }],
            ["a path in a repository name", { repositories: ["acme/.."], permissions: { contents: "read" }, ttlMinutes: 5 }],
            ["two owners", { repositories: ["acme/app", "evil/app"], permissions: { contents: "read" }, ttlMinutes: 5 }],
            ["no permissions (GitHub would grant all)", { repositories: ["acme/app"], permissions: {}, ttlMinutes: 5 }],
            ["a level that is not read or write", { repositories: ["acme/app"], permissions: { contents: "admin" }, ttlMinutes: 5 }],
            ["a ttl beyond GitHub's hour", { repositories: ["acme/app"], permissions: { contents: "read" }, ttlMinutes: 61 }],
            ["a boolean ttl", { repositories: ["acme/app"], permissions: { contents: "read" }, ttlMinutes: true }],
        ])("a hostile request (%s) is refused with one line, and GitHub is never asked", async (_, request) => {
            const { reply } = await serve(request);
            expect(reply.ok).toBe(false);
            expect(reply.error).toMatch(/^[^\n]+$/);
            expect(github.requests).toEqual([]);
        });

        it("a token that comes back with more than was asked is revoked, not handed out", async () => {
            github.grantExtra = ["administration", "write"];
            const { reply } = await ask(["acme/app"], { contents: "read" });
            expect(reply).toEqual({ ok: false, error: "GitHub granted more than asked (administration:write); token revoked" });
            expect([...github.tokens.values()].at(-1)).toEqual({ active: false });
        });
    });

    describe("keys and clocks", () => {
        // some-other-org is listed too: GitHub answering with another owner's repository than asked is caught after the mint.
        beforeAll(() => configure({ maxPermissions: { contents: "read" }, repositories: ["acme/*", "some-other-org/app"] }));

        it("a wrong key fails with one line that says which", async () => {
            storeKey(pem(generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey));
            const { reply } = await ask(["acme/app"], { contents: "read" });
            expect(reply).toEqual({ ok: false, error: `GitHub rejected the App's JWT: A JSON web token could not be decoded (is GITHUB_APP_PRIVATE_KEY the private key of App ${APP_ID}?)` });
            expect(github.mints).toEqual([]);
        });

        it.each<[string, number, RegExp]>([
            ["behind GitHub's (the JWT has expired)", 20 * 60, /^GitHub rejected the App's JWT: 'Expiration time' claim \('exp'\) must be a numeric value representing the future time at which the assertion expires\. \(the gateway's clock is (119\d|120\d) s behind GitHub's: timedatectl\)$/],
            ["ahead of GitHub's (issued in the future)", -5 * 60, /^GitHub rejected the App's JWT: 'Issued at' claim \('iat'\) must be an Integer representing the time that the assertion was issued\. \(the gateway's clock is (29\d|30\d) s ahead of GitHub's: timedatectl\)$/],
        ])("a gateway clock %s fails with one line naming the skew", async (_, offset, error) => {
            storeKey(pem(app.privateKey));
            github.clockOffset = offset;
            const { reply } = await ask(["acme/app"], { contents: "read" });
            expect(reply.ok).toBe(false);
            expect(reply.error).toMatch(error);
        });

        it("a token for repositories of another owner than asked is revoked, never handed out (the journal must name what the token is for)", async () => {
            const { reply } = await ask(["some-other-org/app"], { contents: "read" });
            expect(reply).toEqual({ ok: false, error: "GitHub's token is for acme/app, not some-other-org/app; token revoked" });
            const [minted] = [...github.tokens.values()].slice(-1);
            expect(minted.active).toBe(false);
        });

        it("a key that is not an RSA private key fails before any request", async () => {
            storeKey("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n");
            expect((await ask(["acme/app"], { contents: "read" })).reply).toEqual({ ok: false, error: "GITHUB_APP_PRIVATE_KEY is not a usable RSA private key" });
            storeKey(undefined);
            expect((await ask(["acme/app"], { contents: "read" })).reply).toEqual({ ok: false, error: "GITHUB_APP_PRIVATE_KEY is not among the agent secrets: airlock secrets push" });
            expect(github.requests).toEqual([]);
        });
    });

    describe("approvals and revocation", () => {
        beforeAll(() => {
            configure({ maxPermissions: { contents: "write", pull_requests: "write" }, allowHighImpact: ["contents:write"], approvalRequired: ["contents:write"] });
            storeKey(pem(app.privateKey));
        });

        it("asking for write does not skip an approval the stack requires for read (write includes read)", async () => {
            configure({ maxPermissions: { contents: "write" }, allowHighImpact: ["contents:write"], approvalRequired: ["contents:read"] });
            try {
                for (const level of ["read", "write"]) {
                    const refused = await ask(["acme/app"], { contents: level });
                    expect(refused.reply.ok, level).toBe(false);
                    expect(refused.reply.error).toMatch(new RegExp(`^contents:${level} needs an operator's approval`));
                }
                expect(github.requests).toEqual([]);
            } finally {
                configure({ maxPermissions: { contents: "write", pull_requests: "write" }, allowHighImpact: ["contents:write"], approvalRequired: ["contents:write"] });
            }
        });

        it("a scope marked approvalRequired is minted only after an operator approves it, once", async () => {
            const refused = await ask(["acme/app"], { contents: "write", pull_requests: "write" });
            expect(refused.reply.error).toBe(
                "contents:write needs an operator's approval for this task: on the gateway, sudo airlock-github-token --approve --repo acme/app --permissions contents:write",
            );
            expect(github.requests).toEqual([]);
            // Reading does not need the approval that writing does.
            expect((await ask(["acme/app"], { contents: "read" })).reply.ok).toBe(true);

            // The docs' approval command (as root there, through sudo).
            const approved = await runTool([tool, ...readmeApproval()]);
            expect(approved.stdout).toBe("approved once, for 30m: acme/app contents:write\n");
            expect((await runTool([tool, "--approve", "--repo", "acme/app", "--permissions", "pull_requests:write"])).stderr).toBe(
                "airlock-github-token: pull_requests:write needs no approval (not in airlock:gateway.github.approvalRequired)\n",
            );
            const other = await ask(["acme/other"], { contents: "write" });
            expect(other.reply.ok).toBe(false);
            const used = await ask(["acme/app"], { contents: "write", pull_requests: "write" });
            expect(used.reply.ok).toBe(true);
            expect(used.log).toContain("(approved)");
            expect((await ask(["acme/app"], { contents: "write" })).reply.ok).toBe(false);
        });

        it("a token shorter-lived than GitHub's hour is revoked once its ttl has passed", async () => {
            const spool = path.join(dir, "state", "tokens");
            fs.rmSync(spool, { recursive: true, force: true });
            const { reply } = await ask(["acme/app"], { pull_requests: "write" }, 5);
            const [entry] = fs.readdirSync(spool);
            expect(fs.statSync(path.join(spool, entry)).mode & 0o777).toBe(0o600);
            expect((await runTool([tool, "--revoke-expired"])).code).toBe(0);
            expect(github.tokens.get(reply.token!)).toEqual({ active: true });
            // Five minutes later, as far as the spool is concerned.
            const file = path.join(spool, entry);
            fs.writeFileSync(file, JSON.stringify({ ...JSON.parse(fs.readFileSync(file, "utf8")), revokeAt: Math.floor(Date.now() / 1000) - 1 }));
            expect((await runTool([tool, "--revoke-expired"])).code).toBe(0);
            expect(github.tokens.get(reply.token!)).toEqual({ active: false });
            expect(github.requests.at(-1)).toEqual({ method: "DELETE", path: "/installation/token" });
            expect(fs.readdirSync(spool)).toEqual([]);
        });
    });

    describe.runIf(hasCommand("systemd-socket-activate"))("the client, through the minter's socket", () => {
        let activator: ChildProcess;
        let socketPath: string;

        beforeAll(async () => {
            configure({ maxPermissions: { contents: "read", pull_requests: "write" } });
            storeKey(pem(app.privateKey));
            socketPath = path.join(dir, "token.sock");
            // What airlock-github-token.socket does: one minter per connection, on its stdin/stdout.
            activator = spawn("systemd-socket-activate", ["--inetd", "--accept", "--listen", socketPath, tool, "--serve"], { stdio: "ignore" });
            for (let i = 0; i < 50 && !fs.existsSync(socketPath); i++) await new Promise((r) => setTimeout(r, 100));
        });

        afterAll(() => activator?.kill());

        const client = (args: string[]) => runTool([tool, ...args], "", { ...process.env, AIRLOCK_GITHUB_TOKEN_SOCKET: socketPath });

        it("prints the token on stdout and nothing else", async () => {
            const ran = await client(["--repo", "acme/app", "--permissions", "contents:read", "--ttl", "60m"]);
            expect(ran.stderr).toBe("");
            expect(ran.code).toBe(0);
            expect(ran.stdout).toMatch(/^ghs_\w+\n$/);
            expect(github.tokens.get(ran.stdout.trim())).toEqual({ active: true });
        });

        it("the docs' per-command example: the token reaches ssh's environment, never its command line", async () => {
            const bin = path.join(dir, "readme-bin");
            fs.mkdirSync(bin, { recursive: true });
            fs.copyFileSync(tool, path.join(bin, "airlock-github-token"));
            fs.chmodSync(path.join(bin, "airlock-github-token"), 0o755);
            // A stand-in ssh: what it was given, and the GITHUB_TOKEN it would send (SendEnv).
            fs.writeFileSync(path.join(bin, "ssh"), `#!/bin/bash\nprintf '%s\\n' "$@" > ${dir}/ssh-argv\nprintf '%s' "\${GITHUB_TOKEN:-}" > ${dir}/ssh-token\n`, { mode: 0o755 });
            // --norc: bash with a socket for stdin (Node's pipes are socketpairs) at shell level 1
            // reads /etc/bash.bashrc as if sshd had started it, and Debian's fails under -u (seen
            // when the suite ran without SHLVL in its environment).
            const ran = await runTool(["bash", "--norc", "-euo", "pipefail", "-c", docShBlock("GITHUB_TOKEN=\"$(airlock-github-token")], "", {
                ...process.env,
                PATH: `${bin}:${process.env.PATH}`,
                AIRLOCK_GITHUB_TOKEN_SOCKET: socketPath,
            });
            expect(ran.stderr).toBe("");
            expect(ran.code).toBe(0);
            const token = fs.readFileSync(path.join(dir, "ssh-token"), "utf8");
            expect(token).toMatch(/^ghs_/);
            expect(fs.readFileSync(path.join(dir, "ssh-argv"), "utf8")).toBe("sandbox\ngit clone https://github.com/acme/app\n");
            expect(github.mints.at(-1)!.body).toEqual({ repositories: ["app"], permissions: { contents: "read", pull_requests: "write" } });
        });

        it("a refusal is one line on stderr, exit 1; a malformed command line is exit 2 without asking", async () => {
            const refused = await client(["--repo", "acme/app", "--permissions", "contents:write"]);
            expect([refused.code, refused.stdout, refused.stderr]).toEqual([1, "", "airlock-github-token: contents:write is beyond airlock:gateway.github.maxPermissions (contents: read)\n"]);
            const bad = await client(["--repo", "acme", "--ttl", "90m"]);
            expect([bad.code, bad.stderr]).toEqual([2, "airlock-github-token: 'acme': expected OWNER/NAME\n"]);
            expect(github.requests).toEqual([]);
        });
    });
});
