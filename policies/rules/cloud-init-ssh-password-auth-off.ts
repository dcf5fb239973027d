import { GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";

export const cloudInitSshPasswordAuthOff: Rule = {
    kind: "cloud-init",
    id: "cloud-init-ssh-password-auth-off",
    profiles: GENERIC,
    description: "cloud-init must not turn on ssh password authentication (ssh_pwauth).",
    remediation: "Set `ssh_pwauth: false` or remove the key.",
    check(doc) {
        const value = doc.data?.ssh_pwauth;
        const on = value === true || ["true", "yes", "1", "on"].includes(String(value).toLowerCase());
        return on ? [{ message: `ssh_pwauth: ${value}`, line: doc.lines.ssh_pwauth, where: "ssh_pwauth" }] : [];
    },
};
