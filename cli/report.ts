import * as fs from "node:fs";
import * as path from "node:path";
import { Command, Option } from "commander";
import type { Finding } from "../policies/engine/finding";
import { formatFinding } from "../policies/engine/format";
import { failing, loadPolicy, Policy } from "../policies/policy";
import { Cli, EXIT } from "./command";

/** The policy every judging command uses: --policy, or the shipped policies/config.json. */
export function policyOf(cli: Cli): Policy {
    return cli.policyFile === undefined ? loadPolicy() : loadPolicy(cli.policyFile);
}

export type Format = "text" | "json" | "sarif";

/** `--format text|json|sarif`, and `--json` for `--format json`. */
export function withFormat(command: Command, formats: Format[] = ["text", "json", "sarif"]): Command {
    return command
        .addOption(new Option("--format <format>", "output format").choices(formats).default("text"))
        .option("--json", "machine-readable output (--format json)");
}

export const formatOf = (opts: { format?: Format; json?: boolean }): Format => (opts.json ? "json" : (opts.format ?? "text"));

/** airlock's version, from package.json (beside cli/, or two levels up from dist/cli/). */
export function packageVersion(): string {
    for (const candidate of [path.join(__dirname, "..", "package.json"), path.join(__dirname, "..", "..", "package.json")]) {
        try {
            const pkg = JSON.parse(fs.readFileSync(candidate, "utf8")) as { name?: string; version?: string };
            if (pkg.name === "airlock" && pkg.version) return pkg.version;
        } catch {
            // not here
        }
    }
    return "0.0.0";
}

/**
 * Prints findings for people (text), machines (json) or code scanning (sarif);
 * returns the exit code (advisory findings do not fail). `clean`: the line a person
 * gets when there is nothing to report.
 */
export function report(findings: Finding[], format: Format | boolean | undefined, extra: Record<string, unknown> = {}, clean?: string, policy?: Policy, sarif?: { category: string }): number {
    const as: Format = format === true ? "json" : format === false || format === undefined ? "text" : format;
    const violations = failing(findings).length;
    const shown = findings.filter((f) => !f.suppressed);
    const suppressed = findings.length - shown.length;
    const suppressedNote = suppressed > 0 ? `${suppressed} suppressed (--format json lists them)` : "";
    if (as === "sarif") {
        // Loaded only for SARIF output.
        const { toSarif } = require("./sarif") as typeof import("./sarif");
        const log = toSarif(findings, policy ?? loadPolicy(), packageVersion(), Array.isArray(extra.errors) ? (extra.errors as string[]) : [], sarif?.category ?? "airlock/");
        process.stdout.write(`${JSON.stringify(log, null, 2)}\n`);
    } else if (as === "json") {
        // Where a service starts and which profiles a finding is in only steer suppressions and --profile: not part of the report.
        const listed = findings.map(({ subjectLine: _line, profiles: _profiles, ...f }) => f);
        process.stdout.write(`${JSON.stringify({ ...extra, violations, findings: listed }, null, 2)}\n`);
    }
    else if (shown.length > 0) {
        for (const f of shown) process.stdout.write(`${formatFinding(f)}\n`);
        const advisory = shown.length - violations;
        process.stdout.write(`${[`${violations} violation${violations === 1 ? "" : "s"}`, advisory > 0 ? `${advisory} advisory` : "", suppressedNote].filter(Boolean).join(", ")}\n`);
    } else if (clean) process.stdout.write(`${clean}${suppressedNote ? ` (${suppressedNote})` : ""}\n`);
    else if (suppressedNote) process.stdout.write(`${suppressedNote}\n`);
    return violations > 0 ? EXIT.violations : EXIT.clean;
}

/** The folder holding `.git` above `from` (the repository's root), else `from` itself. */
export function repositoryRoot(from: string = process.cwd()): string {
    const cached = roots.get(from);
    if (cached) return cached;
    for (let dir = path.resolve(from); ; dir = path.dirname(dir)) {
        const found = fs.existsSync(path.join(dir, ".git")) ? dir : path.dirname(dir) === dir ? path.resolve(from) : undefined;
        if (found) {
            roots.set(from, found);
            return found;
        }
    }
}
const roots = new Map<string, string>();

/** What `check -` judges: standard input, named so in its findings (it has no path). */
export const STDIN_NAME = "<stdin>";

/** A file as the repository names it (relative to its root, with /), for fingerprints and SARIF; absolute when outside it. */
export function relativeToRepository(file: string): string {
    if (file === STDIN_NAME) return file;
    const relative = path.relative(repositoryRoot(), path.resolve(file));
    return relative.startsWith("..") || path.isAbsolute(relative) ? path.resolve(file) : relative.split(path.sep).join("/");
}
