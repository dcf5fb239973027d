import { spawn, ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as net from "node:net";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { buildGoTool, GO_TOOLS } from "../twin/gotools";
import { tempDir } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * The twin's stand-in for the backups' B2 buckets is restic's own rest-server, run as
 * twin/backup.ts runs it (--append-only): the hosts' restic (first on PATH, from
 * test/helpers/hostTools.ts) initialises, backs up and checks through it, and nothing
 * but restic's locks can be deleted, as with the hosts' B2 keys, which lack deleteFiles.
 */

const canRun = toolsAvailable("the twin's backup stand-in", ["go", "restic"]);

async function freePort(): Promise<number> {
    return new Promise((resolve) => {
        const server = net.createServer().listen(0, "127.0.0.1", () => {
            const { port } = server.address() as net.AddressInfo;
            server.close(() => resolve(port));
        });
    });
}

describe.runIf(canRun)("the twin's backup stand-in: restic's rest-server, append-only", () => {
    let server: ChildProcess;
    let url: string;
    let storage: string;
    const password = ["standin", String(process.pid)].join("-");
    const restic = (args: string[], repo = "sandbox") =>
        run("restic", args, { env: { PATH: process.env.PATH!, HOME: storage, RESTIC_REPOSITORY: `rest:${url}/${repo}/`, RESTIC_PASSWORD: password }, timeout: 120_000 });

    beforeAll(async () => {
        const binary = await buildGoTool("rest-server", (line) => console.log(line));
        expect(run(binary, ["--version"]).stdout).toContain(GO_TOOLS["rest-server"].version.replace(/^v/, ""));
        storage = tempDir("rest-server");
        const port = await freePort();
        url = `http://127.0.0.1:${port}`;
        server = spawn(binary, ["--path", path.join(storage, "repos"), "--listen", `127.0.0.1:${port}`, "--append-only", "--no-auth"], { stdio: "ignore" });
        for (let i = 0; i < 100 && (await fetch(`${url}/`).then(() => false, () => true)); i++) await new Promise((r) => setTimeout(r, 100));
    }, 600_000);
    afterAll(() => server?.kill());

    it("restic 0.17+ says there is no repository (exit 10) until init, then backs up and checks", () => {
        expect(restic(["cat", "config"]).status).toBe(10);
        expect(restic(["init"]).status).toBe(0);
        const data = path.join(storage, "data");
        fs.mkdirSync(data);
        fs.writeFileSync(path.join(data, "file"), "backed up\n");
        const backup = restic(["backup", "--host", "sandbox", data]);
        expect(backup.status, backup.stderr).toBe(0);
        // The locks of the backup are gone (append-only allows deleting locks only), so check starts.
        const check = restic(["check"]);
        expect(check.status, check.stderr).toBe(0);
        expect(fs.readdirSync(path.join(storage, "repos", "sandbox", "locks"))).toEqual([]);
    });

    it("refuses a prune, and a snapshot deleted or overwritten over HTTP", async () => {
        const forget = restic(["forget", "--keep-last", "0", "--unsafe-allow-remove-all", "--prune"]);
        expect(forget.status).not.toBe(0);
        expect(restic(["snapshots", "--json"]).stdout).toMatch(/"hostname":"sandbox"/);
        const [snapshot] = fs.readdirSync(path.join(storage, "repos", "sandbox", "snapshots"));
        const deleted = await fetch(`${url}/sandbox/snapshots/${snapshot}`, { method: "DELETE" });
        expect(deleted.status).toBe(403);
        const overwritten = await fetch(`${url}/sandbox/snapshots/${snapshot}`, { method: "POST", body: "{}" });
        expect(overwritten.status).toBe(403);
        expect(fs.existsSync(path.join(storage, "repos", "sandbox", "snapshots", snapshot))).toBe(true);
    });
});
