/** Rule throughput: the whole rule set over a large synthetic plan, in this process. */
import { gatePlan } from "../gate";
import { planStack, StackPlan } from "../offline";

/** The dev plan repeated `copies` times, each copy with its own URNs (parents follow). */
export function syntheticPlan(plan: StackPlan, copies: number): StackPlan {
    const resources = [];
    for (let i = 0; i < copies; i++) {
        const rename = (urn: string | undefined) => urn?.replace("urn:pulumi:", `urn:pulumi:copy${i}-`);
        for (const r of plan.resources) resources.push({ ...r, urn: rename(r.urn)!, parent: rename(r.parent) });
    }
    return { ...plan, resources };
}

export async function ruleThroughput(stackFile: string, copies: number, rounds: number): Promise<{ resources: number; perSecond: number; msPerRound: number }> {
    const synthetic = syntheticPlan(await planStack(stackFile, "dev"), copies);
    gatePlan(synthetic); // warm-up
    const started = performance.now();
    for (let i = 0; i < rounds; i++) {
        const findings = gatePlan(synthetic);
        if (findings.length > 0) throw new Error(`synthetic plan has ${findings.length} findings`);
    }
    const ms = (performance.now() - started) / rounds;
    return { resources: synthetic.resources.length, perSecond: (synthetic.resources.length / ms) * 1000, msPerRound: ms };
}
