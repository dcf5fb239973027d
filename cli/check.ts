import * as fs from "node:fs";
import * as path from "node:path";
import picomatch from "picomatch";
import * as YAML from "yaml";
import { ConfigError } from "../policies/contract";
import { found } from "../policies/engine/describeIssue";
import type { Finding } from "../policies/engine/finding";
import { ArtifactKind, judgeCloudInit, judgeCompose, judgeResources, judgeSshd, parseRuleOf } from "../policies/engine/judge";
import type { PlannedResourceLike } from "../policies/engine/resource";
import { applyInlineSuppressions, Comment } from "../policies/engine/suppressions";
import { ALL_RULES, enforce, loadPolicy, Policy } from "../policies/policy";
import { STDIN_NAME } from "./report";

/** `airlock check` and `gate --preview`: judging files, without Pulumi (fast start). */

/** Steps without a new state: the resource goes away, nothing is left to judge. */
const REMOVALS = new Set(["delete", "discard", "remove-pending-replace", "read-discard", "delete-replaced"]);

/**
 * Resources from `pulumi preview --json` (steps[].newState) or `pulumi stack export`
 * (deployment.resources). Anything of another shape is bad input naming the key path.
 */
export function resourcesOfPreview(file: string, text: string): PlannedResourceLike[] {
    let doc: any;
    try {
        doc = JSON.parse(text);
    } catch (err) {
        throw new ConfigError([`${file}: not JSON: ${(err as Error).message}`]);
    }
    const bad = (at: string, what: string, value: unknown) => new ConfigError([`${file}: ${at}: expected ${what}, got ${found(value)}`]);
    const isObject = (v: unknown): v is Record<string, any> => v !== null && typeof v === "object" && !Array.isArray(v);
    if (!isObject(doc)) throw bad("(top level)", "the output of `pulumi preview --json` or `pulumi stack export`", doc);
    let states: [string, unknown][];
    if ("steps" in doc) {
        if (!Array.isArray(doc.steps)) throw bad("steps", "a list", doc.steps);
        states = doc.steps.flatMap((step: unknown, i: number): [string, unknown][] => {
            if (!isObject(step)) throw bad(`steps[${i}]`, "an object", step);
            if (step.newState === undefined && REMOVALS.has(String(step.op))) return [];
            return [[`steps[${i}].newState`, step.newState]];
        });
    } else {
        const [at, list] = isObject(doc.deployment) ? ["deployment.resources", doc.deployment.resources] : ["resources", doc.resources];
        if (!Array.isArray(list)) throw bad(at === "resources" && !("resources" in doc) ? "steps" : at, "the output of `pulumi preview --json` (steps) or `pulumi stack export` (deployment.resources)", list);
        states = list.map((state: unknown, i: number) => [`${at}[${i}]`, state]);
    }
    return states.map(([at, s]) => {
        if (!isObject(s)) throw bad(at, "an object", s);
        if (typeof s.urn !== "string") throw bad(`${at}.urn`, "a string", s.urn);
        if (typeof s.type !== "string") throw bad(`${at}.type`, "a string", s.type);
        if (s.inputs !== undefined && !isObject(s.inputs)) throw bad(`${at}.inputs`, "an object", s.inputs);
        return { urn: s.urn, type: s.type, name: s.urn.split("::").pop()!, parent: typeof s.parent === "string" ? s.parent : undefined, inputs: s.inputs ?? {} };
    });
}

export type CheckKind = ArtifactKind | "preview";

/** Names `airlock plan` writes, and the usual names people give these files (`.in` = a template filled at boot). */
const NAMES: [RegExp, CheckKind][] = [
    [/(^|[._-])sshd_config([._-][\w.-]*)?$/, "sshd"],
    [/(^|[._-])compose([._-][\w.-]*)?\.ya?ml$/, "compose"],
    [/^(user[-_]?data|cloud[-_]?(init|config)([._-][\w.-]*)?\.(ya?ml|cfg))$/, "cloud-init"],
    [/\.json$/, "preview"],
];

