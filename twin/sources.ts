import * as fs from "node:fs";
import * as path from "node:path";

/**
 * The twin's real files (package lists, hooks, configs, the mirror's server):
 * beside this module when it runs from the sources (tsx), two levels up when it
 * runs compiled from dist/twin/.
 */
export const TWIN_SOURCES = [__dirname, path.resolve(__dirname, "..", "..", "twin")].find((dir) => fs.existsSync(path.join(dir, "base-image", "packages"))) ?? __dirname;
