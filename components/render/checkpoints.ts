import type { StackConfig } from "../config/schema";
import { renderSessionCompose, renderTryCompose, ResolvedImages, SANDBOX_COMPOSE_PROJECT, SESSION_SECRET_VARIABLE, SESSION_WORKSPACES_DIR, TRY_NETWORKS, TryNetwork } from "../workloads/compose";
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
/** A try's compose file for each network mode (named like a compose file, so the gate judges them). */
export const TRY_COMPOSE_PATHS: Record<TryNetwork, string> = { none: "/etc/airlock/compose.try-none.yml.in", egress: "/etc/airlock/compose.try-egress.yml.in" };
/** Tries that may exist at once on the sandbox: each is a clone and a container with the shell's limits. */
export const MAX_TRIES = 4;
/** The longest a try may run, and its default (seconds), and the output it returns by default (KiB, head and tail each). */
export const TRY_LIMITS = { maxTimeout: 3600, timeout: 600, outputKb: 64, maxOutputKb: 1024 } as const;
/** Beside the wrapper: what a try hands back of its command's output. */
export const TRY_OUTPUT_PATH = "/usr/local/libexec/airlock/try-output";
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
        tryCompose: TRY_COMPOSE_PATHS,
        maxTries: MAX_TRIES,
        tryMaxTimeout: TRY_LIMITS.maxTimeout,
    };
}

export function checkpointFiles(cfg: StackConfig, images: ResolvedImages): HostFile[] {
    const files: HostFile[] = [
        fromTemplate(CHECKPOINT_ENGINE_PATH, "scripts/checkpoint", {}, "0700"),
        { path: CHECKPOINTS_CONFIG_PATH, content: `${JSON.stringify(checkpointsConfig(cfg), null, 2)}\n`, permissions: "0644" },
        fromTemplate(DESTRUCTIVE_RULES_PATH, "checkpoints/destructive-commands", {}, "0644"),
        fromTemplate(
            CHECKPOINT_CLIENT_PATH,
            "scripts/checkpoint-client.bash",
            {
                autoCheckpoint: String(cfg.sandbox.checkpoints.auto),
                sessions: cfg.sandbox.sessions.mode,
                tryTimeout: String(TRY_LIMITS.timeout),
                tryMaxTimeout: String(TRY_LIMITS.maxTimeout),
                tryOutputKb: String(TRY_LIMITS.outputKb),
                tryMaxOutputKb: String(TRY_LIMITS.maxOutputKb),
            },
            "0644",
        ),
        fromTemplate(TRY_OUTPUT_PATH, "scripts/try-output", {}, "0755"),
        fromTemplate("/etc/systemd/system/airlock-checkpoints.service", "systemd/airlock-checkpoints.service", { engine: CHECKPOINT_ENGINE_PATH }, "0644"),
        fromTemplate("/etc/systemd/system/airlock-checkpoints.timer", "systemd/airlock-checkpoints.timer", {}, "0644"),
    ];
    for (const network of TRY_NETWORKS) files.push({ path: TRY_COMPOSE_PATHS[network], content: renderTryCompose(cfg, images, network), permissions: "0644" });
    if (cfg.sandbox.sessions.mode === "per-session") {
        files.push({ path: SESSION_COMPOSE_PATH, content: renderSessionCompose(cfg, images), permissions: "0644" });
    }
    return files;
}
