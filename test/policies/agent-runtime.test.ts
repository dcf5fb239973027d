import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { readStackFile } from "../../components/config/load";
import { COMPOSE_TEMPLATE_PATH } from "../../components/render/hosts";
import { GATEWAY_AGENT_PATHS } from "../../components/workloads/compose";
import { HERMES_RUNTIME } from "../../policies/contract";
import { renderedFile, renderHosts, stackFile } from "../helpers/stacks";
import { cloudInit, compose, composeText, DIGEST, hardenedService, ruleIds } from "./helpers";

/**
 * agent-runtime-commands-on-sandbox: a Hermes service that airlock would start passes;
 * changing ONE property of it (a compose key, or a line of the managed files inside a
 * host's user_data) fails exactly this rule.
 */

const RULE = "agent-runtime-commands-on-sandbox";

function runtimeService(): Record<string, any> {
    return {
        ...hardenedService(),
        image: `nousresearch/hermes-agent:v2026.7.20@${DIGEST}`,
        read_only: false,
        command: [HERMES_RUNTIME.preflight, "hermes", "gateway", "run"],
        environment: { HERMES_HOME: "/opt/data", PATH: "/opt/hermes/.venv/bin:/usr/bin:/bin" },
        volumes: [
            "/var/lib/airlock/agent-state/agent-state:/opt/data",
            `/etc/airlock/agent/hermes-config.yaml:${HERMES_RUNTIME.managedConfig}:ro`,
            `/etc/airlock/agent/hermes.env:${HERMES_RUNTIME.managedEnv}:ro`,
            `${HERMES_RUNTIME.preflight}:${HERMES_RUNTIME.preflight}:ro`,
            "/etc/airlock/agent/hermes-user.env:/opt/data/.env:ro",
        ],
        ports: [],
    };
}

describe("agent-runtime-commands-on-sandbox on compose", () => {
    it("airlock's way of running Hermes passes; a service of another image is not judged", () => {
        expect(compose(composeText({ agent: runtimeService() }))).toEqual([]);
        expect(compose(composeText({ shell: hardenedService() }))).toEqual([]);
    });

    it.each<[string, (s: Record<string, any>) => void, RegExp]>([
        ["no managed config.yaml", (s) => s.volumes.splice(1, 1), /nothing is mounted at \/etc\/hermes\/config\.yaml/],
        ["a writable managed config.yaml", (s) => (s.volumes[1] = s.volumes[1].replace(/:ro$/, "")), /\/etc\/hermes\/config\.yaml is mounted writable/],
        ["no managed .env", (s) => s.volumes.splice(2, 1), /nothing is mounted at \/etc\/hermes\/\.env/],
        ["the long syntax without read_only", (s) => (s.volumes[2] = { type: "bind", source: "/etc/airlock/agent/hermes.env", target: HERMES_RUNTIME.managedEnv }), /\.env is mounted writable/],
        ["TERMINAL_ENV=local", (s) => (s.environment.TERMINAL_ENV = "local"), /TERMINAL_ENV is "local"/],
        ["TERMINAL_ENV=docker in list form", (s) => (s.environment = ["HERMES_HOME=/opt/data", "TERMINAL_ENV=docker"]), /TERMINAL_ENV is "docker"/],
        ["a managed scope elsewhere", (s) => (s.environment.HERMES_MANAGED_DIR = "/opt/data/managed"), /HERMES_MANAGED_DIR moves/],
        ["no preflight", (s) => (s.command = ["hermes", "gateway", "run"]), /does not start with \/usr\/local\/libexec\/airlock\/hermes-preflight/],
        ["no command at all", (s) => delete s.command, /does not start with/],
        ["its entrypoint replaced", (s) => (s.entrypoint = ["hermes"]), /entrypoint is replaced/],
        ["a writable preflight", (s) => (s.volumes[3] = `${HERMES_RUNTIME.preflight}:${HERMES_RUNTIME.preflight}`), /preflight is not mounted read-only/],
        ["the image from another registry", (s) => (s.volumes = s.volumes.slice(0, 1)) && (s.image = `ghcr.io/example/hermes-agent:1@${DIGEST}`), /nothing is mounted at/],
        ["an image of another name, given Hermes's state", (s) => (s.volumes = s.volumes.slice(0, 1)) && (s.image = `ghcr.io/example/my-agent:1@${DIGEST}`), /nothing is mounted at/],
        ["Hermes's own .env writable", (s) => s.volumes.splice(4, 1), /Hermes's own \.env \(\/opt\/data\/\.env\) is in its writable state volume/],
        ["Hermes's own .env elsewhere (HERMES_HOME moved)", (s) => (s.environment.HERMES_HOME = "/data"), /\/data\/\.env\) is in its writable state volume/],
        ["a managed file from inside the state volume", (s) => (s.volumes[1] = `/var/lib/airlock/agent-state/agent-state/config.yaml:${HERMES_RUNTIME.managedConfig}:ro`), /inside a directory the container can write/],
        ["a shell between the preflight and Hermes", (s) => (s.command = [HERMES_RUNTIME.preflight, "sh", "-c", "HERMES_MANAGED_DIR=/tmp exec hermes gateway run"]), /the preflight starts "sh", not hermes/],
        ["env between the preflight and Hermes", (s) => (s.command = [HERMES_RUNTIME.preflight, "env", "HERMES_MANAGED_DIR=/opt/data", "hermes"]), /the preflight starts "env", not hermes/],
        ["LD_PRELOAD", (s) => (s.environment.LD_PRELOAD = "/opt/data/x.so"), /LD_PRELOAD is set/],
        ["PYTHONPATH", (s) => (s.environment.PYTHONPATH = "/opt/data"), /PYTHONPATH is set/],
        ["a PATH through the state volume", (s) => (s.environment.PATH = "/opt/data/.local/bin:/usr/bin"), /PATH has \/opt\/data\/\.local\/bin/],
        ["a PATH through /tmp", (s) => (s.environment.PATH = "/usr/bin:/tmp/bin"), /PATH has \/tmp\/bin/],
    ])("%s fails it", (_, change, message) => {
        const service = runtimeService();
        change(service);
        const findings = compose(composeText({ agent: service }), "compose.yml");
        expect(ruleIds(findings)).toEqual([RULE]);
        expect(findings.map((f) => f.message).join("\n")).toMatch(message);
        expect(findings[0].where).toBe("agent");
    });
});

