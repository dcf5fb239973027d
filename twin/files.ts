import * as fs from "node:fs";
import * as path from "node:path";

/** The twin's own real files (configs, templates it serves), beside its sources. */
export const TWIN_DIR = [path.resolve(__dirname), path.resolve(__dirname, "..", "..", "twin")].find((dir) => fs.existsSync(path.join(dir, "contract.ts")))!;

/**
 * Fills `{{name}}` placeholders in a file under twin/. As templates/ does: a
 * placeholder without a value and a value without a placeholder are both errors.
 */
export function fillTwinFile(relativePath: string, vars: Record<string, string>): string {
    const used = new Set<string>();
    const text = fs.readFileSync(path.join(TWIN_DIR, relativePath), "utf8").replace(/\{\{(\w+)\}\}/g, (_, name: string) => {
        const value = vars[name];
        if (value === undefined) throw new Error(`twin/${relativePath}: no value for {{${name}}}`);
        used.add(name);
        return value;
    });
    const unused = Object.keys(vars).filter((name) => !used.has(name));
    if (unused.length > 0) throw new Error(`twin/${relativePath}: no placeholder for ${unused.join(", ")}`);
    return text;
}
