import * as fs from "node:fs";
import * as path from "node:path";
import { Command, Option } from "commander";
import { ConfigError } from "../../policies/contract";
import type { Finding } from "../../policies/engine/finding";
import { applyBaseline, BaselineLabel, fingerprints } from "../../policies/engine/suppressions";
import { ALL_RULES } from "../../policies/policy";
import { PROFILES, Profile } from "../../policies/engine/profile";
import { checkFile, CheckKind, checkStdin, detectKind, filesInTree } from "../check";
import { Cli, EXIT } from "../command";
import { isAirlockProject } from "../project";
import { Format, formatOf, policyOf, relativeToRepository, report, STDIN_NAME, withFormat } from "../report";

interface CheckOptions {
    kind?: CheckKind;
    profile?: Profile;
    json?: boolean;
    format?: Format;
    only: string[];
    skip: string[];
    ignore: string[];
    baseline?: string;
    writeBaseline?: string;
}

const collect = (value: string, previous: string[]) => [...previous, value];
const listOf = (values: string[]) => values.flatMap((v) => v.split(",")).map((v) => v.trim()).filter(Boolean);

export function define(command: Command, cli: Cli) {
    command
        .argument("<paths...>", "files, folders (walked for the kinds it judges) or - for standard input")
        .addOption(new Option("--kind <kind>", "what the files are (detected when omitted)").choices(["compose", "sshd", "cloud-init", "preview"]))
        .addOption(new Option("--profile <profile>", "generic: the hardening any file should meet; airlock: every rule (default: airlock inside an airlock project, else generic)").choices([...PROFILES]))
        .option("--only <rules>", "judge only these rules (comma-separated, repeatable); a file that cannot be parsed is still reported", collect, [])
        .option("--skip <rules>", "do not report these rules (comma-separated, repeatable)", collect, [])
        .option("--ignore <glob>", "in folders, leave out paths matching this glob, relative to the folder (repeatable; .git and node_modules always)", collect, [])
        .option("--baseline <file>", "findings recorded in this baseline are reported as suppressed and do not fail")
        .option("--write-baseline <file>", "record every current finding in this baseline file and exit 0");
    withFormat(command);
    return (paths: string[], opts: CheckOptions) => {
        const policy = policyOf(cli);
        const known = new Set(ALL_RULES.map((r) => r.id));
        const only = new Set(listOf(opts.only));
        const skip = new Set(listOf(opts.skip));
        const unknown = [...[...only].map((r) => ["--only", r]), ...[...skip].map((r) => ["--skip", r])].filter(([, r]) => !known.has(r));
        if (unknown.length > 0) {
            for (const [option, rule] of unknown) process.stderr.write(`${option}: '${rule}' is not a rule (docs/policy-pack.md lists them)\n`);
            return EXIT.badInput;
        }
        let baseline: Map<string, BaselineLabel> | undefined;
        if (opts.baseline !== undefined) {
            try {
                baseline = readBaseline(opts.baseline);
            } catch (err) {
                if (!(err instanceof ConfigError)) throw err;
                for (const line of err.problems) process.stderr.write(`${line}\n`);
                return EXIT.badInput;
            }
        }

        let findings: Finding[] = [];
        const errors: string[] = [];
        const files: string[] = [];
        const profiles: Record<string, Profile> = {};
        const profilesOf = new Map(ALL_RULES.map((r) => [r.id, r.profiles]));
        // A file is judged by its own project's profile; --only names the rules itself.
        const judgedBy = (file: string): Profile => opts.profile ?? (isAirlockProject(file === "-" ? process.cwd() : path.dirname(path.resolve(file))) ? "airlock" : "generic");
        let internal = false;
        // One bad file never hides the findings for the others.
        for (const given of paths) {
            let targets: string[];
            try {
                targets = given !== "-" && isDirectory(given) ? filesInTree(given, opts.ignore) : [given];
                // Nothing to judge is never clean.
                if (targets.length === 0) errors.push(`${given}: holds no compose file, sshd config, cloud-init user data or preview to judge`);
            } catch (err) {
                errors.push(`${given}: cannot read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
                continue;
            }
            for (const file of targets) {
                const name = file === "-" ? STDIN_NAME : file;
                files.push(name);
                // A preview is a plan of airlock's own resources: every rule judges it.
                const isPreview = (opts.kind ?? (file === "-" ? undefined : detectKind(file, ""))) === "preview";
                const profile = (profiles[name] = isPreview ? "airlock" : judgedBy(file));
                try {
                    const found = file === "-" ? checkStdin(opts.kind, policy) : checkFile(file, opts.kind, policy);
                    findings.push(...(only.size > 0 ? found : found.filter((f) => (f.profiles ?? profilesOf.get(f.rule) ?? PROFILES).includes(profile))));
                } catch (err) {
                    if (err instanceof ConfigError) errors.push(...err.problems);
                    else {
                        internal = true;
                        errors.push(`${file}: internal error: ${err instanceof Error ? err.message : String(err)}`);
                    }
                }
            }
        }
        // A rule left out by --only never hides that a file could not be judged at all.
        if (only.size > 0) findings = findings.filter((f) => only.has(f.rule) || f.rule.endsWith("-parses"));
        findings = findings.filter((f) => !skip.has(f.rule));
        const prints = fingerprints(findings, relativeToRepository);

        if (opts.writeBaseline !== undefined) {
            for (const line of errors) process.stderr.write(`${line}\n`);
            if (errors.length > 0) {
                process.stderr.write(`${opts.writeBaseline}: not written: not every file could be judged\n`);
                return internal ? EXIT.internal : EXIT.badInput;
            }
            // What a suppression already accepts, with its reason, stays out of the baseline.
            const open = findings.flatMap((f, i) => (f.suppressed ? [] : [{ finding: f, print: prints[i] }]));
            writeBaseline(opts.writeBaseline, open);
            process.stdout.write(`wrote ${open.length} finding${open.length === 1 ? "" : "s"} to ${opts.writeBaseline}\n`);
            return EXIT.clean;
        }
        if (baseline) findings = applyBaseline(findings, prints, baseline, opts.baseline!, relativeToRepository);
        const extra = { files, profiles, ...(errors.length > 0 ? { errors } : {}) };
        const code = report(findings, formatOf(opts), extra, errors.length === 0 ? "clean" : undefined, policy, { category: "airlock/check/" });
        for (const line of errors) process.stderr.write(`${line}\n`);
        return internal ? EXIT.internal : errors.length > 0 ? EXIT.badInput : code;
    };
}

function isDirectory(file: string): boolean {
    try {
        return fs.statSync(file).isDirectory();
    } catch {
        return false; // reported by checkFile as unreadable
    }
}

/** What a baseline holds: each finding's fingerprint, with enough beside it for a reviewer to read. */
interface BaselineEntry {
    fingerprint: string;
    rule: string;
    file: string;
    message: string;
}

function readBaseline(file: string): Map<string, BaselineLabel> {
    let doc: any;
    try {
        doc = JSON.parse(fs.readFileSync(file, "utf8"));
    } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        throw new ConfigError([`${file}: ${code ? `cannot read: ${code}` : `not JSON: ${(err as Error).message}`}`]);
    }
    if (doc?.version !== 1) throw new ConfigError([`${file}: version: expected 1 (a baseline written by airlock check --write-baseline)`]);
    if (!Array.isArray(doc.findings)) throw new ConfigError([`${file}: findings: expected a list`]);
    doc.findings.forEach((entry: unknown, i: number) => {
        const { fingerprint, rule, file: of } = (entry ?? {}) as Partial<BaselineEntry>;
        if (typeof fingerprint !== "string" || !/^[0-9a-f]{32}$/.test(fingerprint)) throw new ConfigError([`${file}: findings[${i}].fingerprint: expected 32 hex digits`]);
        if (typeof rule !== "string") throw new ConfigError([`${file}: findings[${i}].rule: expected the rule's id`]);
        if (typeof of !== "string") throw new ConfigError([`${file}: findings[${i}].file: expected the file, relative to the repository's root`]);
    });
    return new Map(doc.findings.map((entry: BaselineEntry) => [entry.fingerprint, { rule: entry.rule, file: entry.file }]));
}

/** Written whole to a temporary file beside it, then renamed: never half a baseline. */
function writeBaseline(file: string, findings: { finding: Finding; print: string }[]): void {
    const entries: BaselineEntry[] = findings.map(({ finding: f, print }) => ({ fingerprint: print, rule: f.rule, file: f.file ? relativeToRepository(f.file) : "", message: f.message }));
    const temporary = path.join(path.dirname(path.resolve(file)), `.${path.basename(file)}.${process.pid}.tmp`);
    fs.writeFileSync(temporary, `${JSON.stringify({ version: 1, tool: "airlock check", findings: entries }, null, 2)}\n`);
    fs.renameSync(temporary, file);
}
