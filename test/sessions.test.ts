import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { gatePlan } from "../cli/gate";
import { planStack } from "../cli/offline";
import { readStackFile } from "../components/config/load";
import { CHECKPOINTS_CONFIG_PATH, SESSION_COMPOSE_PATH } from "../components/render/checkpoints";
import { COMPOSE_TEMPLATE_PATH, withTailnetKey } from "../components/render/hosts";
import { SESSION_PLACEHOLDER, SESSION_SECRET_VARIABLE } from "../components/workloads/compose";
import { judgeCloudInit } from "../policies/engine/judge";
import { editedStack, fakeTailnetKey, renderHosts, renderedFile, stackFile, tempDir } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * Per-session mode: every session's container comes from one rendered file,
 * compose.session.yml.in, built from the shell's own hardened definition and
 * judged by the gate wherever the shared container is.
 */

const perSession = (edit: (c: Record<string, any>) => void = () => {}) =>
    editedStack("dev", (c) => {
        c["airlock:sandbox"].sessions = "per-session";
        edit(c);
    });
const sandboxOf = (file: string) => renderHosts(readStackFile(file)).sandbox;
const gateContext = { agentUser: "agent", envAllowlist: ["GITHUB_TOKEN", "AIRLOCK_SESSION"], retentionDays: 30 };

