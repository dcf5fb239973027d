import { GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { coversPath, hostBinds, whenKnown } from "../engine/container";

/**
 * Host trees a container must not see, at any depth: the kernel's views of every
 * process and device (/proc: /proc/<pid>/environ of the agent user's host processes
 * under rootless Docker; /sys; /dev), the boot files, and the engines' own state
 * (write access to /var/lib/docker rewrites another container's config to restart it
 * privileged; the rootless engine keeps it under ~/.local/share/docker). CIS Docker
 * Benchmark 5.5 lists /, /boot, /dev, /etc, /lib, /proc, /sys and /usr; /etc is
 * containers-no-host-secret-mounts', and / contains these trees.
 */
const SYSTEM_TREES = ["/proc", "/sys", "/dev", "/boot", "/var/lib/docker", "/var/lib/containerd", "/home/*/.local/share/docker"];
/** System directories whose whole tree (or a parent) is refused; a single file below them (a tool, read-only) is not. */
const SYSTEM_DIRECTORIES = ["/usr", "/lib"];

const within = (host: string, tree: string) => coversPath(tree, host) || coversPath(host, tree);

export const containersNoHostSystemMounts: Rule = {
    kind: "container",
    id: "containers-no-host-system-mounts",
    profiles: GENERIC,
    description:
        "No container mounts the host's /proc, /sys, /dev or /boot, a container engine's state (/var/lib/docker, /var/lib/containerd, ~/.local/share/docker), " +
        "anything inside them, or a directory that contains one (/, /var/lib), nor the whole of /usr or /lib (CIS Docker Benchmark 5.5).",
    remediation:
        "Remove the mount. A tool the container needs is one file mounted read-only, or part of its image; a host-metrics exporter that needs /proc or /sys belongs on a host that runs no untrusted workload.",
    check: (c) =>
        whenKnown(c, ["mounts"], () =>
            hostBinds(c).flatMap(({ mount, host }) => {
                if (host === "unknowable") return [];
                const tree = SYSTEM_TREES.find((t) => within(host, t)) ?? SYSTEM_DIRECTORIES.find((d) => coversPath(host, d));
                if (!tree) return [];
                const what = coversPath(tree, host) ? `the host's ${tree}` : `which contains the host's ${tree}`;
                return [{ message: `${c.name} mounts host path ${mount.source} (${what})`, line: mount.line ?? c.line, where: c.name }];
            }),
        ),
};
