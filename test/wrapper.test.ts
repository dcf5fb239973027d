import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { brokerClient, installWrapperFiles, recordEntries, startBroker, TestBroker } from "./helpers/broker";
import { egressRulesFor, inEgressNamespace } from "./helpers/egress";
import { editedStack, REPO, tempDir, renderHosts } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/** The ForceCommand wrapper on its own: what reaches the container, and what does not. */

const brokers: TestBroker[] = [];
afterAll(async () => {
    for (const broker of brokers) await broker.stop();
});

/**
 * The rendered wrapper and its broker client at their host paths under a temp dir,
 * with a running broker unless `withBroker` is false and a stub `docker`, run in a
 * network namespace of its own where the sandbox's rendered egress rules apply to
 * it (or, with `egress: false`, are missing).
 */
async function installWrapper(allowlist: string[], { withBroker = true, egress = true } = {}) {
    const cfg = readStackFile(editedStack("dev", (c) => (c["airlock:agent"].envAllowlist = allowlist)));
    const dir = tempDir("wrapper");
    const sandbox = renderHosts(cfg).sandbox;
    const { wrapper, ...files } = installWrapperFiles(sandbox, dir);
    const rules = path.join(dir, "egress.nft");
    // The namespace's uid 0 stands in for the agent.
    fs.writeFileSync(rules, egressRulesFor(sandbox, cfg.agent.uid, 0));
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
    const invoke = (env: Record<string, string>) => {
        const [cmd, ...args] = inEgressNamespace(egress ? rules : undefined, [wrapper]);
        return run(cmd, args, { env: { PATH: `${dir}/bin:/usr/sbin:/usr/bin:/sbin:/bin`, ...env } });
    };
    const dockerArgs = () => fs.readFileSync(path.join(dir, "state", "docker-args"), "utf8");
    const record = () => recordEntries(path.join(files.stateDir, "record.jsonl"));
    const workspace = path.join(dir, "workspace");
    return { invoke, dockerArgs, record, dir, workspace, stateDir: files.stateDir };
}

