import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { z } from "zod";
import { stackConfigBase } from "../components/config/schema";

/**
 * A JSON Schema of `stacks/Pulumi.<stack>.yaml`, generated from the zod schema that
 * validates it (components/config/schema.ts), for editors: completion, hover and
 * red squiggles while a stack file is written (yaml-language-server, VS Code's YAML
 * extension, JetBrains). It says what each key takes, field by field; the rules that
 * span fields (a CX type outside Europe, a PostgreSQL newer than the drills restore, …)
 * stay zod's, so `airlock plan` remains the judge. test/stack-schema.test.ts fails
 * when the committed file is not this function's output.
 */

export const STACK_SCHEMA_FILE = path.join("stacks", "stack.schema.json");
/** Another namespace's keys (the providers' own: hcloud:token, tailscale:tailnet, …), which their providers check. */
const OTHER_NAMESPACES = "^(?!airlock:)[A-Za-z0-9_.-]+:";

/** Each top-level key's description, as Pulumi.yaml declares it. */
function descriptions(projectFile: string): Record<string, string> {
    const project = YAML.parse(fs.readFileSync(projectFile, "utf8")) as { config?: Record<string, { description?: string }> };
    return Object.fromEntries(Object.entries(project.config ?? {}).flatMap(([key, spec]) => (spec.description ? [[key, spec.description]] : [])));
}

export function stackFileSchema(projectFile: string): Record<string, unknown> {
    const described = descriptions(projectFile);
    const required: string[] = [];
    const properties: Record<string, unknown> = {};
    for (const [key, field] of Object.entries(stackConfigBase.shape)) {
        const { $schema: _, ...schema } = z.toJSONSchema(field as z.ZodType, { io: "input", unrepresentable: "any", target: "draft-2020-12" }) as Record<string, unknown>;
        properties[`airlock:${key}`] = { ...(described[key] ? { description: described[key] } : {}), ...schema };
        if (!(field as z.ZodType).safeParse(undefined).success) required.push(`airlock:${key}`);
    }
    return {
        $schema: "https://json-schema.org/draft/2020-12/schema",
        title: "airlock stack file (stacks/Pulumi.<stack>.yaml)",
        description: "Generated from components/config/schema.ts by cli/stackSchema.ts; `airlock plan` checks what spans fields.",
        type: "object",
        properties: {
            config: { type: "object", properties, required, patternProperties: { [OTHER_NAMESPACES]: {} }, additionalProperties: false },
            // Pulumi's own keys of a stack file (a passphrase or cloud secrets provider writes them).
            encryptionsalt: { type: "string" },
            secretsprovider: { type: "string" },
            encryptedkey: { type: "string" },
        },
        required: ["config"],
        additionalProperties: false,
    };
}

export function stackFileSchemaText(projectFile: string): string {
    return `${JSON.stringify(stackFileSchema(projectFile), null, 2)}\n`;
}
