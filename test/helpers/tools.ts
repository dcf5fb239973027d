import { spawnSync, SpawnSyncOptions } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { RenderedHost } from "../../components/render/hosts";

export function hasCommand(name: string): boolean {
    return spawnSync("sh", ["-c", `command -v ${name}`], { encoding: "utf8" }).status === 0;
}

/**
 * True when every tool is installed. Otherwise prints why the tests are skipped;
 * under CI (CI=true) a missing tool is an error instead, so a gap in .ci/run can
 * never turn into a silent pass.
 */
export function toolsAvailable(purpose: string, tools: string[]): boolean {
    const missing = tools.filter((tool) => !hasCommand(tool));
    if (missing.length === 0) return true;
    const reason = `${purpose}: ${missing.join(", ")} not installed (.ci/run installs it)`;
    if (process.env.CI === "true") throw new Error(`CI is missing tools: ${reason}`);
    console.warn(`SKIPPED ${reason}`);
    return false;
}

export function isRoot(): boolean {
    return process.getuid?.() === 0;
}

/**
 * A uid no account holds, from a range that belongs to one test file: test users come and
 * go while other files run, and a uid handed on to the next useradd inherits whatever its
 * last holder left under /run/user/<uid>.
 */
export function freeUid(first: number, last: number): number {
    for (let uid = first; uid <= last; uid++) if (run("getent", ["passwd", String(uid)]).status !== 0) return uid;
    throw new Error(`no free uid in ${first}-${last}`);
}

export function run(cmd: string, args: string[], options: SpawnSyncOptions = {}) {
    const result = spawnSync(cmd, args, { encoding: "utf8", ...options });
    return { status: result.status, stdout: String(result.stdout ?? ""), stderr: String(result.stderr ?? ""), error: result.error };
}

/** Writes a host's files under `root` at their host paths, with their modes. */
export function installFiles(host: RenderedHost, root: string): void {
    for (const file of host.files) {
        const target = path.join(root, file.path);
        fs.mkdirSync(path.dirname(target), { recursive: true });
        fs.writeFileSync(target, file.content, { mode: parseInt(file.permissions, 8) });
        fs.chmodSync(target, parseInt(file.permissions, 8));
    }
}

/** The address the e2e and tool tests give the "tailnet" side (inside 100.64.0.0/10). */
export const TEST_TAILNET_IPV4 = "100.100.7.1";

/** The tailnet's MagicDNS domain in tests (what `tailscale status` calls MagicDNSSuffix). */
export const TEST_TAILNET_DOMAIN = "tail7e57.ts.net";

/** What airlock-tailnet-render does at boot, for tests that cannot run it. */
export function withTailnetValues(template: string, address = TEST_TAILNET_IPV4, domain = TEST_TAILNET_DOMAIN): string {
    return template.replaceAll("@TAILNET_IPV4@", address).replaceAll("@TAILNET_DOMAIN@", domain);
}
