import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as pulumi from "@pulumi/pulumi";
import * as YAML from "yaml";
import { PROJECT, readStackFile } from "../components/config/load";
import type { StackConfig } from "../components/config/schema";
import { REDACTED_SECRET } from "../policies/engine/finding";

/**
 * Runs the real airlock program offline: Pulumi's mock monitor stands in for the
 * engine and the providers, in preview mode, so values that only a cloud API
 * knows (ids, the tailnet key) are unknown exactly as in `pulumi preview`.
 */

/** How `pulumi preview --json` spells a value it does not know yet. */
export const UNKNOWN = pulumi.runtime.unknownValue;


export interface PlannedResource {
    urn: string;
    /** Empty at preview, as for any resource not created yet. */
    id: string;
    type: string;
    name: string;
    parent?: string;
    custom: boolean;
    inputs: Record<string, unknown>;
    /** The resource options that decide what a later `up` does to it (only those set). */
    options: ResourceOptionsPlanned;
    /** Input -> the URNs of the resources its value comes from (only inputs that have some). */
    propertyDependencies: Record<string, string[]>;
}

export interface ResourceOptionsPlanned {
    protect?: boolean;
    retainOnDelete?: boolean;
    deleteBeforeReplace?: boolean;
    ignoreChanges?: string[];
    replaceOnChanges?: string[];
    /** A value the engine compares with the recorded one: a different one replaces the resource. */
    replacementTrigger?: unknown;
}

export interface StackPlan {
    stack: string;
    stackFile: string;
    config: StackConfig;
    resources: PlannedResource[];
}

/**
 * What the offline plan answers for a registry digest lookup: it cannot reach a
 * registry, so it renders this obviously-fake digest; `pulumi preview` renders the real one.
 */
export const OFFLINE_DIGEST = `sha256:${"0".repeat(64)}`;

/** Outputs only a provider computes; unknown at preview, as in a real preview. */
const COMPUTED_AT_DEPLOY: Record<string, string[]> = {
    "tailscale:index/tailnetKey:TailnetKey": ["key", "id", "createdAt", "expiresAt", "invalid"],
    "hcloud:index/server:Server": ["ipv4Address", "ipv6Address", "ipv6Network", "status"],
    "tls:index/privateKey:PrivateKey": ["privateKeyOpenssh", "privateKeyPem", "publicKeyOpenssh", "publicKeyPem", "publicKeyFingerprintSha256"],
    "docker:index/image:Image": ["repoDigest"],
};

export { listStacks, stackFilePath } from "./stacks";

// Pulumi's runtime state is process-global: plans run one after another.
let queue: Promise<unknown> = Promise.resolve();

export interface PlanOptions {
    /**
     * "preview" (default): a first `pulumi preview`, ids and computed outputs unknown.
     * "up": values resolved as during `pulumi up`, with `deployed` supplying what a
     * provider would compute (the tailnet key, for instance).
     */
    mode?: "preview" | "up";
    deployed?: (type: string, name: string) => Record<string, unknown>;
    /** Answers provider function calls (invokes); the default answers registry lookups with OFFLINE_DIGEST. */
    calls?: (token: string, inputs: Record<string, unknown>) => Record<string, unknown> | undefined;
    /**
     * What `secure:` values decrypt to. A real preview hands the program plaintext;
     * the offline plan has no key, so by default the program sees the ciphertext objects.
     */
    decrypt?: (keyPath: string, ciphertext: string) => string;
}

export function planStack(stackFile: string, stack: string, options: PlanOptions = {}): Promise<StackPlan> {
    const run = queue.then(() => planStackNow(stackFile, stack, options));
    queue = run.catch(() => undefined);
    return run;
}

