import { execFileSync } from "node:child_process";
import * as path from "node:path";

/**
 * vitest globalSetup: build dist/ once, as `npm ci` does, so the CLI the tests
 * spawn is the compiled one users run (cli/airlock.js falls back to the sources
 * through tsx when dist/ is stale, which would only be slower).
 */
export default function setup(): void {
    execFileSync(process.execPath, [path.join(__dirname, "..", "..", "cli", "build.js")], { stdio: "inherit" });
}
