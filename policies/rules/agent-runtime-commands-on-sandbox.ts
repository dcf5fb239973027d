import { AIRLOCK_ONLY } from "../engine/profile";
import * as path from "node:path";
import * as YAML from "yaml";
import { FORBIDDEN_ENV, HERMES_RUNTIME, isHermesImage } from "../contract";
import type { ContainerSpec } from "../engine/container";
import { coversPath, whenKnown } from "../engine/container";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";

/**
 * Hermes Agent runs every command in its own container unless it is told otherwise:
 * its terminal backend defaults to "local" (tools/terminal_tool.py), and a config.yaml
 * or .env in its state volume decides (hermes_cli/config.py, env_loader.py, which
 * reloads that .env on every turn). Only its managed scope (/etc/hermes,
 * hermes_cli/managed_scope.py) is laid over both.
 */
const MANAGED_DIR = path.posix.dirname(HERMES_RUNTIME.managedConfig);
/** The published image's HERMES_HOME, where the compose file does not set one. */
const DEFAULT_HERMES_HOME = "/opt/data";

/** A Hermes service: its image says so, or it is given Hermes's state or managed scope. */
function isHermes(c: ContainerSpec): boolean {
    if (typeof c.image === "string" && isHermesImage(c.image)) return true;
    return "HERMES_HOME" in c.environment || c.mounts.some((m) => coversPath(MANAGED_DIR, m.target) || coversPath(m.target, MANAGED_DIR));
}

function mountAt(c: ContainerSpec, target: string) {
    return c.mounts.find((m) => m.target.replace(/\/+$/, "") === target);
}

/** Where the container can write: the targets of its writable mounts, and its tmpfs. */
function writableInside(c: ContainerSpec): string[] {
    return [...c.mounts.filter((m) => !m.readOnly).map((m) => m.target), "/tmp", "/run", "/var/tmp", "/dev/shm"];
}

/** What a managed file mounted at `target` says, when the same user_data writes it; undefined when it is not known here. */
function mountedText(c: ContainerSpec, target: string): string | undefined {
    const source = mountAt(c, target)?.source;
    return source === undefined ? undefined : c.hostFiles?.[source];
}

/** The backend and host a managed config.yaml selects ("" when it selects none). */
function managedConfigSays(text: string): { backend: string; host: string } {
    let terminal: unknown;
    try {
        terminal = (YAML.parse(text) as Record<string, unknown> | null)?.terminal;
    } catch {
        return { backend: "", host: "" };
    }
    const t = terminal !== null && typeof terminal === "object" ? (terminal as Record<string, unknown>) : {};
    return { backend: String(t.backend ?? t.env_type ?? ""), host: String(t.ssh_host ?? "") };
}

