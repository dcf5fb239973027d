import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { ConfigError } from "../contract";
import { ContainerSpec, fromComposeService, NamedVolumes } from "./container";
import { found } from "./describeIssue";
import type { Problem } from "./finding";
import { flattenLines, LineTree, linesOfNode, mergeLines, relocateLines } from "./sourceLines";

/**
 * A compose file as the engine sees it: YAML anchors, aliases and `<<` merge keys
 * resolved, and each service merged with what it `extends` (same file or another),
 * before any rule looks at it.
 */
export interface ComposeFile {
    containers: ContainerSpec[];
    networks: Record<string, any>;
    /** Problems found while resolving (an unreadable `extends` file, a cycle). */
    problems: Problem[];
}

export class ComposeParseError extends Error {
    constructor(message: string, readonly line?: number) {
        super(message);
    }
}

/**
 * How many alias expansions (weighted by the aliases inside what they expand) a
 * file may make: large real projects use a few thousand; an "alias bomb" that
 * doubles at every level needs millions, and is refused before it is expanded.
 */
export const MAX_ALIAS_EXPANSIONS = 100_000;

interface LoadedCompose {
    services: Record<string, any>;
    networks: Record<string, any>;
    volumes: NamedVolumes;
    lines: Record<string, number>;
    /** Where each service's keys and entries are written. */
    trees: Record<string, LineTree>;
    /** Services that cannot be judged (not a mapping), and a file with nothing to judge. */
    problems: Problem[];
}

const isMapping = (v: unknown): v is Record<string, any> => v !== null && typeof v === "object" && !Array.isArray(v);

function load(text: string, label: string): LoadedCompose {
    const lineCounter = new YAML.LineCounter();
    const doc = YAML.parseDocument(text.replace(/^\uFEFF/, ""), { merge: true, lineCounter, uniqueKeys: false, logLevel: "error" });
    if (doc.errors.length > 0) throw new ComposeParseError(`${label}: ${doc.errors[0].message.split("\n")[0]}`, doc.errors[0].linePos?.[0].line);
    let data: unknown;
    try {
        data = doc.toJS({ maxAliasCount: MAX_ALIAS_EXPANSIONS });
    } catch (err) {
        if (err instanceof ReferenceError && /alias/i.test(err.message)) {
            throw new ConfigError([`${label}: refusing it: more than ${MAX_ALIAS_EXPANSIONS} YAML alias expansions (an alias bomb?)`]);
        }
        throw new ComposeParseError(`${label}: ${(err as Error).message.split("\n")[0]}`);
    }
    const lineOf = (node: unknown) => (YAML.isNode(node) && node.range ? lineCounter.linePos(node.range[0]).line : undefined);
    if (data === null || data === undefined) return { services: {}, networks: {}, volumes: {}, lines: {}, trees: {}, problems: [nothingToJudge("the file is empty (or only comments)")] };
    if (!isMapping(data)) throw new ComposeParseError(`${label}: expected a compose mapping, got ${found(data)}`, lineOf(doc.contents));
    const problems: Problem[] = [];
    const lines: Record<string, number> = {};
    const trees: Record<string, LineTree> = {};
    const servicesNode = doc.get("services", true);
    if (YAML.isMap(servicesNode)) {
        for (const item of servicesNode.items) {
            const key = item.key as YAML.Scalar | undefined;
            if (!key?.range) continue;
            lines[String(key.value)] = lineCounter.linePos(key.range[0]).line;
            trees[String(key.value)] = linesOfNode(item.value, lines[String(key.value)], doc, lineCounter);
        }
    }
    let services: Record<string, any> = {};
    if (data.services === undefined || data.services === null) problems.push(nothingToJudge("it has no services"));
    else if (!isMapping(data.services)) {
        problems.push({ ...nothingToJudge(`services: expected a mapping of services, got ${found(data.services)}`), line: lineOf(servicesNode) });
    } else {
        services = data.services;
        if (Object.keys(services).length === 0) problems.push({ ...nothingToJudge("services is empty"), line: lineOf(servicesNode) });
        for (const [name, service] of Object.entries(services)) {
            if (!isMapping(service)) {
                problems.push({ message: `unverifiable: services.${name}: expected a mapping, got ${found(service)}`, where: name, line: lines[name], unverifiable: true });
            }
        }
    }
    return {
        services,
        networks: isMapping(data.networks) ? data.networks : {},
        volumes: isMapping(data.volumes) ? data.volumes : {},
        lines,
        trees,
        problems,
    };
}

