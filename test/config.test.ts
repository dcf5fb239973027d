import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { ConfigError, configFromPulumiRuntime, readStackFile } from "../components/config/load";
import { postgresMajor } from "../components/config/schema";
import { airlock } from "./helpers/cli";
import { editedStack, SHIPPED_STACKS, stackFile, tempDir } from "./helpers/stacks";

function problemsOf(file: string): string[] {
    try {
        readStackFile(file);
    } catch (err) {
        if (err instanceof ConfigError) return err.problems;
        throw err;
    }
    throw new Error(`${file} was accepted`);
}

describe("stack config schema", () => {
    it.each(SHIPPED_STACKS)("accepts the shipped %s stack and applies defaults", (stack) => {
        const cfg = readStackFile(stackFile(stack));
        expect(cfg.agent.user).toBe("agent");
        expect(cfg.agent.envAllowlist).toEqual(["GITHUB_TOKEN"]);
        expect(cfg.tailnet.gatewayTag).toBe(`tag:${cfg.prefix}-gateway`);
        expect(cfg.tailnet.sandboxTag).toBe(`tag:${cfg.prefix}-sandbox`);
        expect(cfg.gateway.image).toBe("debian-13");
    });

    it("dev and prod differ the way environments do", () => {
        const dev = readStackFile(stackFile("dev"));
        const prod = readStackFile(stackFile("prod"));
        expect(dev.sandbox.serverType).not.toBe(prod.sandbox.serverType);
        expect(dev.gateway.location).not.toBe(prod.gateway.location);
        expect(prod.backup.retentionDays).toBeGreaterThan(dev.backup.retentionDays);
        expect(prod.gateway.protect).toBe(true);
        expect(dev.tailnet.manageAcl).toBe(true);
        expect(prod.tailnet.manageAcl).toBe(false);
    });

    it("names the file and key path of a bad enum value, listing the choices", () => {
        const file = editedStack("dev", (c) => (c["airlock:sandbox"].serverType = "huge"));
        const problems = problemsOf(file);
        expect(problems).toHaveLength(1);
        expect(problems[0]).toMatch(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: airlock:sandbox\\.serverType: expected one of cx23, cx33, `));
    });

    it.each([
        ["cx22", "cx23"],
        ["cpx21", "cpx22"],
        ["cpx31", "cpx32"],
    ])("refuses %s, which Hetzner no longer sells, and names its successor %s", (withdrawn, successor) => {
        const file = editedStack("dev", (c) => (c["airlock:sandbox"].serverType = withdrawn));
        expect(problemsOf(file)).toEqual([`${file}: airlock:sandbox.serverType: withdrawn by Hetzner (not orderable since 2026-01-01): use ${successor} instead, got the string "${withdrawn}"`]);
    });

    it("refuses a host's tag among the operators: this stack's gateway or sandbox, or any sandbox's", () => {
        for (const tag of ["tag:airlock-dev-sandbox", "tag:airlock-dev-gateway", "tag:airlock-prod-sandbox"]) {
            const file = editedStack("dev", (c) => (c["airlock:tailnet"].operators = ["alice@example.com", tag]));
            expect(problemsOf(file)).toEqual([`${file}: airlock:tailnet.operators[1]: ${tag} is a host's tag: operators are people or their CI, never the gateway or a sandbox`]);
        }
    });

    it("an enabled API needs its image: there is no default one", () => {
        const file = editedStack("dev", (c) => (c["airlock:workloads"].api = { enabled: true }));
        expect(problemsOf(file)).toEqual([`${file}: airlock:workloads.api.image: required when airlock:workloads.api.enabled is true`]);
    });

    it("refuses a PostgreSQL newer than the built shell's pg_dump, which would refuse to dump it; takes it with a shell of the user's", () => {
        const file = editedStack("prod", (c) => (c["airlock:workloads"].postgres = { enabled: true, image: "postgres:16-bookworm" }));
        expect(problemsOf(file)).toEqual([
            `${file}: airlock:workloads.postgres.image: PostgreSQL 16 is newer than the built shell's pg_dump (15, Debian 12's postgresql-client), which refuses to dump it: use postgres:15-bookworm`,
        ]);
        expect(readStackFile(stackFile("prod")).workloads.postgres.image).toBe("postgres:15-bookworm");
        const own = editedStack("dev", (c) => (c["airlock:workloads"].postgres = { enabled: true, image: "postgres:17" }));
        expect(readStackFile(own).workloads.postgres.image).toBe("postgres:17");
        expect([postgresMajor("postgres:16-bookworm@sha256:" + "a".repeat(64)), postgresMajor("registry:5000/postgres:15"), postgresMajor("pgvector/pgvector:pg15"), postgresMajor("postgres")]).toEqual([16, 15, 15, undefined]);
    });

    it("refuses a PostgreSQL newer than the gateway's pg_restore, whose dumps no drill could restore", () => {
        const sandboxDb = editedStack("dev", (c) => (c["airlock:workloads"].postgres = { enabled: true, image: "postgres:18" }));
        expect(problemsOf(sandboxDb)).toEqual([
            `${sandboxDb}: airlock:workloads.postgres.image: PostgreSQL 18 is newer than the gateway's pg_restore (17, Debian 13's), which cannot restore its dumps: the monthly restore drill would fail; use PostgreSQL 17 or older`,
        ]);
        const memory = editedStack("dev", (c) => (c["airlock:gateway"].agent.memoryDb = { enabled: true, image: "pgvector/pgvector:pg18" }));
        expect(problemsOf(memory)).toEqual([
            `${memory}: airlock:gateway.agent.memoryDb.image: PostgreSQL 18 is newer than the gateway's pg_restore (17, Debian 13's), which cannot restore its dumps: the monthly restore drill would fail; use PostgreSQL 17 or older`,
        ]);
        expect(readStackFile(editedStack("dev", (c) => (c["airlock:gateway"].agent.memoryDb = { enabled: true, image: "pgvector/pgvector:pg17" }))).gateway.agent?.memoryDb.image).toBe("pgvector/pgvector:pg17");
    });

    it("refuses a destroy that deletes the backups while Object Lock keeps them; takes either alone", () => {
        const both = editedStack("dev", (c) => {
            c["airlock:deleteDataOnDestroy"] = true;
            c["airlock:backup"].objectLockDays = 30;
        });
        expect(problemsOf(both)).toEqual([
            `${both}: airlock:deleteDataOnDestroy: cannot be true with airlock:backup.objectLockDays set: B2 keeps each backup 30 days under Object Lock, and nothing can delete it before then`,
        ]);
        expect(readStackFile(editedStack("dev", (c) => (c["airlock:deleteDataOnDestroy"] = true))).deleteDataOnDestroy).toBe(true);
        expect(readStackFile(editedStack("dev", (c) => (c["airlock:backup"].objectLockDays = 30))).backup.objectLockDays).toBe(30);
    });

    it("refuses a CX or CAX type outside Hetzner's European locations, and takes a CPX type there", () => {
        const cx = editedStack("dev", (c) => (c["airlock:gateway"].location = "ash"));
        expect(problemsOf(cx)).toEqual([`${cx}: airlock:gateway.serverType: cx23 is not offered in ash (CX and CAX types are in fsn1, nbg1, hel1 only): use cpx22 there`]);
        const cax = editedStack("dev", (c) => Object.assign(c["airlock:sandbox"], { serverType: "cax21", location: "sin" }));
        expect(problemsOf(cax)).toEqual([`${cax}: airlock:sandbox.serverType: cax21 is not offered in sin (CX and CAX types are in fsn1, nbg1, hel1 only): use cpx32 there`]);
        expect(readStackFile(editedStack("dev", (c) => Object.assign(c["airlock:gateway"], { serverType: "cpx22", location: "ash" }))).gateway.location).toBe("ash");
    });

    it("reports every problem, one line each, with array indexes in the path", () => {
        const file = editedStack("dev", (c) => {
            c["airlock:gateway"].adminSshKeys = ["not a key"];
            c["airlock:tailnet"].keyExpirySeconds = 10;
            delete c["airlock:prefix"];
        });
        const problems = problemsOf(file);
        expect(problems.map((p) => p.split(": ")[1]).sort()).toEqual([
            "airlock:gateway.adminSshKeys[0]",
            "airlock:prefix",
            "airlock:tailnet.keyExpirySeconds",
        ]);
    });

    it("rejects unknown keys so a typo is not silently ignored", () => {
        const file = editedStack("dev", (c) => (c["airlock:sandbox"].serverTyp = "cx23"));
        expect(problemsOf(file)).toEqual([`${file}: airlock:sandbox: unknown key serverTyp`]);
    });

    it.each(["LD_PRELOAD", "PATH", "BASH_ENV", "ENV", "GITHUB_*", "github_token", "SSH_AUTH_SOCK", "DOCKER_HOST"])(
        "refuses to pass %s through to the sandbox",
        (name) => {
            const file = editedStack("dev", (c) => (c["airlock:agent"].envAllowlist = ["GITHUB_TOKEN", name]));
            const problems = problemsOf(file);
            expect(problems).toHaveLength(1);
            expect(problems[0]).toContain("airlock:agent.envAllowlist[1]");
        },
    );

    it("ignores other providers' keys and reads Pulumi's JSON-encoded values", () => {
        const raw = fs.readFileSync(stackFile("dev"), "utf8");
        const doc = require("yaml").parse(raw).config as Record<string, unknown>;
        const all: Record<string, string> = { "hcloud:token": "ignored" };
        for (const [k, v] of Object.entries(doc)) all[k] = typeof v === "string" ? v : JSON.stringify(v);
        expect(configFromPulumiRuntime(all, "dev")).toEqual(readStackFile(stackFile("dev")));
    });

    it("checkpoints and sessions have their defaults, and a session mode can be written as a string", () => {
        const cfg = readStackFile(stackFile("dev"));
        expect(cfg.sandbox.checkpoints).toEqual({ keep: 20, keepDays: 7, auto: true, minFreePercent: 10 });
        expect(cfg.sandbox.sessions).toEqual({ mode: "shared", idleMinutes: 60, max: 8 });
        const perSession = readStackFile(editedStack("dev", (c) => (c["airlock:sandbox"].sessions = "per-session")));
        expect(perSession.sandbox.sessions).toEqual({ mode: "per-session", idleMinutes: 60, max: 8 });
        const tuned = readStackFile(editedStack("dev", (c) => (c["airlock:sandbox"].sessions = { mode: "per-session", idleMinutes: 15 })));
        expect(tuned.sandbox.sessions).toEqual({ mode: "per-session", idleMinutes: 15, max: 8 });
    });

    it("per-session mode lets sshd accept AIRLOCK_SESSION; shared mode does not", () => {
        expect(readStackFile(stackFile("dev")).agent.envAllowlist).toEqual(["GITHUB_TOKEN"]);
        const perSession = readStackFile(editedStack("dev", (c) => (c["airlock:sandbox"].sessions = "per-session")));
        expect(perSession.agent.envAllowlist).toEqual(["GITHUB_TOKEN", "AIRLOCK_SESSION"]);
        const listed = readStackFile(
            editedStack("dev", (c) => {
                c["airlock:sandbox"].sessions = "per-session";
                c["airlock:agent"].envAllowlist = ["AIRLOCK_SESSION", "GITHUB_TOKEN"];
            }),
        );
        expect(listed.agent.envAllowlist).toEqual(["AIRLOCK_SESSION", "GITHUB_TOKEN"]);
    });

    it.each([
        [{ keep: 0 }, "airlock:sandbox.checkpoints.keep"],
        [{ keepDays: 1000 }, "airlock:sandbox.checkpoints.keepDays"],
        [{ auto: "yes" }, "airlock:sandbox.checkpoints.auto"],
        [{ minFreePercent: 90 }, "airlock:sandbox.checkpoints.minFreePercent"],
        [{ keepHours: 3 }, "airlock:sandbox.checkpoints"],
    ])("a bad checkpoints value %j is one line naming %s", (checkpoints, where) => {
        const file = editedStack("dev", (c) => (c["airlock:sandbox"].checkpoints = checkpoints));
        const problems = problemsOf(file);
        expect(problems).toHaveLength(1);
        expect(problems[0]).toMatch(new RegExp(`: ${where.replace(/\./g, "\\.")}: `));
    });

    it.each([
        ["per-task", "airlock:sandbox.sessions.mode"],
        [{ mode: "per-session", idleMinutes: 1 }, "airlock:sandbox.sessions.idleMinutes"],
        [{ mode: "per-session", max: 0 }, "airlock:sandbox.sessions.max"],
    ])("a bad sessions value %j is one line naming %s", (sessions, where) => {
        const file = editedStack("dev", (c) => (c["airlock:sandbox"].sessions = sessions));
        const problems = problemsOf(file);
        expect(problems).toHaveLength(1);
        expect(problems[0]).toMatch(new RegExp(`: ${where.replace(/\./g, "\\.")}: `));
    });

    it.each<[string, string, string]>([
        ["a tab as indentation", "config:\n  airlock:prefix: x\n\tairlock:agent: {}\n", ":3:1: YAML syntax error: Tabs are not allowed as indentation"],
        ["a duplicate key", "config:\n  airlock:prefix: x\n  airlock:prefix: y\n", ":3:3: YAML syntax error: Map keys must be unique"],
        ["an unclosed quote", 'config:\n  airlock:prefix: "x\n  airlock:agent: {}\n', ":4:1: YAML syntax error: Missing closing \"quote"],
    ])("a YAML syntax error (%s) is one line naming the file, line and column", (_, text, message) => {
        const file = path.join(tempDir("yaml"), "Pulumi.dev.yaml");
        fs.writeFileSync(file, text);
        expect(problemsOf(file)).toEqual([`${file}${message}`]);
    });

    it.each<[string, (c: Record<string, any>) => void, string]>([
        ["a wrong type", (c) => (c["airlock:sandbox"].workspaceVolumeGb = "ten"), 'airlock:sandbox.workspaceVolumeGb: expected a number, got the string "ten"'],
        ["a string for a boolean", (c) => (c["airlock:tailnet"].manageAcl = "yes"), 'airlock:tailnet.manageAcl: expected true or false, got the string "yes"'],
        ["a missing key", (c) => delete c["airlock:sandbox"].location, "airlock:sandbox.location: missing (expected one of fsn1, nbg1, hel1, ash, hil, sin)"],
        ["a missing number", (c) => (c["airlock:gateway"] = { ...c["airlock:gateway"], serverType: undefined }), "airlock:gateway.serverType: missing (expected one of cx23,"],
        ["a number too small", (c) => (c["airlock:agent"].uid = 5), "airlock:agent.uid: expected at least 1000, got the number 5"],
        ["a list for a string", (c) => (c["airlock:prefix"] = ["a"]), "airlock:prefix: expected a string, got a list of 1"],
    ])("%s says what is wrong, not just that something is required", (_, edit, message) => {
        const file = editedStack("dev", edit);
        expect(problemsOf(file)).toEqual([expect.stringContaining(`${file}: ${message}`)]);
    });
});

