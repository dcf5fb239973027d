#!/usr/bin/env node
"use strict";
/**
 * `npm run build` (also run by `npm ci`, as the `prepare` script): compiles the
 * TypeScript sources to dist/ - CommonJS, one file per source, no bundling - so the
 * CLI starts without a compiler at run time. esbuild only strips types; type
 * checking stays with `tsc --noEmit` (npm test). The new build replaces dist/ whole,
 * and dist/.built is written last: cli/airlock.js runs dist/ only when that stamp is
 * at least as new as every source.
 */
const fs = require("node:fs");
const path = require("node:path");
const esbuild = require("esbuild");
const { SOURCES } = require("./dist-stamp");

const ROOT = path.resolve(__dirname, "..");

/** Every .ts file under SOURCES (not .d.ts), relative to ROOT. */
function sourceFiles() {
    const files = [];
    for (const source of SOURCES) {
        const full = path.join(ROOT, source);
        if (fs.statSync(full).isFile()) {
            files.push(source);
            continue;
        }
        for (const entry of fs.readdirSync(full, { withFileTypes: true, recursive: true })) {
            if (entry.isFile() && entry.name.endsWith(".ts") && !entry.name.endsWith(".d.ts")) {
                files.push(path.relative(ROOT, path.join(entry.parentPath, entry.name)));
            }
        }
    }
    return files.sort();
}

function build() {
    const staging = path.join(ROOT, `dist.tmp-${process.pid}`);
    fs.rmSync(staging, { recursive: true, force: true });
    try {
        esbuild.buildSync({
            absWorkingDir: ROOT,
            entryPoints: sourceFiles(),
            outdir: staging,
            outbase: ".",
            format: "cjs",
            platform: "node",
            target: "node20",
            bundle: false,
            // As tsx compiles: the same text for functions Pulumi serializes (the B2 providers), so a plan is byte-identical either way.
            minifyWhitespace: true,
            // import() of a sibling module becomes require(): lazy loading without ESM resolution.
            supported: { "dynamic-import": false },
            logLevel: "warning",
        });
        // The twin's own files (recipes, configs, scripts it serves) sit beside its compiled modules, as beside the sources.
        fs.cpSync(path.join(ROOT, "twin"), path.join(staging, "twin"), { recursive: true, filter: (source) => !source.endsWith(".ts") });
        fs.writeFileSync(path.join(staging, ".built"), `${new Date().toISOString()}\n`);
        fs.rmSync(path.join(ROOT, "dist"), { recursive: true, force: true });
        fs.renameSync(staging, path.join(ROOT, "dist"));
    } catch (err) {
        fs.rmSync(staging, { recursive: true, force: true });
        throw err;
    }
}

module.exports = { SOURCES, sourceFiles };

if (require.main === module) {
    try {
        build();
    } catch (err) {
        // esbuild has printed the file and line already.
        process.stderr.write(`airlock build: ${err instanceof Error ? err.message.split("\n")[0] : String(err)}\n`);
        process.exitCode = 1;
    }
}
