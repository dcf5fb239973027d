import * as fs from "node:fs";
import type { Command } from "commander";
import { ConfigError } from "../policies/contract";

/**
 * What every command module shares. Kept free of heavy imports: `airlock check`
 * starts by loading only main.ts, this file and the one command it runs.
 */

/** Exit codes, the same for every command. */
export const EXIT = { clean: 0, violations: 1, badInput: 2, internal: 3 } as const;

/** The global options, given to every command. */
export interface Cli {
    /** Folder holding Pulumi.<stack>.yaml files (--stacks-dir, else the project's stacks/). */
    stacksDir: string;
    /** Where a stack's plan goes unless --out says: the project's out/<stack> (the working directory's out/ outside one). */
    outDir(stack: string): string;
    /** The policy file (--policy), or undefined for the shipped policies/config.json. */
    policyFile?: string;
}

/**
 * A command module (cli/commands/<name>.ts) exports `define`: it adds the command's
 * arguments and options to `command` and returns its action, which returns the exit code.
 * Commander calls the action with the arguments, then the options object.
 */
export interface CommandModule {
    define(command: Command, cli: Cli): (...args: any[]) => number | Promise<number>;
}

/** A file's text, or bad input naming it. */
export function readText(file: string): string {
    try {
        return fs.readFileSync(file, "utf8");
    } catch (err) {
        throw new ConfigError([`${file}: cannot read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`]);
    }
}
