import { GENERIC } from "../engine/profile";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { couldCoverPath, coversPath, hostBinds, whenKnown } from "../engine/container";

/** Sockets that control a container engine: mounting one (or a parent directory) is root on the host. */
const ENGINE_SOCKETS = [
    "/run/docker.sock",
    "/run/user/*/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/user/*/podman/podman.sock",
];

export const containersNoDockerSocket: Rule = {
    kind: "container",
    id: "containers-no-docker-socket",
    profiles: GENERIC,
    description:
        "No container mounts a container-engine socket (rootful /var/run/docker.sock, /run/docker.sock, rootless " +
        "/run/user/<uid>/docker.sock, containerd, podman) or a directory that contains one (/, /run, /var/run, /run/user).",
    remediation: "Remove the mount: whatever holds the socket is root on the host. A build gets a separate, remote builder; a tool that watches or updates containers runs outside the hosts it manages.",
    check: (c) =>
        whenKnown(c, ["mounts"], () => {
            const problems: Problem[] = [];
            for (const { mount, host } of hostBinds(c)) {
                if (host === "unknowable") {
                    if (!ENGINE_SOCKETS.some((socket) => couldCoverPath(mount.source ?? "", socket))) continue;
                    problems.push({ message: `${c.name} mounts ${mount.source}, whose host path depends on a variable`, line: mount.line ?? c.line, where: c.name, unverifiable: true });
                } else if (ENGINE_SOCKETS.some((socket) => coversPath(host, socket))) {
                    problems.push({ message: `${c.name} mounts ${mount.source}, which is or contains a container-engine socket`, line: mount.line ?? c.line, where: c.name });
                }
            }
            return problems;
        }),
};
