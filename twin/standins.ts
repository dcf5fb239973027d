import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { planStack } from "../cli/offline";
import { collectArtifacts } from "../cli/plan";
import { BASE_ROOT_DEVICE, ensureBaseImage } from "./base-image";
import { CONTROL_ADDRESS, GuestRole, TWIN_CACHE_DIR, twinNetns } from "./contract";
import type { BootFiles } from "./guests";
import { ensureMirror, startMirror } from "./mirror";
import { daemonRunning, runDirOf, stopDaemon, TwinError } from "./network";
import { addCoordinatorAuthKey, buildTailscaleDeb, newAuthKey, startCoordinator } from "./tailscale";

/**
 * What the twin's other parts provide, behind one interface: the base image, the
 * apt mirror and CA (twin-base), the Tailscale stand-in's coordinator
 * (twin-tailscale), the registry and its images (twin-images).
 */
export interface StandIns {
    bootFiles: BootFiles;
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

export async function bootFiles(log: (line: string) => void): Promise<BootFiles> {
    const base = await ensureBaseImage(log);
    return { kernel: base.kernel, initrd: base.initrd, disk: base.disk, rootDevice: BASE_ROOT_DEVICE };
}

const pidFileOf = (stack: string, name: string) => path.join(runDirOf(stack), `${name}.pid`);
const coordinatorSocket = (stack: string) => path.join(runDirOf(stack), "tailscale-coordinator.sock");

/** Starts (or finds running) every stand-in of the stack's twin. */
export async function startStandIns({ stack, stackFile, log }: StandInOptions): Promise<StandIns> {
    const runDir = runDirOf(stack);
    const base = await ensureBaseImage(log);
    // What does not depend on deploy-time values: the packages user_data installs, the tailnet policy.
    const plan = await planStack(stackFile, path.basename(stackFile).replace(/^Pulumi\.(.*)\.yaml$/, "$1"));
    const artifacts = collectArtifacts(plan);
    const packages = new Set<string>();
    for (const role of ["gateway", "sandbox"]) for (const name of YAML.parse(artifacts.get(role)!["cloud-init.yaml"]).packages ?? []) packages.add(String(name));
    const policy = artifacts.get("tailnet")?.["policy.hujson"];
    if (policy === undefined) throw new TwinError("the plan renders no tailnet policy (out/<stack>/tailnet/policy.hujson)");
    fs.writeFileSync(path.join(runDir, "tailnet-policy.hujson"), policy);

    const deb = buildTailscaleDeb(path.join(TWIN_CACHE_DIR, "tailscale-deb"));
    const mirror = await ensureMirror({ packages: [...packages].sort(), image: base, extraDebs: [deb], log });
    if (!daemonRunning(stack, "mirror")) {
        const running = await startMirror({ netns: twinNetns(stack), dir: mirror.dir, logFile: path.join(runDir, "mirror.log") });
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
    const tags: Record<GuestRole, string> = { gateway: plan.config.tailnet.gatewayTag, sandbox: plan.config.tailnet.sandboxTag };
    return {
        bootFiles: { kernel: base.kernel, initrd: base.initrd, disk: base.disk, rootDevice: BASE_ROOT_DEVICE },
        tailscaleKeyFingerprint: mirror.fingerprint,
        joinKey: async (role) => {
            const key = newAuthKey([tags[role]]);
            await addCoordinatorAuthKey(coordinatorSocket(stack), key);
            return key.key;
        },
        // Interim, until the registry is integrated: no image pulls.
        digestOf: () => `sha256:${"1".repeat(64)}`,
    };
}

export function stopStandIns(stack: string): void {
    for (const name of ["coordinator", "mirror"]) stopDaemon(stack, name);
}
