#!/usr/bin/env node
import * as fs from "node:fs";
import * as path from "node:path";
import { Command, CommanderError, InvalidArgumentError, Option } from "commander";
import { ConfigError, readStackFile } from "../components/config/load";
import { DEFAULT_CONTEXT, JudgeContext } from "../policies/engine/context";
import type { Finding } from "../policies/engine/finding";
import { formatFinding } from "../policies/engine/format";
import { judgeResources } from "../policies/engine/judge";
import { checkFile, CheckKind, contextOfStack, gatePlan, gateStack, resourcesOfPreview } from "./gate";
import { listStacks, planStack, stackFilePath } from "./offline";
import { evaluateChecklist, formatChecklist } from "./checklist";
import { runDoctor } from "./doctor";
import { forkStack, ForkRefused } from "./fork";
import { formatSummary, summarize, writePlan } from "./plan";
import { addSecretsCommand } from "./secrets";
import { paint, status, step } from "./style";

/** Exit codes, the same for every command. */
export const EXIT = { clean: 0, violations: 1, badInput: 2, internal: 3 } as const;

const program = new Command()
    .name("airlock")
    .description("Plan, check and gate airlock stacks offline")
    .option("--stacks-dir <dir>", "folder holding Pulumi.<stack>.yaml files", "stacks")
    .exitOverride()
    .configureOutput({ writeErr: (text) => process.stderr.write(text) });

const stacksDir = () => program.opts<{ stacksDir: string }>().stacksDir;

/** Options that describe the deployment when no stack file says it (check, gate --preview). */
function withContextOptions(command: Command): Command {
    return command
        .option("--agent-user <user>", "the sandbox agent user", DEFAULT_CONTEXT.agentUser)
        .option("--env-allowlist <names>", "comma-separated variables sshd may accept", DEFAULT_CONTEXT.envAllowlist.join(","))
        .option("--retention-days <days>", "days B2 must keep hidden versions", (v) => {
            const n = Number(v);
            if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError("expected a whole number of days");
            return n;
        }, DEFAULT_CONTEXT.retentionDays);
}

function contextOf(opts: { agentUser: string; envAllowlist: string; retentionDays: number }): JudgeContext {
    return { agentUser: opts.agentUser, envAllowlist: opts.envAllowlist.split(",").map((s) => s.trim()).filter(Boolean), retentionDays: opts.retentionDays };
}

/** Prints findings for humans or machines; returns the exit code. */
function report(findings: Finding[], json: boolean | undefined, extra: Record<string, unknown> = {}): number {
    if (json) process.stdout.write(`${JSON.stringify({ ...extra, violations: findings.length, findings }, null, 2)}\n`);
    else if (findings.length > 0) {
        for (const f of findings) process.stdout.write(`${formatFinding(f)}\n`);
        process.stdout.write(`${findings.length} violation${findings.length === 1 ? "" : "s"}\n`);
    }
    return findings.length > 0 ? EXIT.violations : EXIT.clean;
}

let exitCode: number = EXIT.clean;

program
    .command("plan")
    .description("run the real program offline (Pulumi mocks), write every rendered artifact and preview.json, then gate it")
    .requiredOption("--stack <name>", "stack name (stacks/Pulumi.<name>.yaml)")
    .option("--out <dir>", "output folder (default: out/<stack>)")
    .option("--json", "print the summary and findings as JSON")
    .action(async (opts: { stack: string; out?: string; json?: boolean }) => {
        const outDir = opts.out ?? path.join("out", opts.stack);
        const plan = await planStack(stackFilePath(stacksDir(), opts.stack), opts.stack);
        const files = writePlan(plan, outDir);
        const summary = summarize(plan);
        const findings = gatePlan(plan);
        if (opts.json) {
            exitCode = report(findings, true, { ...summary, outDir, files });
            return;
        }
        process.stdout.write(formatSummary(summary, outDir));
        process.stdout.write(findings.length === 0 ? "gate: clean\n" : "gate:\n");
        exitCode = report(findings, false);
    });

withContextOptions(
    program
        .command("check")
        .description("lint artifacts (compose, sshd config, cloud-init, preview JSON) with the policy rules")
        .argument("<files...>", "files to check")
        .addOption(new Option("--kind <kind>", "what the files are (detected when omitted)").choices(["compose", "sshd", "cloud-init", "preview"]))
        .option("--json", "machine-readable output"),
).action((files: string[], opts: { kind?: CheckKind; json?: boolean; agentUser: string; envAllowlist: string; retentionDays: number }) => {
    const ctx = contextOf(opts);
    exitCode = report(files.flatMap((file) => checkFile(file, opts.kind, ctx)), opts.json, { files });
});

