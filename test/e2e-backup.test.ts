import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { editedStack, renderHosts, renderedFile } from "./helpers/stacks";
import { isRoot, run, toolsAvailable } from "./helpers/tools";

/**
 * The rendered backup and restore-drill scripts with a real restic and a real
 * PostgreSQL: back up, destroy, restore, count rows. The repository is local
 * (the B2 path is covered against the fake B2); "the sandbox" is this machine,
 * reached with `bash -c` instead of the agent's ssh path.
 */

const canRun = isRoot() && toolsAvailable("backup e2e", ["restic", "runuser", "tar"]) && findPgBin() !== undefined;
if (!isRoot()) console.warn("SKIPPED backup e2e: the drill starts PostgreSQL as the postgres user, which needs root (CI runs it as root)");

function findPgBin(): string | undefined {
    if (!fs.existsSync("/usr/lib/postgresql")) {
        if (process.env.CI === "true") throw new Error("CI is missing PostgreSQL server binaries (.ci/run installs postgresql)");
        return undefined;
    }
    const versions = fs.readdirSync("/usr/lib/postgresql").sort();
    return versions.length > 0 ? `/usr/lib/postgresql/${versions[versions.length - 1]}/bin` : undefined;
}

/** A restic password assembled at run time. */
const PASSWORD = ["drill", "pass", "0123456789"].join("-");

