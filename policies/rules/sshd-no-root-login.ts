import { GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { mustBeNoEverywhere } from "../engine/sshdKeyword";

export const sshdNoRootLogin: Rule = {
    kind: "sshd",
    id: "sshd-no-root-login",
    profiles: GENERIC,
    description: "PermitRootLogin must be `no` globally and in every Match block (the default, prohibit-password, still lets root in with a key).",
    remediation: "Set `PermitRootLogin no` near the top of sshd_config; break-glass access goes through the provider's rescue system.",
    check: (config) => mustBeNoEverywhere(config, "permitrootlogin", "PermitRootLogin", false),
};