withContextOptions(
    program
        .command("gate")
        .description("the policy gate: a stack's offline plan, every stack, or a real `pulumi preview --json`")
        .option("--stack <name>", "gate one stack's offline plan (with --preview: take the agent user, env allowlist and retention from it)")
        .option("--all", "gate every stack in the stacks folder")
        .option("--preview <file>", "gate the output of `pulumi preview --json` or `pulumi stack export`")
        .option("--json", "machine-readable output"),
).action(async (opts: { stack?: string; all?: boolean; preview?: string; json?: boolean; agentUser: string; envAllowlist: string; retentionDays: number }) => {
    const chosen = [opts.stack !== undefined && !opts.preview, opts.all === true, opts.preview !== undefined].filter(Boolean).length;
    if (chosen !== 1) throw new ConfigError(["airlock gate: pass exactly one of --stack, --all, --preview"]);
    if (opts.preview) {
        const resources = resourcesOfPreview(opts.preview, readText(opts.preview));
        const ctx = opts.stack ? contextOfStack(readStackFile(stackFilePath(stacksDir(), opts.stack))) : contextOf(opts);
        exitCode = report(judgeResources(resources, ctx), opts.json, { preview: opts.preview, resources: resources.length });
        return;
    }
    const stacks = opts.all ? listStacks(stacksDir()) : [opts.stack!];
    const results = [];
    for (const stack of stacks) results.push(await step(`gating ${stack}`, () => gateStack(stacksDir(), stack)));
    const findings = results.flatMap((r) => r.findings.map((f) => ({ ...f, stack: r.stack })));
    if (!opts.json) {
        for (const r of results) process.stdout.write(`${r.stack}: ${r.findings.length === 0 ? status("pass", "clean") : status("fail", `${r.findings.length} violation(s)`)}\n`);
    }
    exitCode = report(findings, opts.json, { stacks: results.map((r) => ({ stack: r.stack, violations: r.findings.length })) });
});

program
    .command("fork")
    .description("derive a new customer stack from an existing one: unique names, no secrets, gated before it is written")
    .argument("<customer>", "the new stack's name (2-16 of a-z, 0-9, -)")
    .requiredOption("--from <stack>", "the stack to derive from")
    .option("--region <location>", "put both hosts in this Hetzner location")
    .option("--json", "machine-readable output")
    .action(async (customer: string, opts: { from: string; region?: string; json?: boolean }) => {
        let result;
        try {
            result = await step(`forking ${opts.from} into ${customer}`, () => forkStack({ stacksDir: stacksDir(), customer, from: opts.from, region: opts.region }));
        } catch (err) {
            if (!(err instanceof ForkRefused)) throw err;
            process.stderr.write(`${err.message}\n`);
            exitCode = report(err.findings, opts.json);
            return;
        }
        if (opts.json) {
            process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
            return;
        }
        process.stdout.write(`${result.status === "written" ? status("pass", "wrote") : "unchanged:"} ${result.file} (schema and gate: clean)\n`);
        process.stdout.write(`\ndiffers from ${opts.from}:\n${result.changes.map((c) => `  ${c}`).join("\n")}\n`);
        process.stdout.write(`\nstill needed (values are never copied):\n${result.stillNeeded.map((c) => `  ${c}`).join("\n")}\n`);
    });

program
    .command("checklist")
    .description("the pre-deployment checklist, evaluated from the stack's offline plan where it can be")
    .requiredOption("--stack <name>", "stack name")
    .option("--json", "machine-readable output")
    .option("--markdown", "a Markdown checklist to paste into a ticket")
    .action(async (opts: { stack: string; json?: boolean; markdown?: boolean }) => {
        const plan = await step(`planning ${opts.stack}`, () => planStack(stackFilePath(stacksDir(), opts.stack), opts.stack));
        const items = evaluateChecklist(plan, gatePlan(plan));
        const failed = items.filter((i) => i.status === "fail").length;
        if (opts.json) process.stdout.write(`${JSON.stringify({ stack: opts.stack, failed, items }, null, 2)}\n`);
        else {
            process.stdout.write(formatChecklist(items, opts.markdown === true, status));
            const counts = ["pass", "fail", "manual"].map((s) => `${items.filter((i) => i.status === s).length} ${s}`).join(", ");
            process.stdout.write(`\n${opts.markdown ? counts : paint("bold", counts)}\n`);
        }
        exitCode = failed > 0 ? EXIT.violations : EXIT.clean;
    });

program
    .command("doctor")
    .description("check this machine for a real deployment: pulumi, backend, credentials, ssh (never prints a secret)")
    .option("--stack <name>", "also look for credentials in this stack's config", "dev")
    .option("--json", "machine-readable output")
    .action((opts: { stack: string; json?: boolean }) => {
        const checks = runDoctor(process.env, stackFilePath(stacksDir(), opts.stack), opts.stack);
        const failed = checks.filter((c) => c.required && !c.ok);
        if (opts.json) process.stdout.write(`${JSON.stringify({ ok: failed.length === 0, checks }, null, 2)}\n`);
        else {
            for (const c of checks) {
                const mark = c.ok ? status("pass", "ok  ") : c.required ? status("fail", "FAIL") : status("manual", "warn");
                process.stdout.write(`${mark} ${c.name}: ${c.detail}${c.ok ? "" : `\n     fix: ${c.fix}`}\n`);
            }
        }
        exitCode = failed.length > 0 ? EXIT.violations : EXIT.clean;
    });

addSecretsCommand(program, { stacksDir, done: (code) => (exitCode = code) });

function readText(file: string): string {
    try {
        return fs.readFileSync(file, "utf8");
    } catch (err) {
        throw new ConfigError([`${file}: cannot read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`]);
    }
}

async function main(argv: string[]): Promise<number> {
    try {
        await program.parseAsync(argv);
        return exitCode;
    } catch (err) {
        if (err instanceof CommanderError) {
            return err.exitCode === 0 ? EXIT.clean : EXIT.badInput;
        }
        if (err instanceof ConfigError) {
            process.stderr.write(`${err.message}\n`);
            return EXIT.badInput;
        }
        process.stderr.write(`airlock: internal error: ${err instanceof Error ? err.message : String(err)}\n`);
        if (process.env.AIRLOCK_DEBUG) console.error(err);
        return EXIT.internal;
    }
}

main(process.argv).then((code) => {
    process.exitCode = code;
});
