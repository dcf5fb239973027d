import * as fs from "node:fs";
import * as path from "node:path";
import type { Finding } from "../policies/engine/finding";
import { judgeResources, judgeStackFile } from "../policies/engine/judge";
import { enforce, loadPolicy, Policy } from "../policies/policy";
import { planStack, StackPlan } from "./offline";
import { existingStackFile } from "./stacks";
import { locateInPlan } from "./plan";

/** A plan judged against the one policy (the stack's own values are what is judged, never the yardstick). */
export function gatePlan(plan: StackPlan, policy: Policy = loadPolicy()): Finding[] {
    const stackFile = judgeStackFile(fs.readFileSync(plan.stackFile, "utf8"), policy.context, { file: plan.stackFile });
    return enforce([...stackFile, ...judgeResources(plan.resources, policy.context)], policy);
}

/** A stack's offline plan gated; findings are located in the files `airlock plan` would write to `outDir` (out/<stack>/). */
export async function gateStack(stacksDir: string, stack: string, policy: Policy = loadPolicy(), outDir = path.join("out", stack)): Promise<{ stack: string; findings: Finding[] }> {
    const plan = await planStack(existingStackFile(stacksDir, stack), stack);
    return { stack, findings: locateInPlan(gatePlan(plan, policy), plan, outDir) };
}
