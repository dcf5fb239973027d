import * as fs from "node:fs";
import { artifactsOf, ConfigError, STASH_TYPE } from "../policies/contract";
import { B2_BUCKET_REPLACED_BY, B2_KEY_REPLACED_BY } from "../components/b2/resources";
import { PlannedResource, ResourceOptionsPlanned, UNKNOWN } from "./offline";
import type { PreviewJson } from "./plan";

/**
 * What an `up` from one plan to another does to each resource, decided the way the
 * engine decides it: an input a provider cannot change in place (force-new) means a
 * replacement, unless the resource's ignoreChanges covers it; a protected resource
 * is never replaced or deleted (the engine refuses the whole update).
 */

/**
 * The inputs each provider replaces the resource for, from the providers' source.
 * hcloud: terraform-provider-hcloud internal/server/resource.go (image, location,
 * user_data, ssh_keys: ForceNew), internal/volume/resource.go (location),
 * internal/volume/resource_attachment.go (server_id, volume_id), internal/sshkey/
 * resource.go (public_key: RequiresReplace); a firewall is updated in place.
 * tailscale: terraform-provider-tailscale tailscale/resource_tailnet_key.go (every
 * input but recreate_if_invalid: RequiresReplace). tls: terraform-provider-tls
 * private_key (algorithm, ecdsa_curve, rsa_bits: RequiresReplace).
 */
export const FORCE_NEW: Record<string, string[]> = {
    "hcloud:index/server:Server": ["image", "location", "userData", "sshKeys"],
    "hcloud:index/volume:Volume": ["location"],
    "hcloud:index/volumeAttachment:VolumeAttachment": ["serverId", "volumeId"],
    "hcloud:index/sshKey:SshKey": ["publicKey"],
    "hcloud:index/firewall:Firewall": [],
    "tailscale:index/tailnetKey:TailnetKey": ["reusable", "ephemeral", "tags", "preauthorized", "expiry", "description"],
    "tailscale:index/acl:Acl": [],
    "tls:index/privateKey:PrivateKey": ["algorithm", "ecdsaCurve", "rsaBits"],
};

const DYNAMIC = "pulumi-nodejs:dynamic:Resource";

export type Action = "create" | "update" | "replace" | "refused" | "kept" | "delete" | "retained";

export interface Change {
    urn: string;
    type: string;
    name: string;
    action: Action;
    /** The inputs that differ and count. */
    keys: string[];
    /** The inputs that differ and the resource's ignoreChanges covers. */
    ignored: string[];
}

/** What `airlock plan` wrote, read back as planned resources. */
export function readPlannedResources(file: string): PlannedResource[] {
    let preview: PreviewJson;
    try {
        preview = JSON.parse(fs.readFileSync(file, "utf8"));
    } catch (err) {
        const why = err instanceof SyntaxError ? "not JSON" : ((err as NodeJS.ErrnoException).code ?? String(err));
        throw new ConfigError([`${file}: cannot read as a plan's preview.json: ${why}`]);
    }
    if (!Array.isArray(preview?.steps)) throw new ConfigError([`${file}: steps: expected the list \`airlock plan\` or \`pulumi preview --json\` writes`]);
    return preview.steps.map((step, i) => {
        // A real preview's delete step carries only the state it deletes.
        const state = step?.newState ?? (step as { oldState?: PreviewJson["steps"][number]["newState"] })?.oldState;
        if (!state || typeof state.urn !== "string" || typeof state.type !== "string") throw new ConfigError([`${file}: steps[${i}].newState: expected a resource with urn and type`]);
        const { type, urn, custom, parent, inputs, propertyDependencies, ...options } = state;
        return {
            urn,
            id: "",
            type,
            name: urn.slice(urn.lastIndexOf("::") + 2),
            custom: Boolean(custom),
            ...(parent ? { parent } : {}),
            inputs: inputs ?? {},
            options: options as ResourceOptionsPlanned,
            propertyDependencies: propertyDependencies ?? {},
        };
    });
}

