import { AIRLOCK_ONLY } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { effective, userMayLogIn } from "../engine/sshd";

export const sshdAgentForceCommand: Rule = {
    kind: "sshd",
    id: "sshd-agent-force-command",
    profiles: AIRLOCK_ONLY,
    compares: ["agentUser"],
    description:
        "Every login of the agent user must run the ForceCommand wrapper, so each command lands in the sandbox container. " +
        "A config that does not let the agent log in at all (AllowUsers/DenyUsers) passes.",
    remediation: "Add `Match User <agent>` with `ForceCommand /usr/local/libexec/airlock/sandbox-shell`.",
    check(config, ctx) {
        if (config.fragment || !userMayLogIn(config, ctx.agentUser)) return [];
        const force = effective(config, "forcecommand", ctx.agentUser);
        if (!force || force.value.length === 0 || force.value[0].toLowerCase() === "none") {
            return [{ message: `the agent user "${ctx.agentUser}" may log in without a ForceCommand`, line: force?.line, where: "ForceCommand" }];
        }
        return [];
    },
};
