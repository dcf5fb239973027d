import { BUILT_SANDBOX_SHELL_PLACEHOLDER, TAILNET_AUTH_KEY_PLACEHOLDER } from "../contract";
import type { Rule } from "../engine/rule";

/**
 * Hetzner Cloud's API refuses a server whose user_data is longer than 32,768 characters
 * (API reference, "Create a Server", user_data: "Length must be between 0 and 32768").
 */
export const HETZNER_USER_DATA_LIMIT = 32_768;

/**
 * What a deploy fills into airlock's document, each counted at the longest it can be,
 * so a document the gate passes is never refused by Hetzner once filled in.
 */
export const DEPLOY_TIME_MAX: Record<string, number> = {
    // tskey-auth-<id>-<secret>: about 60 characters today.
    [TAILNET_AUTH_KEY_PLACEHOLDER]: 128,
    // An OpenSSH ed25519 private key as a JSON string (its newlines escaped): about 430.
    '"@SANDBOX_HOST_KEY@"': 512,
    // ssh-ed25519 and 68 characters of base64.
    "@SANDBOX_HOST_PUBLIC_KEY@": 128,
    // https://f00N.backblazeb2.com/file/<bucket, at most 63>/airlock-bundle-<sha256>.json, or a mirror's.
    "@BUNDLE_URL@": 256,
    // <registry>/<path>@sha256:<64 hex>: Docker's references are at most 255 before the digest.
    [BUILT_SANDBOX_SHELL_PLACEHOLDER]: 255 + 72,
};

/** The document's length once every deploy-time value is in it, each at its longest. */
export function filledLength(text: string): number {
    let length = [...text].length;
    for (const [placeholder, max] of Object.entries(DEPLOY_TIME_MAX)) length += (text.split(placeholder).length - 1) * (max - placeholder.length);
    return length;
}

export const cloudInitWithinHetznerUserDataLimit: Rule = {
    kind: "cloud-init",
    id: "cloud-init-within-hetzner-user-data-limit",
    description: `The user_data document is at most ${HETZNER_USER_DATA_LIMIT.toLocaleString("en")} characters, the most Hetzner's API accepts for a server, with each value a deploy fills in (join key, host keys, bundle URL, built image) counted at its longest.`,
    remediation:
        "Move host code out of user_data: airlock keeps only per-stack settings there and installs the rest from its sha256-pinned bundle; a hand-written document can fetch and verify its files the same way.",
    check(doc) {
        const length = filledLength(doc.text);
        if (length <= HETZNER_USER_DATA_LIMIT) return [];
        return [{ message: `user_data is ${length.toLocaleString("en")} characters with its deploy-time values, over Hetzner's ${HETZNER_USER_DATA_LIMIT.toLocaleString("en")} by ${(length - HETZNER_USER_DATA_LIMIT).toLocaleString("en")}`, line: 1, where: "user_data" }];
    },
};
