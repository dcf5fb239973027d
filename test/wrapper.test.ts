import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { SANDBOX_WRAPPER_PATH } from "../components/render/hosts";
import { installBrokerFiles, recordEntries, startBroker, TestBroker } from "./helpers/broker";
import { editedStack, REPO, tempDir, renderHosts, renderedFile } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/** The ForceCommand wrapper on its own: what reaches the container, and what does not. */

const brokers: TestBroker[] = [];
afterAll(async () => {
    for (const broker of brokers) await broker.stop();
});

/** The rendered wrapper and its broker client at their host paths under a temp dir, with a running broker unless `withBroker` is false. */
async function installWrapper(allowlist: string[], withBroker = true) {
    const cfg = readStackFile(editedStack("dev", (c) => (c["airlock:agent"].envAllowlist = allowlist)));
    const dir = tempDir("wrapper");
    const sandbox = renderHosts(cfg).sandbox;
    const files = installBrokerFiles(sandbox, dir);
    const wrapper = path.join(dir, SANDBOX_WRAPPER_PATH);
    fs.writeFileSync(wrapper, renderedFile(sandbox, SANDBOX_WRAPPER_PATH), { mode: 0o755 });
    const broker = withBroker ? await startBroker(files.broker, files.socket, files.stateDir) : undefined;
    if (broker) brokers.push(broker);
    for (const sub of ["bin", "state", "workspace"]) fs.mkdirSync(path.join(dir, sub));
    fs.writeFileSync(
        path.join(dir, "bin", "docker"),
        fs
            .readFileSync(path.join(REPO, "test/fixtures/docker-exec-stub"), "utf8")
            .replace("@STATE_DIR@", path.join(dir, "state"))
            .replace("@WORKSPACE@", path.join(dir, "workspace")),
        { mode: 0o755 },
    );
    const invoke = (env: Record<string, string>) =>
        run(wrapper, [], { env: { PATH: `${dir}/bin:/usr/bin:/bin`, ...env } });
    const dockerArgs = () => fs.readFileSync(path.join(dir, "state", "docker-args"), "utf8");
    const record = () => recordEntries(path.join(files.stateDir, "record.jsonl"));
    return { invoke, dockerArgs, record, dir, stateDir: files.stateDir };
}

describe.runIf(toolsAvailable("wrapper tests", ["bash", "socat", "systemd-socket-activate", "python3"]))("sandbox-shell wrapper", () => {
    const secret = ["ghp", "wrapperTEST0123456789abcdef"].join("_");

    it("passes only allowlisted variables into the container, by name", async () => {
        const { invoke, dockerArgs } = await installWrapper(["GITHUB_TOKEN"]);
        const result = invoke({
            SSH_ORIGINAL_COMMAND: 'echo "$GITHUB_TOKEN|${NPM_TOKEN:-none}|${AWS_SECRET_ACCESS_KEY:-none}|${HOME}"',
            GITHUB_TOKEN: secret,
            NPM_TOKEN: "not-for-the-sandbox-either",
            AWS_SECRET_ACCESS_KEY: "not-for-the-sandbox",
        });
        expect(result.stderr).toBe("");
        expect(result.stdout.trim().split("|").slice(0, 3)).toEqual([secret, "none", "none"]);
        const args = dockerArgs().split("\n");
        expect(args).toContain("GITHUB_TOKEN");
        expect(args.join(" ")).not.toContain(secret);
    });

    it("passes every allowlisted name, and none that is unset", async () => {
        const { invoke, dockerArgs } = await installWrapper(["GITHUB_TOKEN", "TASK_ID"]);
        const result = invoke({ SSH_ORIGINAL_COMMAND: 'echo "${GITHUB_TOKEN:-unset}|$TASK_ID"', TASK_ID: "42" });
        expect(result.stdout.trim()).toBe("unset|42");
        const args = dockerArgs().split("\n");
        expect(args).toContain("TASK_ID");
        expect(args).not.toContain("GITHUB_TOKEN");
    });

    it("runs the command with bash -lc in /workspace of agent-sandbox-shell, as one argument", async () => {
        const { invoke, dockerArgs } = await installWrapper(["GITHUB_TOKEN"]);
        invoke({ SSH_ORIGINAL_COMMAND: "echo a; echo b" });
        expect(dockerArgs().trim().split("\n").slice(-6)).toEqual(["-w", "/workspace", "agent-sandbox-shell", "bash", "-lc", "echo a; echo b"]);
    });

    it("puts every command on the record: before it runs, completed with its status, the names that crossed but never a value", async () => {
        const { invoke, record, stateDir } = await installWrapper(["GITHUB_TOKEN", "TASK_ID"]);
        expect(invoke({ SSH_ORIGINAL_COMMAND: "exit 7", GITHUB_TOKEN: secret, SSH_CONNECTION: "100.100.7.2 40000 100.100.7.1 22" }).status).toBe(7);
        const [begin, end] = record().slice(-2);
        expect(begin).toMatchObject({ kind: "begin", command: "exit 7", env: ["GITHUB_TOKEN"], session: "100.100.7.2:40000", source: "100.100.7.1" });
        expect(begin.image).toMatch(/^registry\.example\/airlock-sandbox-shell@sha256:[0-9a-f]{64}$/);
        expect(end).toMatchObject({ kind: "end", of: begin.seq, exit: 7, ended: "exited" });
        expect(fs.readFileSync(path.join(stateDir, "record.jsonl"), "utf8")).not.toContain(secret);
    });

    it("refuses to run a command it cannot put on the record", async () => {
        const { invoke, dir } = await installWrapper(["GITHUB_TOKEN"], false);
        const result = invoke({ SSH_ORIGINAL_COMMAND: "touch ran" });
        expect(result.status).toBe(1);
        expect(result.stderr).toMatch(/^airlock: command refused: it cannot be put on the record \(no reply from the broker at .*\)$/m);
        expect(fs.existsSync(path.join(dir, "state", "docker-args"))).toBe(false);
        expect(fs.existsSync(path.join(dir, "workspace", "ran"))).toBe(false);
    });

    it("hands the gateway's record pull to the broker and runs nothing in the container", async () => {
        const { invoke, dir } = await installWrapper(["GITHUB_TOKEN"]);
        invoke({ SSH_ORIGINAL_COMMAND: "true" });
        const pulled = invoke({ SSH_ORIGINAL_COMMAND: "airlock record-pull - 0" });
        expect(pulled.status).toBe(0);
        expect(pulled.stdout.trim().split("\n").map((l) => l.split(" ")[0])).toEqual(["data", "data", "data", "ok"]);
        expect(fs.readFileSync(path.join(dir, "state", "docker-args"), "utf8")).toContain("true");
        // Anything else that starts like the verb is an ordinary command.
        invoke({ SSH_ORIGINAL_COMMAND: "airlock record-pull - 0; id" });
        expect(fs.readFileSync(path.join(dir, "state", "docker-args"), "utf8")).toContain("airlock record-pull - 0; id");
    });

    it("refuses an interactive session", async () => {
        const { invoke } = await installWrapper(["GITHUB_TOKEN"]);
        const result = invoke({});
        expect(result.status).toBe(2);
        expect(result.stderr).toContain("interactive sessions are disabled");
    });
});
