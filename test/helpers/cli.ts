import { spawn, spawnSync } from "node:child_process";
import * as path from "node:path";
import { REPO } from "./stacks";

export interface CliResult {
    status: number | null;
    stdout: string;
    stderr: string;
}

/** The package's bin (what `npx airlock` and `npm run airlock` run). */
export const AIRLOCK_BIN = path.join(REPO, "cli", "airlock.js");

/** The CLI as a user runs it, in its own process. */
export function airlock(args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string; input?: string; timeout?: number } = {}): CliResult {
    const result = spawnSync(process.execPath, [AIRLOCK_BIN, ...args], {
        encoding: "utf8",
        cwd: options.cwd ?? REPO,
        env: options.env ?? process.env,
        input: options.input,
        timeout: options.timeout ?? 120_000,
    });
    return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

/** The same, without blocking this process: for a CLI that calls a stand-in served from the test itself. */
export function airlockAsync(args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): Promise<CliResult> {
    return new Promise((resolve, reject) => {
        const child = spawn(process.execPath, [AIRLOCK_BIN, ...args], { cwd: options.cwd ?? REPO, env: options.env ?? process.env });
        let stdout = "";
        let stderr = "";
        child.stdout.on("data", (chunk) => (stdout += chunk));
        child.stderr.on("data", (chunk) => (stderr += chunk));
        child.on("error", reject);
        child.on("close", (status) => resolve({ status, stdout, stderr }));
    });
}
