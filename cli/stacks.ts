import * as fs from "node:fs";
import * as path from "node:path";

/** Where stack files live; no Pulumi needed to find them. */

export function stackFilePath(stacksDir: string, stack: string): string {
    return path.join(stacksDir, `Pulumi.${stack}.yaml`);
}

/** `stacks/Pulumi.<name>.yaml` -> `<name>`, for every stack in the folder, sorted. */
export function listStacks(stacksDir: string): string[] {
    return fs
        .readdirSync(stacksDir)
        .map((file) => /^Pulumi\.(.+)\.yaml$/.exec(file)?.[1])
        .filter((name): name is string => name !== undefined)
        .sort();
}
