import { Argument, type Command } from "commander";
import { Cli } from "../command";

/** `airlock secrets push|status --stack S`: the agent runtime's secrets on the gateway (see ../secrets.ts). */
export function define(command: Command, cli: Cli) {
    command
        .addArgument(new Argument("<action>", "push: deliver them and restart the runtime; status: which are there, and how old").choices(["push", "status"]))
        .requiredOption("--stack <name>", "stack name")
        .option("--stdin", 'push: read {"NAME": "value", ...} from stdin (CI) instead of asking Pulumi')
        .option("--ssh-config <file>", "ssh_config to reach the gateway with (ssh -F)")
        .option("--json", "machine-readable output");
    return async (action: "push" | "status", opts: { stack: string; stdin?: boolean; sshConfig?: string; json?: boolean }) => {
        const { pushSecrets, secretsStatus } = await import("../secrets");
        const options = { stacksDir: cli.stacksDir, ...opts };
        const outcome = action === "push" ? await pushSecrets(options, () => readAll(process.stdin)) : await secretsStatus(options);
        if (opts.json) process.stdout.write(`${JSON.stringify(outcome.json, null, 2)}\n`);
        else if (outcome.lines.length > 0) process.stdout.write(`${outcome.lines.join("\n")}\n`);
        if (outcome.error) process.stderr.write(`${outcome.error}\n`);
        return outcome.code;
    };
}

async function readAll(stream: NodeJS.ReadableStream): Promise<string> {
    let text = "";
    for await (const chunk of stream) text += chunk.toString();
    return text;
}
