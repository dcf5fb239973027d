import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { AUDIT_PROGRAM } from "../cli/audit";
import { readStackFile } from "../components/config/load";
import { installStubEngine, installWrapperFiles, recordEntries, startBroker, talk, TestBroker } from "./helpers/broker";
import { egressRulesFor, inEgressNamespace } from "./helpers/egress";
import * as YAML from "yaml";
import { GATEWAY_AGENT_PATHS } from "../components/workloads/compose";
import { editedStack, REPO, tempDir, renderHosts, renderedFile, stackFile } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * The wrapper's side of the undo button, through the real broker: which commands
 * are the three verbs (and reach the checkpoint engine, with which arguments),
 * which go to the container, the automatic checkpoint before a destructive command,
 * and the session a command lands in. The engine here is a stand-in that records
 * how it was called; the real one is exercised as root in e2e-checkpoints.
 */

const brokers: TestBroker[] = [];
afterAll(async () => {
    for (const broker of brokers) await broker.stop();
});

const b64 = (text: string) => Buffer.from(text, "utf8").toString("base64");
/**
 * A command in the shape Hermes Agent's ssh terminal sends it, for the refusals below
 * (what the pinned Hermes really sends is sent by it, in test/e2e-hermes.test.ts).
 */
const frame = (command: string) =>
    "bash -c '" +
    [
        "builtin cd -- /workspace || exit 126",
        `eval '"'"'${command}'"'"'`,
        "__hermes_ec=$?",
        "umask 077",
        `printf '"'"'\\n__HERMES_CWD_0123456789ab__%s__HERMES_CWD_0123456789ab__\\n'"'"' "$(pwd -P)"`,
        "exit $__hermes_ec",
    ].join("\n") +
    "'";
/** The container a recorded `docker exec` ran in: the argument after `-w /workspace`. */
const containerOf = (args: string[] | undefined) => args?.[args.indexOf("/workspace") + 1];

async function installWrapper(stackEdit: (c: Record<string, any>) => void = () => {}) {
    const cfg = readStackFile(editedStack("dev", stackEdit));
    const dir = tempDir("ckpt-wrapper");
    const sandbox = renderHosts(cfg).sandbox;
    const { wrapper, ...files } = installWrapperFiles(sandbox, dir);
    const { volume, calls, brokerEnv } = installStubEngine(dir);
    const broker = await startBroker(files.broker, files.socket, files.stateDir, undefined, brokerEnv);
    brokers.push(broker);
    for (const sub of ["bin", "state", "workspace"]) fs.mkdirSync(path.join(dir, sub));
    fs.writeFileSync(
        path.join(dir, "bin", "docker"),
        fs.readFileSync(path.join(REPO, "test/fixtures/docker-exec-stub"), "utf8").replace("@STATE_DIR@", path.join(dir, "state")).replace("@WORKSPACE@", path.join(dir, "workspace")),
        { mode: 0o755 },
    );
    // The wrapper runs only where the sandbox's egress rules hold: a namespace of its own with them loaded.
    const rules = path.join(dir, "egress.nft");
    fs.writeFileSync(rules, egressRulesFor(sandbox, cfg.agent.uid, 0));
    const invoke = (command: string, env: Record<string, string> = {}) => {
        const [cmd, ...args] = inEgressNamespace(rules, [wrapper]);
        return run(cmd, args, { env: { PATH: `${dir}/bin:/usr/sbin:/usr/bin:/sbin:/bin`, SSH_ORIGINAL_COMMAND: command, SSH_CONNECTION: "100.100.7.2 40000 100.100.7.1 22", ...env } });
    };
    const dockerArgs = () => (fs.existsSync(path.join(dir, "state", "docker-args")) ? fs.readFileSync(path.join(dir, "state", "docker-args"), "utf8").trim().split("\n") : undefined);
    const reset = () => {
        fs.rmSync(path.join(dir, "engine-calls"), { force: true });
        fs.rmSync(path.join(dir, "state", "docker-args"), { force: true });
    };
    const recordFile = () => path.join(files.stateDir, "record.jsonl");
    const record = () => (fs.existsSync(recordFile()) ? recordEntries(recordFile()) : []);
    return { invoke, calls, dockerArgs, reset, record, recordFile, dir, volume, socket: files.socket };
}

