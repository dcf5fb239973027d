import { AIRLOCK_ONLY } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { securityOptsMatching } from "../engine/container";

/** A profile of the container's own replaces the daemon's, and with it what the host's profile denies. */
const OWN_PROFILE = /^seccomp[:=](?!unconfined$)/;

export const containersNoOwnSeccompProfile: Rule = {
    kind: "container",
    id: "containers-no-own-seccomp-profile",
    profiles: AIRLOCK_ONLY,
    description: "No container brings its own seccomp profile: every one runs under its daemon's (on the sandbox, Docker's default without btrfs subvolume, snapshot and reflink calls).",
    remediation: "Remove seccomp=<profile> from security_opt; the host's dockerd applies its profile to every container.",
    check: (c) => securityOptsMatching(c, OWN_PROFILE),
};
