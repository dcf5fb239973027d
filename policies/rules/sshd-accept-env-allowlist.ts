import { AIRLOCK_ONLY } from "../engine/profile";
import { ENV_NAME, FORBIDDEN_ENV } from "../contract";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { allValues } from "../engine/sshd";

export const sshdAcceptEnvAllowlist: Rule = {
    kind: "sshd",
    id: "sshd-accept-env-allowlist",
    profiles: AIRLOCK_ONLY,
    compares: ["envAllowlist"],
    description:
        "AcceptEnv may name only the policy's envAllowlist (policies/config.json), each exactly: no wildcards, and never a " +
        "variable that changes how programs run (LD_*, BASH_ENV, ENV, PATH, ...).",
    remediation: "List in AcceptEnv only exact names that are both in airlock:agent.envAllowlist and in the policy's envAllowlist (drop distribution defaults like `AcceptEnv LANG LC_*`).",
    check(config, ctx) {
        const problems: Problem[] = [];
        for (const setting of allValues(config, "acceptenv")) {
            for (const name of setting.value) {
                let why: string | undefined;
                if (!ENV_NAME.test(name)) why = "is not one exact upper-case name (wildcards are not allowed)";
                else if (FORBIDDEN_ENV.test(name)) why = "changes how programs run";
                else if (!ctx.envAllowlist.includes(name)) why = `is not in the allowlist (${ctx.envAllowlist.join(", ")})`;
                if (why) problems.push({ message: `AcceptEnv ${name} ${why}`, line: setting.line, where: "AcceptEnv" });
            }
        }
        return problems;
    },
};
