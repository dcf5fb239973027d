import { AIRLOCK_ONLY } from "../engine/profile";
import { DEFAULT_AGENT_USER } from "../contract";
import type { Rule } from "../engine/rule";

export const stackAgentUserIsThePolicys: Rule = {
    kind: "stack-file",
    id: "stack-agent-user-is-the-policys",
    profiles: AIRLOCK_ONLY,
    description:
        "The stack's agent user (airlock:agent.user, default \"agent\") is the one the policy judges: the ForceCommand and no-sudo rules " +
        "look at the policy's user, so a stack deploying another would pass them unjudged. (Judged by plan and gate; CrossGuard never sees the stack file.)",
    remediation: "Use the policy's agent user in the stack, or change agentUser in policies/config.json (for every stack) through review.",
    check(doc, ctx) {
        const agent = doc.config["airlock:agent"];
        const written = agent !== null && typeof agent === "object" && !Array.isArray(agent) ? (agent as Record<string, unknown>).user : undefined;
        const user = written ?? DEFAULT_AGENT_USER;
        if (user === ctx.agentUser) return [];
        return [
            {
                message: `airlock:agent.user is ${JSON.stringify(user)}${written === undefined ? " (the default)" : ""}; the policy judges ${JSON.stringify(ctx.agentUser)}`,
                line: doc.lines["airlock:agent"],
                where: "airlock:agent.user",
                fix: `set airlock:agent.user to ${JSON.stringify(ctx.agentUser)}`,
            },
        ];
    },
};
