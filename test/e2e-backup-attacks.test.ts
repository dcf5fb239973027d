import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BackupRig, backupRigAvailable, Repository, SECRETS } from "./helpers/backupRig";
import { run } from "./helpers/tools";

/**
 * The agent attacks its safety net, for real: everything the sandbox returns (dumps,
 * archives, exit codes) is under its control, and whoever holds the gateway's B2
 * key can hide files. Each test performs one attack against the rendered scripts
 * with a real restic and PostgreSQL and asserts that it fails loudly or reveals
 * nothing.
 */

const canRun = backupRigAvailable();

/** A stand-in for "the sandbox" that returns `file` whatever it is asked to run. */
function returning(rig: BackupRig, name: string, file: string): string {
    const standIn = path.join(rig.dir, name);
    fs.writeFileSync(standIn, `#!/bin/bash\ncat ${file}\n`, { mode: 0o755 });
    return `bash ${standIn}`;
}

describe.runIf(canRun)("attacks on the backups", () => {
    let rig: BackupRig;

    beforeAll(() => {
        rig = new BackupRig();
        rig.startPostgres();
        const seeded = rig.psql("CREATE TABLE items (id int); INSERT INTO items SELECT generate_series(1, 7); CREATE SCHEMA audit; CREATE TABLE audit.events (at int); INSERT INTO audit.events VALUES (1);");
        expect(seeded.status, seeded.stderr).toBe(0);
    }, 120_000);

    afterAll(() => rig?.close());

    describe("a hostile database dump runs nothing and reads no credential", () => {
        it("a plain SQL dump with \\! and COPY ... TO PROGRAM", () => {
            const repo = rig.newRepository();
            expect(rig.script("airlock-backup", ["sandbox"], repo).status).toBe(0);
            const hostile = path.join(rig.dir, "hostile.sql");
            fs.writeFileSync(
                hostile,
                [
                    `\\! sh -c 'id > ${rig.marks}/psql-meta-command; env >> ${rig.marks}/psql-meta-command'`,
                    "CREATE TABLE items (id int); INSERT INTO items VALUES (1);",
                    "CREATE SCHEMA audit; CREATE TABLE audit.events (at int); INSERT INTO audit.events VALUES (1);",
                    `COPY (SELECT 1) TO PROGRAM 'cat >/dev/null; id > ${rig.marks}/copy-to-program; env >> ${rig.marks}/copy-to-program';`,
                    "",
                ].join("\n"),
            );
            const dump = rig.script("airlock-db-dump", [], repo, { AIRLOCK_SANDBOX_EXEC: returning(rig, "plain-dump", hostile) });
            expect(dump.status, dump.stderr).toBe(0);

            const drill = rig.script("airlock-restore-drill", [], repo);
            expect(rig.marksLeft()).toEqual({});
            expect(drill.status).toBe(1);
            expect(drill.stderr).toMatch(/FAILED: the database dump does not restore/);
        });

        /**
         * Custom-format dumps made by a real pg_dump from a database the agent shaped.
         * Each payload is first restored here by a superuser, as the control: it
         * must fire there, or the test proves nothing.
         */
        const payloads: { name: string; sql: string; fired: () => boolean }[] = [
            {
                name: "COPY ... TO PROGRAM from a CHECK constraint during the data load",
                sql: `CREATE FUNCTION pwn() RETURNS boolean LANGUAGE plpgsql AS $f$
                      BEGIN
                        IF current_database() <> 'hostile_copy' THEN
                          EXECUTE format('COPY (SELECT 1) TO PROGRAM %L', 'cat >/dev/null; id > MARKS/custom-copy-' || current_database() || '; env >> MARKS/custom-copy-' || current_database());
                        END IF;
                        RETURN true;
                      END $f$;
                      CREATE TABLE items (id int CHECK (pwn()));`,
                fired: () => fs.existsSync(path.join(rig.marks, "custom-copy-control_copy")),
            },
            {
                name: "server-side reads of the environment and credentials, written to a host file (errors swallowed)",
                sql: `CREATE FUNCTION pwn() RETURNS boolean LANGUAGE plpgsql AS $f$
                      BEGIN
                        IF current_database() <> 'hostile_read' THEN
                          BEGIN
                            EXECUTE format('COPY (SELECT encode(pg_read_binary_file(%L), %L)) TO %L', '/proc/self/environ', 'escape', 'MARKS/custom-read-' || current_database());
                          EXCEPTION WHEN others THEN NULL;
                          END;
                          BEGIN
                            EXECUTE format('COPY (SELECT pg_read_file(%L)) TO %L', 'ENV_FILE', 'MARKS/custom-creds-' || current_database());
                          EXCEPTION WHEN others THEN NULL;
                          END;
                        END IF;
                        RETURN true;
                      END $f$;
                      CREATE TABLE items (id int CHECK (pwn()));`,
                fired: () => fs.existsSync(path.join(rig.marks, "custom-read-control_read")),
            },
            {
                name: "a superuser-only object: an event trigger that runs COPY ... TO PROGRAM on DDL",
                sql: `CREATE FUNCTION pwn() RETURNS event_trigger LANGUAGE plpgsql AS $f$
                      BEGIN
                        EXECUTE format('COPY (SELECT 1) TO PROGRAM %L', 'cat >/dev/null; id > MARKS/custom-event-' || current_database());
                      END $f$;
                      CREATE EVENT TRIGGER pwn ON ddl_command_end EXECUTE FUNCTION pwn();
                      CREATE TABLE items (id int);`,
                fired: () => rig.psql("SELECT count(*) FROM pg_event_trigger", "control_event").stdout.trim() === "1",
            },
        ];

        it.each(payloads.map((p, i) => [p.name, i] as const))("a custom-format dump: %s", (_, i) => {
            const payload = payloads[i];
            const key = ["copy", "read", "event"][i];
            const repo = rig.newRepository();
            const sql = payload.sql.replaceAll("MARKS", rig.marks).replaceAll("ENV_FILE", path.join(repo.envDir, "sandbox.env"));
            expect(rig.psql(`CREATE DATABASE hostile_${key}`, "postgres").status).toBe(0);
            const shaped = rig.psql(`${sql} INSERT INTO items VALUES (1); CREATE SCHEMA audit; CREATE TABLE audit.events (at int); INSERT INTO audit.events VALUES (1);`, `hostile_${key}`);
            expect(shaped.status, shaped.stderr).toBe(0);
            const file = path.join(rig.dir, `hostile-${key}.dump`);
            // pg_dump runs as postgres, which may write only into the world-writable folder.
            const dumped = rig.pg([`${rig.pgBin}/pg_dump`, `--host=${rig.socket}`, "--username=postgres", "--format=custom", "--no-owner", `--dbname=hostile_${key}`, `--file=${path.join(rig.marks, `dump-${key}`)}`]);
            expect(dumped.status, dumped.stderr).toBe(0);
            fs.renameSync(path.join(rig.marks, `dump-${key}`), file);

            // The control: a superuser restore fires the payload.
            expect(rig.psql(`CREATE DATABASE control_${key}`, "postgres").status).toBe(0);
            rig.pg([`${rig.pgBin}/pg_restore`, `--host=${rig.socket}`, "--username=postgres", "--no-owner", `--dbname=control_${key}`, file]);
            expect(payload.fired(), "the payload fires under a superuser restore").toBe(true);
            for (const mark of fs.readdirSync(rig.marks)) fs.rmSync(path.join(rig.marks, mark));

            expect(rig.script("airlock-backup", ["sandbox"], repo).status).toBe(0);
            const dump = rig.script("airlock-db-dump", [], repo, { AIRLOCK_SANDBOX_EXEC: returning(rig, `custom-dump-${key}`, file) });
            expect(dump.status, dump.stderr).toBe(0);
            const drill = rig.script("airlock-restore-drill", [], repo);
            expect(rig.marksLeft()).toEqual({});
            expect(drill.stdout + drill.stderr).not.toContain(SECRETS.password);
            if (key !== "read") {
                expect(drill.status).toBe(1);
                expect(drill.stderr).toMatch(/FAILED: the database dump does not restore/);
            }
        });
    });

    describe("a hidden or replaced repository fails every scheduled run loudly and is never re-initialised", () => {
        const runs: [string, string[]][] = [
            ["airlock-backup", ["sandbox"]],
            ["airlock-db-dump", []],
            ["airlock-restic-check", ["sandbox"]],
            ["airlock-restore-drill", []],
        ];

        it("every file of the repository hidden (gone from listings)", () => {
            const repo = rig.newRepository();
            rig.backupAll(repo);
            fs.renameSync(repo.path, `${repo.path}.hidden`);
            for (const [name, args] of runs) {
                const result = rig.script(name, args, repo);
                expect(result.status, `${name}: ${result.stdout}`).not.toBe(0);
                // restic 0.17+ says there is none (exit 10), and each run says so.
                expect(result.stderr, name).toMatch(/FAILED: there is no sandbox repository at .* its files may have been hidden; it is never re-initialised/);
                expect(fs.existsSync(repo.path), `${name} created a repository`).toBe(false);
            }
        });

        it("a fresh repository initialised in its place", () => {
            const repo = rig.newRepository();
            rig.backupAll(repo);
            fs.renameSync(repo.path, `${repo.path}.hidden`);
            expect(rig.restic(repo, ["init"]).status).toBe(0);
            for (const [name, args] of runs) {
                const result = rig.script(name, args, repo);
                expect(result.status, `${name}: ${result.stdout}`).not.toBe(0);
                expect(result.stderr, name).toMatch(/FAILED: .*repository id \w+ is not the pinned \w+/);
            }
            expect(rig.restic(repo, ["snapshots", "--json"]).stdout.trim()).toBe("[]");
        });
    });

    it("no process of the agent user started by the backup carries a credential", () => {
        const repo = rig.newRepository();
        // The agent's ssh, as another user; like a ControlMaster, a child outlives the command.
        const ssh = path.join(rig.dir, "agent-ssh");
        fs.writeFileSync(
            ssh,
            [
                "#!/bin/bash",
                `sleep 300 </dev/null >/dev/null 2>&1 &`,
                `echo $! > ${rig.marks}/master-$$.pid`,
                `export AIRLOCK_WORKSPACE=${rig.workspace} PGHOST=${rig.socket} PGUSER=postgres PGDATABASE=agent`,
                `exec bash -c "$1"`,
                "",
            ].join("\n"),
            { mode: 0o755 },
        );
        const pids: string[] = [];
        try {
            rig.backupAll(repo, { AIRLOCK_SANDBOX_EXEC: `runuser -u nobody -- ${ssh}` });
            pids.push(...fs.readdirSync(rig.marks).filter((f) => f.startsWith("master-")).map((f) => fs.readFileSync(path.join(rig.marks, f), "utf8").trim()));
            expect(pids.length).toBe(2);
            for (const pid of pids) {
                expect(fs.readFileSync(`/proc/${pid}/status`, "utf8")).toMatch(/^Uid:\s+65534\s/m);
                const environ = fs.readFileSync(`/proc/${pid}/environ`, "utf8");
                for (const secret of Object.values(SECRETS)) expect(environ).not.toContain(secret);
                expect(environ).not.toMatch(/RESTIC_|B2_/);
            }
        } finally {
            for (const pid of pids) run("kill", [pid]);
            for (const mark of fs.readdirSync(rig.marks)) fs.rmSync(path.join(rig.marks, mark));
        }
    });

    describe("the drill checks every archive it restores", () => {
        /**
         * Cut where tar itself notices (inside a file's data: "Unexpected EOF", status 2),
         * and where it does not (inside a header: GNU tar lists the entries before it
         * and exits 0). Either way the end-of-archive marker is missing.
         */
        it.each([
            ["inside a file's data", 1 + 1, /damaged or forged \(tar exit status 2: tar: Unexpected EOF in archive\)/],
            ["inside an entry's header", 1, /damaged or forged \(no end-of-archive marker: the stream was cut\)/],
        ] as const)("a workspace archive truncated %s fails the drill", (_, headerBlocks, reason) => {
            const repo = rig.newRepository();
            rig.writeWorkspace(30);
            rig.backupAll(repo);
            const full = path.join(rig.dir, "full.tar");
            expect(run("tar", ["-C", rig.workspace, "-cf", full, "."]).status).toBe(0);
            // The 16th entry: "block N: -rw-r--r-- ...".
            const entry = run("tar", ["-tvR", "-f", full]).stdout.split("\n").filter((l) => /^block \d+: -/.test(l))[15];
            const block = Number(/^block (\d+):/.exec(entry)![1]);
            const truncated = path.join(rig.dir, "truncated.tar");
            fs.writeFileSync(truncated, fs.readFileSync(full).subarray(0, (block + headerBlocks - 1) * 512 + 100));
            const backup = rig.script("airlock-backup", ["sandbox"], repo, { AIRLOCK_SANDBOX_EXEC: returning(rig, "truncated-tar", truncated) });
            expect(backup.status, backup.stderr).toBe(0);

            const drill = rig.script("airlock-restore-drill", [], repo);
            expect(drill.status).toBe(1);
            expect(drill.stderr).toMatch(/FAILED: the latest workspace archive is damaged or forged/);
            expect(drill.stderr).toMatch(reason);
        });

        it("a workspace that lost more than half its files or bytes since the previous snapshot fails the drill", () => {
            const repo = rig.newRepository();
            rig.writeWorkspace(30);
            rig.backupAll(repo);
            rig.writeWorkspace(20);
            rig.backupAll(repo);
            const kept = rig.script("airlock-restore-drill", [], repo);
            expect(kept.stderr).toBe("");
            expect(kept.status).toBe(0);

            rig.writeWorkspace(2);
            rig.backupAll(repo);
            const drill = rig.script("airlock-restore-drill", [], repo);
            expect(drill.status).toBe(1);
            expect(drill.stderr).toMatch(/FAILED: the latest workspace archive holds 2 files, \d+ bytes; the previous one 20 files, \d+ bytes/);
        });
    });

    describe("the drill notices snapshots removed since its last run", () => {
        /** Hides one snapshot (as the host key can), by its rank from the oldest. */
        function hideSnapshot(repo: Repository, rank: number): void {
            const snapshots = JSON.parse(rig.restic(repo, ["snapshots", "--json"]).stdout) as { id: string; time: string }[];
            snapshots.sort((a, b) => Date.parse(a.time) - Date.parse(b.time));
            fs.renameSync(path.join(repo.path, "snapshots", snapshots[rank].id), path.join(rig.dir, `hidden-${snapshots[rank].id}`));
        }

        it("a purge of the oldest snapshots", () => {
            const repo = rig.newRepository();
            rig.backupAll(repo);
            rig.backupAll(repo);
            const first = rig.script("airlock-restore-drill", [], repo);
            expect(first.status, first.stderr).toBe(0);
            hideSnapshot(repo, 0);
            rig.backupAll(repo);
            const drill = rig.script("airlock-restore-drill", [], repo);
            expect(drill.status).toBe(1);
            expect(drill.stderr).toMatch(/FAILED: the oldest snapshot at the last drill \(\w+, .+\) is gone/);
        });

        it("a recent snapshot removed", () => {
            const repo = rig.newRepository();
            rig.backupAll(repo);
            rig.backupAll(repo);
            const first = rig.script("airlock-restore-drill", [], repo);
            expect(first.status, first.stderr).toBe(0);
            hideSnapshot(repo, 2);
            const drill = rig.script("airlock-restore-drill", [], repo);
            expect(drill.status).toBe(1);
            expect(drill.stderr).toMatch(/FAILED: the repository holds 3 snapshots, fewer than the 4 at the last drill/);
        });
    });

    describe("backups that stopped, or an archive too big to restore, fail the drill", () => {
        it("the newest workspace snapshot is older than two days (a stalled or failing backup)", () => {
            const repo = rig.newRepository();
            rig.writeWorkspace(5);
            // A snapshot as the last good run left it, three days ago; nothing since.
            const stale = run("bash", ["-c", `tar -C '${rig.workspace}' -cf - . | restic --repo '${repo.path}' backup --quiet --stdin --stdin-filename workspace.tar --tag workspace --time "$(date -d '3 days ago' '+%Y-%m-%d %H:%M:%S')"`], {
                env: { ...process.env, RESTIC_PASSWORD: SECRETS.password, RESTIC_CACHE_DIR: path.join(rig.dir, "cache") },
            });
            expect(stale.status, stale.stderr).toBe(0);
            // The database dumps kept coming: only the workspace's backups stopped.
            const dump = rig.script("airlock-db-dump", [], repo);
            expect(dump.status, dump.stderr).toBe(0);
            const drill = rig.script("airlock-restore-drill", [], repo);
            expect(drill.status).toBe(1);
            expect(drill.stderr).toMatch(/FAILED: the newest workspace snapshot is (7[0-9]|8[0-9]) hours old \(from .+\): backups have stopped/);
        });

        it("a sparse file in the workspace costs its data, not its length", () => {
            const repo = rig.newRepository();
            rig.writeWorkspace(5);
            // A terabyte of nothing: without --sparse the stream would run for hours.
            const hole = path.join(rig.workspace, "src", "hole");
            expect(run("truncate", ["-s", "1T", hole]).status).toBe(0);
            fs.chmodSync(hole, 0o644);
            try {
                const backup = rig.script("airlock-backup", ["sandbox"], repo);
                expect(backup.status, backup.stderr).toBe(0);
                const listed = rig.restic(repo, ["ls", "--json", "latest"]).stdout.split("\n").filter(Boolean).map((l) => JSON.parse(l));
                expect(listed.find((n) => n.name === "workspace.tar").size).toBeLessThan(10 * 1024 * 1024);
            } finally {
                fs.rmSync(hole);
            }
        }, 120_000);

        it("an archive larger than half the drill's scratch space fails before it is restored", () => {
            const repo = rig.newRepository();
            rig.writeWorkspace(5);
            const big = path.join(rig.workspace, "src", "big.bin");
            fs.writeFileSync(big, Buffer.alloc(24 * 1024 * 1024, 7), { mode: 0o644 });
            const scratch = fs.mkdtempSync(path.join(rig.dir, "small-scratch-"));
            expect(run("mount", ["-t", "tmpfs", "-o", "size=32m", "tmpfs", scratch]).status).toBe(0);
            try {
                rig.backupAll(repo);
                const drill = rig.script("airlock-restore-drill", [], repo, { AIRLOCK_SCRATCH_DIR: scratch });
                expect(drill.status).toBe(1);
                expect(drill.stderr).toMatch(/FAILED: the latest workspace archive \(\d+ bytes\) does not fit in the drill's scratch space/);
                // Nothing was restored into it.
                expect(run("df", ["--output=used", "-B1", scratch]).stdout.split("\n")[1].trim()).toMatch(/^\d{1,6}$/);
            } finally {
                run("umount", [scratch]);
                fs.rmSync(big);
            }
        }, 120_000);
    });
});
