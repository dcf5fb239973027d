import type { StackConfig } from "../config/schema";
import { renderSessionCompose, ResolvedImages, SANDBOX_COMPOSE_PROJECT, SESSION_SECRET_VARIABLE, SESSION_WORKSPACES_DIR } from "../workloads/compose";
import { fromTemplate, HostFile } from "./bundle";

/**
 * The sandbox's undo button (checkpoints) and disposable sessions: the root engine,
 * its settings, the destructive-command list, the retention timer and, in
 * per-session mode, the session compose file the gate judges.
 */

export const CHECKPOINT_ENGINE_PATH = "/usr/local/libexec/airlock/checkpoint";
export const CHECKPOINTS_CONFIG_PATH = "/etc/airlock/checkpoints.json";
export const DESTRUCTIVE_RULES_PATH = "/etc/airlock/destructive-commands";
/** Sourced by the wrapper, beside it. */
export const CHECKPOINT_CLIENT_PATH = "/usr/local/libexec/airlock/checkpoint-client.bash";
/** Named like a compose file, so the gate judges it wherever it is embedded. */
export const SESSION_COMPOSE_PATH = "/etc/airlock/compose.session.yml.in";
/** The volume's top level: root only. */
export const VOLUME_DIR = "/var/lib/airlock/volume";

/** What the root engine reads (templates/scripts/checkpoint); every path it touches is here. */
export function checkpointsConfig(cfg: StackConfig): Record<string, unknown> {
    const { keep, keepDays, minFreePercent } = cfg.sandbox.checkpoints;
    return {
        agentUser: cfg.agent.user,
        dockerHost: `unix:///run/user/${cfg.agent.uid}/docker.sock`,
        volume: VOLUME_DIR,
        workspacesMount: SESSION_WORKSPACES_DIR,
        runDir: "/run/airlock",
        keep,
        keepDays,
        minFreePercent,
        sessions: cfg.sandbox.sessions,
        shell: { composeFile: "/etc/airlock/compose.yml", project: SANDBOX_COMPOSE_PROJECT, service: "agent-sandbox-shell", container: "agent-sandbox-shell" },
        sessionCompose: SESSION_COMPOSE_PATH,
        sessionSecretVariable: SESSION_SECRET_VARIABLE,
    };
}

export function checkpointFiles(cfg: StackConfig, images: ResolvedImages): HostFile[] {
    const files: HostFile[] = [
        fromTemplate(CHECKPOINT_ENGINE_PATH, "scripts/checkpoint", {}, "0700"),
        { path: CHECKPOINTS_CONFIG_PATH, content: `${JSON.stringify(checkpointsConfig(cfg), null, 2)}\n`, permissions: "0644" },
        fromTemplate(DESTRUCTIVE_RULES_PATH, "checkpoints/destructive-commands", {}, "0644"),
        fromTemplate(CHECKPOINT_CLIENT_PATH, "scripts/checkpoint-client.bash", { autoCheckpoint: String(cfg.sandbox.checkpoints.auto), sessions: cfg.sandbox.sessions.mode }, "0644"),
        fromTemplate("/etc/systemd/system/airlock-checkpoints.service", "systemd/airlock-checkpoints.service", { engine: CHECKPOINT_ENGINE_PATH }, "0644"),
        fromTemplate("/etc/systemd/system/airlock-checkpoints.timer", "systemd/airlock-checkpoints.timer", {}, "0644"),
    ];
    if (cfg.sandbox.sessions.mode === "per-session") {
        files.push({ path: SESSION_COMPOSE_PATH, content: renderSessionCompose(cfg, images), permissions: "0644" });
    }
    return files;
}
