import * as fs from "node:fs";
import * as path from "node:path";
import { fillPlaceholders } from "../components/render/templates";

/** The twin's own real files (configs, templates it serves), beside its sources. */
export const TWIN_DIR = [path.resolve(__dirname), path.resolve(__dirname, "..", "..", "twin")].find((dir) => fs.existsSync(path.join(dir, "contract.ts")))!;

/**
 * Fills `{{name}}` placeholders in a file under twin/. As templates/ does: a
 * placeholder without a value and a value without a placeholder are both errors.
 */
export function fillTwinFile(relativePath: string, vars: Record<string, string>): string {
    return fillPlaceholders(fs.readFileSync(path.join(TWIN_DIR, relativePath), "utf8"), vars, `twin/${relativePath}`);
}