describe.runIf(canRun)("backup and restore drill with real restic and PostgreSQL", () => {
    let dir: string;
    let scripts: Record<string, string>;
    const pgBin = findPgBin()!;
    const socket = () => path.join(dir, "socket");

    const pg = (args: string[]) => run("runuser", ["-u", "postgres", "--", ...args], { timeout: 60_000 });
    const psql = (sql: string, db = "agent") => pg([`${pgBin}/psql`, `--host=${socket()}`, "--username=postgres", "--no-psqlrc", "--tuples-only", "--no-align", `--dbname=${db}`, "--set=ON_ERROR_STOP=1", "--command", sql]);

    /** Runs a rendered script as its systemd unit would, pointed at the test repository and "sandbox". */
    function runScript(name: string, args: string[] = [], env: Record<string, string> = {}) {
        return run(scripts[name], args, {
            timeout: 180_000,
            env: {
                PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                AIRLOCK_BACKUP_ENV_DIR: path.join(dir, "env"),
                AIRLOCK_SANDBOX_EXEC: "bash -c",
                AIRLOCK_WORKSPACE: path.join(dir, "workspace"),
                PGHOST: socket(),
                PGUSER: "postgres",
                PGDATABASE: "agent",
                ...env,
            },
        });
    }

    function writeEnv(repository: string) {
        fs.mkdirSync(path.join(dir, "env"), { recursive: true, mode: 0o700 });
        fs.writeFileSync(path.join(dir, "env", "sandbox.env"), `RESTIC_REPOSITORY=${repository}\nRESTIC_PASSWORD=${PASSWORD}\n`, { mode: 0o600 });
    }

    // The scripts' own default, as under systemd (which sets no $HOME).
    const cacheDir = "/var/cache/airlock-restic";
    const cacheExisted = fs.existsSync(cacheDir);

    beforeAll(() => {
        dir = fs.mkdtempSync("/var/tmp/airlock-backup-e2e-");
        fs.chmodSync(dir, 0o755);
        const cfg = readStackFile(
            editedStack("dev", (c) => {
                c["airlock:workloads"].postgres = { enabled: true };
                c["airlock:backup"].drillTables = ["items", "audit.events"];
            }),
        );
        const gateway = renderHosts(cfg).gateway;
        scripts = {};
        for (const name of ["airlock-backup", "airlock-db-dump", "airlock-restore-drill"]) {
            scripts[name] = path.join(dir, name);
            fs.writeFileSync(scripts[name], renderedFile(gateway, `/usr/local/sbin/${name}`), { mode: 0o755 });
        }
        writeEnv(path.join(dir, "repo"));

        // "The sandbox": a workspace and a PostgreSQL with data.
        fs.mkdirSync(path.join(dir, "workspace", "src"), { recursive: true });
        fs.writeFileSync(path.join(dir, "workspace", "src", "main.py"), "print('hello')\n");
        for (const d of ["pg", "socket"]) fs.mkdirSync(path.join(dir, d));
        run("chown", ["postgres:", path.join(dir, "pg"), socket()]);
        expect(pg([`${pgBin}/initdb`, "--auth=trust", "--username=postgres", "-D", path.join(dir, "pg")]).status).toBe(0);
        const started = pg([`${pgBin}/pg_ctl`, "-D", path.join(dir, "pg"), "-w", "-l", path.join(dir, "pg", "log"), "-o", `-c listen_addresses='' -k ${socket()}`, "start"]);
        expect(started.status, started.stderr).toBe(0);
        expect(psql("CREATE DATABASE agent", "postgres").status).toBe(0);
        const seeded = psql("CREATE TABLE items (id int, name text); INSERT INTO items SELECT g, 'item ' || g FROM generate_series(1, 42) g; CREATE SCHEMA audit; CREATE TABLE audit.events (at timestamptz default now()); INSERT INTO audit.events DEFAULT VALUES;");
        expect(seeded.status, seeded.stderr).toBe(0);
    }, 120_000);

    afterAll(() => {
        if (dir) {
            pg([`${pgBin}/pg_ctl`, "-D", path.join(dir, "pg"), "-m", "immediate", "stop"]);
            run("rm", ["-rf", dir]);
        }
        if (!cacheExisted) fs.rmSync(cacheDir, { recursive: true, force: true });
    });

    it("backs up the workspace and the database, survives their loss, and the drill restores them with rows", () => {
        const backup = runScript("airlock-backup", ["sandbox"]);
        expect(backup.status, backup.stderr).toBe(0);
        const dump = runScript("airlock-db-dump");
        expect(dump.status, dump.stderr).toBe(0);

        // Disaster: the data is gone.
        expect(psql("DROP TABLE items; DROP SCHEMA audit CASCADE;").status).toBe(0);
        fs.rmSync(path.join(dir, "workspace"), { recursive: true });
        fs.mkdirSync(path.join(dir, "workspace"));

        const drill = runScript("airlock-restore-drill");
        expect(drill.stderr).toBe("");
        expect(drill.status).toBe(0);
        expect(drill.stdout).toContain("workspace snapshot restored (1 files)");
        expect(drill.stdout).toContain("items: 42 rows");
        expect(drill.stdout).toContain("audit.events: 1 rows");
        expect(drill.stdout).toContain("passed");
    });

    it("fails loudly against an empty repository", () => {
        const empty = path.join(dir, "empty-repo");
        run("restic", ["init", "--repo", empty], { env: { ...process.env, RESTIC_PASSWORD: PASSWORD } });
        writeEnv(empty);
        try {
            const drill = runScript("airlock-restore-drill");
            expect(drill.status).toBe(1);
            expect(drill.stderr).toMatch(/FAILED: no restorable workspace snapshot/);
        } finally {
            writeEnv(path.join(dir, "repo"));
        }
    });

    it("fails loudly when a restored table has no rows", () => {
        expect(psql("CREATE TABLE items (id int); CREATE SCHEMA audit; CREATE TABLE audit.events (at timestamptz);").status).toBe(0);
        expect(runScript("airlock-db-dump").status).toBe(0);
        const drill = runScript("airlock-restore-drill");
        expect(drill.status).toBe(1);
        expect(drill.stderr).toMatch(/FAILED: table items restored with no rows/);
    });

    it("fails loudly when the repository is corrupted", () => {
        const copy = path.join(dir, "corrupt-repo");
        run("cp", ["-a", path.join(dir, "repo"), copy]);
        // Every snapshot and index file overwritten: nothing can be trusted or restored.
        for (const file of run("find", [path.join(copy, "snapshots"), path.join(copy, "index"), "-type", "f"]).stdout.trim().split("\n")) fs.writeFileSync(file, "garbage");
        writeEnv(copy);
        try {
            const drill = runScript("airlock-restore-drill");
            expect(drill.status).toBe(1);
            expect(drill.stderr).toMatch(/FAILED/);
        } finally {
            writeEnv(path.join(dir, "repo"));
        }
    });
});
