import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { REPO, tempDir } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * The sandbox shell image's git configuration, exercised with the real git: a
 * GitHub token reaches git from the command's environment and nowhere else.
 */

const IMAGE_DIR = path.join(REPO, "templates/images/sandbox-shell");
const GITCONFIG = path.join(IMAGE_DIR, "gitconfig");
/** A GitHub-token-shaped value, assembled at run time. */
const TOKEN = ["ghs", "imageTEST0123456789abcdefABCDEF"].join("_");

/** git as it runs in the image: /etc/gitconfig is the image's file, no user config. */
function git(args: string[], options: { input?: string; env?: Record<string, string>; cwd?: string } = {}) {
    return run("git", args, {
        input: options.input,
        cwd: options.cwd,
        timeout: 20_000,
        env: { PATH: process.env.PATH, HOME: tempDir("git-home"), GIT_CONFIG_SYSTEM: GITCONFIG, GIT_CONFIG_GLOBAL: "/dev/null", GIT_TERMINAL_PROMPT: "0", ...options.env },
    });
}

describe.runIf(toolsAvailable("git in the sandbox image", ["git"]))("the sandbox image's git", () => {
    it("the Dockerfile installs the configuration as /etc/gitconfig", () => {
        expect(fs.readFileSync(path.join(IMAGE_DIR, "Dockerfile"), "utf8")).toMatch(/^COPY gitconfig \/etc\/gitconfig$/m);
    });

    it("answers GitHub's credential request with the token from the environment", () => {
        const filled = git(["credential", "fill"], { input: "protocol=https\nhost=github.com\npath=acme/app.git\n\n", env: { GITHUB_TOKEN: TOKEN } });
        expect(filled.status, filled.stderr).toBe(0);
        expect(filled.stdout).toContain("username=x-access-token\n");
        expect(filled.stdout).toContain(`password=${TOKEN}\n`);
    });

    it("gives the token to no other host, and has nothing to give without one", () => {
        const other = git(["credential", "fill"], { input: "protocol=https\nhost=evil.example\n\n", env: { GITHUB_TOKEN: TOKEN } });
        expect(other.stdout).not.toContain(TOKEN);
        expect(other.status).not.toBe(0);
        const none = git(["credential", "fill"], { input: "protocol=https\nhost=github.com\n\n" });
        expect(none.status).not.toBe(0);
    });

    it("refuses a clone URL that carries the token, before connecting and before writing anything", () => {
        const dir = tempDir("git-clone");
        const clone = git(["clone", `https://x-access-token:${TOKEN}@127.0.0.1:9/acme/app.git`, "app"], { cwd: dir });
        expect(clone.status).not.toBe(0);
        expect(clone.stderr).toMatch(/uses plaintext credentials/);
        expect(clone.stderr).not.toContain(TOKEN);
        expect(fs.existsSync(path.join(dir, "app"))).toBe(false);
    });
});
