import { GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { mustBeNoEverywhere } from "../engine/sshdKeyword";

export const sshdNoPasswordAuth: Rule = {
    kind: "sshd",
    id: "sshd-no-password-auth",
    profiles: GENERIC,
    description:
        "PasswordAuthentication and KbdInteractiveAuthentication (ChallengeResponseAuthentication) must be `no` globally and in " +
        "every Match block; both default to yes.",
    remediation: "Put `PasswordAuthentication no` and `KbdInteractiveAuthentication no` near the top of sshd_config (first value wins).",
    check: (config) => [
        ...mustBeNoEverywhere(config, "passwordauthentication", "PasswordAuthentication", false),
        ...mustBeNoEverywhere(config, "kbdinteractiveauthentication", "KbdInteractiveAuthentication", false),
    ],
};
