import type { Rule } from "../engine/rule";
import { stringLeaves } from "../engine/cloudInit";

const TAILSCALE_SSH = /\btailscale\s+(up|set|login)\b[^\n;&|]*\s--ssh(=true)?(\s|$)/;

export const cloudInitNoTailscaleSsh: Rule = {
    kind: "cloud-init",
    id: "cloud-init-no-tailscale-ssh",
    description: "No host turns on Tailscale SSH (`tailscale up --ssh`): it authenticates by tailnet identity and bypasses sshd's ForceCommand wrapper.",
    remediation: "Drop `--ssh` from tailscale up/set; sshd on the tailnet address is the only way in.",
    check: (doc) =>
        stringLeaves(doc)
            .filter((leaf) => leaf.value.split("\n").some((line) => TAILSCALE_SSH.test(line)))
            .map((leaf) => ({ message: `Tailscale SSH enabled in ${leaf.path}`, where: leaf.path })),
};
