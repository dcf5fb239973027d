/**
 * The undo button's cost: checkpoint and restore latency of the real engine on a
 * btrfs volume (a loop device) for workspaces of 100 MiB, 1 GiB and 4 GiB (100 KiB
 * files: 1,000 / 10,000 / 40,000 of them), restore including the recreation of the
 * shell container on the test dockerd; a try's fixed cost (the engine's clone, container
 * and removal at each size, and `airlock try -- true` through the wrapper); and the
 * first command of a new session against a plain one, through the rendered wrapper and
 * the root broker. Needs root
 * (loop devices, dockerd); the test rig builds what the e2e tests use.
 */
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { readStackFile } from "../../components/config/load";
import { installWrapperFiles, startBroker } from "../../test/helpers/broker";
import { startCheckpointRig } from "../../test/helpers/checkpointRig";
import { createTestNet } from "../../test/helpers/netns";
import { enforceEgress } from "../../test/helpers/sshdRig";
import { editedStack, renderHosts } from "../../test/helpers/stacks";
import { hasCommand, isRoot, run } from "../../test/helpers/tools";
import { series, Series } from "./command";

export interface WorkspaceSize {
    label: string;
    bytes: number;
    files: number;
    checkpoint: Series;
    restore: Series;
    /** `btrfs subvolume snapshot -r` alone: the part of a checkpoint that is btrfs's. */
    snapshot: Series;
    /** A try's begin and end in the engine (clone, its container up, then down and the clone thrown away). */
    tryEngine: Series;
    /** How long btrfs's cleaner then took to drop the try's clone (`btrfs subvolume sync`), off the try's path. */
    tryCleaner: Series;
}

export interface CheckpointCost {
    sizes: WorkspaceSize[];
    /** One command (`true`) through the wrapper as the agent, no ssh. */
    commands: { plain: Series; plainNoAuto: Series; sessionWarm: Series; sessionCold: Series; tried: Series };
    /** When, and under what load, when measured on its own (`--only checkpoints`). */
    measured?: { date: string; loadAverage: number };
}

const USER = "airlock-bench-ck";
const MiB = 1024 ** 2;
const FILE_BYTES = 100 * 1024;
const SIZES = [
    { label: "100 MiB", bytes: 100 * MiB },
    { label: "1 GiB", bytes: 1024 * MiB },
    { label: "4 GiB", bytes: 4096 * MiB },
];

export function checkpointCostUnavailable(): string | undefined {
    if (!isRoot()) return "needs root (a loop device, a test dockerd)";
    const missing = ["losetup", "mkfs.btrfs", "btrfs", "dockerd", "docker", "docker-compose", "busybox", "git", "setpriv", "socat", "systemd-socket-activate", "useradd"].filter((t) => !hasCommand(t));
    return missing.length > 0 ? `missing ${missing.join(", ")}` : undefined;
}

/** Milliseconds of each of `runs` calls of `once` (which must succeed). */
function timed(label: string, runs: number, once: (i: number) => ReturnType<typeof run>, before: (i: number) => void, log: (line: string) => void): Series {
    const samples: number[] = [];
    for (let i = 0; i < runs; i++) {
        before(i);
        const started = performance.now();
        const result = once(i);
        const ms = performance.now() - started;
        if (result.status !== 0) throw new Error(`${label}: ${result.stderr.trim() || result.stdout.trim()}`);
        samples.push(ms);
    }
    const s = series(samples);
    log(`  ${label}: ${s.runs} runs, p50 ${s.p50.toFixed(1)} ms, p95 ${s.p95.toFixed(1)} ms`);
    return s;
}

/** Grows the workspace to `bytes` in files of FILE_BYTES (incompressible, never equal). */
function fillTo(workspace: string, bytes: number): number {
    const pool = crypto.randomBytes(4 * MiB);
    const target = Math.round(bytes / FILE_BYTES);
    for (let i = 0; i < target; i++) {
        const file = path.join(workspace, "data", `d${String(i % 100).padStart(2, "0")}`, `f${i}.bin`);
        if (fs.existsSync(file)) continue;
        fs.mkdirSync(path.dirname(file), { recursive: true });
        const offset = (i * 7919) % (pool.length - FILE_BYTES);
        const chunk = Buffer.from(pool.subarray(offset, offset + FILE_BYTES));
        chunk.writeUInt32LE(i, 0);
        fs.writeFileSync(file, chunk);
    }
    run("sync", []);
    return target;
}

