import { Command, Option } from "commander";
import { checkFile, CheckKind } from "../check";
import type { Cli } from "../command";
import { policyOf, report } from "../report";

export function define(command: Command, cli: Cli) {
    command
        .argument("<files...>", "files to check")
        .addOption(new Option("--kind <kind>", "what the files are (detected when omitted)").choices(["compose", "sshd", "cloud-init", "preview"]))
        .option("--json", "machine-readable output");
    return (files: string[], opts: { kind?: CheckKind; json?: boolean }) => {
        const policy = policyOf(cli);
        return report(files.flatMap((file) => checkFile(file, opts.kind, policy)), opts.json, { files });
    };
}
