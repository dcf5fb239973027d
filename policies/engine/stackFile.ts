import * as YAML from "yaml";

/** A Pulumi stack file (stacks/Pulumi.<stack>.yaml) as the stack-file rules see it. */
export interface StackFileDoc {
    /** Top-level config key ("hcloud:token", "airlock:gateway") -> value as written. */
    config: Record<string, unknown>;
    /** Config key -> line. */
    lines: Record<string, number>;
}

/** Parses a stack file; undefined when it is not YAML with a `config` mapping (the config loader reports that). */
export function parseStackFile(text: string): StackFileDoc | undefined {
    const lineCounter = new YAML.LineCounter();
    const doc = YAML.parseDocument(text, { lineCounter });
    if (doc.errors.length > 0) return undefined;
    const node = doc.get("config", true);
    if (!YAML.isMap(node)) return undefined;
    const lines: Record<string, number> = {};
    for (const item of node.items) {
        const key = item.key as YAML.Scalar | undefined;
        if (key?.range) lines[String(key.value)] = lineCounter.linePos(key.range[0]).line;
    }
    return { config: (node.toJS(doc) ?? {}) as Record<string, unknown>, lines };
}

/** `{ secure: v1:... }`: what `pulumi config set --secret` writes. */
export const isEncrypted = (value: unknown) => value !== null && typeof value === "object" && !Array.isArray(value) && "secure" in value;
