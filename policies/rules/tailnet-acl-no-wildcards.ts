import { AIRLOCK_ONLY } from "../engine/profile";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { isUnknown, unverifiable } from "../engine/finding";
import { TYPES } from "../engine/resource";

/** HuJSON -> JSON: drop comments and trailing commas (outside strings). */
export function parseHujson(text: string): any {
    let out = "";
    for (let i = 0; i < text.length; i++) {
        const ch = text[i];
        if (ch === '"') {
            const end = /"(?:[^"\\]|\\.)*"/y;
            end.lastIndex = i;
            const m = end.exec(text);
            if (!m) throw new Error("unterminated string");
            out += m[0];
            i += m[0].length - 1;
        } else if (ch === "/" && text[i + 1] === "/") {
            while (i < text.length && text[i] !== "\n") i++;
            out += "\n";
        } else if (ch === "/" && text[i + 1] === "*") {
            i = text.indexOf("*/", i + 2) + 1;
            if (i === 0) throw new Error("unterminated comment");
        } else out += ch;
    }
    return JSON.parse(out.replace(/,(\s*[}\]])/g, "$1"));
}

/** Problems in a tailnet policy document. */
export function wildcardProblems(policy: any): Problem[] {
    const problems: Problem[] = [];
    const wild = (v: unknown) => String(v) === "*";
    (Array.isArray(policy?.grants) ? policy.grants : []).forEach((g: any, i: number) => {
        const parts = [...(g.src ?? []).filter(wild).map(() => "src *"), ...(g.dst ?? []).filter(wild).map(() => "dst *"), ...(g.ip ?? []).filter(wild).map(() => "ip *")];
        if (parts.length > 0) problems.push({ message: `grants[${i}] uses ${parts.join(", ")}`, where: `grants[${i}]` });
    });
    (Array.isArray(policy?.acls) ? policy.acls : []).forEach((a: any, i: number) => {
        const bad = [...(a.src ?? []).filter(wild), ...(a.dst ?? []).filter((d: string) => /^\*(:|$)|:\*$/.test(String(d)))];
        if (bad.length > 0) problems.push({ message: `acls[${i}] uses ${bad.join(", ")}`, where: `acls[${i}]` });
    });
    return problems;
}

export const tailnetAclNoWildcards: Rule = {
    kind: "resource",
    types: [TYPES.acl],
    id: "tailnet-acl-no-wildcards",
    profiles: AIRLOCK_ONLY,
    description: "The tailnet policy grants nothing to or from `*` and no `*:*`-style ACL or all-ports rule: every grant names its tags and ports.",
    remediation: "Replace `*` with the exact tags and `tcp:22`-style ports (see out/<stack>/tailnet/policy.hujson).",
    check(resource) {
        const acl = resource.inputs.acl;
        if (isUnknown(acl)) return [unverifiable("the tailnet policy", resource.name)];
        try {
            return wildcardProblems(parseHujson(String(acl)));
        } catch (err) {
            return [{ message: `the tailnet policy does not parse: ${(err as Error).message}`, unverifiable: true }];
        }
    },
};
