import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { readStackFile } from "../components/config/load";
import { BUILT_SANDBOX_SHELL_PLACEHOLDER } from "../components/workloads/compose";
import { planStack } from "../cli/offline";
import { collectArtifacts } from "../cli/plan";
import { BASE_ROOT_DEVICE, type BaseImage, EARLY_FILE_DIRS, ensureBaseImage, type HostPackages } from "./base-image";
import { issueLeaf } from "./ca";
import { CONTROL_ADDRESS, GuestRole, REGISTRY_ADDRESS, TWIN_CACHE_DIR, twinNetns } from "./contract";
import { twinImages, twinRegistryNames } from "./images";
import type { BootFiles } from "./guests";
import { ensureMirror, startMirror } from "./mirror";
import { daemonRunning, runDirOf, stopDaemon, TwinError } from "./network";
import { fillRegistry, startRegistry } from "./registry";
import { addCoordinatorAuthKey, buildTailscaleDeb, newAuthKey, startCoordinator } from "./tailscale";

/**
 * What the twin's other parts provide, behind one interface: the base image, the
 * apt mirror and CA (twin-base), the Tailscale stand-in's coordinator
 * (twin-tailscale), the registry and its images (twin-images).
 */
export interface StandIns {
    /** Each host's image (the base with its packages installed), its kernel and initrd. */
    bootFiles: Record<GuestRole, BootFiles>;
    /** The fingerprint of the key that signs the twin's stand-in Tailscale repository. */
    tailscaleKeyFingerprint: string;
    /** A single-use, tagged join key from the coordinator. */
    joinKey(role: GuestRole): Promise<string>;
    /** "name:tag" -> the digest of the twin's image under that name. */
    digestOf(reference: string): string;
    /** The built sandbox shell's pinned reference, when the stack builds it. */
    builtSandboxShell?: string;
}

export interface StandInOptions {
    stack: string;
    stackFile: string;
    log: (line: string) => void;
}

/** Registry names the stack's images use beyond TWIN_NAMES (a built shell's registry): the twin's DNS answers them with its registry. */
export function registryNames(stackFile: string): string[] {
    return twinRegistryNames(readStackFile(stackFile));
}

const bootFilesOf = (image: BaseImage): BootFiles => ({ kernel: image.kernel, initrd: image.initrd, disk: image.disk, rootDevice: BASE_ROOT_DEVICE });

/** What a host's image installs ahead of its first boot: its user_data's packages, and the files they read while they install. */
export function hostPackages(cloudConfig: string): HostPackages {
    const parsed = YAML.parse(cloudConfig) as { packages?: unknown[]; write_files?: { path: string; content: string; permissions?: string; encoding?: string }[] };
    const earlyFiles: HostPackages["earlyFiles"] = {};
    for (const file of parsed.write_files ?? []) {
        if (!EARLY_FILE_DIRS.some((dir) => file.path.startsWith(dir))) continue;
        if (file.encoding) throw new TwinError(`user_data's ${file.path} is ${file.encoding}-encoded; the twin's host image takes plain text only`);
        earlyFiles[file.path] = { content: file.content, permissions: file.permissions ?? "0644" };
    }
    return { packages: (parsed.packages ?? []).map(String), earlyFiles };
}

const pidFileOf = (stack: string, name: string) => path.join(runDirOf(stack), `${name}.pid`);
export const coordinatorSocket = (stack: string) => path.join(runDirOf(stack), "tailscale-coordinator.sock");

