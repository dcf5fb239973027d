import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as YAML from "yaml";
import { ConfigError, ownKeys, parseStackConfig, PROJECT, readStackFile } from "../components/config/load";
import { LOCATIONS, offeredInstead } from "../components/config/schema";
import type { Finding } from "../policies/engine/finding";
import { failing, loadPolicy } from "../policies/policy";
import { gatePlan } from "./gate";
import { planStack, stackFilePath } from "./offline";
import { existingStackFile } from "./stacks";

/**
 * A new stack for a customer, derived from an existing one: everything that must
 * be unique is made unique, secrets are never copied, and the result must pass
 * the schema and the gate before it is written.
 */

export interface ForkOptions {
    stacksDir: string;
    customer: string;
    from: string;
    region?: string;
    /** The policy the fork must pass (default: policies/config.json). */
    policyFile?: string;
}

export interface ForkResult {
    file: string;
    status: "written" | "unchanged";
    /** "key path: old -> new" for every airlock value that differs from the source. */
    changes: string[];
    /** Config the new stack still needs, as commands; values are never copied. */
    stillNeeded: string[];
}

export class ForkRefused extends Error {
    constructor(message: string, readonly findings: Finding[] = []) {
        super(message);
    }
}

const CUSTOMER = /^[a-z][a-z0-9-]{0,14}[a-z0-9]$/;

/** Keys derived from the prefix when absent; an explicit source value would be shared, so it is dropped. */
const DERIVED_FROM_PREFIX = [["tailnet", "gatewayTag"], ["tailnet", "sandboxTag"]];

export async function forkStack(options: ForkOptions): Promise<ForkResult> {
    const { stacksDir, customer, from, region } = options;
    if (!CUSTOMER.test(customer)) {
        throw new ConfigError([`airlock fork: customer "${customer}": expected 2-16 lower-case letters, digits or dashes, starting with a letter`]);
    }
    if (region !== undefined && !(LOCATIONS as readonly string[]).includes(region)) {
        throw new ConfigError([`airlock fork: --region ${region}: expected one of ${LOCATIONS.join(", ")}`]);
    }
    const sourceFile = existingStackFile(stacksDir, from);
    readStackFile(sourceFile); // the source must itself be valid
    const target = stackFilePath(stacksDir, customer);

    const doc = YAML.parseDocument(fs.readFileSync(sourceFile, "utf8"));
    const config = doc.get("config") as YAML.YAMLMap<unknown, unknown>;
    // Every customer brings its own cloud project and tailnet.
    // A secret is asked for at pulumi's prompt: never an argument, which the shell's history keeps.
    const stillNeeded: string[] = [
        `pulumi config set --secret hcloud:token --stack ${customer}   (prompts for the value)`,
        `export TAILSCALE_API_KEY=... TAILSCALE_TAILNET=...   (or TAILSCALE_OAUTH_CLIENT_ID and TAILSCALE_OAUTH_CLIENT_SECRET: the provider and airlock doctor read them)`,
    ];
    for (const item of [...config.items]) {
        const key = String(YAML.isScalar(item.key) ? item.key.value : item.key);
        const value = item.value;
        const secret = YAML.isMap(value) && value.has("secure");
        if (!key.startsWith(`${PROJECT}:`) || secret) {
            // Provider credentials and anything secret belong to the customer; never copy them.
            config.delete(item.key);
            const command = secret ? `pulumi config set --secret ${key} --stack ${customer}` : `pulumi config set ${key} <value> --stack ${customer}`;
            if (!/^tailscale:/.test(key) && !stillNeeded.some((line) => line.startsWith(command))) stillNeeded.push(command);
        }
    }
    // Secrets nested in airlock:* objects (the agent's, set with --path) are the source's too.
    for (const item of config.items) {
        const key = String(YAML.isScalar(item.key) ? item.key.value : item.key);
        for (const nested of dropNestedSecrets(item.value, key)) {
            stillNeeded.push(`pulumi config set --secret --path '${nested}' --stack ${customer}   (prompts for the value)`);
        }
    }
    const prefix = `airlock-${customer}`;
    config.set(`${PROJECT}:prefix`, prefix);
    for (const keyPath of DERIVED_FROM_PREFIX) config.deleteIn([`${PROJECT}:${keyPath[0]}`, ...keyPath.slice(1)]);
    // The source gateway's agent key is that gateway's; the new gateway makes its own.
    if (config.hasIn([`${PROJECT}:agent`, "authorizedKeys"])) config.setIn([`${PROJECT}:agent`, "authorizedKeys"], doc.createNode([]));
    if (region) {
        for (const role of ["gateway", "sandbox"]) {
            config.setIn([`${PROJECT}:${role}`, "location"], region);
            // Outside Europe Hetzner sells no CX or CAX type: the CPX type of the same size (listed in the changes).
            const instead = offeredInstead(String(config.getIn([`${PROJECT}:${role}`, "serverType"])), region);
            if (instead) config.setIn([`${PROJECT}:${role}`, "serverType"], instead);
        }
    }
    // manageAcl replaces the tailnet's whole policy: a fork aimed at a tailnet in use must turn it off first.
    if (config.getIn([`${PROJECT}:tailnet`, "manageAcl"]) === true) {
        stillNeeded.push(
            `before the first \`pulumi up\`: ${PROJECT}:tailnet.manageAcl is true, so that \`up\` replaces the tailnet's whole policy file with this stack's: keep it only on a tailnet airlock alone uses, else set manageAcl: false in ${path.basename(target)} and merge out/${customer}/tailnet/policy.hujson into your policy`,
        );
    }
    stillNeeded.push(
        `the stack's own ssh keys, in place of ${from}'s (airlock doctor fails the shipped examples): pulumi config set ${PROJECT}:breakGlassSshPublicKey '<public key>' --stack ${customer}, and pulumi config set --path '${PROJECT}:gateway.adminSshKeys[0]' '<public key>' --stack ${customer}`,
        `after the first \`pulumi up\`: pulumi config set --path '${PROJECT}:agent.authorizedKeys[0]' '<the new gateway agent key>' --stack ${customer}`,
    );
    // The source's description is about the source; the fork gets its own.
    doc.commentBefore = ` ${customer}: forked from ${from} by \`airlock fork\`. Secrets are not copied: set them\n with the commands \`airlock fork\` printed before \`pulumi up\`.`;
    if (YAML.isMap(doc.contents)) {
        doc.contents.commentBefore = undefined;
        const first = doc.contents.items[0]?.key;
        if (YAML.isNode(first)) first.commentBefore = undefined;
    }
    // Comments that name the source stack describe it; in the fork they name the customer.
    const sourceName = new RegExp(`(?<![\\w./-])(airlock-)?${from.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}(?![\\w/-])`, "g");
    const rename = (comment: string | null | undefined) => comment?.replace(sourceName, (_, prefix: string | undefined) => `${prefix ?? ""}${customer}`);
    YAML.visit(doc, {
        Node(_, node) {
            node.commentBefore = rename(node.commentBefore);
            node.comment = rename(node.comment);
        },
    });
    doc.comment = rename(doc.comment) ?? null;
    // Flow sequences as the source writes them: `[a, b]`, not yaml's padded `[ a, b ]`.
    const text = doc.toString({ lineWidth: 0, flowCollectionPadding: false });

    parseStackConfig(ownKeys(YAML.parse(text).config), target);
    const changes = diff(flatten(configOf(sourceFile)), flatten(ownConfig(YAML.parse(text).config)));

    // Gate the result exactly as it would be written.
    const staging = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-fork-"));
    try {
        const staged = path.join(staging, `Pulumi.${customer}.yaml`);
        fs.writeFileSync(staged, text);
        const findings = failing(gatePlan(await planStack(staged, customer), options.policyFile === undefined ? loadPolicy() : loadPolicy(options.policyFile)));
        if (findings.length > 0) throw new ForkRefused(`airlock fork: the forked stack fails the gate; ${target} not written`, findings);
    } finally {
        fs.rmSync(staging, { recursive: true, force: true });
    }

    if (fs.existsSync(target)) {
        if (fs.readFileSync(target, "utf8") === text) return { file: target, status: "unchanged", changes, stillNeeded };
        throw new ConfigError([`${target}: exists and differs from a fresh fork of ${from}; refusing to overwrite it`]);
    }
    const temp = `${target}.tmp-${process.pid}`;
    fs.writeFileSync(temp, text, { flag: "wx" });
    fs.renameSync(temp, target);
    return { file: target, status: "written", changes, stillNeeded };
}

