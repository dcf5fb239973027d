import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { AIRLOCK_BIN } from "./helpers/cli";
import { REPO, STACKS_DIR, tempDir } from "./helpers/stacks";
import { hasCommand } from "./helpers/tools";

/**
 * Long work shows progress on a terminal and stays quiet when piped or in CI. The
 * terminal is a real pseudo-terminal (util-linux's `script`), as a user's shell gives.
 */

const CLEAR_LINE = "\r\u001b[2K";

function project(): string {
    const dir = tempDir("progress");
    fs.copyFileSync(path.join(REPO, "Pulumi.yaml"), path.join(dir, "Pulumi.yaml"));
    fs.cpSync(STACKS_DIR, path.join(dir, "stacks"), { recursive: true });
    return dir;
}

const withoutCi = () => {
    const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: "1" };
    delete env.CI;
    return env;
};

/** The CLI on a terminal: what the terminal showed (stdout and stderr together). */
function onTerminal(args: string[], env: NodeJS.ProcessEnv) {
    const line = [process.execPath, AIRLOCK_BIN, ...args].map((a) => `'${a}'`).join(" ");
    const result = spawnSync("script", ["-qec", line, "/dev/null"], { cwd: project(), env, encoding: "utf8", timeout: 300_000 });
    return { status: result.status, shown: result.stdout };
}

describe.runIf(hasCommand("script"))("progress", () => {
    const stacks = fs.readdirSync(STACKS_DIR).filter((f) => /^Pulumi\..+\.yaml$/.test(f)).length;

    it("gate --all on a terminal says which stack it gates, of how many, and clears the line", () => {
        const { status, shown } = onTerminal(["gate", "--all"], withoutCi());
        expect(status, shown).toBe(0);
        expect(shown).toContain(`gating dev (`);
        expect(shown).toContain(` of ${stacks})...`);
        expect(shown).toContain(CLEAR_LINE);
        expect(shown).toMatch(/dev: clean\r?\n/);
    }, 300_000);

    it("plan on a terminal says it is planning", () => {
        const { status, shown } = onTerminal(["plan", "--stack", "dev"], withoutCi());
        expect(status, shown).toBe(0);
        expect(shown).toContain(`planning dev...${CLEAR_LINE}`);
    }, 300_000);

    it("is quiet when piped, and on a terminal in CI", () => {
        const piped = spawnSync(process.execPath, [AIRLOCK_BIN, "gate", "--all"], { cwd: project(), env: withoutCi(), encoding: "utf8", timeout: 300_000 });
        expect(piped.status, piped.stderr).toBe(0);
        expect(piped.stderr).toBe("");
        expect(piped.stdout).not.toContain("gating");
        const ci = onTerminal(["plan", "--stack", "dev"], { ...withoutCi(), CI: "true" });
        expect(ci.status, ci.shown).toBe(0);
        expect(ci.shown).not.toContain("planning");
        expect(ci.shown).not.toContain(CLEAR_LINE);
    }, 300_000);
});
