import { createHash } from "node:crypto";
import { BUNDLE_FILES_PATH, BUNDLE_SOURCE_PATH } from "../contract";

/**
 * The host code bundle as a host installs it (templates/scripts/bundle-install does the same
 * in Python): the one place the plan, the gate and the tests fill a host's bundled files in,
 * so what is judged is what the host writes.
 */

export const BUNDLE_FORMAT = "airlock-bundle/1";

/**
 * Fills `{{name}}` placeholders in one pass. A placeholder without a value and a value
 * without a placeholder are errors, and values are the map's own strings (as Python's
 * dict lookup: nothing inherited).
 */
export function fillPlaceholders(template: string, vars: Record<string, unknown>, where: string): string {
    const used = new Set<string>();
    const text = template.replace(/\{\{([A-Za-z0-9_]+)\}\}/g, (_, name: string) => {
        if (!Object.hasOwn(vars, name)) throw new Error(`${where}: no value for {{${name}}}`);
        const value = vars[name];
        if (typeof value !== "string") throw new Error(`${where}: the value for {{${name}}} is not a string`);
        used.add(name);
        return value;
    });
    const unused = Object.keys(vars).filter((name) => !used.has(name));
    if (unused.length > 0) throw new Error(`${where}: no placeholder for ${unused.join(", ")}`);
    return text;
}

export interface BundledFile {
    path: string;
    permissions: string;
    template: string;
    vars: Record<string, string>;
}

export interface InstalledFile {
    path: string;
    content: string;
    permissions: string;
}

/** The files the installer writes from a bundle's text and a host's list (throws what the installer refuses). */
export function installedFiles(files: unknown, bundleText: string): InstalledFile[] {
    const bundle = JSON.parse(bundleText) as { format?: unknown; templates?: unknown };
    if (bundle.format !== BUNDLE_FORMAT || bundle.templates === null || typeof bundle.templates !== "object") throw new Error(`not an ${BUNDLE_FORMAT} bundle`);
    const templates = bundle.templates as Record<string, unknown>;
    if (!Array.isArray(files)) throw new Error(`${BUNDLE_FILES_PATH} is not a list`);
    return files.map((file: BundledFile) => {
        const where = `${file?.template} (for ${file?.path})`;
        if (typeof file?.path !== "string" || !file.path.startsWith("/")) throw new Error(`${where}: not an absolute path`);
        if (typeof file.permissions !== "string" || !/^0?[0-7]{3,4}$/.test(file.permissions)) throw new Error(`${where}: permissions ${JSON.stringify(file.permissions)}`);
        const template = Object.hasOwn(templates, file.template) ? templates[file.template] : undefined;
        if (typeof template !== "string") throw new Error(`the bundle has no ${where}`);
        if (file.vars === null || typeof file.vars !== "object" || Array.isArray(file.vars)) throw new Error(`${where}: vars is not a map`);
        return { path: file.path, content: fillPlaceholders(template, file.vars, where), permissions: file.permissions };
    });
}

/** What a user_data document says of its bundle, read as the host reads it (cloud-init writes entries in order: the last wins). */
export interface NamedBundle {
    sha256?: string;
    /** Why what it names cannot be known: its files are then not judged. */
    problem?: string;
    /** The host's list of bundled files (BUNDLE_FILES_PATH), decoded. */
    files?: unknown;
}

export function namedBundle(files: { path: string; content: string }[]): NamedBundle | undefined {
    const sources = files.filter((f) => f.path === BUNDLE_SOURCE_PATH);
    const lists = files.filter((f) => f.path === BUNDLE_FILES_PATH);
    if (sources.length === 0 && lists.length === 0) return undefined;
    if (sources.length !== 1 || lists.length !== 1) return { problem: `expected one ${BUNDLE_SOURCE_PATH} and one ${BUNDLE_FILES_PATH}, found ${sources.length} and ${lists.length}` };
    // JSON.parse refuses NaN and Infinity, which Python's json accepts: the installer refuses them too.
    try {
        const source = JSON.parse(sources[0].content) as { sha256?: unknown };
        if (typeof source?.sha256 !== "string" || !/^[0-9a-f]{64}$/.test(source.sha256)) return { problem: `${BUNDLE_SOURCE_PATH} names no sha256` };
        return { sha256: source.sha256, files: JSON.parse(lists[0].content) };
    } catch (err) {
        return { problem: `${BUNDLE_SOURCE_PATH} or ${BUNDLE_FILES_PATH} does not read: ${(err as Error).message}` };
    }
}

/** The bundle text among `artifacts` whose name and bytes have this sha256. */
function carriedBundle(artifacts: Record<string, string>, sha256: string): string | undefined {
    const text = artifacts[`airlock-bundle-${sha256}.json`];
    return text !== undefined && createHash("sha256").update(text, "utf8").digest("hex") === sha256 ? text : undefined;
}

/**
 * The files a host's installer writes from the bundle its document names, taken from the
 * artifacts stashed with that document (the plan writes them out, the gate judges them):
 * undefined when it names none, a problem when what it names cannot be known or installed.
 */
export function filesFromBundle(written: { path: string; content: string }[], beside: Record<string, string>): { files: InstalledFile[] } | { problem: string } | undefined {
    const named = namedBundle(written);
    if (!named) return undefined;
    const bundle = named.sha256 ? carriedBundle(beside, named.sha256) : undefined;
    if (named.problem || !bundle) return { problem: named.problem ?? `it installs bundle ${named.sha256}, which is not stashed with it` };
    try {
        return { files: installedFiles(named.files, bundle) };
    } catch (err) {
        return { problem: `its installer would refuse the bundle: ${(err as Error).message}` };
    }
}
