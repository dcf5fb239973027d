import * as fs from "node:fs";
import * as path from "node:path";
import { FORBIDDEN_ENV, RUNTIME_PINNED_ENV } from "../../policies/contract";
import { fillPlaceholders } from "../../policies/engine/bundle";
import { GITHUB_REPOSITORY_PERMISSIONS } from "../config/automation";

/** The real files everything is rendered from; see templates/README.md. (From the compiled copy in dist/, the source tree's.) */
export const TEMPLATES_DIR = [path.resolve(__dirname, "..", "..", "templates"), path.resolve(__dirname, "..", "..", "..", "templates")].find((dir) =>
    fs.existsSync(dir),
)!;

/**
 * `{{kit.name}}`: values that are the same for every stack of one airlock version, filled
 * into the template as it is read, so the bundle carries them and user_data does not.
 * Each is a JSON literal a Python script reads (JSON strings and lists are Python literals).
 */
const KIT_VALUES: Record<string, string> = {
    // Names no variable of the agent runtime may have (a regular expression for Python's re).
    forbiddenNames: JSON.stringify(`(?:${FORBIDDEN_ENV.source})|(?:${RUNTIME_PINNED_ENV.source})`),
    permissionNames: JSON.stringify(GITHUB_REPOSITORY_PERMISSIONS),
};

const cache = new Map<string, string>();

/** A template as the bundle carries it: its kit values filled, its per-stack `{{name}}`s left. */
export function readTemplate(relativePath: string): string {
    let text = cache.get(relativePath);
    if (text === undefined) {
        text = fs.readFileSync(path.join(TEMPLATES_DIR, relativePath), "utf8").replace(/\{\{kit\.([A-Za-z0-9_]+)\}\}/g, (_, name: string) => {
            if (!Object.hasOwn(KIT_VALUES, name)) throw new Error(`templates/${relativePath}: no kit value ${name}`);
            return KIT_VALUES[name];
        });
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
