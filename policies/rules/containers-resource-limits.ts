import { AIRLOCK_ONLY } from "../engine/profile";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { lineAt, whenKnown } from "../engine/container";

/** A limit is present and finite: not missing, not 0/-1 (both mean "unlimited"). */
function finite(value: unknown): boolean {
    if (value === undefined || value === null || value === "") return false;
    const text = String(value).trim().toLowerCase();
    return !["0", "-1", "unlimited", "max"].includes(text);
}

export const containersResourceLimits: Rule = {
    kind: "container",
    id: "containers-resource-limits",
    profiles: AIRLOCK_ONLY,
    description:
        "Every container has a finite pids limit and memory limit, so a fork bomb or a leak stays inside it. " +
        "(A docker Container resource has no pids limit: run such workloads from the rendered compose file.)",
    remediation: "Set `pids_limit` and `mem_limit` to what the service needs (for example `pids_limit: 256`, `mem_limit: 512m`; or deploy.resources.limits.pids / memory).",
    check: (c) =>
        whenKnown(c, ["pidsLimit", "memoryLimit"], () => {
            const problems: Problem[] = [];
            for (const [label, value] of [["pids", c.pidsLimit], ["memory", c.memoryLimit]] as const) {
                if (finite(value)) continue;
                const fix =
                    c.origin === "docker:Container"
                        ? label === "pids"
                            ? "A docker Container resource cannot set a pids limit: run the workload from the rendered compose file."
                            : "Set memory (MB) on the Container."
                        : label === "pids"
                          ? "Set `pids_limit: 256` (or deploy.resources.limits.pids)."
                          : "Set `mem_limit` to what the service needs (for example `mem_limit: 512m`, or deploy.resources.limits.memory).";
                problems.push({ message: `${c.name} has no finite ${label} limit`, line: lineAt(c, ...(label === "pids" ? ["pids_limit", "deploy.resources.limits.pids"] : ["mem_limit", "deploy.resources.limits.memory"])), where: c.name, fix });
            }
            return problems;
        }),
};
