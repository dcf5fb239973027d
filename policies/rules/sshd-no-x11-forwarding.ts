import { GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { mustBeNoEverywhere } from "../engine/sshdKeyword";

export const sshdNoX11Forwarding: Rule = {
    kind: "sshd",
    id: "sshd-no-x11-forwarding",
    profiles: GENERIC,
    description: "X11Forwarding must stay `no` (its default) globally and in every Match block.",
    remediation: "Remove `X11Forwarding yes`, or set `X11Forwarding no`.",
    check: (config) => mustBeNoEverywhere(config, "x11forwarding", "X11Forwarding", true),
};