function nothingToJudge(why: string): Problem {
    return { message: `unverifiable: nothing to judge: ${why}`, unverifiable: true, fix: "Check the file: a compose file declares its services under `services:`." };
}

/** Keys whose sequences replace rather than append when a service extends another. */
const REPLACED = new Set(["command", "entrypoint", "image", "healthcheck"]);

function mergeService(base: Record<string, any>, override: Record<string, any>): Record<string, any> {
    const merged: Record<string, any> = { ...base };
    for (const [key, value] of Object.entries(override)) {
        const old = merged[key];
        if (REPLACED.has(key) || old === undefined) merged[key] = value;
        else if (Array.isArray(old) && Array.isArray(value)) merged[key] = [...old, ...value];
        else if (isMapping(old) && isMapping(value)) merged[key] = mergeService(old, value);
        else merged[key] = value;
    }
    return merged;
}

/**
 * Parses compose text. `file` (when known) lets `extends: {file: ...}` be followed;
 * without it, such an extends is unverifiable.
 */
/** `hostFiles`: what the same user_data writes, by host path (see ContainerSpec.hostFiles). */
export function parseCompose(text: string, file?: string, hostFiles?: Record<string, string>): ComposeFile {
    const root = load(text, file ?? "compose");
    const problems: Problem[] = [...root.problems];
    const cache = new Map<string, LoadedCompose>();

    /** A service merged with what it extends, and where each of its keys is written in `file`. */
    type Resolved = { service: Record<string, any>; tree: LineTree };
    const resolve = (loaded: LoadedCompose, dir: string | undefined, name: string, seen: string[]): Resolved => {
        const service = loaded.services[name];
        const tree = loaded.trees[name] ?? {};
        if (!isMapping(service)) return { service: {}, tree: {} };
        const ext = service.extends;
        if (ext === undefined) return { service, tree };
        const { extends: _, ...own } = service;
        const ownTree = { ...tree, keys: { ...tree.keys } };
        const extendsLine = ownTree.keys.extends?.line ?? tree.line;
        delete ownTree.keys.extends;
        const ref = typeof ext === "string" ? { service: ext } : (ext as { service?: string; file?: string });
        const key = `${ref.file ?? ""}#${ref.service}`;
        if (seen.includes(key)) {
            problems.push({ message: `extends cycle: ${[...seen, key].join(" -> ")}`, where: name });
            return { service: own, tree: ownTree };
        }
        let source = loaded;
        let sourceDir = dir;
        if (ref.file) {
            if (!dir) {
                problems.push({ message: `extends ${ref.file} cannot be followed without the file's location`, where: name, unverifiable: true });
                return { service: own, tree: ownTree };
            }
            const target = path.resolve(dir, ref.file);
            try {
                source = cache.get(target) ?? load(fs.readFileSync(target, "utf8"), target);
                cache.set(target, source);
                sourceDir = path.dirname(target);
            } catch (err) {
                problems.push({ message: `extends ${ref.file}: ${(err as Error).message}`, where: name, unverifiable: true });
                return { service: own, tree: ownTree };
            }
        }
        const base = resolve(source, sourceDir, String(ref.service), [...seen, key]);
        // What another file contributes is reported on the `extends` line of this one.
        const baseTree = ref.file ? relocateLines(base.tree, extendsLine) : base.tree;
        return { service: mergeService(base.service, own), tree: mergeLines(base.service, own, baseTree, ownTree, REPLACED) };
    };

    const dir = file ? path.dirname(path.resolve(file)) : undefined;
    const containers = Object.keys(root.services)
        .filter((name) => isMapping(root.services[name]))
        .map((name) => {
            const { service, tree } = resolve(root, dir, name, []);
            return fromComposeService(name, service, root.lines[name], root.volumes, hostFiles, flattenLines(tree));
        });
    return { containers, networks: root.networks, problems };
}