/** Every custom resource whose `up` from `before` to `after` does something, in `after`'s order, deletions last. */
export function changesBetween(before: PlannedResource[], after: PlannedResource[]): Change[] {
    const old = new Map(before.map((r) => [r.urn, r]));
    const now = new Map(after.map((r) => [r.urn, r]));
    const renderedBefore = renderedDocuments(before);
    const renderedAfter = renderedDocuments(after);
    const decided = new Map<string, Change | undefined>();
    // A value that is unknown until deploy changes when what it comes from is created anew.
    const renewed = (urns: string[] = []) => urns.some((urn) => ["create", "replace"].includes(decide(now.get(urn))?.action ?? ""));
    const decide = (r: PlannedResource | undefined): Change | undefined => {
        if (!r || !r.custom || r.type === STASH_TYPE) return undefined;
        if (decided.has(r.urn)) return decided.get(r.urn);
        decided.set(r.urn, undefined); // a cycle cannot occur in a plan; this ends one anyway
        const change = (action: Action, keys: string[] = [], ignored: string[] = []): Change => ({ urn: r.urn, type: r.type, name: r.name, action, keys, ignored });
        const was = old.get(r.urn);
        let result: Change | undefined;
        if (!was) {
            result = change("create");
        } else if (triggerChanged(was, r)) {
            result = change(was.options.protect || r.options.protect ? "refused" : "replace", ["replacementTrigger"]);
        } else {
            const differing = differingInputs(was, r, renderedBefore, renderedAfter, renewed);
            const ignoredKeys = new Set(r.options.ignoreChanges ?? []);
            const ignored = differing.filter((k) => ignoredKeys.has(k));
            const keys = differing.filter((k) => !ignoredKeys.has(k));
            if (keys.length === 0) {
                result = ignored.length > 0 ? change("kept", keys, ignored) : undefined;
            } else {
                const forceNew = new Set([...replacedBy(r), ...(r.options.replaceOnChanges ?? [])]);
                const replaces = keys.some((k) => forceNew.has(k));
                const protectedNow = Boolean(was.options.protect || r.options.protect);
                result = change(replaces ? (protectedNow ? "refused" : "replace") : "update", keys, ignored);
            }
        }
        decided.set(r.urn, result);
        return result;
    };
    /** Whether a server is created anew by what else than one of its inputs' sources (a join key) changes. */
    const replacedWithout = (server: PlannedResource, source: string): boolean => {
        const was = old.get(server.urn);
        if (!was) return true;
        const ignoredKeys = new Set(server.options.ignoreChanges ?? []);
        const forceNew = new Set([...replacedBy(server), ...(server.options.replaceOnChanges ?? [])]);
        const others = (urns: string[] = []) => renewed(urns.filter((urn) => urn !== source));
        return differingInputs(was, server, renderedBefore, renderedAfter, others).some((k) => !ignoredKeys.has(k) && forceNew.has(k));
    };
    /**
     * A changed replacementTrigger replaces (Pulumi's resource option). One unknown until
     * deploy is the kit's join key trigger: what creates the server it joins anew, so it
     * changes when that server is replaced for any reason but the key itself.
     */
    const triggerChanged = (was: PlannedResource, r: PlannedResource): boolean => {
        const a = was.options.replacementTrigger;
        const b = r.options.replacementTrigger;
        if (!hasUnknown(a) && !hasUnknown(b)) return JSON.stringify(a) !== JSON.stringify(b);
        const consumer = after.find((s) => s.propertyDependencies.userData?.includes(r.urn));
        return consumer ? replacedWithout(consumer, r.urn) : JSON.stringify(a) !== JSON.stringify(b);
    };
    const changes = after.map(decide).filter((c): c is Change => c !== undefined);
    for (const r of before) {
        if (!r.custom || r.type === STASH_TYPE || now.has(r.urn)) continue;
        changes.push({ urn: r.urn, type: r.type, name: r.name, action: r.options.protect ? "refused" : r.options.retainOnDelete ? "retained" : "delete", keys: [], ignored: [] });
    }
    return changes;
}

/** The force-new inputs of a resource; our own B2 provider's by what it manages. */
function replacedBy(r: PlannedResource): string[] {
    if (r.type === DYNAMIC) return "bucketName" in r.inputs ? [...B2_BUCKET_REPLACED_BY] : "capabilities" in r.inputs ? [...B2_KEY_REPLACED_BY] : [];
    const known = FORCE_NEW[r.type];
    if (!known) throw new Error(`cli/changes.ts: no force-new inputs known for ${r.type}; add them from its provider's source`);
    return known;
}

/**
 * Top-level inputs that differ. A value unknown until deploy (an id, a join key)
 * differs when a resource it comes from is created anew. A server's user_data is its
 * rendered document (its artifacts' cloud-init.yaml) plus such values: it differs
 * when either does.
 */
function differingInputs(
    was: PlannedResource,
    now: PlannedResource,
    renderedBefore: Map<string, string>,
    renderedAfter: Map<string, string>,
    renewed: (urns?: string[]) => boolean,
): string[] {
    const keys = new Set([...Object.keys(was.inputs), ...Object.keys(now.inputs)]);
    keys.delete("__provider");
    return [...keys].filter((key) => {
        const a = was.inputs[key];
        const b = now.inputs[key];
        if (!hasUnknown(a) && !hasUnknown(b)) return JSON.stringify(a) !== JSON.stringify(b);
        if (renewed(now.propertyDependencies[key])) return true;
        if (key === "userData") return renderedBefore.get(hostOf(was.name)) !== renderedAfter.get(hostOf(now.name));
        return JSON.stringify(a) !== JSON.stringify(b);
    });
}

const hostOf = (serverName: string) => serverName.replace(/-server$/, "");

/** Host (its component's name) -> its rendered cloud-init.yaml. */
function renderedDocuments(resources: PlannedResource[]): Map<string, string> {
    const out = new Map<string, string>();
    for (const r of resources) {
        const document = r.type === STASH_TYPE ? artifactsOf(r.inputs)?.["cloud-init.yaml"] : undefined;
        if (document !== undefined) out.set(r.name.replace(/-artifacts$/, ""), document);
    }
    return out;
}

function hasUnknown(value: unknown): boolean {
    if (value === UNKNOWN) return true;
    if (Array.isArray(value)) return value.some(hasUnknown);
    if (value !== null && typeof value === "object") return Object.values(value).some(hasUnknown);
    return false;
}

const WHAT: Record<Action, string> = {
    create: "created",
    update: "updated in place",
    replace: "REPLACED (deleted, then created anew)",
    refused: "refused: protected, and the change needs a replacement (pulumi up fails)",
    kept: "kept as it is: the change is ignored for it",
    delete: "deleted",
    retained: "removed from the stack, kept in the cloud (retainOnDelete)",
};

/** One line per change, for `airlock plan --against`. */
export function formatChanges(changes: Change[], against: string): string {
    if (changes.length === 0) return `changes against ${against}: none\n`;
    const lines = [`changes against ${against}:`];
    for (const c of changes) {
        const detail = [c.keys.length > 0 ? `changed: ${c.keys.join(", ")}` : "", c.ignored.length > 0 ? `ignored: ${c.ignored.join(", ")}` : ""].filter(Boolean).join("; ");
        lines.push(`  ${c.name} (${c.type}): ${WHAT[c.action]}${detail ? ` [${detail}]` : ""}`);
    }
    return `${lines.join("\n")}\n`;
}
