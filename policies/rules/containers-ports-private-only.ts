import type { Rule } from "../engine/rule";
import { whenKnown } from "../engine/container";
import { isLoopbackAddress, isTailnetAddress, TAILNET_IPV4_PLACEHOLDER } from "../engine/net";

export const containersPortsPrivateOnly: Rule = {
    kind: "container",
    id: "containers-ports-private-only",
    description:
        "Published ports bind only 127.0.0.1/::1 or a tailnet address; a port without a host IP binds 0.0.0.0 and is public.",
    remediation: `Write the host IP: "127.0.0.1:8080:8080", or the tailnet address ("${TAILNET_IPV4_PLACEHOLDER}:9222:9222" is filled at boot).`,
    check: (c) =>
        whenKnown(c, ["ports"], () =>
            c.ports.flatMap((p) => {
            const ip = p.hostIp?.replace(/^\[|\]$/g, "");
            if (!ip) return [{ message: `${c.name} publishes ${p.text} on every address`, line: c.line, where: c.name }];
            if (ip === TAILNET_IPV4_PLACEHOLDER || isLoopbackAddress(ip) || isTailnetAddress(ip)) return [];
            if (/\$/.test(ip)) return [{ message: `${c.name} publishes ${p.text} on an address set by a variable`, line: c.line, where: c.name, unverifiable: true }];
            return [{ message: `${c.name} publishes ${p.text} on ${ip}, which is neither loopback nor tailnet`, line: c.line, where: c.name }];
        }),
        ),
};
