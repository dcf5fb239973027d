import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { ownKeys } from "../components/config/load";
import { STACK_CONFIG_KEYS, stackConfigSchema } from "../components/config/schema";
import { REPO, SHIPPED_STACKS, stackFile } from "./helpers/stacks";

/**
 * Pulumi refuses a stack that lacks a value for a key Pulumi.yaml declares without a
 * default ("Stack 'dev' is missing configuration value ..."; pulumi/pulumi
 * sdk/go/common/workspace ValidateStackConfigAndApplyProjectConfig), and hands the
 * program a declared default for a key the stack omits. So Pulumi.yaml declares every
 * key, and gives a default to exactly the keys the schema does not require.
 */
describe("Pulumi.yaml against the stack schema", () => {
    const project = YAML.parse(fs.readFileSync(path.join(REPO, "Pulumi.yaml"), "utf8")) as { config: Record<string, { default?: unknown }> };

    it("declares every key of the schema, and no other", () => {
        expect(Object.keys(project.config).sort()).toEqual([...STACK_CONFIG_KEYS].sort());
    });

    it.each(SHIPPED_STACKS)("a key without a default is one the schema requires (from %s, each key left out in turn)", (stack) => {
        const config = ownKeys(YAML.parse(fs.readFileSync(stackFile(stack), "utf8")).config);
        expect(stackConfigSchema.safeParse(config).success).toBe(true);
        for (const key of STACK_CONFIG_KEYS) {
            const { [key]: _, ...without } = config;
            const declaredDefault = project.config[key]?.default;
            // What the program gets when the stack leaves the key out: the declared default, or nothing.
            const given = declaredDefault === undefined ? without : { ...without, [key]: declaredDefault };
            const result = stackConfigSchema.safeParse(given);
            const required = !result.success && result.error.issues.some((issue) => issue.path[0] === key);
            expect(declaredDefault === undefined, `Pulumi.yaml: ${key}: ${required ? "the schema requires it: no default" : "the schema has defaults for it: declare default: {}"}`).toBe(required);
        }
    });
});
