/**
 * Compose variable interpolation, as judged: a value is judged as it is when its
 * variables are unset, i.e. `${VAR:-default}` is its default. A variable without a
 * default (`$VAR`, `${VAR}`, `${VAR:?error}`) makes the value unknown, so the rules
 * that read it fail closed. `$$` is a literal dollar.
 */
export interface Interpolated {
    value: string;
    /** A variable without a default decides (part of) the value. */
    unknown: boolean;
}

export function interpolate(text: string): Interpolated {
    let out = "";
    let unknown = false;
    for (let i = 0; i < text.length; i++) {
        const ch = text[i];
        if (ch !== "$") {
            out += ch;
            continue;
        }
        const next = text[i + 1];
        if (next === "$") {
            out += "$";
            i++;
        } else if (next === "{") {
            const end = closingBrace(text, i + 1);
            if (end < 0) {
                // Compose refuses an unclosed ${: nothing sure can be said about the value.
                return { value: text, unknown: true };
            }
            const inner = text.slice(i + 2, end);
            const m = /^([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?+])([\s\S]*))?$/.exec(inner);
            if (!m || !m[2] || m[2].endsWith("?")) unknown = true;
            else if (m[2].endsWith("-")) {
                const fallback = interpolate(m[3]);
                out += fallback.value;
                unknown ||= fallback.unknown;
            } // `${VAR:+alt}`: empty while VAR is unset.
            i = end;
        } else if (next !== undefined && /[A-Za-z_]/.test(next)) {
            unknown = true;
            i += /^[A-Za-z_][A-Za-z0-9_]*/.exec(text.slice(i + 1))![0].length;
        } else out += ch;
    }
    return { value: out, unknown };
}

/** Index of the `}` closing the `{` at `open`, nesting counted; -1 when there is none. */
function closingBrace(text: string, open: number): number {
    let depth = 0;
    for (let i = open; i < text.length; i++) {
        if (text[i] === "{") depth++;
        else if (text[i] === "}" && --depth === 0) return i;
    }
    return -1;
}

/** Splits at `separator` outside `${...}` (`${A:-/x:y}:/t` is two parts, not three). */
export function splitOutsideBraces(text: string, separator: string): string[] {
    const parts: string[] = [];
    let depth = 0;
    let start = 0;
    for (let i = 0; i < text.length; i++) {
        if (text[i] === "$" && text[i + 1] === "$") i++;
        else if (text[i] === "$" && text[i + 1] === "{") {
            depth++;
            i++;
        } else if (text[i] === "}" && depth > 0) depth--;
        else if (text[i] === separator && depth === 0) {
            parts.push(text.slice(start, i));
            start = i + 1;
        }
    }
    parts.push(text.slice(start));
    return parts;
}

/** Every string in a value interpolated; `unknown` when any of them is. */
export function interpolateDeep(value: unknown): { value: unknown; unknown: boolean } {
    if (typeof value === "string") return interpolate(value);
    if (Array.isArray(value)) {
        const items = value.map(interpolateDeep);
        return { value: items.map((i) => i.value), unknown: items.some((i) => i.unknown) };
    }
    if (value !== null && typeof value === "object") {
        const entries = Object.entries(value).map(([k, v]) => [k, interpolateDeep(v)] as const);
        return { value: Object.fromEntries(entries.map(([k, v]) => [k, v.value])), unknown: entries.some(([, v]) => v.unknown) };
    }
    return { value, unknown: false };
}
