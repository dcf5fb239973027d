import { GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { mustBeNoEverywhere } from "../engine/sshdKeyword";

export const sshdNoUserEnvironment: Rule = {
    kind: "sshd",
    id: "sshd-no-user-environment",
    profiles: GENERIC,
    description:
        "PermitUserEnvironment must stay `no` (its default): ~/.ssh/environment would let a user set LD_PRELOAD and the like " +
        "before the ForceCommand runs.",
    remediation: "Remove `PermitUserEnvironment`, or set it to `no`.",
    check: (config) => mustBeNoEverywhere(config, "permituserenvironment", "PermitUserEnvironment", true),
};