async function planStackNow(stackFile: string, stack: string, options: PlanOptions): Promise<StackPlan> {
    const preview = (options.mode ?? "preview") === "preview";
    // Validate first so bad input names the file the user edited.
    const config = readStackFile(stackFile);
    const raw = YAML.parse(fs.readFileSync(stackFile, "utf8")) as { config: Record<string, unknown> };

    const resources: PlannedResource[] = [];
    await pulumi.runtime.setMocks(
        {
            newResource: (args) =>
                preview
                    ? // As in a real preview of a new stack: no ids yet, computed outputs unknown.
                      { id: undefined, state: unknownComputed(args.type, args.inputs) }
                    : {
                          id: deterministicId(args.type, args.name),
                          state: { ...args.inputs, ...options.deployed?.(args.type, args.name) },
                      },
            call: (args) => options.calls?.(args.token, args.inputs) ?? offlineCall(args.token, args.inputs),
        },
        PROJECT,
        stack,
        preview,
    );
    pulumi.runtime.setAllConfig(pulumiConfigOf(options.decrypt ? decrypted(raw.config, options.decrypt) : raw.config));
    recordRegistrations(resources);

    // The very module Pulumi runs, loaded lazily after the mocks are in place.
    const loaded = (await import("../index")) as unknown as { default?: Program } & Program;
    // Pulumi captures a stack trace per resource for source positions that mocks
    // ignore; with source-mapped TypeScript that is most of a plan's time.
    const stackTraceLimit = Error.stackTraceLimit;
    if (!process.env.AIRLOCK_DEBUG) Error.stackTraceLimit = 0;
    try {
        await pulumi.runtime.runInPulumiStack(loaded.default ?? loaded);
        await waitForRegistrations();
    } finally {
        Error.stackTraceLimit = stackTraceLimit;
    }

    resources.sort((a, b) => (a.urn < b.urn ? -1 : a.urn > b.urn ? 1 : 0));
    return { stack, stackFile, config, resources };
}

function offlineCall(token: string, inputs: Record<string, unknown>): Record<string, unknown> {
    if (token === "docker:index/getRegistryImage:getRegistryImage") return { ...inputs, id: String(inputs.name), sha256Digest: OFFLINE_DIGEST };
    // The project's SSH keys are unknown offline: the plan shows the break-glass key as created.
    if (token === "hcloud:index/getSshKeys:getSshKeys") return { sshKeys: [] };
    // Nor its servers: the plan shows each host as new (its join key generation a preview's).
    if (token === "hcloud:index/getServers:getServers") return { servers: [] };
    throw new Error(`the offline plan cannot answer ${token}`);
}

/** Every `{secure: ciphertext}` in the config replaced by its plaintext, as Pulumi does for the program. */
function decrypted(value: unknown, decrypt: NonNullable<PlanOptions["decrypt"]>, at = ""): any {
    if (value === null || typeof value !== "object") return value;
    if (Array.isArray(value)) return value.map((v, i) => decrypted(v, decrypt, `${at}[${i}]`));
    const entries = Object.entries(value as Record<string, unknown>);
    if (entries.length === 1 && entries[0][0] === "secure" && typeof entries[0][1] === "string") return decrypt(at, entries[0][1]);
    return Object.fromEntries(entries.map(([k, v]) => [k, decrypted(v, decrypt, at ? `${at}.${k}` : k)]));
}

/** Pulumi keeps config values as strings; structured ones as JSON. */
function pulumiConfigOf(config: Record<string, unknown>): Record<string, string> {
    const out: Record<string, string> = {};
    for (const [key, value] of Object.entries(config ?? {})) {
        out[key] = typeof value === "string" ? value : JSON.stringify(value);
    }
    return out;
}

/** hcloud ids are numbers; derive them from the name so runs are reproducible. */
function deterministicId(type: string, name: string): string {
    return String(parseInt(createHash("sha256").update(`${type}::${name}`).digest("hex").slice(0, 8), 16));
}

function unknownComputed(type: string, inputs: Record<string, unknown>): Record<string, unknown> {
    const state: Record<string, unknown> = { ...inputs };
    for (const key of COMPUTED_AT_DEPLOY[type] ?? []) state[key] = UNKNOWN;
    return state;
}

