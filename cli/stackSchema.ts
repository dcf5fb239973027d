import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { z } from "zod";
import { SERVICE_OVERRIDE_KEYS, stackConfigBase } from "../components/config/schema";

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

type JsonSchema = {
    type?: string | string[];
    enum?: unknown[];
    const?: unknown;
    default?: unknown;
    description?: string;
    properties?: Record<string, JsonSchema>;
    required?: string[];
    additionalProperties?: JsonSchema | boolean;
    items?: JsonSchema;
    anyOf?: JsonSchema[];
    minimum?: number;
    maximum?: number;
    minItems?: number;
    format?: string;
};

export const CONFIG_REFERENCE_FILE = path.join("docs", "config-reference.md");

const code = (value: unknown) => `\`${typeof value === "string" ? value : JSON.stringify(value)}\``;
const cell = (text: string) => text.replace(/\|/g, "\\|").replace(/\n+/g, " ");

/** What a key takes, in a few words: its values, its range, or its shape. */
function typeOf(schema: JsonSchema, nested = false): string {
    if (schema.anyOf) return schema.anyOf.map((s) => typeOf(s, nested)).join(" or ");
    if (schema.enum) return schema.enum.map(code).join(", ");
    if (schema.const !== undefined) return code(schema.const);
    const bounded = (n: number | undefined) => n !== undefined && Math.abs(n) < Number.MAX_SAFE_INTEGER;
    const range = (unit: string) =>
        bounded(schema.minimum) && bounded(schema.maximum) ? `${unit} ${schema.minimum}–${schema.maximum}` : bounded(schema.minimum) ? `${unit} ≥ ${schema.minimum}` : unit;
    switch (schema.type) {
        case "integer":
            return range("integer");
        case "number":
            return range("number");
        case "boolean":
            return "boolean";
        case "string":
            return schema.format === "uri" ? "URL" : "string";
        case "array":
            return `list of ${schema.items?.type === "object" && schema.items.properties ? "objects (below)" : typeOf(schema.items ?? {}, true)}${schema.minItems ? ` (at least ${schema.minItems})` : ""}`;
        case "object":
            if (schema.properties) return nested ? `{${Object.keys(schema.properties).join(", ")}}` : "object (keys below)";
            return typeof schema.additionalProperties === "object" ? `map of NAME to ${typeOf(schema.additionalProperties, true)}` : "object";
        default:
            return "any";
    }
}

function defaultOf(schema: JsonSchema, required: boolean): string {
    if (schema.default !== undefined) {
        const value = schema.default;
        return schema.properties && typeof value === "object" && value !== null && Object.keys(value).length === 0 ? "(each key's default)" : code(value);
    }
    return required ? "**required**" : "unset";
}

const row = (at: string, schema: JsonSchema, required: boolean) => `| ${code(at)} | ${cell(typeOf(schema))} | ${cell(defaultOf(schema, required))} | ${cell(schema.description ?? "")} |`;

/** A service's hardening keys (cap_add, pids_limit, ...), which every service takes alike: listed once. */
const isOverride = (object: JsonSchema | undefined, key: string) => SERVICE_OVERRIDE_KEYS.includes(key) && SERVICE_OVERRIDE_KEYS.every((k) => object?.properties?.[k]);

/** One row per key, depth first, in the schema's order: a nested object's keys follow it. */
function rows(schema: JsonSchema, at: string, required: boolean, out: string[], overrides: Map<string, JsonSchema>) {
    out.push(row(at, schema, required));
    const object = schema.type === "array" ? schema.items : schema;
    const prefix = schema.type === "array" ? `${at}[]` : at;
    for (const [key, child] of Object.entries(object?.properties ?? {})) {
        if (isOverride(object, key)) overrides.set(key, child);
        else rows(child, `${prefix}.${key}`, object?.required?.includes(key) ?? false, out, overrides);
    }
    if (object?.type === "object" && typeof object.additionalProperties === "object" && !object.properties) {
        const value = object.additionalProperties;
        if (value.properties) for (const [key, child] of Object.entries(value.properties)) rows(child, `${prefix}.<NAME>.${key}`, value.required?.includes(key) ?? false, out, overrides);
    }
}

/**
 * docs/config-reference.md: every key of a stack file with its type, default and
 * meaning, from the same schema as stacks/stack.schema.json (the descriptions are the
 * zod schema's `.describe()` texts), so the page cannot drift from what `plan` accepts.
 */
export function configReferenceText(projectFile: string): string {
    const config = (stackFileSchema(projectFile).properties as Record<string, JsonSchema>).config;
    const out = [
        "# Stack configuration reference",
        "",
        "<!-- Generated from components/config/schema.ts by cli/stackSchema.ts: edit the schema, then run test/stack-schema.test.ts with AIRLOCK_WRITE_DOCS=1. -->",
        "",
        "Use this page to look up a key of `stacks/Pulumi.<stack>.yaml`. Every key lives under",
        "the project's `airlock:` namespace; one zod schema (`components/config/schema.ts`)",
        "validates the file and applies each default, and unknown keys are errors. This page and",
        "`stacks/stack.schema.json` are generated from that schema. The JSON Schema gives an",
        "editor completion and checks as you type (VS Code's YAML extension:",
        '`"yaml.schemas": {"./stacks/stack.schema.json": "stacks/Pulumi.*.yaml"}`). The rules',
        "that span keys (a CX type outside Europe, a PostgreSQL newer than the drills restore,",
        "an unpinned image without `resolveDigests`) are `airlock plan`'s.",
        "",
        "Provider credentials (`hcloud:token`, `tailscale:*`) are the providers' own keys, set",
        "with `pulumi config set --secret`, never committed in clear.",
        "",
        "| key | takes | default | meaning |",
        "|---|---|---|---|",
    ];
    const overrides = new Map<string, JsonSchema>();
    for (const [key, schema] of Object.entries(config.properties ?? {})) rows(schema, key, config.required?.includes(key) ?? false, out, overrides);
    out.push(
        "",
        "## Every service's hardening",
        "",
        "Each service (`airlock:workloads.sandboxShell`, `.browser`, `.postgres`, `.redis`, `.api`, each of `.services`,",
        "`airlock:gateway.agent` and its `memoryDb`) starts from `templates/compose/service-defaults.yaml` and takes",
        "these keys to tighten it, or visibly loosen it: the gate judges the result.",
        "",
        "| key | takes | default | meaning |",
        "|---|---|---|---|",
        ...[...overrides].map(([key, schema]) => row(`<service>.${key}`, schema, false).replace("| unset |", "| the service default |")),
    );
    out.push("", "Next: [what `airlock plan` reports for a bad stack file](cli/plan.md#bad-input), or [deploying a stack](deploy.md).", "");
    return out.join("\n");
}
