import { execFileSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import * as YAML from "yaml";
import { OFFLINE_DIGEST, planStack, PlanOptions, StackPlan } from "../../cli/offline";
import { PINNED_BY_DIGEST, StackConfig } from "../../components/config/schema";
import { renderBundle } from "../../components/render/bundle";
import { renderGateway, RenderedHost, renderSandbox, SANDBOX_SSH_CONFIG_TEMPLATE } from "../../components/render/hosts";
import type { ResolvedImages } from "../../components/workloads/compose";
import { configuredImages } from "../../components/workloads/images";

export const REPO = path.resolve(__dirname, "..", "..");
export const STACKS_DIR = path.join(REPO, "stacks");
export const SHIPPED_STACKS = ["dev", "prod"];

export function stackFile(stack: string): string {
    return path.join(STACKS_DIR, `Pulumi.${stack}.yaml`);
}

/** A throwaway folder under the OS temp dir, removed by the caller's cleanup. */
export function tempDir(label: string): string {
    return fs.mkdtempSync(path.join(os.tmpdir(), `airlock-${label}-`));
}

/**
 * Writes a copy of a shipped stack with one change applied to its `config`, and
 * returns the path; tests change ONE thing and assert the consequence.
 */
export function editedStack(stack: string, edit: (config: Record<string, any>) => void, dir = tempDir("stack")): string {
    const doc = YAML.parse(fs.readFileSync(stackFile(stack), "utf8"));
    edit(doc.config);
    const file = path.join(dir, `Pulumi.${stack}.yaml`);
    fs.writeFileSync(file, YAML.stringify(doc));
    return file;
}

/** A stack edit: the shipped placeholder keys replaced by one of this run's own, the agent's left for the first up. */
export function withOwnKeys(config: Record<string, any>): void {
    config["airlock:breakGlassSshPublicKey"] = testHostKey().publicKeyOpenssh;
    config["airlock:gateway"].adminSshKeys = [testHostKey().publicKeyOpenssh];
    config["airlock:agent"].authorizedKeys = [];
}

/** A tailnet key as Tailscale returns one, assembled at run time (no key-shaped literal in git). */
export function fakeTailnetKey(): string {
    return ["tskey", "auth", "kTEST0CNTRL", "0123456789abcdefABCDEFghijklmnop"].join("-");
}

/** What providers compute during `pulumi up`, for plans in "up" mode. */
/** A real ed25519 host key pair, generated once per test process (never committed). */
let hostKey: { privateKeyOpenssh: string; publicKeyOpenssh: string } | undefined;
export function testHostKey(): { privateKeyOpenssh: string; publicKeyOpenssh: string } {
    if (!hostKey) {
        const file = path.join(tempDir("hostkey"), "key");
        execFileSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "", "-f", file]);
        hostKey = { privateKeyOpenssh: fs.readFileSync(file, "utf8"), publicKeyOpenssh: fs.readFileSync(`${file}.pub`, "utf8").trim() };
    }
    return hostKey;
}

export const deployedValues: PlanOptions["deployed"] = (type, name) => {
    if (type === "tailscale:index/tailnetKey:TailnetKey") return { key: fakeTailnetKey() };
    if (type === "tls:index/privateKey:PrivateKey") return testHostKey();
    if (type === "docker:index/image:Image") return { repoDigest: BUILT_IMAGE };
    // What the B2 provider returns for a created bucket.
    if (type === "pulumi-nodejs:dynamic:Resource" && name.endsWith("-bucket")) return { bucketId: `b2-bucket-of-${name}` };
    // What the B2 provider returns for the uploaded host code bundle: its URL on the account's download host.
    if (type === "pulumi-nodejs:dynamic:Resource" && name.endsWith("-bundle-file")) return { fileId: `4_z${name}`, url: DEPLOYED_BUNDLE_URL };
    return {};
};

/** Where a deploy publishes the bundle (a B2 download host's URL shape, as long as a real one). */
export const DEPLOYED_BUNDLE_URL = `https://f004.backblazeb2.com/file/airlock-dev-bundles-0123456789/${renderBundle().name}`;

/** What a build of the sandbox shell pushes, for plans in "up" mode. */
export const BUILT_IMAGE = `ghcr.io/example-co/airlock/airlock-sandbox-shell@sha256:${"ab".repeat(32)}`;

export function planShipped(stack: string, mode: "preview" | "up" = "preview"): Promise<StackPlan> {
    return planStack(stackFile(stack), stack, { mode, deployed: deployedValues });
}

export function resourcesOfType(plan: StackPlan, type: string) {
    return plan.resources.filter((r) => r.type === type);
}

export function resourceNamed(plan: StackPlan, type: string, name: string) {
    const found = plan.resources.find((r) => r.type === type && r.name === name);
    if (!found) throw new Error(`no ${type} named ${name} in plan of ${plan.stack}`);
    return found;
}

/** The stack's hosts rendered as the offline plan renders them (tags resolved to OFFLINE_DIGEST). */
export function renderHosts(cfg: StackConfig): { gateway: RenderedHost; sandbox: RenderedHost } {
    const images = configuredImages(cfg);
    const pin = (ref: string) => (PINNED_BY_DIGEST.test(ref) || ref.startsWith("@") ? ref : `${ref}@${OFFLINE_DIGEST}`);
    const resolved: ResolvedImages = {
        ...(Object.fromEntries(Object.entries(images).filter(([k]) => k !== "services").map(([k, v]) => [k, pin(v as string)])) as Omit<ResolvedImages, "services">),
        services: Object.fromEntries(Object.entries(images.services).map(([k, v]) => [k, pin(v)])),
    };
    return { gateway: renderGateway(cfg, resolved), sandbox: renderSandbox(cfg, resolved) };
}

/** The content of one rendered file of a host. */
export function renderedFile(host: RenderedHost, hostPath: string): string {
    const found = host.files.find((f) => f.path === hostPath);
    if (!found) throw new Error(`${host.hostname} renders no ${hostPath}`);
    return found.content;
}

/** The gateway's ssh config for the sandbox as airlock-tailnet-render --sandbox fills it: `address` is its node's, or its full MagicDNS name. */
export function sandboxSshConfigAt(gateway: RenderedHost, address: string): string {
    return renderedFile(gateway, SANDBOX_SSH_CONFIG_TEMPLATE).replaceAll("@SANDBOX_ADDRESS@", address);
}

