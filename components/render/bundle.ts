import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { BUNDLE_FILES_PATH, BUNDLE_SOURCE_PATH } from "../../policies/contract";
import { BUNDLE_FORMAT, BundledFile } from "../../policies/engine/bundle";
import { renderSandboxSeccompProfile } from "./seccomp";
import { readTemplate, renderTemplate, TEMPLATES_DIR } from "./templates";

/**
 * The host code bundle. Hetzner accepts at most 32,768 characters of user_data
 * (API reference, "Create a Server": user_data "Length must be between 0 and
 * 32768"), so what is the same for every stack of one airlock version (the
 * templates the hosts' files are rendered from, and the generated seccomp
 * profile) travels apart from user_data: one JSON object named by its sha256,
 * fetched over HTTPS at first boot by airlock-bundle-install, which refuses it
 * unless its digest is the one user_data names. user_data keeps the per-stack
 * part: each bundled file's template name and the values it is filled with.
 */

export interface HostFile {
    /** Absolute path on the host. */
    path: string;
    content: string;
    /** Octal mode, as cloud-init's write_files takes it. */
    permissions: string;
    /** Where the file comes from in the bundle: a template (or generated entry) and its values; content is exactly that filled. */
    bundled?: { name: string; vars: Record<string, string> };
}

/** A file rendered from `templates/<template>`. */
export function fromTemplate(hostPath: string, template: string, vars: Record<string, string>, permissions: string): HostFile {
    return { path: hostPath, content: renderTemplate(template, vars), permissions, bundled: { name: template, vars } };
}

/** Bundle entries computed by the kit rather than read from templates/ (still the same for every stack). */
const GENERATED: Record<string, () => string> = {
    "generated/sandbox-seccomp.json": renderSandboxSeccompProfile,
};

/** A generated bundle entry as a host file. */
export function fromGenerated(hostPath: string, name: keyof typeof GENERATED & string, permissions: string): HostFile {
    return { path: hostPath, content: GENERATED[name](), permissions, bundled: { name, vars: {} } };
}

/** Templates that never reach a host through the bundle: the user_data documents themselves and the image recipes. */
const NOT_HOST_CODE = [/^cloud-init\//, /^images\//, /^README\.md$/];

export interface Bundle {
    /** The object's name: airlock-bundle-<sha256>.json. */
    name: string;
    sha256: string;
    text: string;
}

let cached: Bundle | undefined;

/** The bundle of this airlock version: every host template and generated entry, sorted by name. */
export function renderBundle(): Bundle {
    if (cached) return cached;
    const entries: Record<string, string> = {};
    const walk = (dir: string) => {
        for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
            const full = path.join(dir, entry.name);
            if (entry.isDirectory()) walk(full);
            else {
                const name = path.relative(TEMPLATES_DIR, full).split(path.sep).join("/");
                if (!NOT_HOST_CODE.some((re) => re.test(name))) entries[name] = readTemplate(name);
            }
        }
    };
    walk(TEMPLATES_DIR);
    for (const [name, render] of Object.entries(GENERATED)) entries[name] = render();
    const sorted = Object.fromEntries(Object.keys(entries).sort().map((name) => [name, entries[name]]));
    const text = `${JSON.stringify({ format: BUNDLE_FORMAT, templates: sorted }, null, 1)}\n`;
    const sha256 = createHash("sha256").update(text, "utf8").digest("hex");
    cached = { name: `airlock-bundle-${sha256}.json`, sha256, text };
    return cached;
}

/** Which bundle a host installs (its URL and sha256), written by cloud-init (write_files), in plain text. */
export { BUNDLE_SOURCE_PATH };
/** What it installs from it: each file's path, mode, template and values, one file a line. */
export { BUNDLE_FILES_PATH };
/** How the installer fills them in, shared with the plan and the gate. */
export { installedFiles, type BundledFile } from "../../policies/engine/bundle";
/** The installer itself: in user_data, the one piece of host code the bundle cannot carry. */
export const BUNDLE_INSTALLER_PATH = "/usr/local/sbin/airlock-bundle-install";
/**
 * Files read while cloud-init installs the packages (apt's settings, PostgreSQL's
 * cluster settings): that is before runcmd installs the bundle, so they stay in user_data.
 */
export const BEFORE_PACKAGES_DIRS = ["/etc/apt/", "/etc/postgresql-common/"];

/** The bundle's URL, filled at deploy (a B2 object's, or the operator's mirror). */
export const BUNDLE_URL_PLACEHOLDER = "@BUNDLE_URL@";

export function bundleSourceText(bundle: Bundle): string {
    return `${JSON.stringify({ url: BUNDLE_URL_PLACEHOLDER, sha256: bundle.sha256 }, null, 1)}\n`;
}

/** A host's bundled files as the installer reads them: one file per line, so a reader (and a diff) sees each. */
export function bundledFilesText(files: HostFile[]): string {
    const lines = files.map((file) => {
        if (!file.bundled) throw new Error(`${file.path} is not from the bundle`);
        const entry: BundledFile = { path: file.path, permissions: file.permissions, template: file.bundled.name, vars: file.bundled.vars };
        return ` ${JSON.stringify(entry)}`;
    });
    return `[\n${lines.join(",\n")}\n]\n`;
}

export function withBundleUrl(cloudInit: string, url: string): string {
    // Inside a JSON string in the settings file: nothing that ends or escapes it.
    if (!/^https:\/\/[A-Za-z0-9.-]+(:\d+)?\/[A-Za-z0-9._~\/%+=-]*$/.test(url)) throw new Error(`bundle URL ${url} is not a plain https URL`);
    const parts = cloudInit.split(BUNDLE_URL_PLACEHOLDER);
    if (parts.length !== 2) throw new Error(`expected exactly one ${BUNDLE_URL_PLACEHOLDER} in cloud-init`);
    return parts.join(url);
}
