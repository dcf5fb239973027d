import * as fs from "node:fs";
import * as path from "node:path";
import { expect } from "vitest";
import { readStackFile } from "../../components/config/load";
import { editedStack, renderHosts } from "./stacks";
import { isRoot, run, toolsAvailable } from "./tools";
import { hostToolsBin } from "./hostTools";

/**
 * The gateway's rendered backup scripts, installed under a scratch root and run as
 * their systemd units run them, against a local restic repository and "a sandbox"
 * on this machine: a workspace folder and a real PostgreSQL with data. Commands
 * "on the sandbox" run through AIRLOCK_SANDBOX_EXEC instead of the agent's ssh.
 */

export function findPgBin(): string | undefined {
    if (!fs.existsSync("/usr/lib/postgresql")) {
        if (process.env.CI === "true") throw new Error("CI is missing PostgreSQL server binaries (test/run.sh installs postgresql)");
        return undefined;
    }
    const versions = fs.readdirSync("/usr/lib/postgresql").sort();
    return versions.length > 0 ? `/usr/lib/postgresql/${versions[versions.length - 1]}/bin` : undefined;
}

export function backupRigAvailable(): boolean {
    if (!isRoot()) {
        console.warn("SKIPPED backup e2e: the scripts run as root and start PostgreSQL as other users (CI runs it as root)");
        return false;
    }
    return toolsAvailable("backup e2e", ["restic", "runuser", "tar", "jq", "bwrap", "setpriv"]) && findPgBin() !== undefined;
}

/** Secret-shaped values, assembled at run time. */
export const SECRETS = {
    password: ["drill", "pass", "0123456789"].join("-"),
    b2KeyId: ["0051", "e2e", "keyid", "4242"].join(""),
    b2Key: ["K005", "e2eSECRETkey", "abcdefghij"].join(""),
};

/** The gateway's cloud-init creates the drill's unprivileged user; on a test machine, this does. */
export const DRILL_USER = "airlock-drill";
function ensureDrillUser(): void {
    if (run("id", ["-u", DRILL_USER]).status === 0) return;
    const added = run("useradd", ["--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", DRILL_USER]);
    expect(added.status, added.stderr).toBe(0);
}

export interface Repository {
    path: string;
    envDir: string;
    stateDir: string;
}

export class BackupRig {
    readonly dir: string;
    readonly root: string;
    readonly pgBin = findPgBin()!;
    readonly workspace: string;
    readonly socket: string;
    /** World-writable: where a hostile payload running as any user would leave its mark. */
    readonly marks: string;
    private repositories = 0;

    constructor(drillTables: string[] = ["items", "audit.events"]) {
        ensureDrillUser();
        this.dir = fs.mkdtempSync("/var/tmp/airlock-backup-e2e-");
        fs.chmodSync(this.dir, 0o755);
        this.root = path.join(this.dir, "root");
        this.workspace = path.join(this.dir, "workspace");
        this.socket = path.join(this.dir, "socket");
        this.marks = path.join(this.dir, "marks");
        fs.mkdirSync(this.marks);
        fs.chmodSync(this.marks, 0o1777);

        const cfg = readStackFile(
            editedStack("dev", (c) => {
                c["airlock:workloads"].postgres = { enabled: true };
                c["airlock:backup"].drillTables = drillTables;
            }),
        );
        for (const file of renderHosts(cfg).gateway.files) {
            if (!/^\/usr\/local\/(sbin\/airlock-|lib\/airlock\/)/.test(file.path)) continue;
            const target = path.join(this.root, file.path);
            fs.mkdirSync(path.dirname(target), { recursive: true });
            fs.writeFileSync(target, file.content, { mode: parseInt(file.permissions, 8) });
        }
        fs.chmodSync(this.dir, 0o755);
        this.writeWorkspace(3);
    }

    /** Starts "the sandbox's" PostgreSQL with a database `agent`. */
    startPostgres(): void {
        const data = path.join(this.dir, "pg");
        for (const d of [data, this.socket]) fs.mkdirSync(d);
        run("chown", ["postgres:", data, this.socket]);
        const init = this.pg([`${this.pgBin}/initdb`, "--auth=trust", "--username=postgres", "-D", data]);
        expect(init.status, init.stderr).toBe(0);
        const started = this.pg([`${this.pgBin}/pg_ctl`, "-D", data, "-w", "-l", path.join(data, "log"), "-o", `-c listen_addresses='' -k ${this.socket}`, "start"]);
        expect(started.status, started.stderr).toBe(0);
        expect(this.psql("CREATE DATABASE agent", "postgres").status).toBe(0);
    }

