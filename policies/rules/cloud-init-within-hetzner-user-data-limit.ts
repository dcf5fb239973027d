import type { Rule } from "../engine/rule";

/**
 * Hetzner Cloud's API refuses a server whose user_data is longer than 32,768 characters
 * (API reference, "Create a Server", user_data: "Length must be between 0 and 32768").
 */
export const HETZNER_USER_DATA_LIMIT = 32_768;

export const cloudInitWithinHetznerUserDataLimit: Rule = {
    kind: "cloud-init",
    id: "cloud-init-within-hetzner-user-data-limit",
    description: `The user_data document is at most ${HETZNER_USER_DATA_LIMIT.toLocaleString("en")} characters, the most Hetzner's API accepts for a server (it refuses the server, not the file).`,
    remediation:
        "Move host code out of user_data: airlock keeps only per-stack settings there and installs the rest from its sha256-pinned bundle; a hand-written document can fetch and verify its files the same way.",
    check(doc) {
        const length = [...doc.text].length;
        if (length <= HETZNER_USER_DATA_LIMIT) return [];
        return [{ message: `user_data is ${length.toLocaleString("en")} characters, over Hetzner's ${HETZNER_USER_DATA_LIMIT.toLocaleString("en")} by ${(length - HETZNER_USER_DATA_LIMIT).toLocaleString("en")}`, line: 1, where: "user_data" }];
    },
};
