import * as fs from "node:fs";
import * as path from "node:path";
import { diffLines } from "diff";
import * as YAML from "yaml";
import { planStack, PlannedResource, StackPlan } from "../cli/offline";
import { bucketNameFor } from "../components/backupBucket";
import { readStackFile } from "../components/config/load";
import { renderBundle } from "../components/render/bundle";
import { decodeUserData } from "../policies/engine/userData";
import { B2_DOWNLOAD_HOST, GuestRole } from "./contract";
import type { FirewallRule } from "./network";

/**
 * The user_data the twin boots: rendered by the project's own program, as
 * `pulumi up` would, with only what a real deploy fills in at deploy time
 * supplied by the twin (Pulumi's mocks play the providers):
 *   - the tailnet join keys (the Tailscale stand-in's coordinator issues them),
 *   - the image digests (the twin's registry holds the images),
 *   - the sandbox's ssh host key pair (tls.PrivateKey: generated once per twin),
 *   - the gateway agent's authorized key on the sandbox (a real first deploy's
 *     second `pulumi up`, README "Deploy for real"),
 * and two substitutions that are not deploy-time values: airlock-install-tailscale's
 * pinned repository key fingerprint, for the twin's key that signs its stand-in
 * repository (see pinTailscaleKey), and the gateway resolver's upstreams (see
 * twinResolverUpstreams).
 */

export interface DeployTimeValues {
    /** role -> the tailnet join key the coordinator issued for it. */
    joinKeys: Record<GuestRole, string>;
    /** "name:tag" as the stack writes it -> "sha256:..." in the twin's registry. */
    digestOf(reference: string): string;
    /** The built sandbox shell's digest-pinned reference (docker.Image's repoDigest), when the stack builds it. */
    builtSandboxShell?: string;
    sandboxHostKey: { publicKeyOpenssh: string; privateKeyOpenssh: string };
    /** The gateway agent's public key, authorized on the sandbox. */
    agentPublicKey: string;
    /** The twin operator's public key (twin/operator.ts), added to the gateway's adminSshKeys as an operator adds theirs. */
    operatorPublicKey: string;
}

export interface TwinDeployment {
    plan: StackPlan;
    /** Each server's user_data as cloud-init reads it (the plan sends it as base64 of its gzip: encodeUserData). */
    documents: Record<GuestRole, string>;
    /** The inbound rules of the firewall attached to each server. */
    firewallRules: Record<GuestRole, FirewallRule[]>;
    hostnames: Record<GuestRole, string>;
    location: Record<GuestRole, string>;
    /** The servers' ssh keys, as Hetzner's metadata lists them (public-keys). */
    sshKeys: string[];
    volume: { id: string; sizeGb: number };
    /** The host code bundle as the B2 stand-in serves it: its path under the download host, and its text. */
    bundle: { path: string; text: string };
}

const ROLE_LABEL = "airlock-role";

/**
 * The stack file with the gateway agent's key authorized (what `pulumi config set --path
 * 'airlock:agent.authorizedKeys[0]'` does) and the twin operator's key beside the stack's own
 * operator keys.
 */
export function stackFileWithKeys(stackFile: string, keys: { agentPublicKey: string; operatorPublicKey: string }, outFile: string): string {
    const doc = YAML.parseDocument(fs.readFileSync(stackFile, "utf8"));
    doc.setIn(["config", "airlock:agent", "authorizedKeys"], doc.createNode([keys.agentPublicKey.trim()]));
    const adminKeys = (doc.getIn(["config", "airlock:gateway", "adminSshKeys"]) as YAML.YAMLSeq | undefined)?.toJSON() ?? [];
    doc.setIn(["config", "airlock:gateway", "adminSshKeys"], doc.createNode([...adminKeys, `${keys.operatorPublicKey.trim()} twin-operator`]));
    fs.mkdirSync(path.dirname(outFile), { recursive: true });
    fs.writeFileSync(outFile, doc.toString({ lineWidth: 0 }));
    return outFile;
}