describe("agent-runtime-commands-on-sandbox inside the gateway's user_data", () => {
    const gateway = renderHosts(readStackFile(stackFile("dev"))).gateway;
    /** The gateway's user_data with one rendered file's content changed. */
    const withFile = (filePath: string, change: (content: string) => string) => {
        const doc = YAML.parseDocument(gateway.cloudInit);
        const files = doc.get("write_files") as YAML.YAMLSeq;
        const entry = files.items.find((item) => (item as YAML.YAMLMap).get("path") === filePath) as YAML.YAMLMap;
        // Written plain, whatever encoding the rendered entry has (cloud-init takes both).
        entry.set("content", change(renderedFile(gateway, filePath)));
        entry.delete("encoding");
        return doc.toString({ lineWidth: 0 });
    };

    it("the rendered gateway passes", () => {
        expect(cloudInit(gateway.cloudInit).filter((f) => f.rule === RULE)).toEqual([]);
        expect(YAML.parse(renderedFile(gateway, COMPOSE_TEMPLATE_PATH)).services.agent.image).toMatch(/^nousresearch\/hermes-agent:v2026\.7\.20@sha256:/);
    });

    it.each<[string, string, (c: string) => string, RegExp]>([
        ["backend local", GATEWAY_AGENT_PATHS.hermesConfig, (c) => c.replace("backend: ssh", "backend: local"), /selects terminal backend "local"/],
        ["no terminal section", GATEWAY_AGENT_PATHS.hermesConfig, (c) => c.replace(/^terminal:\n(  .*\n|\s*#.*\n)*/m, ""), /selects terminal backend "\(none: local\)"/],
        ["ssh with no host", GATEWAY_AGENT_PATHS.hermesConfig, (c) => c.replace(/^  ssh_host: .*\n/m, ""), /with no ssh_host/],
        ["TERMINAL_ENV=local in the managed .env", GATEWAY_AGENT_PATHS.hermesEnv, (c) => c.replace("TERMINAL_ENV=ssh", "TERMINAL_ENV=local"), /managed \.env sets TERMINAL_ENV to "local"/],
        ["no TERMINAL_ENV in the managed .env", GATEWAY_AGENT_PATHS.hermesEnv, (c) => c.replace("TERMINAL_ENV=ssh\n", ""), /managed \.env sets TERMINAL_ENV to "\(nothing: local\)"/],
    ])("%s fails it", (_, file, change, message) => {
        const findings = cloudInit(withFile(file, change));
        expect(ruleIds(findings)).toEqual([RULE]);
        expect(findings.map((f) => f.message).join("\n")).toMatch(message);
    });
});
