import { GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { coversPath, hostBinds, whenKnown } from "../engine/container";

/** Host paths that hold credentials: configuration, root's home, ssh keys. */
const SECRET_PATHS = ["/etc", "/root", "/home/*/.ssh"];

export const containersNoHostSecretMounts: Rule = {
    kind: "container",
    id: "containers-no-host-secret-mounts",
    profiles: GENERIC,
    description: "No container mounts host secrets: /etc, /root, ~/.ssh, or a directory that contains one of them.",
    remediation: "Mount only the files the container needs (a project directory, a named volume); pass secrets per command instead.",
    check: (c) =>
        whenKnown(c, ["mounts"], () =>
            hostBinds(c)
                .filter(({ host }) => host !== "unknowable" && SECRET_PATHS.some((secret) => coversPath(host, secret)))
                .map(({ mount }) => ({ message: `${c.name} mounts host path ${mount.source}`, line: mount.line ?? c.line, where: c.name })),
        ),
};
