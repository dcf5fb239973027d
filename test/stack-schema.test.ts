import * as fs from "node:fs";
import * as path from "node:path";
import Ajv2020 from "ajv/dist/2020";
import addFormats from "ajv-formats";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { forkStack } from "../cli/fork";
import { CONFIG_REFERENCE_FILE, configReferenceText, STACK_SCHEMA_FILE, stackFileSchema, stackFileSchemaText } from "../cli/stackSchema";
import { readStackFile } from "../components/config/load";
import { editedStack, REPO, SHIPPED_STACKS, stackFile, STACKS_DIR, tempDir } from "./helpers/stacks";

/**
 * stacks/stack.schema.json, the JSON Schema editors check stack files against, is the
 * zod schema's (cli/stackSchema.ts), and a real validator (Ajv, JSON Schema 2020-12)
 * agrees with zod field by field: it takes every shipped stack and a fresh fork, and
 * refuses what zod refuses in a single field. AIRLOCK_WRITE_DOCS=1 rewrites the file.
 */

const PROJECT = path.join(REPO, "Pulumi.yaml");
const committed = path.join(REPO, STACK_SCHEMA_FILE);

function validator() {
    const ajv = new Ajv2020({ allErrors: true, strict: false });
    addFormats(ajv);
    return ajv.compile(stackFileSchema(PROJECT));
}
const parse = (file: string) => YAML.parse(fs.readFileSync(file, "utf8"));

describe("the stack files' JSON Schema", () => {
    it("is the committed stacks/stack.schema.json", () => {
        const text = stackFileSchemaText(PROJECT);
        if (process.env.AIRLOCK_WRITE_DOCS === "1") fs.writeFileSync(committed, text);
        expect(fs.readFileSync(committed, "utf8"), "stacks/stack.schema.json is stale: run this test with AIRLOCK_WRITE_DOCS=1").toBe(text);
    });

    it("is the committed docs/config-reference.md, where every key says what it means", () => {
        const text = configReferenceText(PROJECT);
        const page = path.join(REPO, CONFIG_REFERENCE_FILE);
        if (process.env.AIRLOCK_WRITE_DOCS === "1") fs.writeFileSync(page, text);
        expect(fs.readFileSync(page, "utf8"), "docs/config-reference.md is stale: run this test with AIRLOCK_WRITE_DOCS=1").toBe(text);
        const keys = text.split("\n").filter((l) => /^\| `/.test(l));
        expect(keys.length).toBeGreaterThan(80);
        for (const line of keys) expect(line.split(" | ")[3], line).toMatch(/\w/);
        // Every key a stack may set is on the page, however deep.
        for (const key of ["airlock:sandbox.checkpoints.minFreePercent", "airlock:workloads.services[].network", "airlock:gateway.github.repositories", "<service>.pids_limit"]) {
            expect(keys.some((l) => l.startsWith(`| \`${key}\``)), key).toBe(true);
        }
    });

    it.each(SHIPPED_STACKS)("takes the shipped %s stack", (stack) => {
        const valid = validator();
        expect(valid(parse(stackFile(stack))), JSON.stringify(valid.errors)).toBe(true);
    });

    it("takes a fresh fork, with the secrets Pulumi writes", async () => {
        const dir = tempDir("schema-fork");
        for (const f of fs.readdirSync(STACKS_DIR).filter((f) => f.endsWith(".yaml"))) fs.copyFileSync(path.join(STACKS_DIR, f), path.join(dir, f));
        const fork = parse((await forkStack({ stacksDir: dir, customer: "acme", from: "prod" })).file);
        Object.assign(fork.config, { "hcloud:token": { secure: "v1:x" }, "tailscale:tailnet": "example.com" });
        fork.config["airlock:gateway"].agent.secrets = { ANTHROPIC_API_KEY: { secure: "v1:y" } };
        fork.encryptionsalt = "v1:salt";
        const valid = validator();
        expect(valid(fork), JSON.stringify(valid.errors)).toBe(true);
    });

    it.each([
        ["an unknown top-level key", (c: Record<string, any>) => (c["airlock:gatewy"] = {})],
        ["an unknown nested key", (c: Record<string, any>) => (c["airlock:sandbox"].workspaceGb = 10)],
        ["a string for a number", (c: Record<string, any>) => (c["airlock:sandbox"].workspaceVolumeGb = "lots")],
        ["a withdrawn server type", (c: Record<string, any>) => (c["airlock:gateway"].serverType = "cx22")],
        ["an unknown location", (c: Record<string, any>) => (c["airlock:gateway"].location = "mars")],
        ["a missing required key", (c: Record<string, any>) => delete c["airlock:prefix"]],
        ["a bad prefix", (c: Record<string, any>) => (c["airlock:prefix"] = "Airlock_Dev")],
        ["an unknown DNS mode", (c: Record<string, any>) => (c["airlock:dns"].mode = "open")],
    ])("refuses %s, as zod does", (_, edit) => {
        const file = editedStack("dev", edit);
        expect(() => readStackFile(file)).toThrow();
        const valid = validator();
        expect(valid(parse(file))).toBe(false);
    });
});
