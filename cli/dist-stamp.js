"use strict";
/**
 * Whether dist/ is as new as the sources it is built from: cli/airlock.js runs dist/
 * only then, and the tests build it only when it is not. Every TypeScript source
 * counts, and every file under twin/ (its scripts and configs are copied into dist/).
 */
const fs = require("node:fs");
const path = require("node:path");

const ROOT = path.resolve(__dirname, "..");
const STAMP = path.join(ROOT, "dist", ".built");
const SOURCES = ["index.ts", "cli", "components", "policies", "twin"];
const COPIED = path.join(ROOT, "twin") + path.sep;

/** The newest modification time of any source (0 in a package that ships none). */
function newestSource() {
    let newest = 0;
    const visit = (file) => {
        let stat;
        try {
            stat = fs.statSync(file);
        } catch {
            return;
        }
        if (stat.isDirectory()) for (const name of fs.readdirSync(file)) visit(path.join(file, name));
        else if ((file.endsWith(".ts") || file.startsWith(COPIED)) && stat.mtimeMs > newest) newest = stat.mtimeMs;
    };
    for (const source of SOURCES) visit(path.join(ROOT, source));
    return newest;
}

function builtAt() {
    try {
        return fs.statSync(STAMP).mtimeMs;
    } catch {
        return -1;
    }
}

/** In a git checkout: built after the newest source. An installed package (no .git) runs what it was packed with. */
function distIsFresh() {
    const checkout = fs.existsSync(path.join(ROOT, ".git"));
    return builtAt() >= (checkout ? newestSource() : 0);
}

module.exports = { SOURCES, distIsFresh };
