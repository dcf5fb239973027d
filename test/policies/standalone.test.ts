import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { REPO } from "../helpers/stacks";

/** Every relative import of every .ts file under `dir`, resolved to a repository path. */
function relativeImports(dir: string): { file: string; target: string }[] {
    const out: { file: string; target: string }[] = [];
    for (const entry of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
        if (!entry.isFile() || !entry.name.endsWith(".ts")) continue;
        const file = path.join(entry.parentPath, entry.name);
        const text = fs.readFileSync(file, "utf8");
        for (const m of text.matchAll(/(?:from|import|require)\s*\(?\s*["'](\.[^"']+)["']/g)) {
            out.push({ file: path.relative(REPO, file), target: path.relative(REPO, path.resolve(path.dirname(file), m[1])) });
        }
    }
    return out;
}

describe("policies/ stands alone", () => {
    it("imports nothing outside policies/ (the pack is published without the rest of the repository)", () => {
        const imports = relativeImports(path.join(REPO, "policies"));
        expect(imports.length).toBeGreaterThan(50);
        expect(imports.filter((i) => !i.target.startsWith("policies/"))).toEqual([]);
    });

    it("components/ takes what both sides agree on from policies/contract.ts, not its own copy", () => {
        const contract = fs.readFileSync(path.join(REPO, "policies", "contract.ts"), "utf8");
        const literals = [...contract.matchAll(/= "(@[A-Z0-9_]+@|\/etc\/[^"]+|pulumi:index:Stash)"/g)].map((m) => m[1]);
        expect(literals.length).toBeGreaterThanOrEqual(5);
        for (const entry of fs.readdirSync(path.join(REPO, "components"), { withFileTypes: true, recursive: true })) {
            if (!entry.isFile() || !entry.name.endsWith(".ts")) continue;
            const text = fs.readFileSync(path.join(entry.parentPath, entry.name), "utf8");
            for (const literal of literals) expect(text, `${entry.name} defines ${literal} again`).not.toMatch(new RegExp(`(const|=)\\s*"${literal.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}"`));
        }
    });
});
