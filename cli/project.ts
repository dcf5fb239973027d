import * as fs from "node:fs";
import * as path from "node:path";
import { ConfigError } from "../policies/contract";

/**
 * The airlock project a command works on: the nearest folder, from the working
 * directory up, that holds a Pulumi.yaml, so that every verb works from any of its
 * subfolders as git does. Paths are given back as the user would type them from
 * where they are ("stacks" at the top, "../stacks" one level down).
 */
export function projectRoot(from = process.cwd()): string | undefined {
    for (let at = path.resolve(from); ; at = path.dirname(at)) {
        if (fs.existsSync(path.join(at, "Pulumi.yaml"))) return at;
        if (path.dirname(at) === at) return undefined;
    }
}

/** A path inside the project, relative to the working directory; bad input outside any project. */
export function inProject(what: string, ...parts: string[]): string {
    const root = projectRoot();
    if (root === undefined) {
        throw new ConfigError([`airlock: no Pulumi.yaml in ${process.cwd()} or any folder above it: run this inside an airlock project (a clone or a fork), or pass ${what}`]);
    }
    return path.relative(process.cwd(), path.join(root, ...parts)) || ".";
}

const airlockProjects = new Map<string, boolean>();

/**
 * Whether `dir` is inside an airlock project (a clone or a fork): the nearest Pulumi.yaml
 * above it names the project airlock (its stacks' keys are `airlock:`), or airlock's
 * policy pack sits beside it (a fork that renamed its project is still judged strictly).
 */
export function isAirlockProject(dir: string): boolean {
    // Any project above it counts: a Pulumi.yaml of its own inside an airlock project never loosens the judgment.
    const root = projectRoot(dir);
    if (root === undefined) return false;
    if (path.dirname(root) !== root && isAirlockProject(path.dirname(root))) return true;
    let known = airlockProjects.get(root);
    if (known === undefined) {
        const text = fs.readFileSync(path.join(root, "Pulumi.yaml"), "utf8");
        known = /^name:\s*["']?airlock["']?\s*(#.*)?$/m.test(text) || /^description: airlock\b/m.test(readOr(path.join(root, "policies", "PulumiPolicy.yaml")));
        airlockProjects.set(root, known);
    }
    return known;
}

function readOr(file: string): string {
    try {
        return fs.readFileSync(file, "utf8");
    } catch {
        return "";
    }
}
