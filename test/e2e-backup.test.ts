import { spawn } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BackupRig, backupRigAvailable, DRILL_USER, Repository, SECRETS } from "./helpers/backupRig";
import { run } from "./helpers/tools";

/**
 * The rendered backup, init and restore-drill scripts with a real restic and a real
 * PostgreSQL: back up, destroy, restore, count rows. The repository is local (the
 * B2 path is covered against the fake B2); "the sandbox" is this machine. The
 * attacks on these scripts are in e2e-backup-attacks.test.ts.
 */

const canRun = backupRigAvailable();

// Each test runs real backups and drills: a minute or more on a loaded machine.
describe.runIf(canRun)("backup and restore drill with real restic and PostgreSQL", { timeout: 300_000 }, () => {
    let rig: BackupRig;
    let repo: Repository;

    beforeAll(() => {
        rig = new BackupRig();
        rig.startPostgres();
        seed();
        repo = rig.newRepository();
    }, 120_000);

    afterAll(() => rig?.close());

    function seed(): void {
        const seeded = rig.psql("CREATE TABLE items (id int, name text); INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 42) g; CREATE SCHEMA audit; CREATE TABLE audit.events (at timestamptz default now()); INSERT INTO audit.events DEFAULT VALUES;");
        expect(seeded.status, seeded.stderr).toBe(0);
    }

    it("backs up the workspace and the database, survives their loss, and the drill restores them with rows", () => {
        rig.backupAll(repo);

        // Disaster: the data is gone.
        expect(rig.psql("DROP TABLE items; DROP SCHEMA audit CASCADE;").status).toBe(0);
        fs.rmSync(rig.workspace, { recursive: true });
        fs.mkdirSync(rig.workspace);

        const drill = rig.script("airlock-restore-drill", [], repo);
        expect(drill.stderr).toBe("");
        expect(drill.status).toBe(0);
        expect(drill.stdout).toMatch(/workspace snapshot restored \(3 files, \d+ bytes\)/);
        expect(drill.stdout).toContain("items: 42 rows");
        expect(drill.stdout).toContain("audit.events: 1 rows");
        expect(drill.stdout).toContain("the dump restored as a non-superuser, confined");
        expect(drill.stdout).toMatch(/airlock-restore-drill: passed\n$/);
        // The baseline for the next drill, root-owned.
        const state = fs.readFileSync(path.join(repo.stateDir, "restore-drill-sandbox.state"), "utf8");
        expect(state).toMatch(/^snapshots=2\noldest_id=[0-9a-f]{64}\noldest_time=\d+\ndrill_time=\d+\n$/);
        expect(fs.statSync(path.join(repo.stateDir, "restore-drill-sandbox.state")).uid).toBe(0);
        seed();
        rig.writeWorkspace(3);
    });

    it("backs up a workspace on an ext4 volume: its lost+found (root's, 0700) is not the agent's to read", () => {
        // Where the sandbox's tar runs (the agent's rootless container), host root's files are nobody's.
        const ext4 = rig.newRepository();
        rig.writeWorkspace(2);
        fs.mkdirSync(path.join(rig.workspace, "lost+found"), { mode: 0o700 });
        // Only the volume's own: a folder of that name deeper down is the agent's work.
        fs.mkdirSync(path.join(rig.workspace, "src", "lost+found"), { mode: 0o755 });
        fs.writeFileSync(path.join(rig.workspace, "src", "lost+found", "kept.txt"), "kept\n", { mode: 0o644 });
        const asTheContainer = { AIRLOCK_SANDBOX_EXEC: `runuser -u nobody -- ${rig.sandboxExec}` };
        const backup = rig.script("airlock-backup", ["sandbox"], ext4, asTheContainer);
        expect(backup.status, backup.stderr).toBe(0);
        const listed = rig.restic(ext4, ["dump", "latest", "workspace.tar"]);
        expect(listed.stdout).toContain("src/file1.py");
        expect(listed.stdout).toContain("./src/lost+found/kept.txt");
        expect(listed.stdout).not.toMatch(/\.\/lost\+found/);
        // One the agent made in its place (red team 3) is the agent's work, and is backed up.
        fs.rmdirSync(path.join(rig.workspace, "lost+found"));
        fs.mkdirSync(path.join(rig.workspace, "lost+found"), { mode: 0o755 });
        fs.writeFileSync(path.join(rig.workspace, "lost+found", "stash.txt"), "stash\n", { mode: 0o644 });
        run("chown", ["-R", "nobody", path.join(rig.workspace, "lost+found")]);
        expect(rig.script("airlock-backup", ["sandbox"], ext4, asTheContainer).status).toBe(0);
        expect(rig.restic(ext4, ["dump", "latest", "workspace.tar"]).stdout).toContain("./lost+found/stash.txt");
        rig.writeWorkspace(3);
    });

    it.each([
        ["airlock-db-dump", [], "db"],
        ["airlock-backup", ["sandbox"], "workspace"],
    ])("%s: a stream from the sandbox that fails halfway fails the unit and stores no snapshot (never a truncated latest)", (script, args, tag) => {
        // The sandbox's pg_dump or tar writes part of its output, then fails; restic must not keep it.
        const own = rig.newRepository();
        const before = JSON.parse(rig.restic(own, ["snapshots", "--json", "--tag", tag]).stdout) as unknown[];
        for (const sandboxExec of ["sh -c 'printf PGDMP-first-half; exit 1'", "sh -c 'exit 1'"]) {
            const failed = rig.script(script, args, own, { AIRLOCK_SANDBOX_EXEC: sandboxExec });
            expect(failed.status, sandboxExec).not.toBe(0);
        }
        expect(JSON.parse(rig.restic(own, ["snapshots", "--json", "--tag", tag]).stdout)).toEqual(before);
        // And a whole one is still stored.
        const whole = rig.script(script, args, own);
        expect(whole.status, whole.stderr).toBe(0);
        expect(JSON.parse(rig.restic(own, ["snapshots", "--json", "--tag", tag]).stdout)).toHaveLength(before.length + 1);
    });

    it("fails loudly against an empty repository", () => {
        const empty = rig.newRepository();
        const drill = rig.script("airlock-restore-drill", [], empty);
        expect(drill.status).toBe(1);
        expect(drill.stderr).toMatch(/FAILED: no restorable workspace snapshot/);
    });

    it("fails loudly when a restored table has no rows", () => {
        const rowless = rig.newRepository();
        expect(rig.psql("CREATE DATABASE rowless", "postgres").status).toBe(0);
        expect(rig.psql("CREATE TABLE items (id int); CREATE SCHEMA audit; CREATE TABLE audit.events (at timestamptz);", "rowless").status).toBe(0);
        rig.backupAll(rowless, { AIRLOCK_SANDBOX_EXEC: rig.sandboxExec.replace("PGDATABASE=agent", "PGDATABASE=rowless") });
        const drill = rig.script("airlock-restore-drill", [], rowless);
        expect(drill.status).toBe(1);
        expect(drill.stderr).toMatch(/FAILED: table items restored with no rows/);
    });

    it("fails loudly when the repository is corrupted", () => {
        const copy: Repository = { ...repo, path: `${repo.path}-corrupt`, envDir: `${repo.envDir}-corrupt` };
        run("cp", ["-a", repo.path, copy.path]);
        run("cp", ["-a", repo.envDir, copy.envDir]);
        rig.writeEnv(copy);
        // Every snapshot and index file overwritten: nothing can be trusted or restored.
        for (const file of run("find", [path.join(copy.path, "snapshots"), path.join(copy.path, "index"), "-type", "f"]).stdout.trim().split("\n")) fs.writeFileSync(file, "garbage");
        // A cold cache, as on a rebuilt gateway: restic's cache would otherwise hold good copies.
        const drill = rig.script("airlock-restore-drill", [], copy, { RESTIC_CACHE_DIR: path.join(rig.dir, "cold-cache") });
        expect(drill.status).toBe(1);
        expect(drill.stderr).toMatch(/FAILED/);
    });

    it("an operator accepts an intended clean-up or prune once, and the next drill compares against it", () => {
        const own = rig.newRepository();
        rig.writeWorkspace(10);
        rig.backupAll(own);
        rig.writeWorkspace(1);
        rig.backupAll(own);
        expect(rig.script("airlock-restore-drill", [], own).stderr).toMatch(/FAILED: the latest workspace archive holds 1 files/);
        const accepted = rig.script("airlock-restore-drill", ["--accept-shrink"], own);
        expect(accepted.status, accepted.stderr).toBe(0);
        expect(accepted.stdout).toMatch(/shrink accepted: the latest workspace archive holds 1 files/);

        // A prune (with the operator's key) removes the oldest snapshots.
        const snapshots = JSON.parse(rig.restic(own, ["snapshots", "--json"]).stdout) as { id: string; time: string }[];
        const oldest = snapshots.sort((a, b) => Date.parse(a.time) - Date.parse(b.time))[0];
        expect(rig.restic(own, ["forget", oldest.id]).status).toBe(0);
        expect(rig.script("airlock-restore-drill", [], own).stderr).toMatch(/FAILED: the repository holds 3 snapshots, fewer than the 4/);
        const history = rig.script("airlock-restore-drill", ["--accept-history"], own);
        expect(history.status, history.stderr).toBe(0);
        expect(history.stdout).toMatch(/history accepted: 3 snapshots \(4 at the last drill/);
        const next = rig.script("airlock-restore-drill", [], own);
        expect(next.status, next.stderr).toBe(0);
        rig.writeWorkspace(3);
    });

    /** Backs up `archive` as the workspace snapshot (as a hostile sandbox would return it) and runs the drill. */
    function drillOn(archive: string) {
        const own = rig.newRepository();
        rig.backupAll(own);
        const standIn = `${archive}.sh`;
        fs.writeFileSync(standIn, `#!/bin/bash\ncat ${archive}\n`, { mode: 0o755 });
        expect(rig.script("airlock-backup", ["sandbox"], own, { AIRLOCK_SANDBOX_EXEC: `bash ${standIn}` }).status).toBe(0);
        return rig.script("airlock-restore-drill", ["--accept-shrink"], own);
    }

    it("counts entries right whatever their names hold (a newline and a forged listing line)", () => {
        const staging = path.join(rig.dir, "newline-names");
        fs.mkdirSync(staging);
        fs.writeFileSync(path.join(staging, "x\nblock 9: -rw-r--r-- 0:0 999999999 2024-01-01 00:00 forged"), "1");
        fs.writeFileSync(path.join(staging, "y"), "2");
        const archive = path.join(rig.dir, "newline-names.tar");
        expect(run("tar", ["-C", staging, "-cf", archive, "."]).status).toBe(0);
        const drill = drillOn(archive);
        expect(drill.status, drill.stderr).toBe(0);
        expect(drill.stdout).toContain("workspace snapshot restored (2 files, 2 bytes)");
    });

    it("fails on absolute and climbing names, and extracts nothing anywhere", () => {
        const staging = path.join(rig.dir, "climbing-names");
        fs.mkdirSync(path.join(staging, "a"), { recursive: true });
        fs.writeFileSync(path.join(staging, "a", "y"), "2");
        fs.writeFileSync(path.join(staging, "a", "z"), "3");
        const archive = path.join(rig.dir, "climbing-names.tar");
        const made = run("tar", ["-C", staging, "-P", "-cf", archive, "--transform", "s,^a/y$,../../../../tmp/airlock-e2e-climbed,;s,^a/z$,/tmp/airlock-e2e-absolute,", "a"]);
        expect(made.status, made.stderr).toBe(0);
        const drill = drillOn(archive);
        expect(drill.status).toBe(1);
        expect(drill.stderr).toMatch(/FAILED: the latest workspace archive is damaged or forged \(tar exit status 0: tar: Removing leading `\/' from member names\)/);
        expect(fs.existsSync("/tmp/airlock-e2e-climbed")).toBe(false);
        expect(fs.existsSync("/tmp/airlock-e2e-absolute")).toBe(false);
    });

    describe("airlock-backup-init: a repository is initialised once, by the operator", () => {
        it("a credentials file whose password does not open the repository: init initialises nothing over it, and every run says why", () => {
            const own = rig.newRepository();
            const env = path.join(own.envDir, "sandbox.env");
            const good = fs.readFileSync(env, "utf8");
            fs.writeFileSync(env, good.replace(`RESTIC_PASSWORD=${SECRETS.password}`, `RESTIC_PASSWORD=${SECRETS.password}-not`), { mode: 0o600 });
            try {
                const backup = rig.script("airlock-backup", ["sandbox"], own);
                expect(backup.status).toBe(1);
                expect(backup.stderr).toMatch(/FAILED: the sandbox repository at .* does not open with the RESTIC_PASSWORD of its credentials file \(pinned id [0-9a-f]{8}\)/);
                fs.rmSync(path.join(own.envDir, "sandbox.id"));
                const config = fs.readFileSync(path.join(own.path, "config"));
                const init = rig.script("airlock-backup-init", ["sandbox"], own);
                expect(init.status).toBe(1);
                expect(init.stderr).toMatch(/FAILED: a repository exists at .*, and the RESTIC_PASSWORD of the credentials file does not open it: nothing initialised, nothing pinned/);
                expect(fs.readFileSync(path.join(own.path, "config"))).toEqual(config);
                expect(fs.existsSync(path.join(own.envDir, "sandbox.id"))).toBe(false);
            } finally {
                fs.writeFileSync(env, good, { mode: 0o600 });
            }
        });

        it("refuses when an id is already pinned", () => {
            const result = rig.script("airlock-backup-init", ["sandbox"], repo);
            expect(result.status).toBe(1);
            expect(result.stderr).toMatch(/FAILED: the sandbox repository is already pinned in .*sandbox\.id \([0-9a-f]{64}\): a repository is initialised once/);
        });

        it("refuses to initialise over an existing repository, and adopts it only with its id", () => {
            const rebuilt: Repository = { ...repo, envDir: `${repo.envDir}-rebuilt` };
            rig.writeEnv(rebuilt);
            const id = fs.readFileSync(path.join(repo.envDir, "sandbox.id"), "utf8").trim();
            const refused = rig.script("airlock-backup-init", ["sandbox"], rebuilt);
            expect(refused.status).toBe(1);
            expect(refused.stderr).toContain(`a repository already exists at ${repo.path} (id ${id}); if it is yours`);
            const wrong = rig.script("airlock-backup-init", ["sandbox", "--adopt", "0".repeat(64)], rebuilt);
            expect(wrong.status).toBe(1);
            expect(fs.existsSync(path.join(rebuilt.envDir, "sandbox.id"))).toBe(false);
            const adopted = rig.script("airlock-backup-init", ["sandbox", "--adopt", id], rebuilt);
            expect(adopted.status, adopted.stderr).toBe(0);
            expect(fs.readFileSync(path.join(rebuilt.envDir, "sandbox.id"), "utf8")).toBe(`${id}\n`);
            expect(rig.script("airlock-restic-check", ["sandbox"], rebuilt).status).toBe(0);
        });

        it("names the file and line of a bad credentials file (exit 2) and a missing one", () => {
            const bad: Repository = { ...repo, envDir: `${repo.envDir}-bad` };
            fs.mkdirSync(bad.envDir, { mode: 0o700 });
            fs.writeFileSync(path.join(bad.envDir, "sandbox.env"), `RESTIC_REPOSITORY=${repo.path}\nRESTIC_PASSWROD=x\n`, { mode: 0o600 });
            const typo = rig.script("airlock-backup", ["sandbox"], bad);
            expect(typo.status).toBe(2);
            expect(typo.stderr).toBe(`airlock-backup: ${path.join(bad.envDir, "sandbox.env")}: line 2: unknown key RESTIC_PASSWROD\n`);
            const missing = rig.script("airlock-backup", ["gateway"], bad);
            expect(missing.status).toBe(1);
            expect(missing.stderr).toMatch(/FAILED: .*gateway\.env is missing: deliver the credentials/);
        });
    });

    it("the confinement holds no credential, no network and nothing of the host", async () => {
        const envFile = path.join(repo.envDir, "sandbox.env");
        const server = net.createServer((socket) => {
            socket.on("error", () => undefined);
            socket.end("reached\n");
        });
        await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
        const port = (server.address() as net.AddressInfo).port;
        const probe = [
            "id -un",
            `cat ${envFile} 2>&1 | head -c 200; echo`,
            "ls /etc /var /root /home 2>&1",
            "cat /proc/1/environ 2>&1 | tr '\\0' ' '; echo",
            "ps -e -o pid=,user=,comm= 2>&1",
            `(exec 3<>/dev/tcp/127.0.0.1/${port} && echo CONNECTED) 2>&1`,
            `touch ${rig.marks}/escaped 2>&1`,
            "env",
        ].join("; ");
        const lib = path.join(rig.root, "usr/local/lib/airlock/backup.sh");
        const confined = (command: string) =>
            new Promise<{ status: number | null; stdout: string }>((resolve) => {
                // Asynchronous: the loopback server must keep answering meanwhile.
                const child = spawn("bash", ["-c", `. ${lib}; scratch="$(new_scratch)"; trap 'rm -rf "$scratch"' EXIT; ${command}`], {
                    env: { PATH: process.env.PATH, [["RESTIC", "PASSWORD"].join("_")]: SECRETS.password },
                    // Not a socket on stdin: Debian's bash would take itself for rshd and read ~/.bashrc.
                    stdio: ["ignore", "pipe", "pipe"],
                });
                let stdout = "";
                child.stdout.on("data", (d) => (stdout += d));
                child.stderr.on("data", (d) => (stdout += d));
                child.on("close", (status) => resolve({ status, stdout }));
            });
        try {
            // The control: the same probe outside the confinement reaches the listener and the file.
            const outside = await confined(`bash -c ${JSON.stringify(probe)}`);
            expect(outside.stdout).toContain("CONNECTED");
            expect(outside.stdout).toContain(SECRETS.password);
            fs.rmSync(path.join(rig.marks, "escaped"), { force: true });

            const inside = await confined(`confined "$scratch" bash -c ${JSON.stringify(probe)}`);
            expect(inside.stdout.split("\n")[0]).toBe(DRILL_USER);
            expect(inside.stdout).not.toContain("CONNECTED");
            expect(inside.stdout).not.toContain(SECRETS.password);
            expect(inside.stdout).not.toContain(SECRETS.b2Key);
            expect(inside.stdout).toMatch(/No such file or directory/);
            expect(inside.stdout).not.toMatch(/RESTIC_|B2_/);
            // Its own processes only: none of the host's.
            expect(inside.stdout).not.toMatch(/vitest|node|restic|postgres/);
            expect(fs.existsSync(path.join(rig.marks, "escaped"))).toBe(false);
            expect(inside.status).toBe(0);
        } finally {
            server.close();
        }
    });
});
