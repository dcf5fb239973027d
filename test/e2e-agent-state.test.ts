import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { RESOLVER_STATE_IMAGE, RESOLVER_STATE_MOUNT } from "../components/render/hosts";
import { AGENT_STATE_IMAGE, AGENT_STATE_MOUNT, RESOLVER_WORK_DIR } from "../components/workloads/compose";
import { editedStack, renderedFile, renderHosts } from "./helpers/stacks";
import { isRoot, run, toolsAvailable } from "./helpers/tools";

/**
 * The rendered airlock-agent-state on a real loop device: a fixed-size ext4 for the
 * runtime's volumes, at a root-owned mount point, the volume directories the
 * agent's, growing with stateGb and never shrinking. Only its image and mount
 * paths move into a temp dir.
 */

const AGENT = "airlock-e2v-agent";
const canRun = isRoot() && toolsAvailable("the runtime's state filesystem", ["mkfs.ext4", "resize2fs", "e2fsck", "losetup", "mountpoint", "useradd"]);
if (!isRoot()) console.warn("SKIPPED the runtime's state filesystem: needs root and loop devices (CI runs it as root)");

describe.runIf(canRun)("airlock-agent-state", () => {
    let dir: string;
    let createdUser = false;
    const mount = () => path.join(dir, "mnt");

    /** The rendered script for `stateGb`, its paths moved under the temp dir. */
    function script(stateGb: number): string {
        const cfg = readStackFile(
            editedStack("dev", (c) => {
                c["airlock:agent"].user = AGENT;
                c["airlock:gateway"].agent.stateGb = stateGb;
                c["airlock:gateway"].agent.memoryDb = { enabled: true };
            }),
        );
        const file = path.join(dir, `airlock-agent-state-${stateGb}`);
        const text = renderedFile(renderHosts(cfg).gateway, "/usr/local/sbin/airlock-agent-state")
            .replace(`readonly IMAGE=${AGENT_STATE_IMAGE}`, `readonly IMAGE=${dir}/agent-state.img`)
            .replace(`readonly MOUNT=${AGENT_STATE_MOUNT}`, `readonly MOUNT=${mount()}`);
        fs.writeFileSync(file, text, { mode: 0o755 });
        return file;
    }

    const sizeGb = () => Number(run("df", ["--output=size", "-B1", mount()]).stdout.trim().split("\n")[1]) / 1024 ** 3;

    beforeAll(() => {
        dir = fs.mkdtempSync("/var/tmp/airlock-e2v-");
        if (run("id", [AGENT]).status !== 0) {
            expect(run("useradd", ["--no-create-home", "--shell", "/usr/sbin/nologin", AGENT]).status).toBe(0);
            createdUser = true;
        }
    });

    afterAll(() => {
        if (dir) {
            run("umount", [mount()]);
            fs.rmSync(dir, { recursive: true, force: true });
        }
        if (createdUser) run("userdel", [AGENT]);
    });

    it("mounts a stateGb filesystem at a root-owned path, with the volume directories owned by the agent", () => {
        const first = run(script(1), []);
        expect(first.stderr).toBe("");
        expect(first.status).toBe(0);
        expect(run("mountpoint", ["-q", mount()]).status).toBe(0);
        expect(sizeGb()).toBeGreaterThan(0.9);
        expect(sizeGb()).toBeLessThanOrEqual(1);
        const rootDir = fs.statSync(mount());
        expect([rootDir.uid, rootDir.mode & 0o777]).toEqual([0, 0o755]);
        const agentUid = Number(run("id", ["-u", AGENT]).stdout.trim());
        for (const volume of ["agent-state", "agent-memory"]) {
            const st = fs.statSync(path.join(mount(), volume));
            expect([st.uid, st.mode & 0o777], volume).toEqual([agentUid, 0o700]);
        }
        expect(run("findmnt", ["-n", "-o", "OPTIONS", mount()]).stdout).toMatch(/nosuid,nodev/);
    });

    it("is idempotent, keeps data, and grows (never shrinks) with stateGb", () => {
        fs.writeFileSync(path.join(mount(), "agent-state", "memory.txt"), "kept\n");
        expect(run(script(1), []).status).toBe(0);
        expect(run("umount", [mount()]).status).toBe(0);
        const grown = run(script(2), []);
        expect(grown.status).toBe(0);
        expect(grown.stdout).toContain("grew");
        expect(sizeGb()).toBeGreaterThan(1.8);
        expect(fs.readFileSync(path.join(mount(), "agent-state", "memory.txt"), "utf8")).toBe("kept\n");
        expect(run("umount", [mount()]).status).toBe(0);
        const smaller = run(script(1), []);
        expect(smaller.status).toBe(0);
        expect(smaller.stderr).toContain("larger than stateGb=1; not shrinking it");
        expect(sizeGb()).toBeGreaterThan(1.8);
        expect(run("umount", [mount()]).status).toBe(0);
    });

    it("a disk without room for stateGb fails by name before anything is written (fallocate reserves it all)", () => {
        const small = path.join(dir, "small");
        fs.mkdirSync(small);
        expect(run("mount", ["-t", "tmpfs", "-o", "size=64m", "tmpfs", small]).status).toBe(0);
        try {
            const file = script(1);
            fs.writeFileSync(file, fs.readFileSync(file, "utf8").replace(`readonly IMAGE=${dir}/agent-state.img`, `readonly IMAGE=${small}/agent-state.img`));
            const refused = run(file, []);
            expect(refused.status).toBe(1);
            expect(refused.stderr.trim()).toMatch(/^airlock-agent-state: stateGb=1 needs 1024 MiB more on .*\/small; \d+ MiB free$/);
            expect(fs.readdirSync(small)).toEqual([]);
        } finally {
            run("umount", [small]);
        }
    });

    it("the resolver's work directory gets one of its own (resolverLogGb): a flood of its logs fills that, never the disk", () => {
        const cfg = readStackFile(editedStack("dev", (c) => (c["airlock:agent"].user = AGENT, (c["airlock:gateway"].resolverLogGb = 1))));
        const file = path.join(dir, "airlock-resolver-state");
        fs.writeFileSync(
            file,
            renderedFile(renderHosts(cfg).gateway, "/usr/local/sbin/airlock-resolver-state")
                .replace(`readonly IMAGE=${RESOLVER_STATE_IMAGE}`, `readonly IMAGE=${dir}/resolver.img`)
                .replace(`readonly MOUNT=${RESOLVER_STATE_MOUNT}`, `readonly MOUNT=${mount()}`),
            { mode: 0o755 },
        );
        const avail = () => Number(run("df", ["--output=avail", "-B1", "/var/tmp"]).stdout.trim().split("\n")[1]);
        const before = avail();
        const made = run(file, []);
        expect(made.status, made.stderr).toBe(0);
        expect(made.stdout).toMatch(/^airlock-resolver-state: .* holds work$/m);
        expect(sizeGb()).toBeLessThanOrEqual(1);
        // The compose file binds AdGuard Home's work directory there.
        expect(path.join(RESOLVER_STATE_MOUNT, "work")).toBe(RESOLVER_WORK_DIR);
        // The agent's container (its uid) writes 2 GB: the filesystem is full at 1 GB, and the disk gave no more than the image.
        const flood = run("runuser", ["-u", AGENT, "--", "dd", "if=/dev/zero", `of=${path.join(mount(), "work", "querylog.json")}`, "bs=1M", "count=2048"]);
        expect(flood.stderr).toMatch(/No space left on device/);
        expect(fs.statSync(path.join(mount(), "work", "querylog.json")).size).toBeLessThanOrEqual(1024 ** 3);
        expect(before - avail()).toBeLessThan(1024 ** 3 + 64 * 1024 ** 2);
    });
});
