import { GENERIC } from "./profile";
import { artifactsOf, BUNDLE_NAME } from "../contract";
import { RULES } from "../rules";
import { parseHujson, wildcardProblems, tailnetAclNoWildcards } from "../rules/tailnet-acl-no-wildcards";
import { filesFromBundle } from "./bundle";
import { CloudInitDoc, CloudInitParseError, parseUserData } from "./cloudInit";
import { ComposeFile, ComposeParseError, parseCompose } from "./compose";
import { fromDockerContainer } from "./container";
import type { JudgeContext } from "./context";
import { Finding, isHidden, Problem, RuleInfo } from "./finding";
import { PlannedResourceLike, TYPES } from "./resource";
import type { Rule } from "./rule";
import { parseSshd } from "./sshd";
import { parseStackFile } from "./stackFile";

/**
 * The one place artifacts meet rules. Every front end (the CrossGuard pack,
 * `airlock check`, `airlock gate`, `airlock plan`) calls these functions.
 */

export type ArtifactKind = "compose" | "sshd" | "cloud-init";

/** Where an artifact came from, stamped on its findings. */
interface Origin {
    file?: string;
    resource?: string;
}

/**
 * Findings about a file embedded in another: `line` becomes the line in the outer
 * document (exact for a literal block, else the entry's line), and the inner file
 * and line go to `within`.
 */
function nested(findings: Finding[], outer: Origin, inner: { path: string; line?: number; contentLine?: number }): Finding[] {
    return findings.map((f) => ({
        ...f,
        ...outer,
        line: f.line !== undefined && inner.contentLine !== undefined ? inner.contentLine + f.line - 1 : inner.line,
        within: [{ file: inner.path, ...(f.line !== undefined ? { line: f.line } : {}) }, ...(f.within ?? [])],
    }));
}

const rulesOf = <K extends Rule["kind"]>(kind: K) => RULES.filter((r): r is Extract<Rule, { kind: K }> => r.kind === kind);

function stamp(rule: Pick<Rule, "id" | "remediation">, problems: Problem[], origin: Origin): Finding[] {
    return problems.map((p) => ({ rule: rule.id, remediation: rule.remediation, ...origin, ...p }));
}

/** Findings about an artifact that cannot be judged at all (fail closed). */
export const PARSE_RULES: RuleInfo[] = [
    { id: "sshd-parses", profiles: GENERIC, description: "An sshd config must be self-contained (no Include) so all of it is judged.", remediation: "Inline the included settings; airlock configs are self-contained on purpose." },
    { id: "compose-parses", profiles: GENERIC, description: "A compose file must parse and every `extends` must resolve before its services are judged.", remediation: "Fix the YAML and make every `extends` resolvable." },
    {
        id: "cloud-init-parses",
        profiles: GENERIC,
        description: "user_data must be #cloud-config (or a script) that parses, plain or as one line of base64 (of its gzip) as cloud-init's Hetzner datasource decodes it; MIME or Jinja user_data cannot be judged.",
        remediation: "Render #cloud-config, sent plain or as base64 of its gzip on one line.",
    },
];
/** The preview itself (`airlock check preview.json`); not a pack policy: CrossGuard hands the pack resources, not a file. */
export const PREVIEW_PARSES: RuleInfo = {
    id: "preview-parses",
    profiles: GENERIC,
    description: "A preview (`pulumi preview --json`, `pulumi stack export`) must hold resources to judge.",
    remediation: "Pass the complete output of `pulumi preview --json` or `pulumi stack export`.",
};
const parseRule = (kind: ArtifactKind) => PARSE_RULES.find((r) => r.id === `${kind}-parses`)!;
export const parseRuleOf = (kind: ArtifactKind | "preview"): RuleInfo => (kind === "preview" ? PREVIEW_PARSES : parseRule(kind));

function unparsable(kind: ArtifactKind, message: string, origin: Origin, line?: number): Finding[] {
    return stamp(parseRule(kind), [{ message: `unverifiable: ${message}`, unverifiable: true, ...(line ? { line } : {}), fix: FIX_UNPARSABLE[kind] }], origin);
}

