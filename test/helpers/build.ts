import { execFileSync } from "node:child_process";
import * as path from "node:path";

/**
 * vitest globalSetup: build dist/ as `npm ci` does, unless it is as new as the
 * sources already, so the CLI the tests spawn is the compiled one users run
 * (cli/airlock.js falls back to the sources through tsx when dist/ is stale,
 * which would only be slower). A build replaces dist/ whole: test/run.sh builds
 * once before it starts the twin's suite beside the rest, and neither rebuilds.
 */
export default function setup(): void {
    const { distIsFresh } = require(path.join(__dirname, "..", "..", "cli", "dist-stamp.js")) as { distIsFresh: () => boolean };
    if (distIsFresh()) return;
    execFileSync(process.execPath, [path.join(__dirname, "..", "..", "cli", "build.js")], { stdio: "inherit" });
}
