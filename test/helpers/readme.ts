import * as fs from "node:fs";
import * as path from "node:path";
import { REPO } from "./stacks";

/** The README's code block after `<!-- doc-test: MARKER -->`, with its final newline. */
export function readmeSample(marker: string): string {
    const readme = fs.readFileSync(path.join(REPO, "README.md"), "utf8");
    const found = new RegExp(`^<!-- doc-test: ${marker} -->\\n\`\`\`\\S*\\n([\\s\\S]*?)^\`\`\`$`, "m").exec(readme);
    if (!found) throw new Error(`README.md has no block marked doc-test: ${marker}`);
    return found[1];
}
