import * as hcloud from "@pulumi/hcloud";

/** An SSH key already in the Hetzner project, which this stack uses and does not manage. */
export interface ExistingSshKey {
    id: string;
    name: string;
}

/** The key itself ("ssh-ed25519 AAAA..."), without its comment: what Hetzner's fingerprint is taken of. */
const keyBlob = (line: string) => line.trim().split(/\s+/).slice(0, 2).join(" ");

/**
 * The project's SSH key with the same key as `publicKey`, when another stack or the
 * console created it. Hetzner refuses a second key with one fingerprint in a project
 * (`uniqueness_error`), so dev and prod in one project, or a key the operator uploaded
 * first, share that one. The key this stack created itself (labelled with its prefix)
 * is not "existing": the stack keeps managing it.
 */
export async function existingBreakGlassKey(publicKey: string, prefix: string): Promise<ExistingSshKey | undefined> {
    const { sshKeys } = await hcloud.getSshKeys({});
    const same = sshKeys.filter((key) => keyBlob(key.publicKey) === keyBlob(publicKey));
    if (same.some((key) => key.labels?.airlock === prefix)) return undefined;
    const [first] = same;
    return first ? { id: String(first.id), name: first.name } : undefined;
}
