import { GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { securityOptsMatching } from "../engine/container";

const UNCONFINED = /^(seccomp[:=]unconfined|apparmor[:=]unconfined|label[:=]disable|systempaths[:=]unconfined)$/;

export const containersNoUnconfinedProfiles: Rule = {
    kind: "container",
    id: "containers-no-unconfined-profiles",
    profiles: GENERIC,
    description: "No container turns off seccomp, AppArmor, SELinux labels or masked system paths.",
    remediation: "Remove seccomp=unconfined / apparmor=unconfined / label=disable / systempaths=unconfined from security_opt.",
    check: (c) => securityOptsMatching(c, UNCONFINED),
};