/** Removes every `{secure: ...}` inside `node` and returns the key paths it removed. */
function dropNestedSecrets(node: unknown, at: string): string[] {
    if (!YAML.isMap(node)) return [];
    const dropped: string[] = [];
    for (const pair of [...node.items]) {
        const key = String(YAML.isScalar(pair.key) ? pair.key.value : pair.key);
        if (YAML.isMap(pair.value) && pair.value.has("secure")) {
            node.delete(pair.key);
            dropped.push(`${at}.${key}`);
        } else {
            dropped.push(...dropNestedSecrets(pair.value, `${at}.${key}`));
        }
    }
    return dropped;
}

function configOf(file: string): Record<string, unknown> {
    return ownConfig((YAML.parse(fs.readFileSync(file, "utf8")) as { config: Record<string, unknown> }).config);
}

function ownConfig(config: Record<string, unknown>): Record<string, unknown> {
    return Object.fromEntries(Object.entries(config).filter(([k]) => k.startsWith(`${PROJECT}:`)));
}

/** Key path -> value; a list is one value (shown shortened), a mapping is walked. */
function flatten(value: unknown, at = ""): Map<string, string> {
    const out = new Map<string, string>();
    if (value !== null && typeof value === "object" && !Array.isArray(value)) {
        for (const [k, v] of Object.entries(value)) for (const [p, leaf] of flatten(v, at ? `${at}.${k}` : k)) out.set(p, leaf);
    } else {
        out.set(at, JSON.stringify(value, (_, v) => (typeof v === "string" && v.length > 40 ? `${v.slice(0, 37)}...` : v)));
    }
    return out;
}

function diff(before: Map<string, string>, after: Map<string, string>): string[] {
    const keys = [...new Set([...before.keys(), ...after.keys()])].sort();
    return keys
        .filter((k) => before.get(k) !== after.get(k))
        .map((k) => `${k}: ${before.get(k) ?? "(unset)"} -> ${after.get(k) ?? "(unset: derived from the prefix)"}`);
}
