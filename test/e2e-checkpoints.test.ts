import { spawn } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { attachLoop, LoopDevice, mountsUnder, unmountUnder } from "./helpers/btrfs";
import { CheckpointRig, RIG_IMAGE, startCheckpointRig } from "./helpers/checkpointRig";
import type { TestDocker } from "./helpers/dockerd";
import { editedStack, renderHosts } from "./helpers/stacks";
import { freeUid, isRoot, run, toolsAvailable } from "./helpers/tools";

/**
 * The workspace volume and the checkpoint engine for real, as root: a btrfs
 * filesystem on a loop device, formatted and laid out by the rendered
 * airlock-mount-workspace, the rendered engine driving a test dockerd through the
 * agent user's socket, and the agent user attacking its own safety net.
 */

/** A stand-in for the Docker Engine API: notes each client's uid (SO_PEERCRED), answers every request with argv[3]. */
const FAKE_DOCKER = `
import socket, struct, sys
path, peers, answer = sys.argv[1], sys.argv[2], sys.argv[3].encode()
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen()
while True:
    conn, _ = server.accept()
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    with open(peers, "a") as f:
        f.write(f"{uid}\\n")
    conn.recv(65536)
    if answer == b"TRICKLE":
        # An answer that never ends, a byte at a time: no read on the way ever times out.
        import time
        conn.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Type: application/json\\r\\n\\r\\n[")
        while True:
            time.sleep(2)
            conn.sendall(b" ")
    conn.sendall(b"HTTP/1.0 200 OK\\r\\nContent-Type: application/json\\r\\n\\r\\n" + answer)
    conn.close()
`;

const canRun = isRoot() && toolsAvailable("e2e checkpoints", ["losetup", "mkfs.btrfs", "btrfs", "btrfs-convert", "mkfs.ext4", "dockerd", "docker", "docker-compose", "busybox", "git", "setpriv", "useradd", "gcc"]);
if (!isRoot()) console.warn("SKIPPED e2e checkpoints: loop devices and a test dockerd need root (CI runs it as root)");

const AGENT = "airlock-ckpt";
const IMAGE = RIG_IMAGE;
const b64 = (text: string) => Buffer.from(text, "utf8").toString("base64");
const GiB = 1024 ** 3;

