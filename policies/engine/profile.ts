/**
 * Which rules judge a file. `generic`: the hardening any compose file, sshd config or
 * cloud-init user data should meet, whoever deploys it (no privileged containers, no
 * engine socket, no root or password logins, no download-and-run). `airlock`: every rule,
 * including those that encode airlock's own deployment (sshd on the tailnet address
 * only, the agent's environment allowlist, digests, limits, Hetzner's user_data size).
 */
export type Profile = "generic" | "airlock";

export const PROFILES: readonly Profile[] = ["generic", "airlock"];

/** In both profiles. */
export const GENERIC: readonly Profile[] = ["generic", "airlock"];

/** Only for airlock's own artifacts and stacks. */
export const AIRLOCK_ONLY: readonly Profile[] = ["airlock"];
