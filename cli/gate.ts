import type { Finding } from "../policies/engine/finding";
import { judgeResources } from "../policies/engine/judge";
import { enforce, loadPolicy, Policy } from "../policies/policy";
import { planStack, StackPlan, stackFilePath } from "./offline";

/** A plan judged against the one policy (the stack's own values are what is judged, never the yardstick). */
export function gatePlan(plan: StackPlan, policy: Policy = loadPolicy()): Finding[] {
    return enforce(judgeResources(plan.resources, policy.context), policy);
}

export async function gateStack(stacksDir: string, stack: string, policy: Policy = loadPolicy()): Promise<{ stack: string; findings: Finding[] }> {
    const plan = await planStack(stackFilePath(stacksDir, stack), stack);
    return { stack, findings: gatePlan(plan, policy) };
}