describe.runIf(toolsAvailable("checkpoint wrapper tests", ["bash", "socat", "systemd-socket-activate", "python3", "unshare", "nft", "ip"]))("the airlock verbs through the wrapper and the broker", () => {
    it.each([
        ["airlock checkpoint", "create shared"],
        ["  airlock   checkpoint  ", "create shared"],
        ["airlock checkpoint --label before migration", `create shared --label-b64 ${b64("before migration")}`],
        ['airlock checkpoint --label "before migration"', `create shared --label-b64 ${b64("before migration")}`],
        ["airlock checkpoint --label='before migration'", `create shared --label-b64 ${b64("before migration")}`],
        ["airlock checkpoints", "list shared"],
        ["airlock checkpoints --json", "list shared --json"],
        ["airlock restore 12", "restore shared --id 12"],
        ["airlock restore last", "restore shared --last"],
        ["airlock restore --label 'before migration'", `restore shared --label-b64 ${b64("before migration")}`],
        // The rest of the line is the label: data, never a second command.
        ["airlock checkpoint --label x; rm -rf /workspace", `create shared --label-b64 ${b64("x; rm -rf /workspace")}`],
        ['airlock checkpoint --label "$(id)"', `create shared --label-b64 ${b64('"$(id)"')}`],
    ])("%s -> the engine's %s, and nothing runs in the container", async (command, expected) => {
        const { invoke, calls, dockerArgs } = await installWrapper();
        const result = invoke(command);
        expect(result.stderr).toBe("");
        expect(result.status).toBe(0);
        expect(calls()).toEqual([expected]);
        expect(dockerArgs()).toBeUndefined();
    });

    it("the commands the runtime's instructions name are exactly verbs the wrapper recognises", async () => {
        const { invoke, calls, dockerArgs, reset } = await installWrapper();
        const hint: string = YAML.parse(renderedFile(renderHosts(readStackFile(stackFile("dev"))).gateway, GATEWAY_AGENT_PATHS.hermesConfig)).agent.environment_hint;
        expect(hint).toMatch(/Sandbox sessions: shared\./);
        expect(hint).toMatch(/Automatic checkpoints before destructive commands \(rm -r, git reset --hard,\s+DROP TABLE, \.\.\.\): on\./);
        const commands = [...hint.matchAll(/`(airlock [^`]+)`/g)].map((m) => m[1]);
        const expected = [
            [`create shared --label-b64 ${b64("before migration")}`],
            ["list shared --json"],
            ["restore shared --id 12"],
            [`restore shared --label-b64 ${b64("before migration")}`],
            ["restore shared --last"],
            ["try-begin shared --timeout 600 --network none", "try-end shared --id 0123456789ab --status 0"],
        ];
        expect(commands).toHaveLength(expected.length);
        for (const [i, template] of commands.entries()) {
            reset();
            const command = template.replace("{label}", "before migration").replace("{id}", "12").replace("{command}", "true");
            expect(invoke(command).status, command).toBe(0);
            expect(calls(), command).toEqual(expected[i]);
            // A try's command runs in the try's container, never the shell's; the other verbs run nothing there.
            expect(containerOf(dockerArgs()), command).toBe(expected[i][0].startsWith("try-") ? "agent-try-0123456789ab" : undefined);
        }
    });

    describe("airlock try", () => {
        it.each([
            ["airlock try -- test -d /", "try-begin shared --timeout 600 --network none", "test -d /"],
            ["airlock try --timeout 30 --network egress -- true && echo passed", "try-begin shared --timeout 30 --network egress", "true && echo passed"],
            ["  airlock  try --keep --timeout=5 --output-kb 2 --  true -x ", "try-begin shared --timeout 5 --network none --keep", "true -x"],
            // A line quoted whole, as a model writes it after `bash -c`: the quotes come off, as a shell takes them.
            ["airlock try -- 'test -d / && echo passed'", "try-begin shared --timeout 600 --network none", "test -d / && echo passed"],
            ['airlock try -- "test -d /"', "try-begin shared --timeout 600 --network none", "test -d /"],
            ["airlock try -- 'test' -d '/'", "try-begin shared --timeout 600 --network none", "'test' -d '/'"],
        ])("%s: a try with those settings, the line after -- run in its container", async (command, begin, line) => {
            const { invoke, calls, dockerArgs } = await installWrapper();
            const result = invoke(command);
            expect(result.status, result.stderr).toBe(0);
            expect(calls()).toEqual([begin, "try-end shared --id 0123456789ab --status 0"]);
            const args = dockerArgs()!;
            expect(containerOf(args)).toBe("agent-try-0123456789ab");
            expect(args.at(-1)).toBe(line);
        });

        it.each([
            ["airlock try", /usage: airlock try/],
            ["airlock try npm test", /usage: airlock try/],
            ["airlock try --network host -- id", /usage: airlock try/],
            ["airlock try --timeout 0 -- true", /--timeout is 1 to 3600 seconds/],
            ["airlock try --timeout 99999 -- true", /--timeout is 1 to 3600 seconds/],
            ["airlock try --output-kb 5000 -- true", /--output-kb is 1 to 1024/],
            ["airlock try -- ", /usage: airlock try/],
            ["airlock try -- ''", /usage: airlock try/],
        ])("%s is refused with 125 before anything is made or run", async (command, why) => {
            const { invoke, calls, dockerArgs } = await installWrapper();
            const result = invoke(command);
            expect(result.status).toBe(125);
            expect(result.stderr).toMatch(why);
            expect(calls()).toEqual([]);
            expect(dockerArgs()).toBeUndefined();
        });

        it("exits with the command's status, and its changes are kept only with --keep and status 0", async () => {
            const { invoke, calls, record, recordFile } = await installWrapper();
            const failed = invoke("airlock try --keep -- exit 3");
            expect(failed.status).toBe(3);
            expect(failed.stderr).toContain("airlock: try 0123456789ab: exit 3; discarded: the workspace is as it was");
            const passed = invoke("airlock try --keep -- true");
            expect(passed.status).toBe(0);
            expect(passed.stderr).toContain("exit 0; kept: the workspace is the try's now");
            expect(calls()).toContain("try-end shared --id 0123456789ab --status 3");
            // On the record: the whole command as a command, and the try's settings and outcome as verbs.
            const entries = record();
            const begin = entries.filter((e) => e.kind === "begin").map((e) => e.command);
            expect(begin).toEqual(["airlock try --keep -- exit 3", "airlock try --keep -- true"]);
            expect(entries.filter((e) => e.kind === "end").map((e) => e.exit)).toEqual([3, 0]);
            const verbs = entries.filter((e) => e.kind === "verb").map((e) => [e.verb, e.outcome, e.args, e.detail.split(":")[0]]);
            expect(verbs).toEqual([
                ["try-begin", "started", { keep: "yes", network: "none", timeout: "600" }, ""],
                ["try-begin", "ok", { keep: "yes", network: "none", timeout: "600" }, "try 0123456789ab agent-try-0123456789ab"],
                ["try-end", "started", { id: "0123456789ab", status: "3" }, ""],
                ["try-end", "ok", { id: "0123456789ab", status: "3" }, "discarded"],
                ["try-begin", "started", { keep: "yes", network: "none", timeout: "600" }, ""],
                ["try-begin", "ok", { keep: "yes", network: "none", timeout: "600" }, "try 0123456789ab agent-try-0123456789ab"],
                ["try-end", "started", { id: "0123456789ab", status: "0" }, ""],
                ["try-end", "ok", { id: "0123456789ab", status: "0" }, "kept"],
            ]);
            // The gateway's checker takes these records: the chain it pulls stays whole.
            const verified = run("/usr/bin/python3", ["-IS", AUDIT_PROGRAM, "--config", "-", "--dir", path.dirname(recordFile()), "verify"]);
            expect(verified.stdout + verified.stderr, "airlock-audit verify").toMatch(/records, chain intact/);
            expect(verified.status).toBe(0);
        });

        it("a command past its timeout ends with 124 and its container killed", async () => {
            const { invoke, dir } = await installWrapper();
            const result = invoke("airlock try --timeout 1 -- sleep 30");
            expect(result.status).toBe(124);
            expect(result.stderr).toContain("airlock: try 0123456789ab timed out after 1 s; its container was killed");
            // The stand-in docker notes its last call: the kill of the try's container.
            expect(fs.readFileSync(path.join(dir, "state", "docker-args"), "utf8").trim().split("\n")).toEqual(["kill", "agent-try-0123456789ab"]);
        });

        it("a flood of output comes back as its first and last KiB, with a line saying how much was cut", async () => {
            const { invoke } = await installWrapper();
            const result = invoke("airlock try --output-kb 1 -- seq 1 1000000");
            expect(result.status, result.stderr).toBe(0);
            expect(result.stdout.length).toBeLessThan(2 * 1024 + 200);
            expect(result.stdout.startsWith("1\n2\n3\n")).toBe(true);
            expect(result.stdout.endsWith("999999\n1000000\n")).toBe(true);
            expect(result.stdout).toMatch(/\[airlock: \d+ bytes of output cut here; the first and last 1 KiB are shown\]/);
        });

        it("only the connection that began a try may end it", async () => {
            const { socket, calls } = await installWrapper();
            const { lines } = talk(socket, "try-end workspace=shared id=0123456789ab status=0\n");
            expect(lines).toEqual(["error that try was not begun on this connection"]);
            expect(calls()).toEqual([]);
        });

        it("a try the broker refuses is 125 and nothing runs", async () => {
            const { invoke, dir, dockerArgs } = await installWrapper();
            fs.writeFileSync(path.join(dir, "fail"), "4 tries run already; wait for one to end");
            const result = invoke("airlock try -- true");
            expect(result.status).toBe(125);
            expect(result.stderr).toBe("airlock: try refused: 4 tries run already; wait for one to end\n");
            expect(dockerArgs()).toBeUndefined();
        });
    });

    it("a destructive command hidden in a frame's other lines still gets its automatic checkpoint, labelled with the frame's command", async () => {
        const { invoke, calls } = await installWrapper();
        // Parses as a frame whose one command is `ls`, but the whole text runs.
        invoke(frame("ls").replace("builtin cd -- /workspace ||", "builtin cd -- /workspace; rm -rf /workspace/* ||"));
        expect(calls()).toEqual([`create shared --label-b64 ${b64("ls")} --auto`]);
    });

    // The home is what the sandbox answered to Hermes's `echo $HOME`, quoted by shlex (red team 6:
    // a planted answer with a space got past a narrower match, and its archive onto the gateway).
    it.each([
        ["the wrapper's own home", "tar cf - -C / tmp/airlock-home.Ab12Cd/.hermes"],
        ["a home with a space, quoted", "tar cf - -C / 'tmp/x y/.hermes'"],
        ["a home with a quote in it", `tar cf - -C / 'tmp/x'"'"'y/.hermes'`],
        ["a home with a plus and a colon", "tar cf - -C / 'tmp/a+b:c/.hermes'"],
        ["an empty home", "tar cf - -C / .hermes"],
    ])("Hermes's copy of .hermes back from the sandbox (%s) is answered with an empty archive; nothing runs in the container", async (_, command) => {
        const { invoke, dockerArgs, record } = await installWrapper();
        const answered = invoke(command);
        expect(answered.status).toBe(0);
        expect(answered.stdout).toBe("\0".repeat(10240));
        expect(dockerArgs()).toBeUndefined();
        expect(record().filter((e) => e.kind === "begin")).toEqual([]);
        // Any other tar is an ordinary command.
        invoke("tar cf - -C / workspace");
        expect(dockerArgs()?.at(-1)).toBe("tar cf - -C / workspace");
    });

    it.each<[string, string]>([
        ["a bare bash -c", "bash -c 'airlock checkpoint'"],
        ["a frame with a second command after it", frame("airlock checkpoint") + "\necho second"],
        ["a frame whose eval holds a bare quote", frame("airlock checkpoint --label it's")],
        ["a frame with a raw quote in its outer quoting", frame("airlock checkpoint").replace("exit 126", "exit 126 'x'")],
        ["a frame with another first line", frame("airlock checkpoint").replace("builtin cd --", "cd")],
    ])("%s that looks like the runtime's frame is an ordinary command for the container", async (_, command) => {
        const { invoke, calls, dockerArgs } = await installWrapper();
        invoke(command);
        expect(calls()).toEqual([]);
        // The stub writes one argument per line: the command is the last of them.
        expect(dockerArgs()?.join("\n").endsWith(command)).toBe(true);
    });

    it("prints the engine's answer, and its refusal with exit 1", async () => {
        const { invoke, dir } = await installWrapper();
        expect(invoke("airlock checkpoint").stdout).toBe("checkpoint 7 of shared at 2026-11-23T10:00:00Z\n");
        expect(invoke("airlock checkpoints").stdout).toBe("ID  TIME (UTC)           KIND    LABEL\n7   2026-11-23 10:00:00  manual  before\n");
        fs.writeFileSync(path.join(dir, "fail"), "no checkpoint 999 in workspace shared (see: airlock checkpoints)");
        const refused = invoke("airlock restore 999");
        expect(refused.status).toBe(1);
        expect(refused.stdout).toBe("");
        expect(refused.stderr).toBe("airlock: no checkpoint 999 in workspace shared (see: airlock checkpoints)\n");
    });

    it.each(["airlock restore abc", "airlock restore 0", "airlock checkpoint; echo after", "airlock checkpoints --all", "airlock delete 1", "airlock", "airlockd checkpoint"])(
        "%s is not one of the verbs: an ordinary command for the container",
        async (command) => {
            const { invoke, calls, dockerArgs } = await installWrapper();
            invoke(command);
            expect(calls()).toEqual([]);
            expect(dockerArgs()?.at(-1)).toBe(command);
        },
    );
});

describe.runIf(toolsAvailable("checkpoint wrapper tests", ["bash", "socat", "systemd-socket-activate", "python3", "unshare", "nft", "ip"]))("automatic checkpoints in the wrapper", () => {
    it("a destructive command gets a checkpoint first, named on its record, and says how to undo it", async () => {
        const { invoke, calls, dockerArgs, record } = await installWrapper();
        const result = invoke("mkdir -p app && rm -rf app/build");
        expect(result.status).toBe(0);
        expect(calls()).toEqual([`create shared --label-b64 ${b64("mkdir -p app && rm -rf app/build")} --auto`]);
        expect(result.stderr).toBe("airlock: checkpoint 7 taken before this command (rm-recursive); undo with: airlock restore 7\n");
        expect(dockerArgs()?.at(-1)).toBe("mkdir -p app && rm -rf app/build");
        expect(record().filter((e) => e.kind === "begin").at(-1)).toMatchObject({ command: "mkdir -p app && rm -rf app/build", checkpoint: 7 });
    });

    it("an ordinary command takes none", async () => {
        const { invoke, calls, record } = await installWrapper();
        expect(invoke("echo tested").status).toBe(0);
        expect(calls()).toEqual([]);
        expect(record().filter((e) => e.kind === "begin").at(-1)).toMatchObject({ command: "echo tested", checkpoint: null });
    });

    it("with airlock:sandbox.checkpoints.auto false, none is taken", async () => {
        const { invoke, calls } = await installWrapper((c) => (c["airlock:sandbox"].checkpoints = { auto: false }));
        expect(invoke("rm -rf build").status).toBe(0);
        expect(calls()).toEqual([]);
    });

    it("when the checkpoint cannot be taken the command still runs, with a warning", async () => {
        const { invoke, dockerArgs, dir } = await installWrapper();
        fs.writeFileSync(path.join(dir, "fail"), "checkpoints are off: the workspace volume holds ext4, not btrfs (docs/checkpoints.md)");
        const result = invoke("rm -rf build");
        expect(result.status).toBe(0);
        expect(result.stderr).toBe("airlock: no automatic checkpoint: checkpoints are off: the workspace volume holds ext4, not btrfs (docs/checkpoints.md); running the command anyway\n");
        expect(dockerArgs()?.at(-1)).toBe("rm -rf build");
    });

    it("the command after a checkpoint, and its exit status, are noted on it", async () => {
        const { invoke, calls, reset, volume } = await installWrapper();
        invoke("true");
        expect(calls()).toEqual([]);
        fs.writeFileSync(path.join(volume, "checkpoints", "shared", ".awaiting-begin"), "");
        reset();
        expect(invoke("exit 3").status).toBe(3);
        expect(calls()).toEqual([`note shared begin ${b64("exit 3")}`]);
        fs.rmSync(path.join(volume, "checkpoints", "shared", ".awaiting-begin"));
        fs.writeFileSync(path.join(volume, "checkpoints", "shared", ".awaiting-end"), "");
        reset();
        expect(invoke("exit 4").status).toBe(4);
        expect(calls()).toEqual(["note shared end 4"]);
    });
});

describe.runIf(toolsAvailable("checkpoint wrapper tests", ["bash", "socat", "systemd-socket-activate", "python3", "unshare", "nft", "ip"]))("per-session mode in the wrapper", () => {
    const perSession = (c: Record<string, any>) => (c["airlock:sandbox"].sessions = "per-session");

    it("AIRLOCK_SESSION picks the session: its container runs the command, its workspace takes the verbs", async () => {
        const { invoke, calls, dockerArgs, reset } = await installWrapper(perSession);
        expect(invoke("echo built", { AIRLOCK_SESSION: "task-42" }).status).toBe(0);
        expect(calls()).toEqual(["session-ensure s-task-42"]);
        expect(containerOf(dockerArgs())).toBe("agent-s-task-42");
        expect(dockerArgs()?.at(-1)).toBe("echo built");
        reset();
        expect(invoke("airlock restore last", { AIRLOCK_SESSION: "task-42" }).status).toBe(0);
        expect(calls()).toEqual(["session-ensure s-task-42", "restore s-task-42 --last"]);
    });

    it("without AIRLOCK_SESSION the connection gets a session of its own", async () => {
        const { invoke, calls, dockerArgs } = await installWrapper(perSession);
        expect(invoke("echo built").status).toBe(0);
        const digest = run("bash", ["-c", "printf '%s' '100.100.7.2 40000 100.100.7.1 22' | sha256sum"]).stdout.slice(0, 12);
        expect(calls()).toEqual([`session-ensure c-${digest} --connection 100.100.7.2 40000 100.100.7.1 22`]);
        expect(containerOf(dockerArgs())).toBe(`agent-c-${digest}`);
    });

    it.each(["../etc", "Upper", "-lead", "a b", "x".repeat(32), "$(id)"])("AIRLOCK_SESSION=%s is refused and nothing runs", async (name) => {
        const { invoke, calls, dockerArgs } = await installWrapper(perSession);
        const result = invoke("touch ran", { AIRLOCK_SESSION: name });
        expect(result.status).toBe(2);
        expect(result.stderr).toBe("airlock: AIRLOCK_SESSION must be 1-31 of a-z, 0-9 and -, starting with a letter or digit\n");
        expect(calls()).toEqual([]);
        expect(dockerArgs()).toBeUndefined();
    });

    it("in shared mode AIRLOCK_SESSION changes nothing", async () => {
        const { invoke, calls, dockerArgs } = await installWrapper();
        expect(invoke("echo built", { AIRLOCK_SESSION: "task-42" }).status).toBe(0);
        expect(calls()).toEqual([]);
        expect(containerOf(dockerArgs())).toBe("agent-sandbox-shell");
    });
});

describe.runIf(toolsAvailable("checkpoint broker tests", ["socat", "systemd-socket-activate", "python3"]))("the broker's checkpoint verbs take hostile requests", () => {
    it.each([
        "checkpoint workspace=../../etc",
        "checkpoint workspace=shared/../x",
        "checkpoint workspace=s-Alpha",
        "checkpoint workspace=shared auto=no",
        `checkpoint workspace=shared label=${"QUFB".repeat(400)}`,
        "checkpoint workspace=shared label=not-base64!",
        "checkpoints workspace=shared json=1",
        "restore workspace=shared",
        "restore workspace=shared id=0",
        "restore workspace=shared id=1 last=yes",
        "restore workspace=shared id=1;reboot",
        "session workspace=shared connection=",
        `session workspace=c-0123456789ab connection=${b64("1.2.3.4 1; rm 5.6.7.8 22")}`,
        "delete workspace=shared id=1",
    ])("%s is refused before the engine runs", async (request) => {
        const { calls, socket } = await installWrapper();
        const reply = talk(socket, `${request}\n`);
        expect(reply.lines).toHaveLength(1);
        expect(reply.lines[0]).toMatch(/^error /);
        expect(calls()).toEqual([]);
    });
});
