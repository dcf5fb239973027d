import { Command, Option } from "commander";
import { ConfigError } from "../../policies/contract";
import type { Finding } from "../../policies/engine/finding";
import { checkFile, CheckKind } from "../check";
import { Cli, EXIT } from "../command";
import { Format, formatOf, policyOf, report, withFormat } from "../report";

export function define(command: Command, cli: Cli) {
    command
        .argument("<files...>", "files to check")
        .addOption(new Option("--kind <kind>", "what the files are (detected when omitted)").choices(["compose", "sshd", "cloud-init", "preview"]));
    withFormat(command);
    return (files: string[], opts: { kind?: CheckKind; json?: boolean; format?: Format }) => {
        const policy = policyOf(cli);
        const findings: Finding[] = [];
        const errors: string[] = [];
        let internal = false;
        // One bad file never hides the findings for the others.
        for (const file of files) {
            try {
                findings.push(...checkFile(file, opts.kind, policy));
            } catch (err) {
                if (err instanceof ConfigError) errors.push(...err.problems);
                else {
                    internal = true;
                    errors.push(`${file}: internal error: ${err instanceof Error ? err.message : String(err)}`);
                }
            }
        }
        const code = report(findings, formatOf(opts), { files, ...(errors.length > 0 ? { errors } : {}) }, errors.length === 0 ? "clean" : undefined, policy);
        for (const line of errors) process.stderr.write(`${line}\n`);
        return internal ? EXIT.internal : errors.length > 0 ? EXIT.badInput : code;
    };
}