describe.runIf(toolsAvailable("wrapper tests", ["bash", "socat", "systemd-socket-activate", "python3", "unshare", "nft", "ip"]))("sandbox-shell wrapper", () => {
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

    it("runs the command in /workspace of agent-sandbox-shell, as one argument of a bash that reads no startup file", async () => {
        const { invoke, dockerArgs } = await installWrapper(["GITHUB_TOKEN"]);
        const result = invoke({ SSH_ORIGINAL_COMMAND: "echo a; echo b" });
        expect(result.stdout).toBe("a\nb\n");
        const args = dockerArgs().trim().split("\n");
        expect(args.slice(args.indexOf("-w"), args.indexOf("-w") + 6)).toEqual(["-w", "/workspace", "agent-sandbox-shell", "bash", "--noprofile", "--norc"]);
        expect(args.at(-1)).toBe("echo a; echo b");
    });

    it("runs nothing an earlier command planted in /workspace or HOME before the next command", async () => {
        const { invoke, workspace } = await installWrapper(["GITHUB_TOKEN"]);
        // Task 1 (hostile) plants startup files where bash, git and friends look for them.
        const planted = invoke({
            SSH_ORIGINAL_COMMAND: [
                // The working directory is /workspace (the stub's stand-in for it).
                "for f in .bash_profile .bash_login .profile .bashrc; do echo 'echo \"$GITHUB_TOKEN\" >>\"$PWD/stolen\"; echo PLANTED' >\"$HOME/$f\"; cp \"$HOME/$f\" \"$PWD/$f\"; done",
                "printf '[alias]\\n\\tstatus = !echo PLANTED\\n' >\"$HOME/.gitconfig\"",
                "echo \"$HOME\" >\"$PWD/home-of-task-1\"",
            ].join("; "),
        });
        expect(planted.status, planted.stderr).toBe(0);
        // Task 2 runs with its own token.
        const token = ["ghp", "task2SECRET0123456789abcdef"].join("_");
        const next = invoke({ SSH_ORIGINAL_COMMAND: 'echo "home=$HOME"; test -e "$HOME/.gitconfig" && echo gitconfig-carried-over; true', GITHUB_TOKEN: token });
        expect(next.stdout).not.toContain("PLANTED");
        expect(next.stdout).not.toContain("gitconfig-carried-over");
        expect(fs.existsSync(path.join(workspace, "stolen")) ? fs.readFileSync(path.join(workspace, "stolen"), "utf8") : "").not.toContain(token);
        // Each command gets a HOME of its own, gone when the command ends.
        const home1 = fs.readFileSync(path.join(workspace, "home-of-task-1"), "utf8").trim();
        expect(home1).not.toBe(workspace);
        expect(fs.existsSync(home1)).toBe(false);
        expect(next.stdout).not.toContain(`home=${home1}\n`);
    });

    it("refuses every command while the egress rules are not in force", async () => {
        const { invoke, dockerArgs } = await installWrapper(["GITHUB_TOKEN"], { egress: false });
        const result = invoke({ SSH_ORIGINAL_COMMAND: "echo ran" });
        expect(result.status).toBe(3);
        expect(result.stdout).toBe("");
        expect(result.stderr).toContain("egress rules are not in force");
        expect(() => dockerArgs()).toThrow();
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
        const { invoke, dir } = await installWrapper(["GITHUB_TOKEN"], { withBroker: false });
        const result = invoke({ SSH_ORIGINAL_COMMAND: "touch ran" });
        expect(result.status).toBe(1);
        expect(result.stderr).toMatch(/^airlock: command refused: it cannot be put on the record \(no reply from the broker at .*\)$/m);
        expect(fs.existsSync(path.join(dir, "state", "docker-args"))).toBe(false);
        expect(fs.existsSync(path.join(dir, "workspace", "ran"))).toBe(false);
    });

    it("waits for a checkpoint verb as long as the broker lets the engine run, for a record append only briefly", () => {
        // A broker that answers every request after 2 s: a restore under emulation (the twin under TCG)
        // takes longer than a record append may. The record's wait is scaled to 1 s here.
        const dir = tempDir("broker-wait");
        const socket = path.join(dir, "broker.sock");
        const client = brokerClient(renderHosts(readStackFile(editedStack("dev", () => undefined))).sandbox, socket);
        if (!client.includes("BROKER_RECORD_SECONDS=30\n")) throw new Error("broker client: record wait not found");
        fs.writeFileSync(path.join(dir, "client.bash"), client.replace("BROKER_RECORD_SECONDS=30\n", "BROKER_RECORD_SECONDS=1\n"));
        fs.writeFileSync(path.join(dir, "slow-broker"), "#!/bin/bash\nread -r request\nsleep 2\necho data \"${request%% *}\"\necho ok\n", { mode: 0o755 });
        const call = (request: string) =>
            run("bash", ["--norc", "-c", `socat UNIX-LISTEN:${socket},fork EXEC:${dir}/slow-broker & listener=$!
                for _ in $(seq 50); do [[ -S ${socket} ]] && break; sleep 0.1; done
                source ${dir}/client.bash; broker_connect; broker_call ${request}; status=$?
                kill $listener; echo "$status|\${BROKER_DATA[*]:-}|\${BROKER_ERROR}"`]);
        expect(call("restore workspace=shared last=yes").stdout.trim()).toBe(`0|restore|no reply from the broker at ${socket}`);
        expect(call("record-begin command=dHJ1ZQ==").stdout.trim()).toBe(`1||no reply from the broker at ${socket}`);
    });

    it("hands the gateway's record pull to the broker and runs nothing in the container", async () => {
        const { invoke, dir } = await installWrapper(["GITHUB_TOKEN"]);
        invoke({ SSH_ORIGINAL_COMMAND: "true" });
        const nonce = "ab".repeat(16);
        const pulled = invoke({ SSH_ORIGINAL_COMMAND: `airlock record-pull - 0 ${nonce}` });
        expect(pulled.status).toBe(0);
        expect(pulled.stdout.trim().split("\n").map((l) => l.split(" ").slice(0, l.startsWith("data signature") ? 2 : 1).join(" "))).toEqual(["data", "data", "data", "data signature", "ok"]);
        expect(fs.readFileSync(path.join(dir, "state", "docker-args"), "utf8")).toContain("true");
        // Anything else that starts like the verb is an ordinary command.
        invoke({ SSH_ORIGINAL_COMMAND: `airlock record-pull - 0 ${nonce}; id` });
        expect(fs.readFileSync(path.join(dir, "state", "docker-args"), "utf8")).toContain(`airlock record-pull - 0 ${nonce}; id`);
    });

    it("refuses an interactive session", async () => {
        const { invoke } = await installWrapper(["GITHUB_TOKEN"]);
        const result = invoke({});
        expect(result.status).toBe(2);
        expect(result.stderr).toContain("interactive sessions are disabled");
    });
});