/** NAME=value lines of a .env (the last one wins, as python-dotenv loads them). */
function envFileSays(text: string): Record<string, string> {
    const values: Record<string, string> = {};
    for (const line of text.split("\n")) {
        const m = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$/.exec(line);
        if (m) values[m[1]] = m[2].replace(/^(["'])(.*)\1$/, "$2");
    }
    return values;
}

export const agentRuntimeCommandsOnSandbox: Rule = {
    kind: "container",
    id: "agent-runtime-commands-on-sandbox",
    profiles: AIRLOCK_ONLY,
    description:
        "An agent runtime (Hermes Agent) runs every command over ssh on the sandbox, never in its own container: its terminal is pinned in Hermes's " +
        "managed scope (read-only /etc/hermes/config.yaml and /etc/hermes/.env, which Hermes lays over the config.yaml and .env of its state volume) " +
        "to backend ssh, its own .env is read-only, nothing in its environment moves it or changes how its programs run, and it starts through " +
        "airlock-hermes-preflight, which refuses to start it otherwise, and then as hermes itself.",
    remediation:
        "Run the runtime from airlock:gateway.agent (airlock renders all of this), or give the service read-only mounts, from files outside its " +
        "writable mounts, of a config.yaml with terminal.backend: ssh and terminal.ssh_host at /etc/hermes/config.yaml, of a .env with " +
        `TERMINAL_ENV=ssh at /etc/hermes/.env and of a file over $HERMES_HOME/.env, and the command ${HERMES_RUNTIME.preflight} hermes ...`,
    check: (c) => {
        if (!isHermes(c)) return [];
        return whenKnown(c, ["mounts", "environment", "command", "entrypoint"], () => {
            const problems: Problem[] = [];
            const at = (message: string, fix?: string): Problem => ({ message: `${c.name}: ${message}`, line: c.line, where: c.name, ...(fix ? { fix } : {}) });
            const writable = writableInside(c);
            const writableSources = c.mounts.filter((m) => !m.readOnly && m.source?.startsWith("/")).map((m) => m.source!);
            const home = c.environment.HERMES_HOME ?? DEFAULT_HERMES_HOME;
            for (const target of [HERMES_RUNTIME.managedConfig, HERMES_RUNTIME.managedEnv, `${home}/.env`]) {
                const mount = mountAt(c, target);
                if (!mount) {
                    problems.push(
                        target.startsWith(MANAGED_DIR)
                            ? at(`nothing is mounted at ${target}, so a file in Hermes's state volume decides where its commands run (by default: here)`)
                            : at(`Hermes's own .env (${target}) is in its writable state volume: Hermes reloads it on every turn, over the environment`, `mount a read-only file of the host's at ${target}`),
                    );
                } else if (!mount.readOnly) {
                    problems.push(at(`${target} is mounted writable: the runtime could change its own terminal`, `mount ${mount.source ?? "it"} at ${target} with :ro`));
                } else if (mount.source && writableSources.some((dir) => coversPath(dir, mount.source!))) {
                    problems.push(at(`${target} comes from ${mount.source}, inside a directory the container can write through another mount`));
                }
            }
            for (const [name, value] of Object.entries(c.environment)) {
                if (name === "TERMINAL_ENV" && value !== "ssh") problems.push(at(`TERMINAL_ENV is ${JSON.stringify(value ?? "")}: Hermes would run the agent's commands in this container`));
                if (name === "HERMES_MANAGED_DIR" && value !== MANAGED_DIR) {
                    problems.push(at(`HERMES_MANAGED_DIR moves Hermes's managed scope away from ${MANAGED_DIR}`, "remove HERMES_MANAGED_DIR from the environment"));
                }
                if (name === "PATH") {
                    const planted = (value ?? "").split(":").filter((dir) => dir !== "" && writable.some((w) => coversPath(w, dir)));
                    if (planted.length > 0) problems.push(at(`PATH has ${planted.join(", ")}, where the runtime can put a program of its own (an ssh, say)`));
                } else if (FORBIDDEN_ENV.test(name) && name !== "HOME") {
                    problems.push(at(`${name} is set: it changes how the runtime's programs run`, `remove ${name} from the environment`));
                }
            }
            const preflight = mountAt(c, HERMES_RUNTIME.preflight);
            if (c.entrypoint !== undefined) problems.push(at("its entrypoint is replaced, so the image's start (and the preflight in its command) may never run", "remove entrypoint; put the runtime's command after the preflight in command"));
            if (c.command?.[0] !== HERMES_RUNTIME.preflight) {
                problems.push(at(`its command does not start with ${HERMES_RUNTIME.preflight}: nothing refuses to start Hermes when its terminal is not ssh to the sandbox`));
            } else if (!preflight?.readOnly) {
                problems.push(at(`${HERMES_RUNTIME.preflight} is not mounted read-only from the host`));
            } else if (c.command[1] !== "hermes") {
                problems.push(at(`the preflight starts ${JSON.stringify(c.command[1] ?? "")}, not hermes: what it checked is not what runs`, `command: [${HERMES_RUNTIME.preflight}, hermes, ...]`));
            }
            // Inside a host's user_data the managed files themselves are known: they must select ssh.
            const config = mountedText(c, HERMES_RUNTIME.managedConfig);
            if (config !== undefined) {
                const says = managedConfigSays(config);
                if (says.backend !== "ssh" || says.host === "") {
                    problems.push(at(`its managed config.yaml selects terminal backend ${JSON.stringify(says.backend || "(none: local)")}${says.backend === "ssh" ? " with no ssh_host" : ""}, not ssh to the sandbox`));
                }
            }
            const env = mountedText(c, HERMES_RUNTIME.managedEnv);
            if (env !== undefined) {
                const says = envFileSays(env);
                if (says.TERMINAL_ENV !== "ssh") problems.push(at(`its managed .env sets TERMINAL_ENV to ${JSON.stringify(says.TERMINAL_ENV ?? "(nothing: local)")}, not ssh`));
                if ("HERMES_MANAGED_DIR" in says) problems.push(at("its managed .env moves Hermes's managed scope (HERMES_MANAGED_DIR)"));
            }
            return problems;
        });
    },
};
