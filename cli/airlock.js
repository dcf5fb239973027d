#!/usr/bin/env node
"use strict";
/**
 * The `airlock` command (package.json "bin"; `npm run airlock` runs it too).
 * It runs the compiled CLI in dist/ - plain JavaScript, no compiler at start, so
 * `airlock check FILE` fits in an editor or a pre-commit hook. In a git checkout it
 * does so only when that build is at least as new as every source file; otherwise
 * (a source edited since `npm ci` or `npm run build`) it runs the TypeScript sources
 * through tsx: slower to start, never stale. An installed package (no .git; file
 * times are those of its unpacking) runs the dist/ it was packed with.
 */
const path = require("node:path");
const { distIsFresh } = require("./dist-stamp");

const ROOT = path.resolve(__dirname, "..");

if (process.env.AIRLOCK_FROM_SOURCE !== "1" && distIsFresh()) {
    require(path.join(ROOT, "dist", "cli", "main.js"));
} else {
    let tsx;
    try {
        tsx = require.resolve("tsx");
    } catch {
        process.stderr.write(`airlock: ${path.join(ROOT, "dist")} is missing or older than the sources; run \`npm run build\` in ${ROOT}\n`);
        process.exit(2);
    }
    // As `node --import tsx cli/main.ts` would: TypeScript for require() and import(). The loader by
    // its path: `--import tsx` is resolved from the working directory, which need not see this package's.
    const loader = require("node:url").pathToFileURL(tsx).href;
    const run = require("node:child_process").spawnSync(process.execPath, ["--import", loader, path.join(ROOT, "cli", "main.ts"), ...process.argv.slice(2)], {
        stdio: "inherit",
    });
    if (run.signal) process.kill(process.pid, run.signal);
    process.exitCode = run.status ?? 3;
}
