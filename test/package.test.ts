import { execFileSync, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { docSample } from "./helpers/docs";
import { REPO, tempDir } from "./helpers/stacks";
import { toolsAvailable } from "./helpers/tools";

/**
 * airlock as other projects get it: the packed package installed with npm (`npx
 * airlock check FILE`), and the pre-commit hook (.pre-commit-hooks.yaml) run by the
 * real pre-commit. Dependencies come from npm's cache, filled by `npm ci`.
 */

const BAD_COMPOSE = "services:\n  web:\n    image: nginx:1.27\n    privileged: true\n";

/** This working tree (tracked and new files) as a git repository, as a hook repository is. */
function snapshotRepository(): string {
    const dir = tempDir("hook-repo");
    const files = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], { cwd: REPO, encoding: "utf8" }).split("\0").filter(Boolean);
    for (const file of files) {
        if (!fs.existsSync(path.join(REPO, file))) continue;
        fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
        fs.copyFileSync(path.join(REPO, file), path.join(dir, file));
        fs.chmodSync(path.join(dir, file), fs.statSync(path.join(REPO, file)).mode);
    }
    const git = (...args: string[]) => execFileSync("git", ["-c", "user.email=test@example.com", "-c", "user.name=test", ...args], { cwd: dir });
    git("init", "-q");
    git("add", "-A");
    git("commit", "-qm", "snapshot");
    return dir;
}

describe("airlock in other projects", () => {
    it("the docs' steps for your own project give `npx airlock check` from the packed package", () => {
        // docs/cli/check.md's lines, in a folder holding the clone (this repository) and a project beside it,
        // with the tarball there instead of in /tmp.
        const root = tempDir("own-project");
        const [pack, install, check] = docSample("own-project").trim().replaceAll(" /tmp", ` ${root}`).split("\n");
        expect(pack).toMatch(/^cd airlock && npm pack /);
        fs.symlinkSync(REPO, path.join(root, "airlock"));
        fs.mkdirSync(path.join(root, "your-project"));
        fs.writeFileSync(path.join(root, "your-project", "package.json"), '{ "name": "consumer", "private": true }\n');
        fs.writeFileSync(path.join(root, "your-project", "docker-compose.yml"), BAD_COMPOSE);
        // Dependencies from npm's cache, filled by `npm ci`.
        const env = { ...process.env, npm_config_prefer_offline: "true", npm_config_audit: "false", npm_config_fund: "false" };
        const run = (line: string) => spawnSync("bash", ["-c", line], { cwd: root, encoding: "utf8", env });
        const packed = run(pack.replace(" && npm pack ", " && npm pack --silent "));
        expect(packed.status, packed.stderr).toBe(0);
        expect(fs.existsSync(path.join(root, `airlock-${JSON.parse(fs.readFileSync(path.join(REPO, "package.json"), "utf8")).version}.tgz`)), "the tarball the docs name").toBe(true);
        expect(install).toContain(`airlock-${JSON.parse(fs.readFileSync(path.join(REPO, "package.json"), "utf8")).version}.tgz`);
        const installed = run(install);
        expect(installed.status, installed.stderr).toBe(0);
        const checked = run(check);
        expect(checked.stderr).not.toMatch(/airlock|Error/);
        expect(checked.status).toBe(1);
        expect(checked.stdout).toContain("docker-compose.yml:4: containers-not-privileged: web is privileged");
        // The installed package runs its packed build, not TypeScript.
        const project = path.join(root, "your-project");
        expect(fs.existsSync(path.join(project, "node_modules/airlock/dist/cli/main.js"))).toBe(true);
        expect(fs.existsSync(path.join(project, "node_modules/tsx"))).toBe(false);
    }, 300_000);

    it.runIf(toolsAvailable("the pre-commit hook", ["pre-commit", "git"]))(
        "pre-commit runs the hook from .pre-commit-hooks.yaml on the files being committed (three lines of config)",
        () => {
            const hookRepo = snapshotRepository();
            const rev = execFileSync("git", ["rev-parse", "HEAD"], { cwd: hookRepo, encoding: "utf8" }).trim();
            const project = tempDir("pre-commit-project");
            execFileSync("git", ["init", "-q"], { cwd: project });
            fs.writeFileSync(path.join(project, ".pre-commit-config.yaml"), `repos:\n  - repo: ${hookRepo}\n    rev: ${rev}\n    hooks: [{ id: airlock-check }]\n`);
            fs.mkdirSync(path.join(project, "deploy"));
            fs.writeFileSync(path.join(project, "deploy", "docker-compose.yml"), BAD_COMPOSE);
            fs.writeFileSync(path.join(project, "notes.yml"), "services: not judged, not a compose file name\n");
            execFileSync("git", ["add", "-A"], { cwd: project });
            const env = { ...process.env, PRE_COMMIT_HOME: tempDir("pre-commit-home") };
            const failing = spawnSync("pre-commit", ["run", "--all-files"], { cwd: project, encoding: "utf8", env });
            expect(failing.status, failing.stdout + failing.stderr).toBe(1);
            expect(failing.stdout).toContain("deploy/docker-compose.yml:4: containers-not-privileged");
            expect(failing.stdout).not.toContain("notes.yml");

            const hardened = `services:\n  web:\n    image: nginx:1.27@sha256:${"ab".repeat(32)}\n    cap_drop: [ALL]\n    security_opt: [no-new-privileges:true]\n    pids_limit: 64\n    mem_limit: 256m\n`;
            fs.writeFileSync(path.join(project, "deploy", "docker-compose.yml"), hardened);
            execFileSync("git", ["add", "-A"], { cwd: project });
            const passing = spawnSync("pre-commit", ["run", "--all-files"], { cwd: project, encoding: "utf8", env });
            expect(passing.status, passing.stdout + passing.stderr).toBe(0);
            expect(passing.stdout).toMatch(/airlock check\.+Passed/);
        },
        600_000,
    );
});
