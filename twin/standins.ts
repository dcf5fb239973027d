import * as fs from "node:fs";
import * as path from "node:path";
import { BASE_ROOT_DEVICE, ensureBaseImage } from "./base-image";
import { GuestRole, twinNetns } from "./contract";
import type { BootFiles } from "./guests";
import { ensureMirror, startMirror, userDataPackages } from "./mirror";
import { daemonRunning, runDirOf, stopDaemon } from "./network";

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

/** The pid file of a stand-in server started by another module (which writes none). */
const pidFileOf = (stack: string, name: string) => path.join(runDirOf(stack), `${name}.pid`);

/** Starts (or finds running) every stand-in of the stack's twin. */
export async function startStandIns({ stack, stackFile, log }: StandInOptions): Promise<StandIns> {
    const base = await ensureBaseImage(log);
    const stacksDir = path.dirname(stackFile);
    const stackName = path.basename(stackFile).replace(/^Pulumi\.(.*)\.yaml$/, "$1");
    const packages = await userDataPackages([stackName], stacksDir);
    const mirror = await ensureMirror({ packages, image: base, extraDebs: [], log });
    if (!daemonRunning(stack, "mirror")) {
        const running = await startMirror({ netns: twinNetns(stack), dir: mirror.dir, logFile: path.join(runDirOf(stack), "mirror.log") });
        fs.writeFileSync(pidFileOf(stack, "mirror"), `${running.pid}\n`);
    }
    return {
        bootFiles: { kernel: base.kernel, initrd: base.initrd, disk: base.disk, rootDevice: BASE_ROOT_DEVICE },
        tailscaleKeyFingerprint: mirror.fingerprint,
        joinKey: async (role) => ["tskey", "auth", "twin", role].join("-"),
        digestOf: () => `sha256:${"1".repeat(64)}`,
    };
}

export function stopStandIns(stack: string): void {
    stopDaemon(stack, "mirror");
}