describe.runIf(canRun)("checkpoints on a real btrfs volume", () => {
    let rig: CheckpointRig | undefined;
    let root: string;
    const loops: LoopDevice[] = [];
    let createdUser = false;
    let uid: number;
    let engine: string;
    let mountScript: string;
    let config: Record<string, any>;
    let compose: string;
    let dockerd: TestDocker | undefined;
    // The main volume's paths.
    let volume: string;
    let workspaces: string;
    let link: string;

    const asAgent = (script: string) => run("runuser", ["-u", AGENT, "--", "bash", "-c", script], { timeout: 60_000 });
    const exec = (container: string, script: string) => dockerd!.docker(["exec", container, "bash", "-c", script]);
    const containerId = (name: string) => dockerd!.docker(["inspect", "--format", "{{.Id}}", name]).stdout.trim();
    const ckpt = (...args: string[]) => rig!.ckpt(...args);
    const list = (ws = "shared") => JSON.parse(ckpt("list", ws, "--json").stdout) as { id: number; kind: string; label: string; then: string | null; exit: number | null; containers: { name: string; image: string; imageId: string }[] | null }[];
    const writeConfig = (changes: Record<string, unknown> = {}) => {
        rig!.configure(changes);
        config = rig!.config;
    };
    /** The rendered mount script with the test's device and directories. */
    const mountVolume = (device: string, dirs: { volume: string; workspaces: string; link: string }) =>
        run(mountScript, [], {
            env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", AIRLOCK_VOLUME_DEVICE: device, AIRLOCK_VOLUME_DIR: dirs.volume, AIRLOCK_WORKSPACES_DIR: dirs.workspaces, AIRLOCK_WORKSPACE_LINK: dirs.link },
            timeout: 120_000,
        });
    /** Moves checkpoints `seconds` into the past (their metadata: what retention reads). */
    const ageCheckpoints = (ids: number[], seconds: number, ws = "shared") => {
        for (const id of ids) {
            const file = path.join(volume, "checkpoints", ws, `${id}.json`);
            const meta = JSON.parse(fs.readFileSync(file, "utf8"));
            meta.epoch -= seconds;
            fs.writeFileSync(file, JSON.stringify(meta));
        }
    };
    const freePercent = () => {
        const st = fs.statfsSync(volume);
        return (100 * st.bavail) / st.blocks;
    };
    const dirsUnder = (base: string) => ({ volume: path.join(base, "volume"), workspaces: path.join(base, "workspaces"), link: path.join(base, "workspace") });

    beforeAll(async () => {
        if (run("id", [AGENT]).status !== 0) {
            expect(run("useradd", ["--create-home", "--shell", "/bin/bash", "--uid", String(freeUid(1611, 1629)), AGENT]).status).toBe(0);
            createdUser = true;
        }
        uid = Number(run("id", ["-u", AGENT]).stdout.trim());
        const cfg = readStackFile(
            editedStack("dev", (c) => {
                c["airlock:agent"].user = AGENT;
                c["airlock:sandbox"].sessions = "per-session";
                c["airlock:workloads"].postgres = { enabled: false };
            }),
        );
        rig = await startCheckpointRig(cfg, renderHosts(cfg).sandbox, 2 * GiB);
        root = rig.work;
        engine = rig.engine;
        mountScript = path.join(root, "mount-workspace");
        ({ volume, workspaces, link } = rig.dirs);
        compose = rig.compose;
        dockerd = rig.docker;
        config = rig.config;
        expect(rig.mounted.stderr).toContain("blank volume: formatting it btrfs");
    }, 300_000);

    afterAll(async () => {
        for (const loop of loops) loop.release();
        await rig?.release();
        run("pkill", ["--uid", AGENT]);
        if (createdUser) run("userdel", ["--remove", AGENT]);
    }, 120_000);

    describe("the volume", () => {
        it("a blank volume becomes btrfs, laid out with the top level for root alone", () => {
            expect(run("blkid", ["--probe", "--output", "value", "--match-tag", "TYPE", rig!.device]).stdout.trim()).toBe("btrfs");
            const mode = (p: string) => (fs.statSync(p).mode & 0o7777).toString(8);
            expect(mode(volume)).toBe("700");
            expect(mode(path.join(volume, "checkpoints"))).toBe("700");
            expect(mode(workspaces)).toBe("711");
            expect(fs.readlinkSync(link)).toBe(path.join(workspaces, "shared"));
            // The agent's files may run (exec) but never carry devices or setuid bits.
            const options = (point: string) => run("findmnt", ["--noheadings", "--output", "OPTIONS", "--mountpoint", point]).stdout.trim().split(",");
            expect(options(workspaces)).toEqual(expect.arrayContaining(["nosuid", "nodev", "noatime"]));
            expect(options(workspaces)).not.toContain("noexec");
            expect(options(volume)).toEqual(expect.arrayContaining(["nosuid", "nodev", "noexec"]));
            expect(fs.statSync(path.join(workspaces, "shared")).uid).toBe(uid);
            expect(fs.statSync(path.join(workspaces, "shared")).ino).toBe(256);
            // The agent works in its workspace and sees nothing else.
            expect(asAgent(`echo hi > ${link}/hello && cat ${link}/hello`).stdout.trim()).toBe("hi");
            expect(asAgent(`ls ${volume}`).stderr).toMatch(/Permission denied/);
            expect(asAgent(`ls ${workspaces}`).stderr).toMatch(/Permission denied/);
            fs.rmSync(path.join(link, "hello"));
        });

        it("mounting again is a no-op, and after an unmount (a reboot) the layout and data are reused, never reformatted", () => {
            fs.writeFileSync(path.join(link, "survives"), "yes\n");
            expect(mountVolume(rig!.device, { volume, workspaces, link }).status).toBe(0);
            unmountUnder(volume);
            unmountUnder(workspaces);
            const again = mountVolume(rig!.device, { volume, workspaces, link });
            expect(again.stderr).not.toContain("formatting");
            expect(again.status).toBe(0);
            expect(fs.readFileSync(path.join(link, "survives"), "utf8")).toBe("yes\n");
            fs.rmSync(path.join(link, "survives"));
            // The remount changed the subvolume the containers see: recreate them on it.
            expect(run("docker-compose", ["--project-name", "airlock", "--file", compose, "up", "--detach", "--force-recreate"], { env: dockerd!.env, timeout: 180_000 }).status).toBe(0);
        });

        it("an ext4 volume is mounted as it is, with checkpoints off; after btrfs-convert its files become the workspace and the originals stay", () => {
            const base = path.join(root, "ext4");
            fs.mkdirSync(base);
            const loop = attachLoop(root, "ext4", 512 * 1024 ** 2);
            loops.push(loop);
            expect(run("mkfs.ext4", ["-q", loop.device]).status).toBe(0);
            const seed = path.join(root, "seed");
            fs.mkdirSync(seed);
            run("mount", [loop.device, seed]);
            fs.mkdirSync(path.join(seed, "app"));
            fs.writeFileSync(path.join(seed, "app", "main.py"), "print('kept')\n");
            // What the mount script before checkpoints left behind: the volume's root owned by the agent.
            run("chown", [`${AGENT}:${AGENT}`, seed]);
            run("umount", [seed]);

            const dirs = dirsUnder(base);
            const mounted = mountVolume(loop.device, dirs);
            expect(mounted.status).toBe(0);
            expect(mounted.stderr).toContain("the volume holds ext4: mounted as the shared workspace, checkpoints are off");
            expect(fs.readFileSync(path.join(dirs.link, "app", "main.py"), "utf8")).toBe("print('kept')\n");
            const off = run(engine, ["create", "shared"], { env: { PATH: "/usr/bin:/bin", AIRLOCK_CHECKPOINTS_CONFIG: withPaths(dirs) } });
            expect(off.status).toBe(2);
            expect(off.stderr.trim()).toBe("airlock: checkpoints are off: the workspace volume holds ext4, not btrfs (docs/checkpoints.md)");

            // The documented migration: unmount, btrfs-convert, mount again.
            unmountUnder(base);
            const converted = run("btrfs-convert", [loop.device], { timeout: 120_000 });
            expect(converted.status, converted.stderr).toBe(0);
            const adopted = mountVolume(loop.device, dirs);
            expect(adopted.status, adopted.stderr).toBe(0);
            expect(adopted.stderr).toMatch(/adopting the \d+ entries on the volume's top level as the shared workspace/);
            expect(fs.readFileSync(path.join(dirs.link, "app", "main.py"), "utf8")).toBe("print('kept')\n");
            expect(fs.existsSync(path.join(dirs.volume, "app", "main.py"))).toBe(true);
            expect(fs.existsSync(path.join(dirs.volume, "ext2_saved"))).toBe(true);
            // The old root belonged to the agent; the top level is root's now, so the agent
            // cannot rename the checkpoints away and plant its own directory in their place.
            const hijack = asAgent(`mv ${dirs.volume}/checkpoints ${dirs.volume}/stolen; mkdir ${dirs.volume}/planted`);
            expect(fs.existsSync(path.join(dirs.volume, "stolen")), "the agent renamed the checkpoints away").toBe(false);
            expect(hijack.stderr).toMatch(/Permission denied/);
            expect(fs.existsSync(path.join(dirs.volume, "checkpoints"))).toBe(true);
            expect(fs.statSync(dirs.volume).uid).toBe(0);
            const created = run(engine, ["create", "shared", "--label-b64", b64("after convert")], { env: { PATH: "/usr/bin:/bin", AIRLOCK_CHECKPOINTS_CONFIG: withPaths(dirs) } });
            expect(created.stderr.replace(/airlock: the container images could not be read.*\n/, "")).toBe("");
            expect(created.status).toBe(0);
            unmountUnder(base);
            loop.release();
        });

        it("a volume holding data of no known filesystem is neither formatted nor mounted", () => {
            const base = path.join(root, "unknown");
            fs.mkdirSync(base);
            const loop = attachLoop(root, "unknown", 64 * 1024 ** 2);
            loops.push(loop);
            const data = crypto.randomBytes(4096);
            const fd = fs.openSync(loop.device, "r+");
            fs.writeSync(fd, data, 0, data.length, 512 * 1024);
            fs.closeSync(fd);
            const before = crypto.createHash("sha256").update(fs.readFileSync(loop.file)).digest("hex");
            const result = mountVolume(loop.device, dirsUnder(base));
            expect(result.status).toBe(1);
            expect(result.stderr).toContain("the volume holds data of no filesystem airlock knows; not formatting it, not mounting it");
            expect(mountsUnder(base)).toEqual([]);
            expect(crypto.createHash("sha256").update(fs.readFileSync(loop.file)).digest("hex")).toBe(before);
            loop.release();
        });
    });

    /** The engine's config with another volume's directories. */
    function withPaths(dirs: { volume: string; workspaces: string }): string {
        const file = path.join(root, `checkpoints-${path.basename(path.dirname(dirs.volume))}.json`);
        fs.writeFileSync(file, JSON.stringify({ ...config, volume: dirs.volume, workspacesMount: dirs.workspaces, dockerHost: "unix:///nonexistent.sock" }));
        return file;
    }

    describe("checkpoint and restore", () => {
        const migrations = { "001_users.sql": `CREATE TABLE users (id int);\n-- ${crypto.randomBytes(24).toString("base64")}\n`, "002_orders.sql": `CREATE TABLE orders (id int);\n-- ${crypto.randomBytes(24).toString("base64")}\n` };

        it("the classic scenario: checkpoint, rm -rf the app and git, restore - files back byte for byte, git back", () => {
            for (const [name, content] of Object.entries(migrations)) {
                expect(exec("agent-sandbox-shell", `mkdir -p /workspace/app/migrations && printf '%s' '${content}' > /workspace/app/migrations/${name}`).status).toBe(0);
            }
            const created = ckpt("create", "shared", "--label-b64", b64("before cleanup"));
            expect(created.stderr).toBe("");
            expect(created.stdout).toMatch(/^checkpoint 1 of shared at \S+ \(before cleanup\)$/m);

            expect(exec("agent-sandbox-shell", "rm -rf /workspace/app /usr/bin/git").status).toBe(0);
            expect(exec("agent-sandbox-shell", "git --version").status).not.toBe(0);
            const oldContainer = containerId("agent-sandbox-shell");

            const restored = ckpt("restore", "shared", "--id", "1");
            expect(restored.stderr).toBe("");
            expect(restored.status).toBe(0);
            expect(restored.stdout).toContain("restored shared to checkpoint 1");
            expect(restored.stdout).toContain("the state it replaced is checkpoint 2");
            for (const [name, content] of Object.entries(migrations)) {
                expect(fs.readFileSync(path.join(link, "app", "migrations", name), "utf8")).toBe(content);
                expect(exec("agent-sandbox-shell", `cat /workspace/app/migrations/${name}`).stdout).toBe(content);
            }
            expect(exec("agent-sandbox-shell", "git --version").stdout).toMatch(/^git version /);
            expect(containerId("agent-sandbox-shell")).not.toBe(oldContainer);
        });

        it("the state a restore replaced is a checkpoint of its own, and restoring it undoes the restore", () => {
            const found = list();
            expect(found.map((c) => [c.id, c.kind, c.label])).toEqual([
                [1, "manual", "before cleanup"],
                [2, "pre-restore", "before restore to 1"],
            ]);
            expect(ckpt("restore", "shared", "--id", "2").status).toBe(0);
            expect(fs.existsSync(path.join(link, "app"))).toBe(false);
            // "last" skips the states restores replaced: it is the agent's own newest checkpoint.
            expect(ckpt("restore", "shared", "--last").stdout).toContain("restored shared to checkpoint 1");
            expect(fs.readFileSync(path.join(link, "app", "migrations", "001_users.sql"), "utf8")).toBe(migrations["001_users.sql"]);
            expect(ckpt("restore", "shared", "--label-b64", b64("before cleanup")).stdout).toContain("restored shared to checkpoint 1");
        });

        it("a restore also brings back a container that is gone, from its compose file", () => {
            expect(dockerd!.docker(["rm", "--force", "agent-sandbox-shell"]).status).toBe(0);
            const restored = ckpt("restore", "shared", "--id", "1");
            expect(restored.stderr).toBe("");
            expect(restored.status).toBe(0);
            expect(exec("agent-sandbox-shell", "git --version; cat /workspace/app/migrations/002_orders.sql").stdout).toBe(`${run("git", ["--version"]).stdout}${migrations["002_orders.sql"]}`);
        });

        it("a checkpoint records the image of every container", () => {
            const [first] = list();
            const names = (first.containers ?? []).map((c) => c.name);
            expect(names).toEqual(expect.arrayContaining(["agent-sandbox-shell", "agent-browser"]));
            const shellImageId = dockerd!.docker(["inspect", "--format", "{{.Image}}", "agent-sandbox-shell"]).stdout.trim();
            expect(first.containers!.find((c) => c.name === "agent-sandbox-shell")).toEqual({ name: "agent-sandbox-shell", image: IMAGE, imageId: shellImageId });
        });

        it("restoring a checkpoint that does not exist fails clearly and changes nothing", () => {
            const before = { list: ckpt("list", "shared", "--json").stdout, files: run("find", [path.join(link, "/")]).stdout, container: containerId("agent-sandbox-shell") };
            for (const args of [["--id", "999"], ["--label-b64", b64("no such label")], ["--id", "1; rm -rf /"], ["--id", "../1"]]) {
                const result = ckpt("restore", "shared", ...args);
                expect(result.status, args.join(" ")).toBe(2);
                expect(result.stderr).toMatch(/^airlock: (no checkpoint 999 in workspace shared|no checkpoint labelled 'no such label'|a checkpoint id is a number)/);
            }
            expect({ list: ckpt("list", "shared", "--json").stdout, files: run("find", [path.join(link, "/")]).stdout, container: containerId("agent-sandbox-shell") }).toEqual(before);
        });

        it("the agent's Docker is asked as the agent, and a hostile answer is data: the checkpoint is taken, the answer dropped", async () => {
            // A stand-in daemon on a socket of its own: it notes who asks and answers with poison.
            const dir = fs.mkdtempSync(path.join(root, "fake-docker-"));
            fs.chmodSync(dir, 0o755);
            const socketPath = path.join(dir, "docker.sock");
            const marker = path.join(dir, "pwned");
            const evil = JSON.stringify([
                { Names: ["/fine"], Image: `img@sha256:${"a".repeat(64)}`, ImageID: `sha256:${"b".repeat(64)}` },
                { Names: [`/evil\n$(touch ${marker})`], Image: "`touch " + marker + "`", ImageID: "sha256:nope" },
            ]);
            const server = spawn("python3", ["-c", FAKE_DOCKER, socketPath, path.join(dir, "peers"), evil], { stdio: "ignore" });
            try {
                for (let i = 0; i < 50 && !fs.existsSync(socketPath); i++) await new Promise((r) => setTimeout(r, 100));
                fs.chmodSync(socketPath, 0o666);
                const configFile = path.join(dir, "checkpoints.json");
                fs.writeFileSync(configFile, JSON.stringify({ ...config, dockerHost: `unix://${socketPath}` }));
                const result = run(engine, ["create", "shared", "--label-b64", b64("hostile daemon")], { env: { PATH: "/usr/bin:/bin", AIRLOCK_CHECKPOINTS_CONFIG: configFile } });
                expect(result.status).toBe(0);
                expect(result.stderr).toBe("airlock: the container images could not be read; the workspace is checkpointed\n");
                expect(list().at(-1)).toMatchObject({ label: "hostile daemon", containers: null });
                expect(fs.readFileSync(path.join(dir, "peers"), "utf8").trim().split("\n")).toEqual([String(uid)]);
                expect(fs.existsSync(marker)).toBe(false);
            } finally {
                server.kill();
            }
        });

        it("an answer from the agent's Docker that never ends costs a checkpoint its image list, not the checkpoint: root stops waiting", async () => {
            const dir = fs.mkdtempSync(path.join(root, "slow-docker-"));
            fs.chmodSync(dir, 0o755);
            const socketPath = path.join(dir, "docker.sock");
            const server = spawn("python3", ["-c", FAKE_DOCKER, socketPath, path.join(dir, "peers"), "TRICKLE"], { stdio: "ignore" });
            try {
                for (let i = 0; i < 50 && !fs.existsSync(socketPath); i++) await new Promise((r) => setTimeout(r, 100));
                fs.chmodSync(socketPath, 0o666);
                const configFile = path.join(dir, "checkpoints.json");
                fs.writeFileSync(configFile, JSON.stringify({ ...config, dockerHost: `unix://${socketPath}` }));
                // Before: root waited for the child as long as the answer went on (this run's timeout).
                const result = run(engine, ["create", "shared", "--label-b64", b64("slow daemon")], { env: { PATH: "/usr/bin:/bin", AIRLOCK_CHECKPOINTS_CONFIG: configFile }, timeout: 150_000 });
                expect(result.status, result.stderr).toBe(0);
                expect(list().at(-1)).toMatchObject({ label: "slow daemon", containers: null });
                // The child that asked is gone (its own alarm: under the broker's unit root cannot kill it).
                expect(run("pgrep", ["-u", String(uid), "-f", "checkpoint"]).stdout.trim()).toBe("");
            } finally {
                server.kill();
            }
        }, 180_000);

        it("bad requests are refused with one line, and nothing changes", () => {
            const before = ckpt("list", "shared", "--json").stdout;
            for (const args of [
                ["create", "../shared"],
                ["create", "shared", "--label-b64", "not base64!"],
                ["create", "shared", "--force"],
                ["restore", "shared"],
                ["restore", "shared", "--id", "1", "--last"],
                ["list", "s-Alpha"],
                ["delete", "shared", "1"],
                ["note", "shared", "end", "-1"],
            ]) {
                const result = ckpt(...args);
                expect(result.status, args.join(" ")).toBe(2);
                expect(result.stderr.trim().split("\n"), args.join(" ")).toHaveLength(1);
                expect(result.stderr).toMatch(/^airlock: /);
            }
            expect(ckpt("list", "shared", "--json").stdout).toBe(before);
        });

        it("labels and commands from the agent are kept as data: nothing runs, nothing reaches the terminal raw", () => {
            const marker = path.join(root, "label-ran");
            const label = `$(touch ${marker}) \`touch ${marker}\`\n\u001b[31mred\u0007`;
            const created = ckpt("create", "shared", "--label-b64", b64(label));
            expect(created.status).toBe(0);
            expect(ckpt("note", "shared", "begin", b64(`rm -rf app; touch ${marker}`)).status).toBe(0);
            expect(ckpt("note", "shared", "end", "1").status).toBe(0);
            const table = ckpt("list", "shared").stdout;
            expect(fs.existsSync(marker)).toBe(false);
            expect(table).not.toMatch(/[\u0000-\u0008\u000b-\u001f\u007f]/);
            const newest = list().at(-1)!;
            expect(newest.label).toBe(`$(touch ${marker}) \`touch ${marker}\` [31mred`);
            expect([newest.then, newest.exit]).toEqual([`rm -rf app; touch ${marker}`, 1]);
        });

        it("the list shows id, time, label, the command that followed and its exit status", () => {
            expect(ckpt("create", "shared", "--label-b64", b64("before tests")).status).toBe(0);
            ckpt("note", "shared", "begin", b64("npm test"));
            ckpt("note", "shared", "end", "0");
            // Only the first command after a checkpoint is its "then".
            ckpt("note", "shared", "begin", b64("ls"));
            const lines = ckpt("list", "shared").stdout.trim().split("\n");
            expect(lines[0]).toMatch(/^ID\s+TIME \(UTC\)\s+KIND\s+LABEL\s+THEN\s+EXIT$/);
            expect(lines.at(-1)).toMatch(/^\d+\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+manual\s+before tests\s+npm test\s+0$/);
        });
    });

    describe("the agent cannot destroy its safety net", () => {
        it("as its host user it cannot list, delete, rename or write a checkpoint", () => {
            const snapshot = path.join(volume, "checkpoints", "shared", "1");
            expect(fs.existsSync(snapshot)).toBe(true);
            for (const attack of [
                `ls ${volume}/checkpoints`,
                `rm -rf ${snapshot}`,
                `mv ${snapshot} ${link}/mine`,
                `btrfs subvolume delete ${snapshot}`,
                `btrfs property set ${snapshot} ro false`,
                `touch ${snapshot}/planted`,
                `btrfs subvolume delete ${workspaces}/shared`,
                `mv ${workspaces}/shared ${workspaces}/other`,
            ]) {
                const result = asAgent(attack);
                expect(result.status, attack).not.toBe(0);
            }
            expect(fs.existsSync(path.join(snapshot, "app", "migrations", "001_users.sql"))).toBe(true);
        });

        it("filling the volume from its workspace costs it no checkpoint: its writes stop above the free-space floor, and the timer keeps every checkpoint", () => {
            writeConfig({ keep: 100 });
            const kept = list().map((c) => c.id);
            expect(kept.length).toBeGreaterThan(1);
            const fill = (name: string) => asAgent(`dd if=/dev/zero of=${link}/${name} bs=1M count=4096 status=none; sync`);
            // One big write; then the cycle that pins what it wrote: a checkpoint (its own verb), delete, write again.
            const first = fill("fill-1");
            run("btrfs", ["filesystem", "sync", volume]);
            const swept = ckpt("maintain");
            expect(list().map((c) => c.id)).toEqual(kept);
            expect(swept.status, swept.stderr).toBe(0);
            const pinned = ckpt("create", "shared", "--label-b64", b64("pins fill-1"));
            expect(pinned.status, pinned.stderr).toBe(0);
            const pinning = list().at(-1)!.id;
            expect(asAgent(`rm -f ${link}/fill-1`).status).toBe(0);
            const second = fill("fill-2");
            run("btrfs", ["filesystem", "sync", volume]);
            const maintained = ckpt("maintain");
            expect(list().map((c) => c.id)).toEqual([...kept, pinning]);
            expect(maintained.stderr).toBe("");
            expect(maintained.status).toBe(0);
            expect(freePercent()).toBeGreaterThanOrEqual(config.minFreePercent);
            for (const write of [first, second]) expect(write.stderr).toMatch(/Disk quota exceeded/);
            // Space back for the tests that follow.
            fs.rmSync(path.join(link, "fill-2"), { force: true });
            expect(run("btrfs", ["subvolume", "delete", "--commit-after", path.join(volume, "checkpoints", "shared", String(pinning))]).status).toBe(0);
            fs.rmSync(path.join(volume, "checkpoints", "shared", `${pinning}.json`));
            run("btrfs", ["subvolume", "sync", volume], { timeout: 120_000 });
            writeConfig({ keep: 20 });
        }, 300_000);

        it("taking a checkpoint gives its workspace no room past the floor: writing to its cap and checkpointing, ten times over, keeps the floor", () => {
            writeConfig({ keep: 100 });
            const before = new Set(list().map((c) => c.id));
            const rounds: string[] = [];
            try {
                for (let round = 0; round < 10; round++) {
                    const name = `round-${round}`;
                    rounds.push(name);
                    expect(asAgent(`dd if=/dev/zero of=${link}/${name} bs=1M count=4096 status=none; sync`).stderr).toMatch(/Disk quota exceeded/);
                    run("btrfs", ["filesystem", "sync", volume]);
                    const taken = ckpt("create", "shared", "--label-b64", b64(name));
                    expect(taken.status, taken.stderr).toBe(0);
                }
                // Before: each checkpoint reset the cap to 8 MiB above what the workspace held alone (seen first).
                expect(freePercent()).toBeGreaterThanOrEqual(config.minFreePercent);
            } finally {
                for (const name of rounds) fs.rmSync(path.join(link, name), { force: true });
                for (const c of list().filter((c) => !before.has(c.id))) {
                    run("btrfs", ["subvolume", "delete", path.join(volume, "checkpoints", "shared", String(c.id))]);
                    fs.rmSync(path.join(volume, "checkpoints", "shared", `${c.id}.json`), { force: true });
                }
                run("btrfs", ["subvolume", "sync", volume], { timeout: 120_000 });
                expect(ckpt("limits").status).toBe(0);
                writeConfig({ keep: 20 });
            }
        }, 300_000);

        it("from its container it can make no btrfs subvolume or snapshot, share no block by reflink (whatever the request's upper bits) and set up no io_uring; under Docker's default profile it could", () => {
            // The agent's own program, in its workspace, as in production: the container's user owns the workspace there.
            const probe = path.join(link, "seccomp-probe");
            const built = run("gcc", ["-static", "-O2", "-Wall", "-Werror", "-o", probe, path.join(__dirname, "fixtures", "seccomp-probe.c")]);
            expect(built.status, built.stderr).toBe(0);
            const attempts = (output: string) => output.trim().split("\n").map((line) => line.split(" "));
            const madeUnder = (profile: string) =>
                dockerd!.docker(["run", "--rm", "--network", "none", "--user", String(uid), "--security-opt", `seccomp=${profile}`, "--volume", `${link}:/workspace`, IMAGE, "/workspace/seccomp-probe", "/workspace"]);
            const made = (): string[] => fs.readdirSync(link).filter((name) => name.startsWith("probe-"));
            try {
                // Seen first: Docker's default profile (the base of the sandbox's) lets every one of them through
                // but io_uring, which it refuses since Docker 25 (EPERM; the sandbox's answers ENOSYS).
                const before = attempts(madeUnder(path.join(__dirname, "..", "templates", "docker", "seccomp-default.json")).stdout);
                expect(before.filter(([, , result]) => result === "made"), JSON.stringify(before)).toHaveLength(17);
                expect(before.filter(([name]) => name === "IO_URING_SETUP").map(([, , result]) => result)).toEqual(["EPERM"]);
                for (const name of made()) expect(run("btrfs", ["subvolume", "delete", path.join(link, name)]).status).toBe(0);

                // The sandbox's profile (the daemon's default here, as the rendered daemon.json sets it), in its shell container.
                const inShell = dockerd!.docker(["exec", "--user", String(uid), "agent-sandbox-shell", "/workspace/seccomp-probe", "/workspace"]);
                expect(inShell.status, inShell.stderr).toBe(0);
                const results = attempts(inShell.stdout);
                expect(results).toHaveLength(19);
                const expected: Record<string, string> = { FIONREAD: "ok", COPY_FILE_RANGE: "ENOSYS", IO_URING_SETUP: "ENOSYS" };
                for (const [name, form, result] of results) expect(result, `${name} ${form}`).toBe(expected[name] ?? "EPERM");
                expect(made()).toEqual([]);
                // btrfs-progs, the way an agent would try it.
                for (const attempt of ["btrfs subvolume create /workspace/nested", "btrfs subvolume snapshot /workspace /workspace/snap"]) {
                    const refused = exec("agent-sandbox-shell", attempt);
                    expect(refused.status, attempt).not.toBe(0);
                    expect(refused.stderr, attempt).toMatch(/Operation not permitted/);
                }
            } finally {
                for (const name of made()) run("btrfs", ["subvolume", "delete", path.join(link, name)]);
                fs.rmSync(probe, { force: true });
            }
        }, 120_000);

        it("a btrfs subvolume it makes inside its workspace (after an escape, as its host user) is outside its quota, yet filling the volume with it costs no checkpoint it needs: the timer fails loudly instead", () => {
            writeConfig({ keep: 100 });
            expect(asAgent(`mkdir -p ${link}/precious && seq 1 100000 > ${link}/precious/data`).status).toBe(0);
            const data = fs.readFileSync(path.join(link, "precious", "data"));
            expect(ckpt("create", "shared", "--label-b64", b64("precious")).status).toBe(0);
            const anchored = list()[0].id;
            // On the host, where no seccomp profile stands in its way: the work deleted, a subvolume made, the volume filled through it.
            const made = asAgent(`rm -rf ${link}/precious && btrfs subvolume create ${link}/nested`);
            expect(made.status, made.stderr).toBe(0);
            const fill = asAgent(`dd if=/dev/zero of=${link}/nested/fill bs=1M; sync`);
            expect(fill.stderr).toMatch(/No space left on device/);
            run("btrfs", ["filesystem", "sync", volume]);
            try {
                const maintained = ckpt("maintain");
                // Before: the floor removed every checkpoint, the one holding the deleted work included (seen first).
                const kept = list();
                expect(kept.at(-1)?.label).toBe("precious");
                expect(kept.map((c) => c.id)).toContain(anchored);
                expect(maintained.status).toBe(1);
                expect(maintained.stderr).toMatch(/airlock: the volume is \d+% full and no checkpoint is left that may go/);
            } finally {
                // What the operator does: the file goes first, the caps follow the space now free
                // (at a full volume the workspace's cap left it no room even to drop the subvolume's entry).
                fs.rmSync(path.join(link, "nested", "fill"), { force: true });
                run("btrfs", ["filesystem", "sync", volume]);
                const limited = ckpt("limits");
                expect(limited.status, limited.stderr).toBe(0);
                const removed = run("btrfs", ["subvolume", "delete", "--commit-after", path.join(link, "nested")]);
                expect(removed.status, removed.stderr).toBe(0);
                run("btrfs", ["subvolume", "sync", volume], { timeout: 120_000 });
            }
            const restored = ckpt("restore", "shared", "--label-b64", b64("precious"));
            expect(restored.status, restored.stderr).toBe(0);
            expect(fs.readFileSync(path.join(link, "precious", "data")).equals(data)).toBe(true);
            writeConfig({ keep: 20 });
        }, 300_000);

        it("a mount the agent puts over its workspace path (a FUSE mount after an escape) is not what root's engine sees", () => {
            // The rig's tree is a shared mount, as systemd makes / on the sandbox.
            const shared = path.join(workspaces, "shared");
            expect(run("mount", ["-t", "tmpfs", "-o", "size=1m", "agent-fuse", shared]).status).toBe(0);
            try {
                // Before: it showed through at the volume's own path, and every checkpoint of every workspace failed (seen first).
                expect(fs.lstatSync(path.join(volume, "workspaces", "shared")).ino).toBe(256);
                const taken = ckpt("create", "shared", "--label-b64", b64("under a mount"));
                expect(taken.status, taken.stderr).toBe(0);
                expect(ckpt("limits").status).toBe(0);
            } finally {
                run("umount", [shared]);
            }
        });

        it("a subvolume it nests past PATH_MAX (after an escape, as its host user) breaks neither its checkpoints nor the caps", () => {
            const made = asAgent(deepSubvolume(link));
            expect(made.status, made.stderr).toBe(0);
            try {
                // Before: btrfs qgroup show failed on the volume, and so every checkpoint, restore and timer run (seen first).
                const taken = ckpt("create", "shared", "--label-b64", b64("deep"));
                expect(taken.status, taken.stderr).toBe(0);
                const limited = ckpt("limits");
                expect(limited.status, limited.stderr).toBe(0);
                const restored = ckpt("restore", "shared", "--last");
                expect(restored.status, restored.stderr).toBe(0);
            } finally {
                // An empty subvolume goes with rmdir (root).
                run("rm", ["-rf", path.join(link, `d00${"x".repeat(247)}`)]);
            }
            // The state the restore replaced held that subvolume: nothing of it is left behind.
            expect(fs.readdirSync(path.join(volume, "workspaces")).filter((n) => n.startsWith(".restore"))).toEqual([]);
            expect(fs.readdirSync(path.join(volume, ".trash"))).toEqual([]);
        }, 120_000);

        it("a removal the agent keeps from finishing leaves the workspace capped at what it holds, never uncapped", () => {
            const held = path.join(volume, "workspaces", "s-held");
            expect(run("btrfs", ["subvolume", "create", held]).status).toBe(0);
            expect(run("btrfs", ["subvolume", "create", path.join(held, "inner")]).status).toBe(0);
            run("btrfs", ["filesystem", "sync", volume]);
            // The engine's own removal, with every delete failing as when the agent keeps making subvolumes inside.
            const harness = [
                "import importlib.machinery, importlib.util, subprocess, sys",
                "loader = importlib.machinery.SourceFileLoader('engine', sys.argv[1])",
                "engine = importlib.util.module_from_spec(importlib.util.spec_from_loader('engine', loader)); loader.exec_module(engine)",
                "engine.CFG = engine.load_config()",
                "top = engine.subvolume_id(sys.argv[2]); engine.limit_exclusive(top, 4 << 20)",
                "real = engine.run",
                "engine.run = lambda argv, **kw: subprocess.CompletedProcess(argv, 1, '', 'held') if argv[:3] == ['btrfs', 'subvolume', 'delete'] else real(argv, **kw)",
                "try:\n    engine.discard(sys.argv[2])\nexcept engine.Failed as err:\n    print('failed:', err, file=sys.stderr)",
                "print(top)",
            ].join("\n");
            const tried = run("python3", ["-I", "-c", harness, engine, held], { env: { PATH: "/usr/bin:/bin", AIRLOCK_CHECKPOINTS_CONFIG: rig!.configPath } });
            expect(tried.status, tried.stderr).toBe(0);
            expect(tried.stderr).toMatch(/failed: could not delete/);
            const top = tried.stdout.trim();
            const row = run("btrfs", ["qgroup", "show", "-e", "--raw", volume]).stdout.split("\n").find((line) => line.startsWith(`0/${top} `));
            // Before: its cap was lifted for the removal and stayed lifted (seen in a red team's run).
            expect(row?.split(/\s+/)[3]).toMatch(/^[0-9]+$/);
            // The timer deletes what the trash holds.
            const maintained = ckpt("maintain");
            expect(maintained.status, maintained.stderr).toBe(0);
            expect(fs.readdirSync(path.join(volume, ".trash"))).toEqual([]);
        });

        it("even root cannot write into a checkpoint: it is read-only", () => {
            const result = run("touch", [path.join(volume, "checkpoints", "shared", "1", "planted")]);
            expect(result.stderr).toMatch(/Read-only file system/);
        });

        it("inside the container there is no trace of the checkpoints", () => {
            const mounts = exec("agent-sandbox-shell", "cat /proc/self/mountinfo").stdout;
            expect(mounts).not.toContain("/checkpoints");
            expect(mounts).toMatch(/ \/workspaces\/shared \/workspace /);
            expect(exec("agent-sandbox-shell", "ls /workspace/..").stdout.split(/\s+/)).not.toContain("checkpoints");
        });
    });

    describe("retention", () => {
        it("keeps the newest `keep` checkpoints per workspace and the first of the hour, others removed oldest first, right when one is taken", () => {
            writeConfig({ keep: 3 });
            // Older than keepDays: no anchor among them, so count alone decides.
            ageCheckpoints(list().map((c) => c.id), 8 * 86400);
            for (let i = 0; i < 4; i++) expect(ckpt("create", "shared", "--label-b64", b64(`round ${i}`)).status).toBe(0);
            expect(list().map((c) => c.label)).toEqual(["round 0", "round 1", "round 2", "round 3"]);
        });

        it("the agent taking checkpoints at will cannot push out the first checkpoint of each of the last 24 hours or of each day", () => {
            for (const label of ["a day ago", "five hours ago", "two hours ago"]) expect(ckpt("create", "shared", "--label-b64", b64(label)).status).toBe(0);
            const taken = list().slice(-3);
            ageCheckpoints([taken[0].id], 86400 + 600);
            ageCheckpoints([taken[1].id], 5 * 3600);
            ageCheckpoints([taken[2].id], 2 * 3600);
            // Its own verb, many times over: count retention runs at each one.
            for (let i = 0; i < 6; i++) expect(ckpt("create", "shared", "--label-b64", b64(`spent ${i}`)).status).toBe(0);
            const labels = list().map((c) => c.label);
            expect(labels).toEqual(expect.arrayContaining(["a day ago", "five hours ago", "two hours ago", "round 0"]));
            expect(labels.slice(-3)).toEqual(["spent 3", "spent 4", "spent 5"]);
            expect(labels).toHaveLength(7);
            const maintained = ckpt("maintain");
            expect(maintained.status, maintained.stderr).toBe(0);
            expect(list().map((c) => c.label)).toEqual(labels);
            // Back to one hour's checkpoints for the tests that follow.
            ageCheckpoints(taken.map((c) => c.id), 8 * 86400);
            writeConfig({ keep: 2 });
            expect(ckpt("maintain").status).toBe(0);
            writeConfig({ keep: 3 });
            expect(list().map((c) => c.label)).toEqual(["round 0", "spent 4", "spent 5"]);
        });

        it("restoring the oldest checkpoint at the keep limit still works (retention never takes the target mid-restore)", () => {
            const [oldest] = list();
            const restored = ckpt("restore", "shared", "--id", String(oldest.id));
            expect(restored.stderr).toBe("");
            expect(restored.status).toBe(0);
            expect(list().map((c) => c.label)).toEqual(["round 0", "spent 4", "spent 5", `before restore to ${oldest.id}`]);
        });

        it("the timer removes checkpoints older than keepDays but always keeps a workspace's newest", () => {
            writeConfig({ keep: 20, keepDays: 7 });
            const dir = path.join(volume, "checkpoints", "shared");
            const ids = list().map((c) => c.id);
            for (const id of ids) {
                const meta = JSON.parse(fs.readFileSync(path.join(dir, `${id}.json`), "utf8"));
                meta.epoch -= 8 * 86400;
                fs.writeFileSync(path.join(dir, `${id}.json`), JSON.stringify(meta));
            }
            const result = ckpt("maintain");
            expect(result.status, result.stderr).toBe(0);
            expect(result.stdout).toMatch(/shared: retention removed checkpoints/);
            expect(list().map((c) => c.id)).toEqual([ids.at(-1)]);
        });

        it("below the free-space floor the oldest checkpoints go first, until the floor holds - but never a workspace's newest or the first of an hour or day", () => {
            // Space taken past the agent's cap (by root here): what the floor is for.
            expect(run("btrfs", ["qgroup", "limit", "-e", "none", link]).status).toBe(0);
            expect(ckpt("create", "shared", "--label-b64", b64("first of the hour")).status).toBe(0);
            const big = fillFile(path.join(link, "big.bin"), 40);
            expect(ckpt("create", "shared", "--label-b64", b64("holds 640 MiB")).status).toBe(0);
            fs.rmSync(big);
            expect(ckpt("create", "shared", "--label-b64", b64("small")).status).toBe(0);
            run("btrfs", ["filesystem", "sync", volume]);
            const free = () => {
                const st = fs.statfsSync(volume);
                return (100 * st.bavail) / st.blocks;
            };
            const floor = Math.ceil(free()) + 5;
            expect(floor).toBeLessThan(95);
            writeConfig({ minFreePercent: floor });
            const result = ckpt("maintain");
            expect(result.status, result.stderr).toBe(0);
            expect(result.stdout).toMatch(new RegExp(`free space below ${floor}%: removed checkpoint \\d+ of shared`));
            expect(list().map((c) => c.label)).not.toContain("holds 640 MiB");
            expect(list().map((c) => c.label)).toEqual(expect.arrayContaining(["first of the hour", "small"]));
            expect(free()).toBeGreaterThanOrEqual(floor);
            writeConfig({ minFreePercent: 10 });
        });

        it("when nothing is left to remove below the floor, the timer fails loudly", () => {
            writeConfig({ minFreePercent: 50 });
            expect(run("btrfs", ["qgroup", "limit", "-e", "none", link]).status).toBe(0);
            const filler = fillFile(path.join(link, "filler.bin"), 70);
            const result = ckpt("maintain");
            expect(result.status).toBe(1);
            expect(result.stderr).toMatch(/airlock: the volume is \d+% full and no checkpoint is left that may go/);
            fs.rmSync(filler);
            writeConfig({ minFreePercent: 10 });
        });
    });

    describe("sessions", () => {
        const ensure = (ws: string, ...args: string[]) => ckpt("session-ensure", ws, ...args);
        beforeAll(() => writeConfig({ sessions: { mode: "per-session", idleMinutes: 5, max: 3 } }));

        it("two named sessions get their own containers and workspaces and do not see each other's files", () => {
            for (const ws of ["s-alpha", "s-beta"]) {
                const result = ensure(ws);
                expect(result.stderr).toBe("");
                // The container, then what the broker puts on the record as the session's creation.
                expect(result.stdout.trim().split("\n")).toEqual([`agent-${ws}`, "created, empty"]);
                expect(exec(`agent-${ws}`, `echo ${ws} > /workspace/mine.txt`).status).toBe(0);
            }
            expect(exec("agent-s-alpha", "cat /workspace/mine.txt; ls /workspace").stdout).toBe("s-alpha\nmine.txt\n");
            expect(exec("agent-s-beta", "cat /workspace/mine.txt; ls /workspace").stdout).toBe("s-beta\nmine.txt\n");
            expect(exec("agent-sandbox-shell", "ls /workspace/mine.txt").status).not.toBe(0);
        });

        it("a session's workspace is capped like the shared one: filling it from the session's container stops above the floor", () => {
            const filled = exec("agent-s-beta", "dd if=/dev/zero of=/workspace/fill bs=1M count=4096 status=none; sync");
            expect(filled.stderr).toMatch(/Disk quota exceeded/);
            run("btrfs", ["filesystem", "sync", volume]);
            expect(freePercent()).toBeGreaterThanOrEqual(config.minFreePercent);
            expect(exec("agent-s-beta", "rm /workspace/fill").status).toBe(0);
        }, 120_000);

        it("a session's container has the shell's hardening (the same definition the gate judges)", () => {
            // Compose v2 keeps ulimits in a map: their order in the container differs from run to run and means nothing.
            const inspect = (name: string) => {
                const config = JSON.parse(dockerd!.docker(["inspect", name]).stdout)[0].HostConfig;
                return { ...config, Ulimits: [...(config.Ulimits ?? [])].sort((a: { Name: string }, b: { Name: string }) => a.Name.localeCompare(b.Name)) };
            };
            const shell = inspect("agent-sandbox-shell");
            const session = inspect("agent-s-alpha");
            for (const key of ["CapDrop", "CapAdd", "SecurityOpt", "PidsLimit", "Memory", "NanoCpus", "Tmpfs", "Init", "IpcMode", "Privileged", "Ulimits", "LogConfig", "ReadonlyRootfs"]) {
                expect(session[key], key).toEqual(shell[key]);
            }
            expect(session.Binds).toEqual([`${workspaces}/s-alpha:/workspace:rw`]);
        });

        it("an idle session is archived as a checkpoint and removed, and resumes where it stopped", () => {
            const state = path.join(volume, "sessions", "s-alpha.json");
            const s = JSON.parse(fs.readFileSync(state, "utf8"));
            s.lastUsed -= 10 * 60;
            fs.writeFileSync(state, JSON.stringify(s));
            const swept = ckpt("maintain");
            expect(swept.status, swept.stderr).toBe(0);
            expect(swept.stdout).toMatch(/session s-alpha: idle 10 min, archived as checkpoint 1/);
            expect(fs.existsSync(path.join(workspaces, "s-alpha"))).toBe(false);
            expect(dockerd!.docker(["inspect", "agent-s-alpha"]).status).not.toBe(0);
            // s-beta was used just now: untouched.
            expect(exec("agent-s-beta", "cat /workspace/mine.txt").stdout).toBe("s-beta\n");

            expect(ensure("s-alpha").status).toBe(0);
            expect(exec("agent-s-alpha", "cat /workspace/mine.txt").stdout).toBe("s-alpha\n");
        });

        it("a new session starts as a clone of the newest base checkpoint, which root takes: a session labelling its own checkpoint base seeds nothing", () => {
            writeConfig({ sessions: { ...config.sessions, max: 4 } });
            // What the broker sends for the agent's `airlock checkpoint --label base` (before: every later session started from it, seen first).
            expect(exec("agent-s-beta", "mkdir -p /workspace/.git/hooks && echo planted > /workspace/.git/hooks/post-checkout").status).toBe(0);
            expect(ckpt("create", "s-beta", "--label-b64", b64("base")).status).toBe(0);
            expect(ensure("s-gamma").status).toBe(0);
            expect(exec("agent-s-gamma", "ls -A /workspace").stdout).toBe("");
            // The operator's, as root on the sandbox.
            expect(exec("agent-s-beta", "rm -rf /workspace/.git && mkdir -p /workspace/repo && echo cloned > /workspace/repo/README").status).toBe(0);
            expect(ckpt("create", "s-beta", "--base").status).toBe(0);
            expect(list("s-beta").at(-1)).toMatchObject({ kind: "base", label: "base" });
            // Older than keepDays, with the session's work checkpointed since: it stays (before: removed by age, seen first).
            const base = list("s-beta").at(-1)!.id;
            ageCheckpoints(list("s-beta").map((c) => c.id), 8 * 86400, "s-beta");
            expect(ckpt("create", "s-beta").status).toBe(0);
            const maintained = ckpt("maintain");
            expect(maintained.status, maintained.stderr).toBe(0);
            expect(list("s-beta").map((c) => c.id)).toContain(base);
            expect(ensure("s-epsilon").status).toBe(0);
            expect(exec("agent-s-epsilon", "cat /workspace/repo/README").stdout).toBe("cloned\n");
        });

        it("no more sessions than the configured maximum", () => {
            const refused = ensure("s-delta");
            expect(refused.status).toBe(2);
            expect(refused.stderr.trim()).toBe("airlock: 4 sessions exist already; let one go idle or finish its connection");
        });

        it("a connection's unnamed session is thrown away once its connection is gone", () => {
            writeConfig({ sessions: { ...config.sessions, max: 8 } });
            expect(ensure("c-0123456789ab", "--connection", "127.0.0.1 50000 127.0.0.1 22").status).toBe(0);
            expect(exec("agent-c-0123456789ab", "echo scratch > /workspace/tmp.txt").status).toBe(0);
            // A subvolume the agent made inside it (a plain delete refuses a subvolume that holds one:
            // before, that failed every timer run from then on, seen first).
            // One inside another and made read-only (before the delete by id, rm could not take that apart either: seen first).
            const ws = `${workspaces}/c-0123456789ab`;
            const planted = asAgent(`btrfs subvolume create ${ws}/nested && touch ${ws}/nested/x && btrfs subvolume create ${ws}/nested/deeper && btrfs property set ${ws}/nested ro true`);
            expect(planted.status, planted.stderr).toBe(0);
            // And one nested past PATH_MAX (no path reaches it: seen failing first), in a workspace at its cap
            // (moving a subvolume out of it writes to it: root's writes failed too, seen first).
            const deep = asAgent(deepSubvolume(ws));
            expect(deep.status, deep.stderr).toBe(0);
            expect(exec("agent-c-0123456789ab", "dd if=/dev/zero of=/workspace/fill bs=1M count=4096 status=none").stderr).toMatch(/Disk quota exceeded/);
            expect(ckpt("create", "c-0123456789ab").status).toBe(0);
            const swept = ckpt("maintain");
            expect(swept.status, swept.stderr).toBe(0);
            expect(swept.stdout).toContain("session c-0123456789ab: connection ended, thrown away");
            expect(fs.existsSync(path.join(workspaces, "c-0123456789ab"))).toBe(false);
            expect(fs.existsSync(path.join(volume, "checkpoints", "c-0123456789ab", "1"))).toBe(false);
            expect(fs.readdirSync(path.join(volume, ".trash"))).toEqual([]);
            expect(dockerd!.docker(["inspect", "agent-c-0123456789ab"]).status).not.toBe(0);
        });

        it("session names are validated before anything is touched", () => {
            for (const ws of ["s-../../etc", "s-", "S-upper", "c-short", "shared", "s-a b"]) {
                const result = ensure(ws, ...(ws.startsWith("c-") ? ["--connection", "127.0.0.1 1 127.0.0.1 22"] : []));
                expect(result.status, ws).toBe(2);
            }
            expect(ensure("c-0123456789ab").status).toBe(2);
            expect(ensure("c-0123456789ab", "--connection", "127.0.0.1 1; rm 127.0.0.1 22").status).toBe(2);
        });
    });
});

/** A shell line that nests a subvolume past PATH_MAX below `dir` (17 directories of 250 characters). */
function deepSubvolume(dir: string): string {
    const names = Array.from({ length: 17 }, (_, i) => `d${String(i).padStart(2, "0")}${"x".repeat(247)}`);
    return `cd ${dir} && for n in ${names.join(" ")}; do mkdir $n && cd $n; done && btrfs subvolume create deep >/dev/null && touch deep/f`;
}

/** Writes `chunks` x 16 MiB of incompressible data to `file` and syncs; returns the file. */
function fillFile(file: string, chunks: number): string {
    const fd = fs.openSync(file, "w");
    const chunk = crypto.randomBytes(16 * 1024 ** 2);
    for (let i = 0; i < chunks; i++) fs.writeSync(fd, chunk);
    fs.closeSync(fd);
    run("sync", []);
    return file;
}