    pg(args: string[]) {
        return run("runuser", ["-u", "postgres", "--", ...args], { timeout: 60_000 });
    }

    psql(sql: string, db = "agent") {
        return this.pg([`${this.pgBin}/psql`, `--host=${this.socket}`, "--username=postgres", "--no-psqlrc", "--tuples-only", "--no-align", `--dbname=${db}`, "--set=ON_ERROR_STOP=1", "--command", sql]);
    }

    /** Replaces the workspace with `count` small files (readable by every user, as the stand-in ssh runs as another one). */
    writeWorkspace(count: number): void {
        fs.rmSync(this.workspace, { recursive: true, force: true });
        fs.mkdirSync(path.join(this.workspace, "src"), { recursive: true, mode: 0o755 });
        for (let i = 0; i < count; i++) fs.writeFileSync(path.join(this.workspace, "src", `file${i}.py`), `print(${i})\n`.repeat(20), { mode: 0o644 });
        run("chmod", ["-R", "a+rX", this.workspace]);
    }

    /** A fresh repository with its own credentials, pinned id and drill state. */
    newRepository(): Repository {
        const n = ++this.repositories;
        const repo: Repository = { path: path.join(this.dir, `repo${n}`), envDir: path.join(this.dir, `env${n}`), stateDir: path.join(this.dir, `state${n}`) };
        this.writeEnv(repo);
        const init = this.script("airlock-backup-init", ["sandbox"], repo);
        expect(init.status, init.stderr).toBe(0);
        return repo;
    }

    writeEnv(repo: Repository): void {
        fs.mkdirSync(repo.envDir, { recursive: true, mode: 0o700 });
        const env = `RESTIC_REPOSITORY=${repo.path}\nB2_ACCOUNT_ID=${SECRETS.b2KeyId}\nB2_ACCOUNT_KEY=${SECRETS.b2Key}\nRESTIC_PASSWORD=${SECRETS.password}\n`;
        fs.writeFileSync(path.join(repo.envDir, "sandbox.env"), env, { mode: 0o600 });
    }

    /** What a command "on the sandbox" is run with: this machine, with the sandbox's variables. */
    get sandboxExec(): string {
        return `env AIRLOCK_WORKSPACE=${this.workspace} PGHOST=${this.socket} PGUSER=postgres PGDATABASE=agent bash -c`;
    }

    /** Runs an installed script as its unit would (no $HOME, a plain PATH), pointed at `repo`. */
    script(name: string, args: string[], repo: Repository, env: Record<string, string> = {}) {
        return run(path.join(this.root, "usr/local/sbin", name), args, {
            timeout: 300_000,
            env: {
                // The hosts' restic (test/helpers/hostTools.ts) before this machine's.
                PATH: [path.join(this.root, "usr/local/sbin"), hostToolsBin(), "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"].filter(Boolean).join(":"),
                AIRLOCK_BACKUP_LIB_DIR: path.join(this.root, "usr/local/lib/airlock"),
                AIRLOCK_BACKUP_ENV_DIR: repo.envDir,
                AIRLOCK_STATE_DIR: repo.stateDir,
                AIRLOCK_SANDBOX_EXEC: this.sandboxExec,
                // The rig's own cache: the machine's /var/cache stays untouched.
                RESTIC_CACHE_DIR: path.join(this.dir, "cache"),
                ...env,
            },
        });
    }

    /** A workspace snapshot and a database dump, both required to succeed. */
    backupAll(repo: Repository, env: Record<string, string> = {}): void {
        const backup = this.script("airlock-backup", ["sandbox"], repo, env);
        expect(backup.status, backup.stderr).toBe(0);
        const dump = this.script("airlock-db-dump", [], repo, env);
        expect(dump.status, dump.stderr).toBe(0);
    }

    /** restic on `repo`, as the operator would run it. */
    restic(repo: Repository, args: string[]) {
        return run("restic", ["--repo", repo.path, ...args], { env: { PATH: process.env.PATH, RESTIC_PASSWORD: SECRETS.password, RESTIC_CACHE_DIR: path.join(this.dir, "operator-cache") }, timeout: 120_000 });
    }

    /** Every file a hostile payload managed to write, with its content. */
    marksLeft(): Record<string, string> {
        return Object.fromEntries(fs.readdirSync(this.marks).map((f) => [f, fs.readFileSync(path.join(this.marks, f), "utf8")]));
    }

    close(): void {
        if (fs.existsSync(path.join(this.dir, "pg", "postmaster.pid"))) this.pg([`${this.pgBin}/pg_ctl`, "-D", path.join(this.dir, "pg"), "-m", "immediate", "stop"]);
        run("rm", ["-rf", this.dir]);
    }
}
