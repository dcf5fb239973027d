import { GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { mustBeNoEverywhere } from "../engine/sshdKeyword";

export const sshdNoTunnel: Rule = {
    kind: "sshd",
    id: "sshd-no-tunnel",
    profiles: GENERIC,
    description: "PermitTunnel must stay `no` (its default) globally and in every Match block: a tun device is a network side door.",
    remediation: "Remove any `PermitTunnel yes|point-to-point|ethernet`, or set `PermitTunnel no`.",
    check: (config) => mustBeNoEverywhere(config, "permittunnel", "PermitTunnel", true),
};
