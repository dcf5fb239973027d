import { AIRLOCK_ONLY } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { hostOfListenAddress, isTailnetAddress, TAILNET_IPV4_PLACEHOLDER } from "../engine/net";
import { allValues } from "../engine/sshd";

export const sshdListenTailnetOnly: Rule = {
    kind: "sshd",
    id: "sshd-listen-tailnet-only",
    profiles: AIRLOCK_ONLY,
    description:
        "sshd must name its ListenAddress, and every one must be a tailnet address (100.64.0.0/10, fd7a:115c:a1e0::/48) " +
        `or ${TAILNET_IPV4_PLACEHOLDER}, which airlock-sshd-config fills at boot and refuses to fill with anything else.`,
    remediation: `Set "ListenAddress ${TAILNET_IPV4_PLACEHOLDER}:22" (or the host's 100.x address) and no other ListenAddress.`,
    check(config) {
        const listens = allValues(config, "listenaddress").flatMap((s) => s.value.map((v) => ({ v, line: s.line })));
        if (listens.length === 0) {
            return config.fragment ? [] : [{ message: "no ListenAddress: sshd listens on every address, public ones included", where: "ListenAddress" }];
        }
        return listens
            .filter(({ v }) => {
                const host = hostOfListenAddress(v.split(" ")[0]);
                return host !== TAILNET_IPV4_PLACEHOLDER && !isTailnetAddress(host);
            })
            .map(({ v, line }) => ({ message: `ListenAddress ${v} is not a tailnet address`, line, where: "ListenAddress" }));
    },
};