/** Starts (or finds running) every stand-in of the stack's twin. */
export async function startStandIns({ stack, stackFile, log }: StandInOptions): Promise<StandIns> {
    const runDir = runDirOf(stack);
    const base = await ensureBaseImage(log);
    // What does not depend on deploy-time values: the packages user_data installs, the tailnet policy.
    const plan = await planStack(stackFile, path.basename(stackFile).replace(/^Pulumi\.(.*)\.yaml$/, "$1"));
    const artifacts = collectArtifacts(plan);
    const hosts = { gateway: hostPackages(artifacts.get("gateway")!["cloud-init.yaml"]), sandbox: hostPackages(artifacts.get("sandbox")!["cloud-init.yaml"]) };
    const packages = new Set([...hosts.gateway.packages, ...hosts.sandbox.packages]);
    const policy = artifacts.get("tailnet")?.["policy.hujson"];
    if (policy === undefined) throw new TwinError("the plan renders no tailnet policy (out/<stack>/tailnet/policy.hujson)");
    fs.writeFileSync(path.join(runDir, "tailnet-policy.hujson"), policy);

    const deb = buildTailscaleDeb(path.join(TWIN_CACHE_DIR, "tailscale-deb"), CONTROL_ADDRESS);
    const mirror = await ensureMirror({ packages: [...packages].sort(), image: base, extraDebs: [deb], log });
    const hostImages = { gateway: await ensureBaseImage(log, TWIN_CACHE_DIR, hosts.gateway), sandbox: await ensureBaseImage(log, TWIN_CACHE_DIR, hosts.sandbox) };
    if (!daemonRunning(stack, "mirror")) {
        const running = await startMirror({ netns: twinNetns(stack), dir: mirror.dir, b2Dir: twinB2Dir(stack), logFile: path.join(runDir, "mirror.log") });
        fs.writeFileSync(pidFileOf(stack, "mirror"), `${running.pid}\n`);
    }
    if (!daemonRunning(stack, "coordinator")) {
        await startCoordinator({
            netns: twinNetns(stack),
            address: CONTROL_ADDRESS,
            port: 80,
            policyFile: path.join(runDir, "tailnet-policy.hujson"),
            authKeys: {},
            logFile: path.join(runDir, "coordinator.log"),
            adminSocket: coordinatorSocket(stack),
            pidFile: pidFileOf(stack, "coordinator"),
        });
    }
    // The stack's images, built from Debian packages (cached), served by digest under the names the stack uses.
    const containerImages = await twinImages(plan.config, log);
    const storageDir = path.join(runDir, "registry");
    if (daemonRunning(stack, "registry")) {
        // A replacement after the images changed (a recipe or the stack edited): the running registry gets the new ones too.
        const missing = containerImages.filter((image) => !fs.existsSync(path.join(storageDir, "docker", "registry", "v2", "blobs", "sha256", image.digest.slice(7, 9), image.digest.slice(7), "data")));
        if (missing.length > 0) await fillRegistry({ storageDir, images: missing, log, workDir: path.join(runDir, "registry-fill") });
    } else {
        await fillRegistry({ storageDir, images: containerImages, log, workDir: path.join(runDir, "registry-fill") });
        const tls = issueLeaf({ dnsNames: twinRegistryNames(plan.config), ips: [REGISTRY_ADDRESS], outDir: path.join(runDir, "registry-tls"), name: "registry" });
        const registry = await startRegistry({ netns: twinNetns(stack), address: REGISTRY_ADDRESS, port: 443, certFile: tls.cert, keyFile: tls.key, storageDir, logFile: path.join(runDir, "registry.log") });
        fs.writeFileSync(pidFileOf(stack, "registry"), `${registry.pid}\n`);
    }
    const pinned = new Map(containerImages.map((image) => [image.reference, image.pinned]));
    const tags: Record<GuestRole, string> = { gateway: plan.config.tailnet.gatewayTag, sandbox: plan.config.tailnet.sandboxTag };
    return {
        bootFiles: { gateway: bootFilesOf(hostImages.gateway), sandbox: bootFilesOf(hostImages.sandbox) },
        tailscaleKeyFingerprint: mirror.fingerprint,
        joinKey: async (role) => {
            // As the plan creates it: its tags, ephemeral or not, its expiry (the coordinator refuses what Tailscale would).
            const planned = plan.resources.find((r) => r.type === "tailscale:index/tailnetKey:TailnetKey" && r.name === `${plan.config.hostnames[role]}-join-key`);
            if (!planned) throw new TwinError(`the plan has no ${role}-join-key`);
            const { tags: keyTags, ephemeral, expiry } = planned.inputs as { tags: string[]; ephemeral?: boolean; expiry?: number };
            if (!keyTags.includes(tags[role])) throw new TwinError(`the plan's ${role}-join-key is not for ${tags[role]}`);
            const key = newAuthKey(keyTags, { ephemeral: ephemeral ?? false, ...(expiry === undefined ? {} : { expirySeconds: expiry }) });
            await addCoordinatorAuthKey(coordinatorSocket(stack), key);
            return key.key;
        },
        digestOf: (reference) => {
            const digest = pinned.get(reference)?.match(/@(sha256:[0-9a-f]{64})$/)?.[1];
            if (!digest) throw new TwinError(`the twin has no image for ${reference}`);
            return digest;
        },
        ...(pinned.has(BUILT_SANDBOX_SHELL_PLACEHOLDER) ? { builtSandboxShell: pinned.get(BUILT_SANDBOX_SHELL_PLACEHOLDER)! } : {}),
    };
}

/** What the mirror serves as B2's download host: the stack's host code bundle (written by the twin before a boot). */
export const twinB2Dir = (stack: string) => path.join(runDirOf(stack), "b2");

export function stopStandIns(stack: string): void {
    for (const name of ["registry", "coordinator", "mirror"]) stopDaemon(stack, name);
}