describe("airlock plan and doctor on bad input", () => {
    it("doctor on a broken stack file exits 2 with the same line as plan", () => {
        const dir = tempDir("doctor");
        editedStack("dev", (c) => (c["airlock:sandbox"].workspaceVolumeGb = "ten"), dir);
        const plan = airlock(["--stacks-dir", dir, "plan", "--stack", "dev", "--out", path.join(dir, "out")]);
        const doctor = airlock(["--stacks-dir", dir, "doctor", "--stack", "dev"]);
        expect(plan.status).toBe(2);
        expect(doctor.status).toBe(2);
        expect(doctor.stderr).toBe(plan.stderr);
        expect(doctor.stderr.trim()).toBe(`${path.join(dir, "Pulumi.dev.yaml")}: airlock:sandbox.workspaceVolumeGb: expected a number, got the string "ten"`);
    });

    it("doctor says when the stack file does not exist", () => {
        const dir = tempDir("doctor");
        const result = airlock(["--stacks-dir", dir, "doctor", "--stack", "acme", "--json"]);
        expect(result.status).toBe(1);
        const stackCheck = JSON.parse(result.stdout).checks.find((c: { name: string }) => c.name === "stack file");
        expect(stackCheck).toMatchObject({ ok: false, detail: `${path.join(dir, "Pulumi.acme.yaml")} does not exist` });
        expect(stackCheck.fix).toContain("airlock fork acme --from dev");
    });

    it("exits 2 with one line per problem, no stack trace, and writes nothing", () => {
        const dir = tempDir("cli");
        editedStack("dev", (c) => (c["airlock:sandbox"].serverType = "huge"), dir);
        const out = path.join(dir, "out");
        const result = airlock(["--stacks-dir", dir, "plan", "--stack", "dev", "--out", out]);
        expect(result.status).toBe(2);
        const lines = result.stderr.trim().split("\n");
        expect(lines).toEqual([`${path.join(dir, "Pulumi.dev.yaml")}: airlock:sandbox.serverType: ${lines[0].split(": ").slice(2).join(": ")}`]);
        expect(result.stderr).not.toMatch(/\bat .*\.ts:\d+/);
        expect(fs.existsSync(out)).toBe(false);
    });

    it("exits 2 naming the file when the stack does not exist", () => {
        const dir = tempDir("cli");
        const result = airlock(["--stacks-dir", dir, "plan", "--stack", "nope"]);
        expect(result.status).toBe(2);
        expect(result.stderr.trim()).toBe(`${path.join(dir, "Pulumi.nope.yaml")}: no such stack, and ${dir} holds none (Pulumi.<stack>.yaml)`);
    });
});
