import * as hcloud from "@pulumi/hcloud";

/** The key itself ("ssh-ed25519 AAAA..."), without its comment: what Hetzner's fingerprint is taken of. */
const keyBlob = (line: string) => line.trim().split(/\s+/).slice(0, 2).join(" ");

/**
 * The id of the project's SSH key with the same key as `publicKey`, when another stack or the
 * console created it. Hetzner refuses a second key with one fingerprint in a project
 * (`uniqueness_error`), so dev and prod in one project, or a key the operator uploaded
 * first, share that one. The key this stack created itself (labelled with its prefix)
 * is not "existing": the stack keeps managing it.
 */
export async function existingBreakGlassKeyId(publicKey: string, prefix: string): Promise<string | undefined> {
    const { sshKeys } = await hcloud.getSshKeys({});
    const same = sshKeys.filter((key) => keyBlob(key.publicKey) === keyBlob(publicKey));
    if (same.some((key) => key.labels?.airlock === prefix)) return undefined;
    return same.length > 0 ? String(same[0].id) : undefined;
}