/** What to do about an artifact that cannot be read at all. */
const FIX_UNPARSABLE: Record<ArtifactKind, string> = {
    compose: "Make it a valid compose file: fix the YAML (the line above), declare its services under `services:`.",
    sshd: "Make it a complete sshd_config.",
    "cloud-init": "Render #cloud-config (or a script) that parses, plain or as base64 of its gzip on one line, with write_files content that decodes.",
};

export function judgeSshd(text: string, ctx: JudgeContext, origin: Origin = {}, fragment = false): Finding[] {
    const config = parseSshd(text, fragment);
    const findings = rulesOf("sshd").flatMap((rule) => stamp(rule, rule.check(config, ctx), origin));
    // An Include pulls in files nobody judged; in a whole config they could add listeners or env names.
    const includes = config.lines.filter((l) => l.keyword === "include");
    findings.push(
        ...stamp(
            parseRule("sshd"),
            includes.map((l) => ({ message: `unverifiable: Include ${l.args.join(" ")} brings in files that are not judged`, line: l.line, where: "Include", unverifiable: true })),
            origin,
        ),
    );
    return findings;
}

export function judgeComposeFile(compose: ComposeFile, ctx: JudgeContext, origin: Origin = {}): Finding[] {
    const resolution = stamp(parseRule("compose"), compose.problems, origin);
    return [
        ...resolution,
        ...compose.containers.flatMap((container) =>
            rulesOf("container").flatMap((rule) => stamp(rule, rule.check(container, ctx).map((p) => (container.line ? { ...p, subjectLine: container.line } : p)), origin)),
        ),
    ];
}

export function judgeCompose(text: string, ctx: JudgeContext, origin: Origin = {}, hostFiles?: Record<string, string>): Finding[] {
    try {
        return judgeComposeFile(parseCompose(text, origin.file, hostFiles), ctx, origin);
    } catch (err) {
        if (err instanceof ComposeParseError) return unparsable("compose", err.message, origin, err.line);
        throw err;
    }
}

/** Which embedded files are judged as what, by their path on the host. */
export function embeddedKind(hostPath: string): { kind: "sshd" | "compose"; fragment: boolean } | undefined {
    if (/^\/etc\/ssh\/sshd_config$|^\/etc\/airlock\/sshd_config(\.in)?$/.test(hostPath)) return { kind: "sshd", fragment: false };
    if (/^\/etc\/ssh\/sshd_config\.d\/[^/]+\.conf$/.test(hostPath)) return { kind: "sshd", fragment: true };
    if (/(^|\/)(docker-)?compose(\.[\w-]+)?\.ya?ml(\.in)?$/.test(hostPath)) return { kind: "compose", fragment: false };
    return undefined;
}

export function judgeCloudInitDoc(doc: CloudInitDoc, ctx: JudgeContext, origin: Origin = {}): Finding[] {
    const findings = rulesOf("cloud-init").flatMap((rule) => stamp(rule, rule.check(doc, ctx), origin));
    // A file whose content cannot be read hides it from every rule: fail closed.
    for (const file of doc.files.filter((f) => f.undecodable)) {
        findings.push(
            ...stamp(
                parseRule("cloud-init"),
                [{ message: `unverifiable: write_files[${file.index}] (${file.path}) ${file.undecodable}`, line: file.line, where: `write_files[${file.index}]`, unverifiable: true, fix: FIX_UNPARSABLE["cloud-init"] }],
                origin,
            ),
        );
    }
    // A compose file's services mount files the same user_data writes: rules may read them.
    const hostFiles = Object.fromEntries(doc.files.filter((f) => !f.undecodable).map((f) => [f.path, f.content]));
    for (const file of doc.files.filter((f) => !f.undecodable)) {
        const embedded = embeddedKind(file.path);
        if (!embedded) continue;
        const inner = embedded.kind === "sshd" ? judgeSshd(file.content, ctx, {}, embedded.fragment) : judgeCompose(file.content, ctx, {}, hostFiles);
        findings.push(...nested(inner, origin, file));
    }
    return findings;
}

/**
 * With the artifacts stashed beside it, a document that names a host code bundle is judged with the
 * files its installer writes from it (their real paths and the host's values), or is unverifiable.
 * `sent`: the text is the user_data a server is created with (its length is what Hetzner counts).
 */