export async function checkpointCost(log: (line: string) => void): Promise<CheckpointCost> {
    const cleanup: (() => unknown)[] = [];
    try {
        if (run("id", [USER]).status !== 0) {
            if (run("useradd", ["--create-home", "--shell", "/bin/bash", USER]).status !== 0) throw new Error(`useradd ${USER} failed`);
            cleanup.push(() => run("userdel", ["--remove", USER]));
        }
        cleanup.push(() => run("pkill", ["--uid", USER]));
        const uid = Number(run("id", ["-u", USER]).stdout.trim());
        const stackFor = (sessions: string, auto: boolean) =>
            readStackFile(
                editedStack("dev", (c) => {
                    c["airlock:agent"].user = USER;
                    c["airlock:agent"].uid = uid;
                    c["airlock:sandbox"].sessions = sessions;
                    c["airlock:sandbox"].checkpoints = { auto };
                    c["airlock:workloads"].postgres = { enabled: false };
                    c["airlock:workloads"].browser = { enabled: false };
                }),
            );
        const cfg = stackFor("per-session", true);
        log("building the checkpoint rig (btrfs on a loop device, a test dockerd)...");
        const rig = await startCheckpointRig(cfg, renderHosts(cfg).sandbox, 12 * 1024 * MiB);
        cleanup.push(() => rig.release());
        rig.configure({ sessions: { ...rig.config.sessions, max: 64 } });
        const workspace = path.join(rig.dirs.workspaces, "shared");

        // Waits for btrfs's cleaner to drop what deleted subvolumes held, so a sample never pays
        // for the one before it (with quotas on, a 4 GiB backlog makes every commit wait seconds).
        const settle = () => {
            const started = performance.now();
            const synced = run("btrfs", ["subvolume", "sync", rig.dirs.volume]);
            if (synced.status !== 0) throw new Error(`btrfs subvolume sync: ${synced.stderr.trim()}`);
            return performance.now() - started;
        };
        const sizes: WorkspaceSize[] = [];
        for (const size of SIZES) {
            log(`filling the workspace to ${size.label}...`);
            const files = fillTo(workspace, size.bytes);
            // A few files change between checkpoints, as between an agent's steps.
            const touch = (i: number) => {
                for (let k = 0; k < 5; k++) fs.writeFileSync(path.join(workspace, `edit-${k}.txt`), `step ${i} ${crypto.randomBytes(2048).toString("hex")}\n`);
            };
            // A bare snapshot beside each checkpoint, in the same state: how much of a checkpoint is btrfs's.
            const bare: number[] = [];
            const taken: number[] = [];
            for (let i = 0; i < 21; i++) {
                touch(i);
                const snapStarted = performance.now();
                const snapped = run("btrfs", ["subvolume", "snapshot", "-r", workspace, path.join(rig.dirs.volume, `bench-${sizes.length}-${i}`)]);
                bare.push(performance.now() - snapStarted);
                if (snapped.status !== 0) throw new Error(`btrfs snapshot at ${size.label}: ${snapped.stderr.trim()}`);
                touch(i);
                const started = performance.now();
                const created = rig.ckpt("create", "shared", "--label-b64", Buffer.from(`bench ${size.label}`).toString("base64"));
                taken.push(performance.now() - started);
                if (created.status !== 0) throw new Error(`checkpoint at ${size.label}: ${created.stderr.trim()}`);
            }
            const checkpoint = series(taken);
            log(`  checkpoint at ${size.label}: ${checkpoint.runs} runs, p50 ${checkpoint.p50.toFixed(1)} ms, p95 ${checkpoint.p95.toFixed(1)} ms`);
            const snapshot = series(bare);
            log(`  btrfs snapshot alone at ${size.label} (beside each checkpoint): p50 ${snapshot.p50.toFixed(1)} ms, p95 ${snapshot.p95.toFixed(1)} ms`);
            for (let i = 0; i < 21; i++) run("btrfs", ["subvolume", "delete", path.join(rig.dirs.volume, `bench-${sizes.length}-${i}`)]);
            log(`  btrfs's cleaner after deleting the 21 bare snapshots: ${settle().toFixed(0)} ms`);
            const restore = timed(`restore at ${size.label}`, 9, () => rig.ckpt("restore", "shared", "--last"), (i) => (touch(i), settle()), log);
            const cleaned: number[] = [];
            const tryEngine = timed(
                `try at ${size.label} (the engine's begin and end)`,
                9,
                () => {
                    const begun = rig.ckpt("try-begin", "shared", "--timeout", "60", "--network", "none");
                    if (begun.status !== 0) return begun;
                    return rig.ckpt("try-end", "shared", "--id", begun.stdout.split(" ")[1], "--status", "1");
                },
                (i) => {
                    touch(i);
                    cleaned.push(settle());
                },
                log,
            );
            const tryCleaner = series([...cleaned.slice(1), settle()]);
            log(`  btrfs's cleaner after each try at ${size.label}: p50 ${tryCleaner.p50.toFixed(1)} ms`);
            sizes.push({ ...size, files, checkpoint, restore, snapshot, tryEngine, tryCleaner });
        }

        // The wrapper as sshd runs it (no ssh: that cost is in the command series), with the broker and the
        // real engine, in a namespace where the sandbox's egress rules hold (else it refuses to run anything).
        log("one command through the wrapper: plain, in a warm session, in a new session...");
        const net = createTestNet("bck");
        cleanup.push(() => net.close());
        enforceEgress(net.server, renderHosts(cfg).sandbox, uid, "198.18.7.2");
        const wrappers: Record<string, string> = {};
        for (const [name, stack] of [["plain", stackFor("shared", true)], ["plainNoAuto", stackFor("shared", false)], ["session", cfg]] as const) {
            const dir = fs.mkdtempSync(`/run/airlock-bench-ck-${name}-`);
            cleanup.push(() => fs.rmSync(dir, { recursive: true, force: true }));
            fs.chmodSync(dir, 0o755);
            const sandbox = renderHosts(stack).sandbox;
            const { wrapper, ...files } = installWrapperFiles(sandbox, dir);
            const broker = await startBroker(files.broker, files.socket, files.stateDir, USER, { AIRLOCK_CHECKPOINT_ENGINE: rig.engine, AIRLOCK_CHECKPOINTS_CONFIG: rig.configPath });
            cleanup.push(() => broker.stop());
            wrappers[name] = wrapper;
        }
        const wrapper = (which: string, env: Record<string, string> = {}, command = "true") =>
            run("ip", ["netns", "exec", net.server, "runuser", "-u", USER, "--", "env", "-i", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", `SSH_ORIGINAL_COMMAND=${command}`, "SSH_CONNECTION=100.100.7.2 40000 100.100.7.1 22", ...Object.entries(env).map(([k, v]) => `${k}=${v}`), wrappers[which]], { timeout: 120_000 });
        const none = () => {};
        const plain = timed("plain command (shared, automatic checkpoints on)", 40, () => wrapper("plain"), none, log);
        const plainNoAuto = timed("plain command (shared, automatic checkpoints off)", 40, () => wrapper("plainNoAuto"), none, log);
        wrapper("session", { AIRLOCK_SESSION: "warm" });
        const sessionWarm = timed("command in a running session", 40, () => wrapper("session", { AIRLOCK_SESSION: "warm" }), none, log);
        const sessionCold = timed("first command of a new session", 9, (i) => wrapper("session", { AIRLOCK_SESSION: `cold-${i}` }), none, log);
        const tried = timed("airlock try -- true (shared, 4 GiB workspace)", 9, () => wrapper("plainNoAuto", {}, "airlock try -- true"), () => settle(), log);
        return { sizes, commands: { plain, plainNoAuto, sessionWarm, sessionCold, tried } };
    } finally {
        for (const undo of cleanup.reverse()) await undo();
    }
}
