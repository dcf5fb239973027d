import { AIRLOCK_ONLY } from "../engine/profile";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { firstIn, SshdConfig } from "../engine/sshd";

const EACH_FORWARDING = ["allowtcpforwarding", "allowstreamlocalforwarding", "allowagentforwarding", "x11forwarding"];

/** The value in a context: that Match block's own setting, else the global one. */
function valueIn(config: SshdConfig, keyword: string, block: number): string | undefined {
    return (firstIn(config, keyword, block) ?? firstIn(config, keyword, -1))?.args[0]?.toLowerCase();
}

export const sshdForwardingDisabled: Rule = {
    kind: "sshd",
    id: "sshd-forwarding-disabled",
    profiles: AIRLOCK_ONLY,
    description:
        "Forwarding must be off everywhere: `DisableForwarding yes`, or TCP, stream-local, agent and X11 forwarding each `no`, " +
        "and no Match block may turn it back on.",
    remediation: "Set `DisableForwarding yes` near the top of sshd_config and never `DisableForwarding no` in a Match block.",
    check(config) {
        if (config.fragment) {
            // A drop-in cannot be judged as a whole; it must not turn anything on.
            return config.lines
                .filter((l) => (l.keyword === "disableforwarding" && l.args[0]?.toLowerCase() === "no") ||
                    (EACH_FORWARDING.includes(l.keyword) && l.args[0]?.toLowerCase() !== "no"))
                .map((l) => ({ message: `${l.keyword} ${l.args.join(" ")} enables forwarding`, line: l.line, where: l.keyword }));
        }
        const problems: Problem[] = [];
        for (const block of [-1, ...config.matches.map((_, i) => i)]) {
            if (valueIn(config, "disableforwarding", block) === "yes") continue;
            const open = EACH_FORWARDING.filter((k) => {
                const value = valueIn(config, k, block);
                // X11Forwarding defaults to no; the others default to yes.
                return k === "x11forwarding" ? value === "yes" : value !== "no";
            });
            if (open.length > 0) {
                const context = block === -1 ? "global" : `Match at line ${config.matches[block].line}`;
                const line = block === -1 ? undefined : config.matches[block].line;
                problems.push({ message: `forwarding is possible (${context}): ${open.join(", ")}`, line, where: "DisableForwarding" });
            }
        }
        return problems;
    },
};
