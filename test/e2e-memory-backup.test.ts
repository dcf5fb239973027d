import * as fs from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import * as path from "node:path";
import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { AGENT_STATE_MOUNT, GATEWAY_AGENT_PATHS } from "../components/workloads/compose";
import { BackupRig, backupRigAvailable, Repository, SECRETS } from "./helpers/backupRig";
import { editedStack, renderedFile, renderHosts } from "./helpers/stacks";
import { run } from "./helpers/tools";

/**
 * The agent runtime's memory database in the gateway's backups, with the backup
 * branch's rig (real restic, a real PostgreSQL standing in for the memory
 * database's container, the confinement): the rendered airlock-memory-dump stores a
 * custom-format dump in the gateway's repository, and the rendered
 * airlock-memory-drill restores it confined and requires rows in the tables the
 * stack names - failing, and so alerting, when they are empty.
 */

const canRun = backupRigAvailable();
const TABLES = ["peers", "messages"];

describe.runIf(canRun)("the memory database's backups and drill", () => {
    let rig: BackupRig;
    const gateway = () =>
        renderHosts(
            readStackFile(
                editedStack("dev", (c) => {
                    c["airlock:gateway"].agent.memoryDb = { enabled: true, drillTables: TABLES };
                    c["airlock:backup"].alertWebhookUrl = "https://alerts.example/hook";
                }),
            ),
        ).gateway;

    /** A gateway repository, initialised and pinned by the operator's airlock-backup-init. */
    function gatewayRepository(): Repository {
        const repo = rig.newRepository();
        const gatewayRepo: Repository = { ...repo, path: `${repo.path}-gateway` };
        const env = `RESTIC_REPOSITORY=${gatewayRepo.path}\nB2_ACCOUNT_ID=${SECRETS.b2KeyId}\nB2_ACCOUNT_KEY=${SECRETS.b2Key}\nRESTIC_PASSWORD=${SECRETS.password}\n`;
        fs.writeFileSync(path.join(repo.envDir, "gateway.env"), env, { mode: 0o600 });
        const init = rig.script("airlock-backup-init", ["gateway"], gatewayRepo);
        expect(init.status, init.stderr).toBe(0);
        return gatewayRepo;
    }

    /** pg_dump "in the memory database's container": here, against the rig's PostgreSQL. */
    const memoryDbExec = () => ({ AIRLOCK_MEMORY_DB_EXEC: `env PGHOST=${rig.socket}` });

    beforeAll(() => {
        rig = new BackupRig();
        // The memory tools, rendered from a stack with a memory database, beside the rig's scripts.
        for (const name of ["airlock-memory-dump", "airlock-memory-drill"]) {
            const target = path.join(rig.root, "usr/local/sbin", name);
            fs.writeFileSync(target, renderedFile(gateway(), `/usr/local/sbin/${name}`), { mode: 0o755 });
        }
        rig.startPostgres();
        expect(rig.psql("CREATE DATABASE memory", "postgres").status).toBe(0);
        const seeded = rig.psql(
            "CREATE TABLE peers (id int, name text); INSERT INTO peers VALUES (1, 'user'), (2, 'agent'); " +
                "CREATE TABLE messages (id int, peer int, body text); INSERT INTO messages SELECT g, 1 + g % 2, 'message ' || g FROM generate_series(1, 17) g;",
            "memory",
        );
        expect(seeded.status, seeded.stderr).toBe(0);
    }, 120_000);

    afterAll(() => rig?.close());

    it("a memory database with rows: dumped into the gateway's repository, restored confined, its tables counted", () => {
        const repo = gatewayRepository();
        const dump = rig.script("airlock-memory-dump", [], repo, memoryDbExec());
        expect(dump.stderr).toBe("");
        expect(dump.status).toBe(0);
        const snapshots = JSON.parse(rig.restic(repo, ["snapshots", "--json"]).stdout) as { tags: string[]; paths: string[] }[];
        expect(snapshots.map((s) => [s.tags, s.paths])).toEqual([[["memory-db"], ["/memory.dump"]]]);

        // Disaster: the memory is gone.
        expect(rig.psql("DROP TABLE peers; DROP TABLE messages;", "memory").status).toBe(0);
        const drill = rig.script("airlock-memory-drill", [], repo);
        expect(drill.stderr).toBe("");
        expect(drill.stdout).toContain("airlock-confined-restore: peers: 2 rows\n");
        expect(drill.stdout).toContain("airlock-confined-restore: messages: 17 rows\n");
        expect(drill.stdout).toContain("the dump restored as a non-superuser, confined");
        expect(drill.stdout).toMatch(/airlock-memory-drill: passed\n$/);
        expect(drill.status).toBe(0);
        const seeded = rig.psql("CREATE TABLE peers (id int, name text); INSERT INTO peers VALUES (1, 'user'); CREATE TABLE messages (id int); INSERT INTO messages VALUES (1);", "memory");
        expect(seeded.status).toBe(0);
    });

    it("an empty memory database fails the drill (its unit then alerts)", () => {
        const repo = gatewayRepository();
        expect(rig.psql("TRUNCATE peers; TRUNCATE messages;", "memory").status).toBe(0);
        expect(rig.script("airlock-memory-dump", [], repo, memoryDbExec()).status).toBe(0);
        const drill = rig.script("airlock-memory-drill", [], repo);
        expect(drill.status).toBe(1);
        expect(drill.stderr).toBe("airlock-confined-restore: FAILED: table peers restored with no rows\n");
        expect(drill.stdout).not.toContain("passed");
        // A failure fires the unit's OnFailure handler.
        expect(renderedFile(gateway(), "/etc/systemd/system/airlock-memory-drill.service")).toMatch(/^OnFailure=airlock-alert@%n\.service$/m);
    });

    it("no dump at all fails the drill; a failing pg_dump fails the dump and stores nothing", () => {
        const repo = gatewayRepository();
        expect(rig.script("airlock-memory-drill", [], repo).stderr).toBe("airlock-memory-drill: FAILED: no restorable memory database dump\n");
        const broken = rig.script("airlock-memory-dump", [], repo, { AIRLOCK_MEMORY_DB_EXEC: `env PGHOST=${rig.socket} PGPORT=1` });
        expect(broken.status).not.toBe(0);
        expect(JSON.parse(rig.restic(repo, ["snapshots", "--json"]).stdout)).toEqual([]);
        expect(rig.script("airlock-memory-drill", [], repo).status).toBe(1);
    });

    it("a drill fails when the newest dump is stale (the hourly dumps stopped), however well it restores", () => {
        const repo = gatewayRepository();
        const dumped = rig.script("airlock-memory-dump", [], repo, memoryDbExec());
        expect(dumped.status, dumped.stderr).toBe(0);
        const [fresh] = JSON.parse(rig.restic(repo, ["snapshots", "--json"]).stdout) as { id: string }[];
        // The only dump dates from 3 days ago: rewrite its time as restic itself would.
        const old = run("bash", ["-c", `restic --repo '${repo.path}' dump --quiet ${fresh.id} memory.dump | restic --repo '${repo.path}' backup --quiet --stdin --stdin-filename memory.dump --tag memory-db --time "$(date -d '3 days ago' '+%Y-%m-%d %H:%M:%S')" && restic --repo '${repo.path}' forget --quiet ${fresh.id}`], {
            env: { ...process.env, RESTIC_PASSWORD: SECRETS.password },
        });
        expect(old.status, old.stderr).toBe(0);
        const drill = rig.script("airlock-memory-drill", [], repo);
        expect(drill.stderr).toMatch(/^airlock-memory-drill: FAILED: the newest memory database dump is (7[0-9]|8[0-9]) hours old \(from .+\): the dumps have stopped\n$/);
        expect(drill.status).toBe(1);
    });

    it("a dump too large for the drill's scratch space fails before anything is written there", () => {
        const repo = gatewayRepository();
        const dumped = rig.script("airlock-memory-dump", [], repo, memoryDbExec());
        expect(dumped.status, dumped.stderr).toBe(0);
        const scratch = fs.mkdtempSync(path.join(rig.dir, "small-scratch-"));
        expect(run("mount", ["-t", "tmpfs", "-o", "size=32m", "tmpfs", scratch]).status).toBe(0);
        try {
            const drill = rig.script("airlock-memory-drill", [], repo, { AIRLOCK_SCRATCH_DIR: scratch });
            expect(drill.stderr).toMatch(/^airlock-memory-drill: FAILED: the memory database dump \(\d+ bytes\) does not fit in the drill's scratch space \(\d+ bytes free, \d+ needed\)\n$/);
            expect(drill.status).toBe(1);
            expect(run("df", ["--output=used", "-B1", scratch]).stdout.split("\n")[1].trim()).toMatch(/^\d{1,6}$/);
        } finally {
            run("umount", [scratch]);
        }
    });

    it("the alert a failed drill fires reaches the webhook with the unit's name", async () => {
        const received: string[] = [];
        const server = http.createServer((req, res) => {
            let body = "";
            req.on("data", (c: Buffer) => (body += c));
            req.on("end", () => {
                received.push(body);
                res.end();
            });
        });
        await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
        const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`;
        // The rendered handler, its https URL pointed at this loopback listener.
        const alert = path.join(rig.dir, "airlock-alert");
        fs.writeFileSync(alert, renderedFile(gateway(), "/usr/local/sbin/airlock-alert").replace("'https://alerts.example/hook'", `'${url}'`), { mode: 0o755 });
        const code = await new Promise<number | null>((resolve) => spawn(alert, ["airlock-memory-drill.service"], { stdio: "ignore" }).on("close", resolve));
        server.close();
        expect(code).toBe(0);
        expect(JSON.parse(received[0])).toMatchObject({ unit: "airlock-memory-drill.service", status: "failed" });
    });

    it("the gateway's daily backup holds the runtime's state volume, never its secrets file", () => {
        const script = renderedFile(gateway(), "/usr/local/sbin/airlock-backup");
        const paths = /--one-file-system --exclude=(\S+) (.+)$/m.exec(script)!;
        expect(paths[1]).toBe(GATEWAY_AGENT_PATHS.secrets);
        expect(paths[2].split(" ")).toEqual(expect.arrayContaining(["/etc/airlock", `${AGENT_STATE_MOUNT}/agent-state`]));
        // Run it: a tree standing in for the gateway's paths, the secrets file among them.
        const repo = gatewayRepository();
        const tree = path.join(rig.dir, "gateway-tree");
        for (const dir of ["etc/airlock/agent", "state"]) fs.mkdirSync(path.join(tree, dir), { recursive: true });
        fs.writeFileSync(path.join(tree, "etc/airlock/agent/secrets.json"), '{"secrets": {}}', { mode: 0o600 });
        fs.writeFileSync(path.join(tree, "etc/airlock/agent/terminal.yaml"), "terminal: {}\n");
        fs.writeFileSync(path.join(tree, "state/skills.md"), "remember\n");
        const backup = path.join(rig.root, "usr/local/sbin/airlock-backup");
        const original = fs.readFileSync(backup, "utf8");
        fs.writeFileSync(
            backup,
            original.replace(/--exclude=\S+ .+$/m, `--exclude=${tree}${GATEWAY_AGENT_PATHS.secrets} ${tree}/etc/airlock ${tree}/state`),
        );
        try {
            const ran = rig.script("airlock-backup", ["gateway"], repo);
            expect(ran.status, ran.stderr).toBe(0);
        } finally {
            fs.writeFileSync(backup, original);
        }
        const listed = rig.restic(repo, ["ls", "latest"]).stdout;
        expect(listed).toContain(`${tree}/state/skills.md`);
        expect(listed).toContain(`${tree}/etc/airlock/agent/terminal.yaml`);
        expect(listed).not.toContain("secrets.json");
        run("rm", ["-rf", tree]);
    });
});