export function judgeCloudInit(text: string, ctx: JudgeContext, origin: Origin = {}, beside?: Record<string, string>, sent = false): Finding[] {
    try {
        const doc = parseUserData(text, sent);
        return judgeCloudInitDoc(beside ? withBundledFiles(doc, beside) : doc, ctx, origin);
    } catch (err) {
        if (err instanceof CloudInitParseError) return unparsable("cloud-init", err.message, origin, err.line);
        throw err;
    }
}

function withBundledFiles(doc: CloudInitDoc, beside: Record<string, string>): CloudInitDoc {
    const bundled = filesFromBundle(doc.files, beside);
    if (!bundled) return doc;
    if ("problem" in bundled) return { ...doc, bundleProblem: bundled.problem };
    return { ...doc, files: [...doc.files, ...bundled.files.map((f, i) => ({ ...f, index: doc.files.length + i }))] };
}

/** Rendered files carried in a Stash (a host's cloud-init document, the tailnet policy), judged by what they are. */
function judgeArtifacts(artifacts: Record<string, string>, ctx: JudgeContext, resource: string): Finding[] {
    const findings: Finding[] = [];
    for (const [relative, content] of Object.entries(artifacts)) {
        const origin = { file: relative, resource };
        if (relative === "cloud-init.yaml") {
            // Judged with every file it embeds, and every file it installs from the bundle it names.
            findings.push(...judgeCloudInit(content, ctx, origin, artifacts));
            continue;
        }
        // A host's bundle is judged as the files its document installs from it (below).
        if (BUNDLE_NAME.test(relative)) continue;
        if (relative.endsWith(".hujson")) {
            try {
                findings.push(...stamp(tailnetAclNoWildcards, wildcardProblems(parseHujson(content)), origin));
            } catch (err) {
                findings.push(...stamp(tailnetAclNoWildcards, [{ message: `unverifiable: ${(err as Error).message}`, unverifiable: true }], origin));
            }
            continue;
        }
        const embedded = embeddedKind(`/${relative}`);
        if (embedded?.kind === "sshd") findings.push(...judgeSshd(content, ctx, origin, embedded.fragment));
        if (embedded?.kind === "compose") findings.push(...judgeCompose(content, ctx, origin));
    }
    return findings;
}

/** All findings for one resource (no cross-resource rules). */
export function judgeResource(resource: PlannedResourceLike, ctx: JudgeContext): Finding[] {
    const origin = { resource: resource.urn };
    const findings = rulesOf("resource")
        .filter((rule) => rule.types.includes(resource.type))
        .flatMap((rule) => stamp(rule, rule.check(resource, ctx), origin));

    if (resource.type === TYPES.server) {
        const userData = resource.inputs.userData;
        // Unknown at preview (or redacted in a preview's JSON): judged through its stashed
        // artifact instead (see hcloud-servers-user-data-verifiable).
        if (typeof userData === "string" && !isHidden(userData)) findings.push(...judgeCloudInit(userData, ctx, { ...origin, file: "userData" }, undefined, true));
    }
    if (resource.type === TYPES.stash) {
        const artifacts = artifactsOf(resource.inputs);
        if (artifacts) findings.push(...judgeArtifacts(artifacts, ctx, resource.urn));
    }
    if (resource.type === TYPES.dockerContainer) {
        const container = fromDockerContainer(resource.name, resource.inputs);
        findings.push(...rulesOf("container").flatMap((rule) => stamp(rule, rule.check(container, ctx), origin)));
    }
    return findings;
}

/** A stack file's own problems (credentials in clear); the stack's resources are judged by judgeResources. */
export function judgeStackFile(text: string, ctx: JudgeContext, origin: Origin = {}): Finding[] {
    const doc = parseStackFile(text);
    return doc ? rulesOf("stack-file").flatMap((rule) => stamp(rule, rule.check(doc, ctx), origin)) : [];
}

/** Everything: each resource, then the rules that need the whole stack. */
export function judgeResources(resources: PlannedResourceLike[], ctx: JudgeContext): Finding[] {
    return [
        ...resources.flatMap((r) => judgeResource(r, ctx)),
        ...rulesOf("stack").flatMap((rule) => stamp(rule, rule.check(resources, ctx), {})),
    ];
}
