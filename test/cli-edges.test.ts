import { spawn, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { sweepAbandoned } from "../cli/plan";
import { airlock, AIRLOCK_BIN } from "./helpers/cli";
import { editedStack, REPO, stackFile, tempDir } from "./helpers/stacks";

/** The rough edges a new user met first (issue 31), each as they met it. */

const VERSION = (JSON.parse(fs.readFileSync(path.join(REPO, "package.json"), "utf8")) as { version: string }).version;

describe("the CLI's rough edges", () => {
    it("--version prints the package's version", () => {
        for (const flag of ["--version", "-V"]) {
            const result = airlock([flag]);
            expect(result.status, flag).toBe(0);
            expect(result.stdout).toBe(`${VERSION}\n`);
        }
    });

    it("a mistyped stack name lists the stacks and suggests the closest, in one line, and writes nothing", () => {
        const out = path.join(tempDir("typo"), "a", "b");
        const result = airlock(["plan", "--stack", "devv", "--out", out]);
        expect(result.status).toBe(2);
        expect(result.stderr).toBe('stacks/Pulumi.devv.yaml: no such stack "devv"; the stacks in stacks are dev, prod; did you mean "dev"?\n');
        expect(fs.existsSync(path.dirname(out))).toBe(false);
        // Nothing close: the list alone.
        expect(airlock(["checklist", "--stack", "customer-x"]).stderr).toBe('stacks/Pulumi.customer-x.yaml: no such stack "customer-x"; the stacks in stacks are dev, prod\n');
    });

    it("a plan that fails after its checks leaves no folder behind", () => {
        const stacks = path.dirname(editedStack("dev", (c) => (c["airlock:sandbox"].workspaceVolumeGb = "lots")));
        const root = tempDir("failed");
        const result = airlock(["--stacks-dir", stacks, "plan", "--stack", "dev", "--out", path.join(root, "x", "y")]);
        expect(result.status).toBe(2);
        expect(result.stderr).toMatch(/workspaceVolumeGb/);
        expect(fs.readdirSync(root)).toEqual([]);
    });

    it("Ctrl-C while planning writes nothing and leaves no folder of its own: exit 130", async () => {
        const root = tempDir("interrupted");
        const out = path.join(root, "x", "y");
        const child = spawn(process.execPath, [AIRLOCK_BIN, "plan", "--stack", "dev", "--out", out], { cwd: REPO, stdio: "ignore" });
        const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
        // The run has made the output's parent (its checks are done, the planning is under way).
        for (let i = 0; i < 400 && !fs.existsSync(path.join(root, "x")); i++) await new Promise((r) => setTimeout(r, 25));
        expect(fs.existsSync(path.join(root, "x"))).toBe(true);
        child.kill("SIGINT");
        expect(await exited).toBe(130);
        // Before: killed at once, the run left its empty x/ (and, inside writePlan, its staging folder).
        expect(fs.readdirSync(root)).toEqual([]);
    }, 60_000);

    it("a plan killed while writing leaves its staging folder, which the next plan removes; a running plan's is kept, a stranded previous plan restored", () => {
        const root = tempDir("abandoned");
        const out = path.join(root, "plan");
        // A process id that is gone: a child that has exited.
        const dead = spawnSync("true").pid!;
        const stale = path.join(root, `.plan.airlock-plan-${dead}-AbC123`);
        fs.mkdirSync(stale);
        fs.writeFileSync(path.join(stale, ".airlock-plan"), "written by airlock plan --stack dev\n");
        const running = path.join(root, `.plan.airlock-plan-${process.pid}-XyZ789`);
        fs.mkdirSync(running);
        // Killed between its renames: the previous plan stranded, no plan in place.
        const previous = path.join(root, `.plan.airlock-plan-${dead}-QrS456-previous`);
        fs.mkdirSync(previous);
        fs.writeFileSync(path.join(previous, ".airlock-plan"), "written by airlock plan --stack dev\n");
        fs.writeFileSync(path.join(previous, "mine"), "the previous plan\n");
        // Someone else's folder of a similar name is not ours to touch.
        const other = path.join(root, `.plan.airlock-plan-${dead}-Other1`);
        fs.mkdirSync(other);
        fs.writeFileSync(path.join(other, "notes.txt"), "keep\n");

        // What the next plan does first: the stranded previous plan back in place, the dead run's staging gone.
        sweepAbandoned(out);
        expect(fs.readFileSync(path.join(out, "mine"), "utf8")).toBe("the previous plan\n");
        expect(fs.readdirSync(root).sort()).toEqual([path.basename(other), path.basename(running), "plan"].sort());
        // And the plan itself.
        fs.rmSync(out, { recursive: true });
        fs.renameSync(fs.mkdtempSync(path.join(root, "x")), previous);
        fs.writeFileSync(path.join(previous, ".airlock-plan"), "written by airlock plan --stack dev\n");
        fs.mkdirSync(stale);
        const result = airlock(["plan", "--stack", "dev", "--out", out]);
        expect(result.status, result.stderr).toBe(0);
        expect(fs.readdirSync(root).sort()).toEqual([path.basename(other), path.basename(running), "plan"].sort());
        expect(fs.existsSync(path.join(out, "preview.json"))).toBe(true);
    });

    it("works from any folder of the project, as from its top", () => {
        const out = path.join(tempDir("sub"), "plan");
        const fromDocs = airlock(["plan", "--stack", "dev", "--out", out], { cwd: path.join(REPO, "docs") });
        expect(fromDocs.status, fromDocs.stderr).toBe(0);
        expect(fs.existsSync(path.join(out, "preview.json"))).toBe(true);
        const checklist = airlock(["checklist", "--stack", "dev"], { cwd: path.join(REPO, "policies", "rules") });
        expect(checklist.status, checklist.stderr).not.toBe(2);
        expect(checklist.stdout).toMatch(/dev/);
    });

    it("outside a project, every stack verb says what it needs (exit 2, one line), never an internal error", () => {
        const outside = tempDir("outside");
        const verbs = [
            ["plan", "--stack", "dev"],
            ["gate", "--all"],
            ["gate", "--stack", "dev"],
            ["checklist", "--stack", "dev"],
            ["doctor", "--stack", "dev"],
            ["fork", "acme", "--from", "dev"],
            ["egress", "propose", "--stack", "dev", "--from", "querylog.json"],
        ];
        for (const args of verbs) {
            const result = airlock(args, { cwd: outside });
            expect(result.status, args.join(" ")).toBe(2);
            expect(result.stderr, args.join(" ")).toBe(`airlock: no Pulumi.yaml in ${fs.realpathSync(outside)} or any folder above it: run this inside an airlock project (a clone or a fork), or pass --stacks-dir DIR\n`);
        }
        expect(fs.readdirSync(outside)).toEqual([]);
        // check needs no project.
        fs.writeFileSync(path.join(outside, "compose.yml"), "services:\n  web:\n    image: nginx@sha256:" + "a".repeat(64) + "\n");
        expect(airlock(["check", "compose.yml"], { cwd: outside }).status).not.toBe(2);
    });

    it("--json and --format sarif answer bad input with their own document on every verb", () => {
        for (const args of [
            ["plan", "--stack", "devv", "--json"],
            ["gate", "--stack", "devv", "--json"],
            ["gate", "--stack", "devv", "--format=json"],
        ]) {
            const result = airlock(args);
            expect(result.status, args.join(" ")).toBe(2);
            expect(JSON.parse(result.stdout), args.join(" ")).toEqual({ errors: [expect.stringContaining('no such stack "devv"')], violations: 0, findings: [] });
        }
        const sarif = airlock(["gate", "--stack", "devv", "--format", "sarif"]);
        expect(sarif.status).toBe(2);
        const notifications = JSON.parse(sarif.stdout).runs[0].invocations[0].toolExecutionNotifications;
        expect(notifications.map((n: { message: { text: string } }) => n.message.text)).toEqual([expect.stringContaining('no such stack "devv"')]);
    });

    it("gate --all judges every stack it can and reports a broken one beside the others' results", () => {
        const dir = tempDir("all");
        fs.copyFileSync(stackFile("dev"), path.join(dir, "Pulumi.dev.yaml"));
        editedStack("prod", (c) => (c["airlock:tailnet"].keyExpirySeconds = 5), dir);
        const text = airlock(["--stacks-dir", dir, "gate", "--all"]);
        expect(text.status).toBe(2);
        expect(text.stdout).toMatch(/^dev: .*clean\nprod: .*not gated: bad input \(below\)\n/);
        expect(text.stderr).toMatch(/Pulumi\.prod\.yaml: .*keyExpirySeconds/);
        const json = JSON.parse(airlock(["--stacks-dir", dir, "gate", "--all", "--json"]).stdout);
        expect(json.stacks).toEqual([{ stack: "dev", violations: 0 }, { stack: "prod", error: expect.stringMatching(/keyExpirySeconds/) }]);
        expect(json.errors).toEqual([expect.stringMatching(/keyExpirySeconds/)]);
    });
});
