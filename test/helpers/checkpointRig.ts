import * as fs from "node:fs";
import * as path from "node:path";
import { StackConfig } from "../../components/config/schema";
import { CHECKPOINT_ENGINE_PATH, checkpointsConfig } from "../../components/render/checkpoints";
import { RenderedHost } from "../../components/render/hosts";
import { renderSandboxCompose, renderSessionCompose, renderTryCompose, SESSION_WORKSPACES_DIR, TRY_NETWORKS } from "../../components/workloads/compose";
import { attachLoop, LoopDevice, mountsUnder, unmountUnder } from "./btrfs";
import { importTestImage, startDockerd, TestDocker } from "./dockerd";
import { engineOnHostTools } from "./hostTools";
import { renderedFile } from "./stacks";
import { run } from "./tools";

/**
 * The sandbox's checkpoint side for real, as root: a blank loop device laid out by
 * the rendered mount script, a test dockerd serving the agent's rootless socket
 * path (/run/user/<uid>/docker.sock), the rendered compose running on it (its shell
 * image carries git), and the rendered engine with its settings pointed at all
 * that. release() undoes everything, also after a failure.
 */
export interface CheckpointRig {
    work: string;
    dirs: { volume: string; workspaces: string; link: string };
    device: string;
    /** What the mount script said and did on the blank volume. */
    mounted: ReturnType<typeof run>;
    docker: TestDocker;
    agentSocket: string;
    compose: string;
    engine: string;
    configPath: string;
    config: Record<string, any>;
    /** Rewrites the engine's settings with `changes`. */
    configure(changes: Record<string, unknown>): void;
    /** The engine, run as the broker and the timer run it. */
    ckpt(...args: string[]): ReturnType<typeof run>;
    release(): Promise<void>;
}

export const RIG_IMAGE = "airlock-test/shell-git:1";

