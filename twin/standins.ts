import type { GuestRole } from "./contract";
import type { BootFiles } from "./guests";
import { TwinError } from "./network";

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
}

/** Starts (or finds running) every stand-in of the stack's twin. */
export async function startStandIns(stack: string, log: (line: string) => void): Promise<StandIns> {
    log(`stand-ins for ${stack}: not integrated yet`);
    throw new TwinError("the twin's stand-ins (base image, mirror, Tailscale, registry) are not integrated on this branch yet");
}

export function stopStandIns(_stack: string): void {}