/** What a file is, from its name and content; undefined when it cannot tell. */
export function detectKind(file: string, text: string): CheckKind | undefined {
    // cloud-init's own headers: #cloud-config, and a Jinja template (judged unverifiable, never skipped).
    if (/^(#cloud-config|## template: jinja)\b/.test(text)) return "cloud-init";
    const base = path.basename(file).toLowerCase().replace(/\.in$/, "");
    if (isSshdFragment(file)) return "sshd";
    for (const [name, kind] of NAMES) if (name.test(base)) return kind;
    // A `services:` mapping, read without expanding aliases (an alias bomb is refused later, by the judge).
    if (/\.ya?ml$/.test(base) && YAML.isMap(YAML.parseDocument(text).get("services", true))) return "compose";
    // An ssh client config (`Host` blocks) shares keywords with sshd's, but sshd has no `Host` keyword.
    const firstKeyword = /^\s*([A-Za-z]+)/m.exec(text.replace(/^\s*#.*$/gm, ""))?.[1].toLowerCase();
    if (firstKeyword !== "host" && /^\s*(ListenAddress|PermitRootLogin|PasswordAuthentication|ForceCommand|AcceptEnv|Match)\s/im.test(text)) return "sshd";
    return undefined;
}

/** A drop-in under sshd_config.d/: judged as a fragment of a config. */
const isSshdFragment = (file: string) => /(^|\/)sshd_config\.d\/[^/]+\.conf$/.test(file.replace(/\\/g, "/"));

/** The most a file may hold before it is refused (exit 2) rather than exhausting memory; see BENCHMARKS.md. */
export const MAX_INPUT_BYTES: Record<CheckKind, number> = {
    compose: 4 * 2 ** 20,
    "cloud-init": 4 * 2 ** 20,
    sshd: 4 * 2 ** 20,
    preview: 32 * 2 ** 20,
};

/** A file's text, refusing what cannot be read or is too large, without a UTF-8 byte-order mark. */
export function readInput(file: string, kind: CheckKind | undefined): string {
    let size: number;
    try {
        const stat = fs.statSync(file);
        if (stat.isDirectory()) throw Object.assign(new Error(), { code: "EISDIR" });
        size = stat.size;
    } catch (err) {
        throw new ConfigError([`${file}: cannot read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`]);
    }
    const cap = kind ? MAX_INPUT_BYTES[kind] : Math.max(...Object.values(MAX_INPUT_BYTES));
    if (size > cap) throw new ConfigError([`${file}: ${size} bytes is more than the ${cap / 2 ** 20} MiB airlock judges${kind ? ` for ${kind}` : ""}; refusing it`]);
    let text: string;
    try {
        text = fs.readFileSync(file, "utf8");
    } catch (err) {
        throw new ConfigError([`${file}: cannot read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`]);
    }
    return text.replace(/^\uFEFF/, "");
}

/** A file's findings: read within its kind's limit, its inline suppressions applied, then the policy's levels. */
export function checkFile(file: string, kind: CheckKind | undefined, policy: Policy = loadPolicy()): Finding[] {
    let text = readInput(file, kind);
    const resolved = kind ?? detectKind(file, text);
    if (resolved === undefined) throw new ConfigError([`${file}: cannot tell whether this is compose, sshd, cloud-init or a preview; pass --kind`]);
    if (kind === undefined) text = readInput(file, resolved); // now the kind's own limit applies
    return checkText(file, text, resolved, policy);
}

const RULE_IDS = new Set(ALL_RULES.map((r) => r.id));

/** `check -`: standard input, of the kind `kind` names or its content shows, within that kind's limit. */
export function checkStdin(kind: CheckKind | undefined, policy: Policy): Finding[] {
    const text = fs.readFileSync(0, "utf8").replace(/^\uFEFF/, "");
    const resolved = kind ?? detectKind("stdin.yaml", text) ?? (/^\s*[{[]/.test(text) ? "preview" : undefined);
    if (resolved === undefined) throw new ConfigError([`${STDIN_NAME}: cannot tell whether this is compose, sshd, cloud-init or a preview; pass --kind`]);
    if (Buffer.byteLength(text) > MAX_INPUT_BYTES[resolved]) throw new ConfigError([`${STDIN_NAME}: more than the ${MAX_INPUT_BYTES[resolved] / 2 ** 20} MiB airlock judges for ${resolved}; refusing it`]);
    return checkText(STDIN_NAME, text, resolved, policy);
}

/**
 * Findings of `text` (the content of `file`, or of standard input), with its inline
 * suppressions applied (`# airlock: ignore[rule] reason`; a preview has no comments),
 * then the policy's levels.
 */
function checkText(file: string, text: string, kind: CheckKind, policy: Policy): Finding[] {
    const judged = judgeText(file, text, kind, policy.context);
    return enforce(kind === "preview" ? judged : applyInlineSuppressions(judged, file, commentsOf(kind, text), RULE_IDS), policy);
}

/**
 * A file's comments as its consumer reads them: YAML's from its parser (a `#` inside a
 * quoted or block value is data, and suppresses nothing); sshd's whole `#` lines only
 * (a `#` after a keyword is a comment only since OpenSSH 8.7).
 */
function commentsOf(kind: Exclude<CheckKind, "preview">, text: string): Comment[] {
    if (kind === "sshd") return text.split("\n").flatMap((line, i) => (/^\s*#/.test(line) ? [{ line: i + 1, text: line, alone: true }] : []));
    const comments: Comment[] = [];
    const lines = new YAML.LineCounter();
    const walk = (node: unknown): void => {
        if (Array.isArray(node)) return node.forEach(walk);
        if (node === null || typeof node !== "object") return;
        const token = node as { type?: string; offset?: number; source?: string };
        if (token.type === "comment" && typeof token.offset === "number") {
            const { line, col } = lines.linePos(token.offset);
            comments.push({ line, text: token.source ?? "", alone: text.slice(token.offset - col + 1, token.offset).trim() === "" });
        }
        for (const value of Object.values(node)) if (value !== null && typeof value === "object") walk(value);
    };
    for (const token of new YAML.Parser(lines.addNewLine).parse(text)) walk(token);
    return comments;
}

function judgeText(file: string, text: string, resolved: CheckKind, ctx: Policy["context"]): Finding[] {
    if (text.trim() === "") return [emptyFinding(resolved, file)];
    switch (resolved) {
        case "compose":
            return judgeCompose(text, ctx, { file });
        case "sshd":
            return judgeSshd(text, ctx, { file }, isSshdFragment(file));
        case "cloud-init":
            return judgeCloudInit(text, ctx, { file });
        case "preview": {
            const resources = resourcesOfPreview(file, text);
            if (resources.length === 0) return [{ ...emptyFinding("preview", file), message: `unverifiable: ${file} holds no resources` }];
            return locateInPreview(judgeResources(resources, ctx), file, text);
        }
    }
}

/** Nothing to judge is never clean. */
function emptyFinding(kind: CheckKind, file: string): Finding {
    const rule = parseRuleOf(kind);
    return {
        rule: rule.id,
        remediation: rule.remediation,
        file,
        line: 1,
        message: `unverifiable: ${file} is empty`,
        unverifiable: true,
        fix: "An empty file has nothing to judge: check the path (and --kind), or give it its content.",
    };
}

/** The line of each resource's URN in a preview or stack export (pretty-printed JSON: one per line). */
export function resourceLines(text: string): Map<string, number> {
    const lines = new Map<string, number>();
    text.split("\n").forEach((line, i) => {
        for (const m of line.matchAll(/"urn"\s*:\s*"((?:[^"\\]|\\.)*)"/g)) if (!lines.has(m[1])) lines.set(m[1], i + 1);
    });
    return lines;
}

/**
 * Findings on a preview's resources, located in the preview file: `file:line` of the
 * resource, the URN, then the artifact inside it (a Stash's cloud-init.yaml and the
 * file it embeds).
 */
export function locateInPreview(findings: Finding[], file: string, text: string): Finding[] {
    const lines = resourceLines(text);
    return findings.map((f) => {
        const urn = f.resource ?? (f.where?.startsWith("urn:") ? f.where : undefined);
        const within = [...(f.file ? [{ file: f.file, ...(f.line ? { line: f.line } : {}) }] : []), ...(f.within ?? [])];
        return { ...f, file, line: (urn && lines.get(urn)) || 1, ...(within.length > 0 ? { within } : {}) };
    });
}

/** Folders a walk never enters: version control and installed dependencies. */
const NEVER_WALKED = new Set([".git", "node_modules"]);

/**
 * The files under `dir` that `check` judges, sorted: those whose kind their name or
 * content tells (a `.json` only when it holds a preview's `steps` or a stack export's
 * `deployment`), minus what an ignore glob matches (relative to `dir`). A link to a file
 * is judged; links to folders are not walked.
 */
export function filesInTree(dir: string, ignores: string[]): string[] {
    const ignored = ignores.length > 0 ? picomatch(ignores, { dot: true }) : () => false;
    const found: string[] = [];
    const walk = (at: string) => {
        for (const entry of fs.readdirSync(at, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
            const file = path.join(at, entry.name);
            const relative = path.relative(dir, file).split(path.sep).join("/");
            if (ignored(relative) || (entry.isDirectory() && ignored(`${relative}/`))) continue;
            if (entry.isDirectory()) {
                if (!NEVER_WALKED.has(entry.name)) walk(file);
            } else if ((entry.isFile() || (entry.isSymbolicLink() && isFile(file))) && judgedInTree(file)) found.push(file);
        }
    };
    walk(dir);
    return found;
}

/** A link to a file is judged as the file its consumer opens (links to folders are not walked: no loops). */
function isFile(file: string): boolean {
    try {
        return fs.statSync(file).isFile();
    } catch {
        return true; // a dangling link: reported as unreadable, never skipped
    }
}

/** Names worth opening in a walk; what they hold decides (cloud-init templates are often `*.tpl`, `*.tftpl`, `*.j2`). */
const CANDIDATE = /(\.(ya?ml|json|cfg|conf|in|tpl|tftpl|j2)$|(^|[._-])sshd_config([._-][\w.-]*)?$|user[-_]?data|cloud[-_]?(init|config))/i;

function judgedInTree(file: string): boolean {
    if (!CANDIDATE.test(path.basename(file))) return false;
    let text: string;
    try {
        if (fs.statSync(file).size > Math.max(...Object.values(MAX_INPUT_BYTES))) return detectKind(file, "") !== undefined; // named for its kind: refused as too large
        text = fs.readFileSync(file, "utf8");
    } catch {
        return true; // unreadable: reported as such
    }
    const kind = detectKind(file, text);
    if (kind !== "preview") return kind !== undefined;
    return /"(steps|deployment)"\s*:/.test(text.slice(0, 65536));
}

