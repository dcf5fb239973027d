import { spawnSync } from "node:child_process";
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
