import { AIRLOCK_ONLY } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { lineOfLeaf, stringLeaves } from "../engine/cloudInit";
import { logicalLines } from "../engine/shell";

const TAILSCALE_SSH = /\btailscale\s+(up|set|login)\b[^\n;&|]*\s--ssh(=true)?(\s|$)/;

export const cloudInitNoTailscaleSsh: Rule = {
    kind: "cloud-init",
    id: "cloud-init-no-tailscale-ssh",
    profiles: AIRLOCK_ONLY,
    description: "No host turns on Tailscale SSH (`tailscale up --ssh`): it authenticates by tailnet identity and bypasses sshd's ForceCommand wrapper.",
    remediation: "Drop `--ssh` from tailscale up/set; sshd on the tailnet address is the only way in.",
    check: (doc) =>
        stringLeaves(doc)
            // A command continued over lines (`tailscale up \` ... `--ssh`) is one line to the shell.
            .filter((leaf) => logicalLines(leaf.value).some((line) => TAILSCALE_SSH.test(line)))
            .map((leaf) => ({ message: `Tailscale SSH enabled in ${leaf.path}`, where: leaf.path, line: lineOfLeaf(doc, leaf.path) })),
};
