import { spawn } from "node:child_process";
import * as fs from "node:fs";

/** Runs a tool with its output appended to `logFile`; resolves with its stdout, rejects naming the tool on failure. */
export function runLogged(cmd: string, args: string[], logFile: string, env: NodeJS.ProcessEnv = process.env, cwd?: string): Promise<string> {
    return new Promise((resolve, reject) => {
        const log = fs.openSync(logFile, "a");
        fs.writeSync(log, `$ ${cmd} ${args.join(" ")}\n`);
        const child = spawn(cmd, args, { stdio: ["ignore", "pipe", log], env, cwd });
        let stdout = "";
        child.stdout!.on("data", (chunk: Buffer) => {
            stdout += chunk.toString();
            fs.writeSync(log, chunk);
        });
        child.on("error", (err) => {
            fs.closeSync(log);
            reject(new Error(`${cmd}: ${err.message}`));
        });
        child.on("close", (code, signal) => {
            fs.closeSync(log);
            if (code === 0) resolve(stdout);
            else reject(new Error(`${cmd} ${args.slice(0, 6).join(" ")}... exited with ${code ?? signal}`));
        });
    });
}
