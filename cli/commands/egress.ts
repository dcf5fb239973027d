import * as fs from "node:fs";
import * as path from "node:path";
import { Argument, Command } from "commander";
import { Cli, EXIT } from "../command";
import { existingStackFile } from "../stacks";

export function define(command: Command, cli: Cli) {
    command
        .addArgument(new Argument("<action>", "propose: the allowlist change, as a diff of the stack file (never applied)").choices(["propose"]))
        .requiredOption("--stack <name>", "the stack whose airlock:dns.allowlist to extend")
        .requiredOption("--from <log>", "AdGuard Home's querylog.json, and its adguardhome.log for failed lookups (repeatable)", (file: string, files: string[] = []) => [...files, file])
        .option("--client <ip>", "only queries from this client (the sandbox's tailnet address)")
        .option("--out <file>", "where to write the diff (default: out/<stack>/dns-allowlist.diff)")
        .option("--json", "machine-readable output (the diff included)");
    return async (_action: "propose", opts: { stack: string; from: string[]; client?: string; out?: string; json?: boolean }) => {
        const { formatProposal, propose } = await import("../egress");
        const proposal = propose(opts.stack, existingStackFile(cli.stacksDir, opts.stack), opts.from, opts.client);
        let diffFile: string | undefined;
        if (proposal.diff) {
            diffFile = opts.out ?? path.join(cli.outDir(opts.stack), "dns-allowlist.diff");
            fs.mkdirSync(path.dirname(diffFile), { recursive: true });
            fs.writeFileSync(diffFile, proposal.diff);
        }
        if (opts.json) process.stdout.write(`${JSON.stringify({ ...proposal, diffFile: diffFile ?? null }, null, 2)}\n`);
        else process.stdout.write(formatProposal(proposal, diffFile));
        return EXIT.clean;
    };
}
