import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { REPO } from "./helpers/stacks";
import { isRoot, toolsAvailable } from "./helpers/tools";

const LOCK = "/var/lib/dpkg/lock-frontend";
const usable = isRoot() && fs.existsSync(LOCK) && toolsAvailable("test/run.sh waits for the dpkg lock", ["python3"]);
if (!isRoot()) console.warn("SKIPPED test/run.sh's dpkg-lock wait: needs root (it takes the real lock)");

/** Holds dpkg's frontend lock (a POSIX lock, as apt-get takes it) for `seconds`; resolves once it is held. */
function holdDpkgLock(seconds: number): Promise<() => Promise<void>> {
    const holder = spawn("python3", ["-c", `import fcntl,sys,time\nf=open("${LOCK}","r+")\nfcntl.lockf(f,fcntl.LOCK_EX)\nprint("held",flush=True)\ntime.sleep(${seconds})`]);
    return new Promise((resolve, reject) => {
        holder.stdout.once("data", () => resolve(() => new Promise((done) => (holder.exitCode !== null ? done() : holder.once("exit", () => done())))));
        holder.once("error", reject);
    });
}

function waitForLocks(limit: number) {
    const started = Date.now();
    const result = spawnSync("bash", ["-c", `source test/apt-lock.sh && wait_for_apt_locks ${limit}`], { cwd: REPO, encoding: "utf8" });
    return { status: result.status, stderr: result.stderr, seconds: (Date.now() - started) / 1000 };
}

describe.runIf(usable)("test/run.sh and the package manager's lock", () => {
    it("run.sh waits for the locks before apt-get, and apt-get itself waits too", () => {
        const script = fs.readFileSync(path.join(REPO, "test/run.sh"), "utf8");
        const aptLines = script.split("\n").filter((l) => /^\s*(DEBIAN_FRONTEND=\S+ )?apt-get /.test(l));
        expect(aptLines.length).toBe(2);
        for (const line of aptLines) expect(script.slice(0, script.indexOf(line)).trimEnd().split("\n").slice(-3).join("\n")).toMatch(/wait_for_apt_locks \d+/);
        expect(aptLines[1]).toContain("-o DPkg::Lock::Timeout=");
    });

    it("waits while another process holds dpkg's lock, and gives up after its limit", async () => {
        const released = await holdDpkgLock(3);
        const gaveUp = waitForLocks(1);
        expect(gaveUp.status).toBe(1);
        expect(gaveUp.stderr).toMatch(/still locked by pid \d+ after 1s/);
        const waited = waitForLocks(60);
        expect(waited.status).toBe(0);
        expect(waited.stderr).toMatch(/waiting for the package manager \(locked by pid \d+\)/);
        expect(waited.seconds).toBeGreaterThan(0.5);
        await released();
        expect(waitForLocks(0)).toMatchObject({ status: 0, stderr: "" });
    });
});