/** `netns`: the agent's daemon runs there with its own packet rules, as the sandbox's rootless one does in its namespace. */
export async function startCheckpointRig(cfg: StackConfig, sandbox: RenderedHost, volumeBytes: number, options: { netns?: string } = {}): Promise<CheckpointRig> {
    const undo: (() => unknown)[] = [];
    // Every step runs even when one before it fails: a daemon left running keeps its socket for the next holder of the uid.
    const release = async () => {
        const failures: unknown[] = [];
        for (const step of undo.reverse()) await Promise.resolve().then(step).catch((err) => failures.push(err));
        undo.length = 0;
        if (failures.length > 0) throw failures[0];
    };
    try {
        const uid = Number(run("id", ["-u", cfg.agent.user]).stdout.trim());
        if (!uid) throw new Error(`no user ${cfg.agent.user}`);
        const work = fs.mkdtempSync("/tmp/airlock-rig-");
        fs.chmodSync(work, 0o755);
        undo.push(() => mountsUnder(work).length === 0 && run("rm", ["-rf", work]));
        // A shared mount, as systemd makes / on the sandbox: what is mounted below it propagates as it would there.
        for (const args of [["--bind", work, work], ["--make-shared", work]]) {
            const made = run("mount", args);
            if (made.status !== 0) throw new Error(`mount ${args.join(" ")}: ${made.stderr}`);
        }
        undo.push(() => unmountUnder(work));

        const engine = path.join(work, "checkpoint");
        fs.writeFileSync(engine, engineOnHostTools(renderedFile(sandbox, CHECKPOINT_ENGINE_PATH)), { mode: 0o700 });
        const mountScript = path.join(work, "mount-workspace");
        fs.writeFileSync(mountScript, renderedFile(sandbox, "/usr/local/sbin/airlock-mount-workspace"), { mode: 0o700 });
        const dirs = { volume: path.join(work, "volume"), workspaces: path.join(work, "workspaces"), link: path.join(work, "workspace") };
        const loop: LoopDevice = attachLoop(work, "volume", volumeBytes);
        undo.push(() => loop.release());
        undo.push(() => unmountUnder(work));
        const mounted = run(mountScript, [], {
            env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", AIRLOCK_VOLUME_DEVICE: loop.device, AIRLOCK_VOLUME_DIR: dirs.volume, AIRLOCK_WORKSPACES_DIR: dirs.workspaces, AIRLOCK_WORKSPACE_LINK: dirs.link },
            timeout: 120_000,
        });
        if (mounted.status !== 0) throw new Error(`mount-workspace: ${mounted.stderr}`);

        const userSocketDir = `/run/user/${uid}`;
        if (!fs.existsSync(userSocketDir)) {
            fs.mkdirSync(userSocketDir, { recursive: true, mode: 0o700 });
            undo.push(() => fs.rmSync(userSocketDir, { recursive: true, force: true }));
        }
        run("chown", [`${uid}:${uid}`, userSocketDir]);
        const agentSocket = path.join(userSocketDir, "docker.sock");
        if (fs.existsSync(agentSocket)) {
            const listening = run("docker", ["--host", `unix://${agentSocket}`, "version", "--format", "{{.Server.Version}}"], { timeout: 10_000 });
            if (listening.status === 0) throw new Error(`${agentSocket} is served by another daemon already`);
            fs.rmSync(agentSocket, { force: true });
        }
        const dockerDir = path.join(work, "docker");
        fs.mkdirSync(dockerDir);
        // Its containers under the sandbox's seccomp profile, as the rendered daemon.json sets it.
        const seccompProfile = path.join(work, "docker-seccomp.json");
        const daemonJson = JSON.parse(renderedFile(sandbox, "/etc/airlock/docker-daemon.json.in"));
        fs.writeFileSync(seccompProfile, renderedFile(sandbox, daemonJson["seccomp-profile"]));
        const docker = await startDockerd(dockerDir, [agentSocket], options.netns, { "seccomp-profile": seccompProfile }, { iptables: options.netns !== undefined });
        undo.push(async () => {
            try {
                for (const id of docker.docker(["ps", "--all", "--quiet"]).stdout.split(/\s+/).filter(Boolean)) docker.docker(["rm", "--force", id]);
                // A network left behind keeps its bridge on the host after the daemon is gone.
                docker.docker(["network", "prune", "--force"]);
            } finally {
                await docker.stop();
                fs.rmSync(agentSocket, { force: true });
            }
        });
        run("chown", [String(uid), agentSocket]);
        // git for the classic scenario; btrfs for the agent making a subvolume from its container.
        importTestImage(docker, dockerDir, RIG_IMAGE, ["/usr/bin/git", "/usr/bin/btrfs"]);

        const images = { sandboxShell: RIG_IMAGE, browser: RIG_IMAGE, postgres: RIG_IMAGE, redis: RIG_IMAGE, api: RIG_IMAGE, adguard: RIG_IMAGE, agent: RIG_IMAGE, agentMemoryDb: RIG_IMAGE, services: {} };
        const compose = path.join(work, "compose.yml");
        fs.writeFileSync(compose, renderSandboxCompose(cfg, images).replaceAll("@TAILNET_IPV4@", "127.0.0.1").replace("- /workspace:/workspace", `- ${dirs.link}:/workspace`));
        const sessionCompose = path.join(work, "compose.session.yml.in");
        fs.writeFileSync(sessionCompose, renderSessionCompose(cfg, images).replaceAll(`${SESSION_WORKSPACES_DIR}/`, `${dirs.workspaces}/`));
        const tryCompose: Record<string, string> = {};
        for (const network of TRY_NETWORKS) {
            tryCompose[network] = path.join(work, `compose.try-${network}.yml.in`);
            fs.writeFileSync(tryCompose[network], renderTryCompose(cfg, images, network).replaceAll(`${SESSION_WORKSPACES_DIR}/`, `${dirs.workspaces}/`));
        }
        const up = run("docker-compose", ["--project-name", "airlock", "--file", compose, "up", "--detach"], { env: docker.env, timeout: 180_000 });
        if (up.status !== 0) throw new Error(`docker-compose up: ${up.stderr}`);

        const base = checkpointsConfig(cfg) as Record<string, any>;
        const configPath = path.join(work, "checkpoints.json");
        let config: Record<string, any> = {
            ...base,
            dockerHost: `unix://${agentSocket}`,
            volume: dirs.volume,
            workspacesMount: dirs.workspaces,
            runDir: path.join(work, "run"),
            sessionCompose,
            tryCompose,
            shell: { ...base.shell, composeFile: compose },
        };
        const configure = (changes: Record<string, unknown>) => {
            config = { ...config, ...changes };
            fs.writeFileSync(configPath, JSON.stringify(config));
        };
        configure({});
        const ckpt = (...args: string[]) => run(engine, args, { env: { PATH: "/usr/bin:/bin", AIRLOCK_CHECKPOINTS_CONFIG: configPath }, timeout: 300_000 });
        // What airlock-workspace.service runs after the mount: the workspaces' caps.
        const limited = ckpt("limits");
        if (limited.status !== 0) throw new Error(`airlock-checkpoint limits: ${limited.stderr}`);
        return {
            work,
            dirs,
            device: loop.device,
            mounted,
            docker,
            agentSocket,
            compose,
            engine,
            configPath,
            get config() {
                return config;
            },
            configure,
            ckpt,
            release,
        };
    } catch (err) {
        await release();
        throw err;
    }
}
