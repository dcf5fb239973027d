import * as fs from "node:fs";
import * as path from "node:path";
import { REPO } from "./stacks";

/**
 * The project's documentation: the README (the front door), every page of docs/ and
 * the CHANGELOG. Samples in them are produced by the tests, wherever a page keeps them.
 */
export function docFiles(): string[] {
    const pages = (dir: string): string[] =>
        fs.readdirSync(path.join(REPO, dir), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? pages(path.join(dir, e.name)) : e.name.endsWith(".md") ? [path.join(dir, e.name)] : []));
    return ["README.md", ...pages("docs").sort(), "CHANGELOG.md"].filter((f) => fs.existsSync(path.join(REPO, f)));
}

export const readDoc = (file: string) => fs.readFileSync(path.join(REPO, file), "utf8");

/** Every page, each after a line naming it, for the searches below. */
export function docsText(): string {
    return docFiles()
        .map((f) => `<!-- file: ${f} -->\n${readDoc(f)}`)
        .join("\n");
}

/** The code block after `<!-- doc-test: MARKER -->` on any page, with its final newline. */
export function docSample(marker: string): string {
    const found = new RegExp(`^<!-- doc-test: ${marker} -->\\n\`\`\`\\S*\\n([\\s\\S]*?)^\`\`\`$`, "m").exec(docsText());
    if (!found) throw new Error(`no page of the docs has a block marked doc-test: ${marker}`);
    return found[1];
}

/** What a page shows after `$ <command>` in a fenced block, up to the next `$ ` line or the end of the block. */
export function docTranscript(command: string): string {
    const text = docsText();
    const start = text.indexOf(`$ ${command}\n`);
    if (start < 0) throw new Error(`no page of the docs shows \`$ ${command}\``);
    const rest = text.slice(start + command.length + 3);
    return rest.slice(0, rest.search(/^(\$ |```)/m));
}

/** The sh code block on any page that starts with `start`. */
export function docShBlock(start: string): string {
    const block = [...docsText().matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]).find((b) => b.startsWith(start));
    if (!block) throw new Error(`no page of the docs has an sh block starting with ${start}`);
    return block;
}
