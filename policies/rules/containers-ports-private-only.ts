import { AIRLOCK_ONLY } from "../engine/profile";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { ContainerSpec, PortBinding, whenKnown } from "../engine/container";
import { isLoopbackAddress, isTailnetAddress, TAILNET_IPV4_PLACEHOLDER } from "../engine/net";

export const containersPortsPrivateOnly: Rule = {
    kind: "container",
    id: "containers-ports-private-only",
    profiles: AIRLOCK_ONLY,
    description:
        "Published ports bind only 127.0.0.1/::1 or a tailnet address; a port without a host IP binds 0.0.0.0 and is public.",
    remediation: `Write the host IP: "127.0.0.1:8080:8080", or the tailnet address ("${TAILNET_IPV4_PLACEHOLDER}:9222:9222" is filled at boot).`,
    check: (c) =>
        whenKnown(c, ["ports"], () =>
            c.ports.flatMap((p): Problem[] => {
            const ip = p.hostIp?.replace(/^\[|\]$/g, "");
            if (!ip) return [{ message: `${c.name} publishes ${p.text} on every address`, line: p.line ?? c.line, where: c.name, fix: fixFor(c, p) }];
            if (ip === TAILNET_IPV4_PLACEHOLDER || isLoopbackAddress(ip) || isTailnetAddress(ip)) return [];
            if (/\$/.test(ip)) return [{ message: `${c.name} publishes ${p.text} on an address set by a variable`, line: p.line ?? c.line, where: c.name, unverifiable: true }];
            return [{ message: `${c.name} publishes ${p.text} on ${ip}, which is neither loopback nor tailnet`, line: p.line ?? c.line, where: c.name, fix: fixFor(c, p) }];
        }),
        ),
};

/** The same port, bound where it is private: the container port is kept as written. */
function fixFor(c: ContainerSpec, p: PortBinding): string {
    if (c.origin === "docker:Container") return `Set ip: "127.0.0.1" on the port with internal ${p.target} (or the host's tailnet address).`;
    if (p.text.startsWith("{")) return `Add host_ip: 127.0.0.1 to the port with target ${p.target} (or the host's tailnet address).`;
    const protocol = /\/(tcp|udp|sctp)$/.exec(p.text)?.[0] ?? "";
    const published = p.published ?? "";
    return `Publish it as "127.0.0.1:${published}:${p.target}${protocol}" (or "${TAILNET_IPV4_PLACEHOLDER}:${published}:${p.target}${protocol}", filled at boot with the tailnet address).`;
}
