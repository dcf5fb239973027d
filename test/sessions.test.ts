import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { gatePlan } from "../cli/gate";
import { planStack } from "../cli/offline";
import { readStackFile } from "../components/config/load";
import { CHECKPOINTS_CONFIG_PATH, SESSION_COMPOSE_PATH } from "../components/render/checkpoints";
import { COMPOSE_TEMPLATE_PATH, withTailnetKey } from "../components/render/hosts";
import { SESSION_PLACEHOLDER } from "../components/workloads/compose";
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
        expect(session.networks).toEqual({ egress: { external: true, name: "airlock_egress" } });
    });

    it("the session's containers join the backend network when the sandbox has one", () => {
        const session = YAML.parse(renderedFile(sandboxOf(perSession((c) => (c["airlock:workloads"].postgres = { enabled: true }))), SESSION_COMPOSE_PATH));
        expect(session.services["agent-sandbox-shell"].networks).toEqual(["egress", "internal"]);
        expect(session.networks.internal).toEqual({ external: true, name: "airlock_internal" });
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
