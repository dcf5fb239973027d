import * as YAML from "yaml";

/**
 * Where each key and list entry of a YAML value is written, so that a finding points at
 * the line that causes it (`privileged: true`, the socket's volume entry) rather than at
 * the service. Built beside the value and merged the way the value is merged.
 */
export interface LineTree {
    line?: number;
    keys?: Record<string, LineTree>;
    items?: LineTree[];
}

/** Deep enough for `deploy.resources.limits.pids`; an alias loop cannot go further. */
const MAX_DEPTH = 6;

const isMergeKey = (key: unknown) => YAML.isScalar(key) && (key.value === "<<" || (typeof key.value === "symbol" && key.value.description === "<<"));

/**
 * The lines of `node` (the value of a key written on `line`), as YAML's toJS reads it:
 * aliases followed to their anchor, `<<` merges filling only the keys the mapping does
 * not set itself, earlier merge sources winning over later ones.
 */
export function linesOfNode(node: unknown, line: number | undefined, doc: YAML.Document, counter: YAML.LineCounter, depth = 0): LineTree {
    const tree: LineTree = { line };
    if (depth > MAX_DEPTH) return tree;
    const at = (n: unknown) => (YAML.isNode(n) && n.range ? counter.linePos(n.range[0]).line : undefined);
    // What an alias brings in is reported where it is used, never at its anchor: the anchor may
    // sit in another service, and a suppression there must not cover this one.
    if (YAML.isAlias(node)) return relocateLines(linesOfNode(node.resolve(doc), line, doc, counter, depth + 1), line);
    if (YAML.isMap(node)) {
        const keys: Record<string, LineTree> = {};
        const merges: { source: unknown; line: number | undefined }[] = [];
        for (const pair of node.items) {
            if (isMergeKey(pair.key)) {
                const value = YAML.isAlias(pair.value) ? pair.value.resolve(doc) : pair.value;
                for (const source of YAML.isSeq(value) ? value.items : [value]) merges.push({ source, line: at(pair.key) });
                continue;
            }
            const name = YAML.isScalar(pair.key) ? String(pair.key.value) : String(pair.key);
            keys[name] = linesOfNode(pair.value, at(pair.key), doc, counter, depth + 1);
        }
        // Merged keys are reported on the `<<` line that brings them in.
        for (const { source, line: mergeLine } of merges) {
            const merged = relocateLines(linesOfNode(source, mergeLine, doc, counter, depth + 1), mergeLine).keys ?? {};
            for (const [name, sub] of Object.entries(merged)) keys[name] ??= sub;
        }
        tree.keys = keys;
    } else if (YAML.isSeq(node)) {
        tree.items = node.items.map((item) => linesOfNode(item, at(item), doc, counter, depth + 1));
    }
    return tree;
}

const isMapping = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);

/**
 * The lines of a service that extends another, merged as compose merges the values
 * (see mergeService): sequences append, mappings merge, `replaced` keys and scalars
 * take the override's.
 */
export function mergeLines(base: Record<string, unknown>, override: Record<string, unknown>, baseTree: LineTree, overrideTree: LineTree, replaced: Set<string>): LineTree {
    const keys: Record<string, LineTree> = { ...baseTree.keys };
    for (const [key, value] of Object.entries(override)) {
        const old = base[key];
        const own = overrideTree.keys?.[key] ?? {};
        const inherited = baseTree.keys?.[key] ?? {};
        if (replaced.has(key) || old === undefined) keys[key] = own;
        else if (Array.isArray(old) && Array.isArray(value)) keys[key] = { line: own.line, items: [...(inherited.items ?? old.map(() => ({}))), ...(own.items ?? [])] };
        else if (isMapping(old) && isMapping(value)) keys[key] = mergeLines(old, value, inherited, own, new Set());
        else keys[key] = own;
    }
    return { line: overrideTree.line ?? baseTree.line, keys };
}

/** Every line of `tree` moved to `line`: what another file contributes, reported where it is pulled in. */
export function relocateLines(tree: LineTree, line: number | undefined): LineTree {
    return {
        line,
        ...(tree.keys ? { keys: Object.fromEntries(Object.entries(tree.keys).map(([k, sub]) => [k, relocateLines(sub, line)])) } : {}),
        ...(tree.items ? { items: tree.items.map((sub) => relocateLines(sub, line)) } : {}),
    };
}

/** `{ "privileged": 7, "volumes": 9, "volumes.0": 10, "deploy.resources.limits.pids": 14 }`. */
export function flattenLines(tree: LineTree, prefix = "", out: Record<string, number> = {}): Record<string, number> {
    if (prefix && tree.line !== undefined) out[prefix] = tree.line;
    const join = (k: string | number) => (prefix ? `${prefix}.${k}` : String(k));
    for (const [k, sub] of Object.entries(tree.keys ?? {})) flattenLines(sub, join(k), out);
    (tree.items ?? []).forEach((sub, i) => flattenLines(sub, join(i), out));
    return out;
}
