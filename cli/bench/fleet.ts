/**
 * Child process of the fleet benchmark: gates every stack in a folder in this one
 * process (what `airlock gate --all` does) and reports its own timings and peak
 * memory as JSON on stdout.
 */
import { gateStack } from "../gate";
import { listStacks } from "../offline";

async function main(): Promise<void> {
    const [stacksDir] = process.argv.slice(2);
    const started = performance.now();
    const stacks = listStacks(stacksDir);
    const perStack: number[] = [];
    let violations = 0;
    for (const stack of stacks) {
        const t = performance.now();
        violations += (await gateStack(stacksDir, stack)).findings.length;
        perStack.push(performance.now() - t);
    }
    const totalMs = performance.now() - started;
    process.stdout.write(
        `${JSON.stringify({ stacks: stacks.length, totalMs, firstMs: perStack[0], restMeanMs: perStack.length > 1 ? perStack.slice(1).reduce((a, b) => a + b, 0) / (perStack.length - 1) : perStack[0], violations, maxRssMb: process.resourceUsage().maxRSS / 1024 })}\n`,
    );
}

main().catch((err) => {
    process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 3;
});
