import * as fs from "node:fs";
import * as path from "node:path";
import { ConfigError } from "../policies/contract";

/** Where stack files live; no Pulumi needed to find them. */

export function stackFilePath(stacksDir: string, stack: string): string {
    return path.join(stacksDir, `Pulumi.${stack}.yaml`);
}

/** `stacks/Pulumi.<name>.yaml` -> `<name>`, for every stack in the folder, sorted. */
export function listStacks(stacksDir: string): string[] {
    let files: string[];
    try {
        files = fs.readdirSync(stacksDir);
    } catch (err) {
        throw new ConfigError([`${stacksDir}: cannot read the stacks folder: ${(err as NodeJS.ErrnoException).code ?? String(err)}`]);
    }
    return files
        .map((file) => /^Pulumi\.(.+)\.yaml$/.exec(file)?.[1])
        .filter((name): name is string => name !== undefined)
        .sort();
}

/** The file of a stack that must exist; a missing one is bad input that names the stacks there and the closest. */
export function existingStackFile(stacksDir: string, stack: string): string {
    const file = stackFilePath(stacksDir, stack);
    if (fs.existsSync(file)) return file;
    const stacks = listStacks(stacksDir);
    if (stacks.length === 0) throw new ConfigError([`${file}: no such stack, and ${stacksDir} holds none (Pulumi.<stack>.yaml)`]);
    const [closest] = [...stacks].sort((a, b) => editDistance(stack, a) - editDistance(stack, b));
    const guess = editDistance(stack, closest) <= Math.max(2, Math.floor(stack.length / 3)) ? `; did you mean "${closest}"?` : "";
    throw new ConfigError([`${file}: no such stack "${stack}"; the stacks in ${stacksDir} are ${stacks.join(", ")}${guess}`]);
}

/** Levenshtein distance: the fewest single-character edits from one name to the other. */
function editDistance(a: string, b: string): number {
    let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
    for (let i = 1; i <= a.length; i++) {
        const row = [i];
        for (let j = 1; j <= b.length; j++) row[j] = Math.min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
        previous = row;
    }
    return previous[b.length];
}