export async function renderDeployment(stackFile: string, stack: string, values: DeployTimeValues, workDir: string): Promise<TwinDeployment> {
    const withKey = stackFileWithKeys(stackFile, values, path.join(workDir, `Pulumi.${stack}.yaml`));
    const cfg = readStackFile(withKey);
    if (cfg.hosts.bundleUrl) throw new Error("the twin serves the host code bundle as B2 does: unset airlock:hosts.bundleUrl for a twin");
    // Where a deploy's B2 upload puts the bundle (HostBundle), on the download host the twin's mirror answers as.
    const bundle = renderBundle();
    const bundlePath = `file/${bucketNameFor(cfg.prefix, "bundles", cfg.breakGlassSshPublicKey)}/${bundle.name}`;
    const plan = await planStack(withKey, stack, {
        mode: "up",
        deployed: (type, name) => {
            if (type === "pulumi-nodejs:dynamic:Resource" && name.endsWith("-bundle-file")) return { url: `https://${B2_DOWNLOAD_HOST}/${bundlePath}` };
            if (type === "tailscale:index/tailnetKey:TailnetKey") return { key: values.joinKeys[roleOfName(name)] };
            if (type === "tls:index/privateKey:PrivateKey") return { ...values.sandboxHostKey };
            if (type === "docker:index/image:Image") {
                if (!values.builtSandboxShell) throw new Error("the stack builds its sandbox shell (airlock:workloads.registry) and the twin has no image for it");
                return { repoDigest: values.builtSandboxShell };
            }
            return {};
        },
        calls: (token, inputs) =>
            token === "docker:index/getRegistryImage:getRegistryImage" ? { ...inputs, id: String(inputs.name), sha256Digest: values.digestOf(String(inputs.name)) } : undefined,
    });
    const servers = resourcesOf(plan, "hcloud:index/server:Server");
    const firewalls = resourcesOf(plan, "hcloud:index/firewall:Firewall");
    const volumes = resourcesOf(plan, "hcloud:index/volume:Volume");
    if (volumes.length !== 1) throw new Error(`expected one hcloud volume in the plan, found ${volumes.length}`);
    const byRole = <T>(list: PlannedResource[], pick: (r: PlannedResource) => T): Record<GuestRole, T> => {
        const out: Partial<Record<GuestRole, T>> = {};
        for (const r of list) out[roleOf(r)] = pick(r);
        if (!out.gateway || !out.sandbox) throw new Error("the plan lacks a gateway or a sandbox");
        return out as Record<GuestRole, T>;
    };
    return {
        plan,
        documents: byRole(servers, (r) => decodeUserData(String(r.inputs.userData)).text),
        firewallRules: byRole(firewalls, (r) => (r.inputs.rules ?? []) as FirewallRule[]),
        hostnames: byRole(servers, (r) => String(r.inputs.name)),
        location: byRole(servers, (r) => String(r.inputs.location)),
        sshKeys: resourcesOf(plan, "hcloud:index/sshKey:SshKey").map((r) => String(r.inputs.publicKey)),
        volume: { id: volumes[0].id, sizeGb: Number(volumes[0].inputs.size) },
        bundle: { path: bundlePath, text: bundle.text },
    };
}

function resourcesOf(plan: StackPlan, type: string): PlannedResource[] {
    return plan.resources.filter((r) => r.type === type);
}

function roleOf(r: PlannedResource): GuestRole {
    const role = (r.inputs.labels as Record<string, string> | undefined)?.[ROLE_LABEL];
    if (role === "gateway" || role === "sandbox") return role;
    return roleOfName(r.name);
}

function roleOfName(name: string): GuestRole {
    if (/-gateway-/.test(name)) return "gateway";
    if (/-sandbox-/.test(name)) return "sandbox";
    throw new Error(`cannot tell which host ${name} belongs to`);
}

/** The fingerprint airlock-install-tailscale pins: its value in the host's bundle-files.json. */
const PINNED_FINGERPRINT = /("fingerprint":")([0-9A-F]{40})(")/;

/**
 * The one change to user_data beyond deploy-time values: the twin cannot serve
 * Tailscale's repository signed with Tailscale's key, so it pins its own key's
 * fingerprint in airlock-install-tailscale. Exactly one occurrence is replaced.
 */
export function pinTailscaleKey(document: string, fingerprint: string): string {
    if (!/^[0-9A-F]{40}$/.test(fingerprint)) throw new Error(`not a GPG fingerprint: ${fingerprint}`);
    const matches = document.match(new RegExp(PINNED_FINGERPRINT.source, "g")) ?? [];
    if (matches.length !== 1) throw new Error(`expected one pinned Tailscale key fingerprint in user_data, found ${matches.length}`);
    return document.replace(PINNED_FINGERPRINT, (_, before: string, __: string, after: string) => `${before}${fingerprint}${after}`);
}

/** The upstreams of the gateway's AdGuard Home, as the plan renders them (inside its AdGuardHome.yaml). */
const RESOLVER_UPSTREAMS = /^(\s+)(upstream_dns|bootstrap_dns): \[.*\]$/gm;

/**
 * The other change beyond deploy-time values, on the gateway: its AdGuard Home (the
 * real one) asks the twin's resolver, in plain DNS, in place of the stack's encrypted
 * upstreams and their bootstrap resolvers, which nothing in the twin answers (a DoH
 * server would need a certificate the real image does not trust). Exactly both lines.
 */
export function twinResolverUpstreams(document: string, resolver: string): string {
    if (!/^\d+\.\d+\.\d+\.\d+$/.test(resolver)) throw new Error(`not an IPv4 address: ${resolver}`);
    const found = document.match(RESOLVER_UPSTREAMS) ?? [];
    if (found.length !== 2) throw new Error(`expected AdGuard Home's upstream_dns and bootstrap_dns in the gateway's user_data, found ${found.length} lines`);
    return document.replace(RESOLVER_UPSTREAMS, (_, indent: string, key: string) => `${indent}${key}: ["${resolver}"]`);
}

/** One line where the twin's user_data differs from the plan's. */
export interface Substitution {
    planned: string;
    twin: string;
}

/**
 * The lines where `twin` differs from `planned` (the plan's cloud-init.yaml, with
 * its placeholders), paired in order; a line only one side has pairs with "".
 */
export function substitutions(planned: string, twin: string): Substitution[] {
    const out: Substitution[] = [];
    let removed: string[] = [];
    for (const change of diffLines(planned, twin)) {
        const lines = change.value.replace(/\n$/, "").split("\n");
        if (change.removed) removed = lines;
        else if (change.added) {
            for (let i = 0; i < Math.max(lines.length, removed.length); i++) out.push({ planned: removed[i] ?? "", twin: lines[i] ?? "" });
            removed = [];
        } else {
            out.push(...removed.map((line) => ({ planned: line, twin: "" })));
            removed = [];
        }
    }
    out.push(...removed.map((line) => ({ planned: line, twin: "" })));
    return out;
}
