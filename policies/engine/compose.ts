import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { ContainerSpec, fromComposeService } from "./container";
import type { Problem } from "./finding";

/**
 * A compose file as the engine sees it: YAML anchors, aliases and `<<` merge keys
 * resolved, and each service merged with what it `extends` (same file or another),
 * before any rule looks at it.
 */
export interface ComposeFile {
    containers: ContainerSpec[];
    networks: Record<string, any>;
    /** Top-level named volumes (a local bind volume is judged as a bind mount of its device). */
    volumes: Record<string, any>;
    /** Problems found while resolving (an unreadable `extends` file, a cycle). */
    problems: Problem[];
}

export class ComposeParseError extends Error {}

interface LoadedCompose {
    services: Record<string, any>;
    networks: Record<string, any>;
    volumes: Record<string, any>;
    lines: Record<string, number>;
}

function load(text: string, label: string): LoadedCompose {
    const lineCounter = new YAML.LineCounter();
    const doc = YAML.parseDocument(text, { merge: true, lineCounter, uniqueKeys: false });
    if (doc.errors.length > 0) throw new ComposeParseError(`${label}: ${doc.errors[0].message.split("\n")[0]}`);
    const data = (doc.toJS({ maxAliasCount: 1000 }) ?? {}) as Record<string, any>;
    if (typeof data !== "object" || Array.isArray(data)) throw new ComposeParseError(`${label}: not a compose mapping`);
    const lines: Record<string, number> = {};
    const servicesNode = doc.get("services", true);
    if (YAML.isMap(servicesNode)) {
        for (const item of servicesNode.items) {
            const key = item.key as YAML.Scalar | undefined;
            if (key?.range) lines[String(key.value)] = lineCounter.linePos(key.range[0]).line;
        }
    }
    return { services: data.services ?? {}, networks: data.networks ?? {}, volumes: data.volumes ?? {}, lines };
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

const isMapping = (v: unknown): v is Record<string, any> => v !== null && typeof v === "object" && !Array.isArray(v);

/**
 * Parses compose text. `file` (when known) lets `extends: {file: ...}` be followed;
 * without it, such an extends is unverifiable.
 */
export function parseCompose(text: string, file?: string): ComposeFile {
    const problems: Problem[] = [];
    const root = load(text, file ?? "compose");
    const cache = new Map<string, LoadedCompose>();

    const resolve = (loaded: LoadedCompose, dir: string | undefined, name: string, seen: string[]): Record<string, any> => {
        const service = loaded.services[name];
        if (!isMapping(service)) return {};
        const ext = service.extends;
        if (ext === undefined) return service;
        const { extends: _, ...own } = service;
        const ref = typeof ext === "string" ? { service: ext } : (ext as { service?: string; file?: string });
        const key = `${ref.file ?? ""}#${ref.service}`;
        if (seen.includes(key)) {
            problems.push({ message: `extends cycle: ${[...seen, key].join(" -> ")}`, where: name });
            return own;
        }
        let source = loaded;
        let sourceDir = dir;
        if (ref.file) {
            if (!dir) {
                problems.push({ message: `extends ${ref.file} cannot be followed without the file's location`, where: name, unverifiable: true });
                return own;
            }
            const target = path.resolve(dir, ref.file);
            try {
                source = cache.get(target) ?? load(fs.readFileSync(target, "utf8"), target);
                cache.set(target, source);
                sourceDir = path.dirname(target);
            } catch (err) {
                problems.push({ message: `extends ${ref.file}: ${(err as Error).message}`, where: name, unverifiable: true });
                return own;
            }
        }
        return mergeService(resolve(source, sourceDir, String(ref.service), [...seen, key]), own);
    };

    const dir = file ? path.dirname(path.resolve(file)) : undefined;
    const containers = Object.keys(root.services).map((name) =>
        fromComposeService(name, resolve(root, dir, name, []), root.lines[name], root.volumes ?? {}),
    );
    return { containers, networks: root.networks, volumes: root.volumes ?? {}, problems };
}