type Program = () => Promise<Record<string, unknown>>;

interface RegisterRequest {
    getType(): string;
    getName(): string;
    getParent(): string;
    getCustom(): boolean;
    getObject(): { toJavaScript(): Record<string, unknown> } | undefined;
    getProtect(): boolean | undefined;
    getRetainondelete(): boolean | undefined;
    getDeletebeforereplace(): boolean;
    getIgnorechangesList(): string[];
    getReplaceonchangesList(): string[];
    getReplacementTrigger(): { toJavaScript(): unknown } | undefined;
    getPropertydependenciesMap(): { forEach(cb: (value: { getUrnsList(): string[] }, key: string) => void): void };
}

function propertyDependenciesOf(req: RegisterRequest): Record<string, string[]> {
    const out: Record<string, string[]> = {};
    req.getPropertydependenciesMap().forEach((value, key) => {
        const urns = value.getUrnsList();
        if (urns.length > 0) out[key] = [...urns].sort();
    });
    return Object.fromEntries(Object.entries(out).sort(([a], [b]) => (a < b ? -1 : 1)));
}

/** The options of a registration that are set, as the engine keeps them. */
function optionsOf(req: RegisterRequest): ResourceOptionsPlanned {
    const ignoreChanges = req.getIgnorechangesList();
    const replaceOnChanges = req.getReplaceonchangesList();
    const replacementTrigger = req.getReplacementTrigger()?.toJavaScript();
    return {
        ...(req.getProtect() ? { protect: true } : {}),
        ...(req.getRetainondelete() ? { retainOnDelete: true } : {}),
        ...(req.getDeletebeforereplace() ? { deleteBeforeReplace: true } : {}),
        ...(ignoreChanges.length > 0 ? { ignoreChanges } : {}),
        ...(replaceOnChanges.length > 0 ? { replaceOnChanges } : {}),
        ...(replacementTrigger !== undefined && replacementTrigger !== null ? { replacementTrigger: asPreviewValue(replacementTrigger) } : {}),
    };
}

/** Wraps the mock monitor to see what the engine would: urn, parent, raw inputs and options. */
function recordRegistrations(into: PlannedResource[]): void {
    const monitor = pulumi.runtime.getMonitor() as unknown as {
        registerResource(req: RegisterRequest, cb: (err: unknown, res?: { getUrn(): string; getId(): string }) => void): Promise<void>;
    };
    const original = monitor.registerResource.bind(monitor);
    monitor.registerResource = (req, callback) =>
        original(req, (err, response) => {
            if (!err && response) {
                const parent = req.getParent();
                into.push({
                    urn: response.getUrn(),
                    id: response.getId(),
                    type: req.getType(),
                    name: req.getName(),
                    ...(parent ? { parent } : {}),
                    custom: req.getCustom(),
                    inputs: asPreviewValue(req.getObject()?.toJavaScript() ?? {}) as Record<string, unknown>,
                    options: optionsOf(req),
                    propertyDependencies: propertyDependenciesOf(req),
                });
            }
            callback(err, response);
        });
}

/** Serialized property values -> what `pulumi preview --json` prints. */
function asPreviewValue(value: unknown): unknown {
    if (Array.isArray(value)) return value.map(asPreviewValue);
    if (value !== null && typeof value === "object") {
        const obj = value as Record<string, unknown>;
        if (obj[pulumi.runtime.specialSigKey] === pulumi.runtime.specialSecretSig) return REDACTED_SECRET;
        const out: Record<string, unknown> = {};
        for (const key of Object.keys(obj)) out[key] = asPreviewValue(obj[key]);
        return out;
    }
    return value;
}

async function waitForRegistrations(): Promise<void> {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const settings = require("@pulumi/pulumi/runtime/settings") as { waitForRPCs(): Promise<void> };
    await settings.waitForRPCs();
}
