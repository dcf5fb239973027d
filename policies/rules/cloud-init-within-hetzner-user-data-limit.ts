import { AIRLOCK_ONLY } from "../engine/profile";
import { BUILT_SANDBOX_SHELL_PLACEHOLDER, TAILNET_AUTH_KEY_PLACEHOLDER } from "../contract";
import type { CloudInitDoc } from "../engine/cloudInit";
import type { Rule } from "../engine/rule";
import { encodeUserData, incompressibleFiller } from "../engine/userData";

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

/** The document with every deploy-time value in it at its longest, each as random as a key (so it compresses as badly). */
export function filledAtLongest(text: string): string {
    let out = text;
    for (const [placeholder, max] of Object.entries(DEPLOY_TIME_MAX)) {
        out = out.split(placeholder).map((part, i) => (i === 0 ? part : `${incompressibleFiller(max, `${placeholder}#${i}`)}${part}`)).join("");
    }
    return out;
}

/**
 * The characters Hetzner counts for this document: the string itself when it is what is sent
 * (a server's user_data, an encoded document); otherwise as airlock sends a plain document,
 * base64 of its gzip, with each deploy-time value at its longest. Compression makes that an
 * estimate within a few characters, not a bound; `pulumi up` judges the real string before
 * the server is created.
 */
export function userDataLength(doc: CloudInitDoc): number {
    return doc.delivery ? doc.delivery.length : encodeUserData(filledAtLongest(doc.text)).length;
}

export const cloudInitWithinHetznerUserDataLimit: Rule = {
    kind: "cloud-init",
    id: "cloud-init-within-hetzner-user-data-limit",
    profiles: AIRLOCK_ONLY,
    description:
        `The user_data is at most ${HETZNER_USER_DATA_LIMIT.toLocaleString("en")} characters as Hetzner's API receives it, the most it accepts for a server: ` +
        "a plain document counted as airlock sends one (base64 of its gzip, which cloud-init's Hetzner datasource decodes), with each value a deploy fills in (join key, host keys, bundle URL, built image) at its longest.",
    remediation:
        "Send the document as base64 of its gzip (airlock does) and move host code out of user_data: airlock keeps only per-stack settings there and installs the rest from its sha256-pinned bundle; a hand-written document can fetch and verify its files the same way.",
    check(doc) {
        const length = userDataLength(doc);
        if (length <= HETZNER_USER_DATA_LIMIT) return [];
        const as = doc.delivery ? (doc.delivery.encoding === "plain" ? "as sent (plain)" : `as sent (${doc.delivery.encoding})`) : "as base64 of its gzip, with its deploy-time values";
        return [{ message: `user_data is ${length.toLocaleString("en")} characters ${as}, over Hetzner's ${HETZNER_USER_DATA_LIMIT.toLocaleString("en")} by ${(length - HETZNER_USER_DATA_LIMIT).toLocaleString("en")}`, line: 1, where: "user_data" }];
    },
};