describe("per-session containers", () => {
    it("only per-session mode renders the session compose file", () => {
        expect(renderHosts(readStackFile(stackFile("dev"))).sandbox.files.map((f) => f.path)).not.toContain(SESSION_COMPOSE_PATH);
        expect(sandboxOf(perSession()).files.map((f) => f.path)).toContain(SESSION_COMPOSE_PATH);
    });

    it("a session's container is the shell's definition with only its name and workspace changed, and @SESSION@ is nowhere else", () => {
        const sandbox = sandboxOf(perSession());
        const shared = YAML.parse(renderedFile(sandbox, COMPOSE_TEMPLATE_PATH)).services["agent-sandbox-shell"];
        const session = YAML.parse(renderedFile(sandbox, SESSION_COMPOSE_PATH));
        const shell = session.services["agent-sandbox-shell"];
        expect(Object.keys(session.services)).toEqual(["agent-sandbox-shell"]);
        expect({ ...shell, container_name: undefined, volumes: undefined }).toEqual({ ...shared, container_name: undefined, volumes: undefined });
        expect(shell.container_name).toBe("agent-@SESSION@");
        expect(shell.volumes).toEqual(["/var/lib/airlock/workspaces/@SESSION@:/workspace"]);
        const lines = renderedFile(sandbox, SESSION_COMPOSE_PATH).split("\n").filter((l) => !l.startsWith("#"));
        expect(lines.filter((l) => l.includes(SESSION_PLACEHOLDER))).toEqual(["    container_name: agent-@SESSION@", "      - /var/lib/airlock/workspaces/@SESSION@:/workspace"]);
        // Its networks are its own project's: no other session's container is on them.
        expect(session.networks).toEqual({ egress: {} });
    });

    it("a session's PostgreSQL and Redis are its own, on its own internal network, with its own secret; the sandbox's shared services are not the session's", () => {
        const stack = perSession((c) => {
            c["airlock:workloads"].postgres = { enabled: true };
            c["airlock:workloads"].redis = { enabled: true };
            c["airlock:workloads"].api = { enabled: true, image: "ghcr.io/example/api:1", port: 8080 };
        });
        const sandbox = sandboxOf(stack);
        const shared = YAML.parse(renderedFile(sandbox, COMPOSE_TEMPLATE_PATH)).services;
        const text = renderedFile(sandbox, SESSION_COMPOSE_PATH);
        const session = YAML.parse(text);
        expect(Object.keys(session.services)).toEqual(["agent-sandbox-shell", "postgres", "redis"]);
        const secret = `\${${SESSION_SECRET_VARIABLE}}`;
        const { postgres, redis } = session.services;
        expect(postgres.container_name).toBe("agent-postgres-@SESSION@");
        expect(redis.container_name).toBe("agent-redis-@SESSION@");
        expect(postgres.environment).toEqual({ POSTGRES_PASSWORD: secret, POSTGRES_DB: "agent" });
        expect({ ...postgres, container_name: undefined, environment: undefined }).toEqual({ ...shared.postgres, container_name: undefined, environment: undefined });
        expect(redis.command).toEqual(["redis-server", "--requirepass", secret]);
        expect({ ...redis, container_name: undefined, command: undefined }).toEqual({ ...shared.redis, container_name: undefined });
        expect(session.services["agent-sandbox-shell"].environment).toEqual({ PGHOST: "postgres", PGUSER: "postgres", PGDATABASE: "agent", PGPASSWORD: secret, REDISCLI_AUTH: secret });
        expect(session.services["agent-sandbox-shell"].networks).toEqual(["egress", "internal"]);
        expect(session.networks).toEqual({ egress: {}, internal: { internal: true } });
        expect(session.volumes).toEqual({ pgdata: {}, redisdata: {} });
        expect(text).not.toMatch(/external|trust|airlock_/);
    });

    it("no session's shell can bear another session's database's name (red team 5: session web-postgres's shell was session web's database)", () => {
        const session = YAML.parse(renderedFile(sandboxOf(perSession((c) => ((c["airlock:workloads"].postgres = { enabled: true }), (c["airlock:workloads"].redis = { enabled: true })))), SESSION_COMPOSE_PATH));
        const named = (ws: string) => Object.values(session.services as Record<string, { container_name: string }>).map((s) => s.container_name.replace(SESSION_PLACEHOLDER, ws));
        const shells = ["s-web-postgres", "s-web-redis", "s-postgres-s-web", "c-0123456789ab"].map((ws) => `agent-${ws}`);
        for (const ws of ["s-web", "s-postgres-s-web", "c-0123456789ab"]) {
            const [, ...databases] = named(ws);
            expect(databases.filter((d) => shells.includes(d)), ws).toEqual([]);
            // Every name a database gets is outside the shells' names (agent-s-… or agent-c-…).
            for (const d of databases) expect(d, ws).not.toMatch(/^agent-(s|c)-/);
        }
    });

    it("the sandbox's Docker has address room for every session's networks at the largest max (its default pools hold 31 networks)", () => {
        const sandbox = sandboxOf(perSession((c) => (c["airlock:sandbox"].sessions = { mode: "per-session", max: 64 })));
        const pools: { base: string; size: number }[] = JSON.parse(renderedFile(sandbox, "/etc/airlock/docker-daemon.json.in"))["default-address-pools"] ?? [];
        const networks = pools.reduce((sum, p) => sum + 2 ** (p.size - Number(p.base.split("/")[1])), 0);
        // Two networks a session (egress, internal) beside the shared project's three (egress, internal, browser).
        expect(networks).toBeGreaterThanOrEqual(64 * 2 + 3);
    });

    it("a per-session stack with its own databases plans clean (the secret is a variable, not a value)", async () => {
        const stack = perSession((c) => {
            c["airlock:workloads"].postgres = { enabled: true };
            c["airlock:workloads"].redis = { enabled: true };
        });
        expect(gatePlan(await planStack(stack, "dev"))).toEqual([]);
    });

    it("a per-session stack plans clean", async () => {
        expect(gatePlan(await planStack(perSession(), "dev"))).toEqual([]);
    });

    it.each<[string, Record<string, unknown>, string]>([
        ["an extra capability", { cap_add: ["SYS_ADMIN"] }, "containers-add-only-allowed-capabilities"],
        ["no pids limit", { pids_limit: -1 }, "containers-resource-limits"],
    ])("a loosened shell (%s) fails the gate for the shared container and for the sessions' alike", async (_, loosen, rule) => {
        const file = perSession((c) => Object.assign(c["airlock:workloads"].sandboxShell, loosen));
        const findings = gatePlan(await planStack(file, "dev")).filter((f) => f.rule === rule);
        const where = findings.map((f) => (f.within ?? []).map((w) => w.file).join(" > "));
        expect(where.some((w) => w.endsWith(COMPOSE_TEMPLATE_PATH))).toBe(true);
        expect(where.some((w) => w.endsWith(SESSION_COMPOSE_PATH))).toBe(true);
    });

    it("the gate judges the session file itself: a privileged session container in user_data is a violation", () => {
        const sandbox = sandboxOf(perSession());
        const original = renderedFile(sandbox, SESSION_COMPOSE_PATH);
        const tampered = original.replace("container_name: agent-@SESSION@", "container_name: agent-@SESSION@\n    privileged: true");
        expect(tampered).not.toBe(original);
        const cloudInit = withTailnetKey(sandbox.cloudInit, fakeTailnetKey());
        const before = judgeCloudInit(cloudInit, gateContext).filter((f) => f.rule === "containers-not-privileged");
        expect(before).toEqual([]);
        const doc = YAML.parseDocument(cloudInit);
        const files = doc.get("write_files") as YAML.YAMLSeq<YAML.YAMLMap>;
        const entry = files.items.find((item) => item.get("path") === SESSION_COMPOSE_PATH)!;
        entry.set("content", tampered);
        const after = judgeCloudInit(`#cloud-config\n${doc.toString({ lineWidth: 0 })}`, gateContext).filter((f) => f.rule === "containers-not-privileged");
        expect(after.map((f) => (f.within ?? []).map((w) => w.file))).toEqual([[SESSION_COMPOSE_PATH]]);
    });

    it.runIf(toolsAvailable("docker-compose", ["docker-compose"]))("with a session's name filled in, docker-compose takes the file", () => {
        const file = path.join(tempDir("session-compose"), "s-task-42.yml");
        fs.writeFileSync(file, renderedFile(sandboxOf(perSession()), SESSION_COMPOSE_PATH).replaceAll(SESSION_PLACEHOLDER, "s-task-42"));
        const result = run("docker-compose", ["--log-level", "ERROR", "--file", file, "config"]);
        expect(result.stderr).toBe("");
        expect(result.status).toBe(0);
        expect(YAML.parse(result.stdout).services["agent-sandbox-shell"].container_name).toBe("agent-s-task-42");
    });

    it("the engine's settings come from the stack", () => {
        const cfg = readStackFile(perSession((c) => (c["airlock:sandbox"].checkpoints = { keep: 5, keepDays: 2, minFreePercent: 20 })));
        const settings = JSON.parse(renderedFile(renderHosts(cfg).sandbox, CHECKPOINTS_CONFIG_PATH));
        expect(settings).toMatchObject({
            agentUser: "agent",
            dockerHost: "unix:///run/user/1500/docker.sock",
            keep: 5,
            keepDays: 2,
            minFreePercent: 20,
            sessions: { mode: "per-session", idleMinutes: 60, max: 8 },
            sessionCompose: SESSION_COMPOSE_PATH,
        });
    });
});
