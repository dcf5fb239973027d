import * as fs from "node:fs";
import * as path from "node:path";
import { fillPlaceholders } from "../../policies/engine/bundle";

/** The real files everything is rendered from; see templates/README.md. (From the compiled copy in dist/, the source tree's.) */
export const TEMPLATES_DIR = [path.resolve(__dirname, "..", "..", "templates"), path.resolve(__dirname, "..", "..", "..", "templates")].find((dir) =>
    fs.existsSync(dir),
)!;

const cache = new Map<string, string>();

function readTemplate(relativePath: string): string {
    let text = cache.get(relativePath);
    if (text === undefined) {
        text = fs.readFileSync(path.join(TEMPLATES_DIR, relativePath), "utf8");
        cache.set(relativePath, text);
    }
    return text;
}

/**
 * Fills `{{name}}` placeholders. Both a placeholder without a value and a value
 * without a placeholder are errors, so a template and its caller cannot drift apart.
 * (`@NAME@` placeholders are left alone: those are filled at deploy or boot time.)
 */
export function renderTemplate(relativePath: string, vars: Record<string, string>): string {
    return fillPlaceholders(readTemplate(relativePath), vars, `templates/${relativePath}`);
}

/** The `{{name}}` filling of renderTemplate (the host installer's own rule), for real files kept elsewhere (the twin's). */
export { fillPlaceholders };
