import { GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { lineAt, whenKnown } from "../engine/container";

/** The compose key for each namespace. */
const COMPOSE_KEYS: Record<string, string> = { network: "network_mode", pid: "pid", ipc: "ipc", userns: "userns_mode", uts: "uts", cgroup: "cgroup" };

export const containersNoHostNamespaces: Rule = {
    kind: "container",
    id: "containers-no-host-namespaces",
    profiles: GENERIC,
    description: "No container shares the host's network, pid, ipc, user, uts or cgroup namespace.",
    remediation: "Remove network_mode/pid/ipc/userns_mode/uts/cgroup: host; publish ports explicitly instead of host networking.",
    check: (c) =>
        whenKnown(c, ["namespaces"], () =>
            Object.entries(c.namespaces)
            .filter(([, mode]) => mode.toLowerCase() === "host")
            .map(([ns]) => ({ message: `${c.name} uses the host ${ns} namespace`, line: lineAt(c, COMPOSE_KEYS[ns] ?? ns), where: c.name, fix: `Remove ${COMPOSE_KEYS[ns] ?? ns}: host${ns === "network" ? "; publish the ports it needs on 127.0.0.1 instead" : ""}.` })),
        ),
};
