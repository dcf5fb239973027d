import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { AUDIT_PROGRAM } from "../cli/audit";
import { installBrokerFiles, recordEntries, startBroker, talk, TestBroker } from "./helpers/broker";
import { renderHosts, stackFile, tempDir } from "./helpers/stacks";
import { isRoot, run, toolsAvailable } from "./helpers/tools";

/**
 * The root broker on its own, through its socket as the wrapper reaches it: every
 * request is hostile, the record is a hash chain with one line per entry, and a
 * connection that goes away still gets its record completed.
 */

const b64 = (text: string | Buffer) => Buffer.from(text).toString("base64");
const sha256 = (line: string) => createHash("sha256").update(line).digest("hex");
const CONNECTION = b64("100.100.7.2 52000 100.100.7.1 22");
const IMAGE = b64(`sha256:${"1f".repeat(32)} registry.example/shell@sha256:${"ab".repeat(32)}`);
const begin = (command: string, env = "-", extra = "") => `record-begin command=${b64(command)} env=${env} image=${IMAGE} connection=${CONNECTION}${extra}\n`;

describe.runIf(toolsAvailable("root broker", ["systemd-socket-activate", "socat", "python3"]))("root broker", () => {
    let broker: TestBroker;
    let dir: string;

    beforeAll(async () => {
        dir = tempDir("broker");
        const files = installBrokerFiles(renderHosts(readStackFile(stackFile("dev"))).sandbox, dir);
        broker = await startBroker(files.broker, files.socket, files.stateDir, undefined, { AIRLOCK_CHECKPOINT_ENGINE: path.join(dir, "engine") });
    });
    afterAll(async () => {
        await broker?.stop();
        if (process.env.AIRLOCK_DEBUG) console.log(fs.readFileSync(broker.log, "utf8"));
    });

    const lines = () => (fs.existsSync(broker.recordFile) ? fs.readFileSync(broker.recordFile, "utf8").split("\n").filter(Boolean) : []);

    it("records a command before it runs and completes it after, on one connection", () => {
        const reply = talk(broker.socket, begin("git status", "GITHUB_TOKEN,TASK_ID") + "record-end exit=3\n");
        expect(reply.lines).toEqual([expect.stringMatching(/^data \d+$/), "ok", "ok"]);
        const entries = recordEntries(broker.recordFile);
        const [started, ended] = entries.slice(-2);
        expect(started).toMatchObject({
            v: 1,
            kind: "begin",
            command: "git status",
            env: ["GITHUB_TOKEN", "TASK_ID"],
            session: "100.100.7.2:52000",
            source: "100.100.7.1",
            image: `registry.example/shell@sha256:${"ab".repeat(32)}`,
            image_id: `sha256:${"1f".repeat(32)}`,
            checkpoint: null,
            uid: process.getuid!(),
        });
        expect(String(started.seq)).toBe(reply.lines[0].slice(5));
        expect(ended).toMatchObject({ kind: "end", of: started.seq, exit: 3, ended: "exited" });
        expect(ended.duration_ms).toBeGreaterThanOrEqual(0);
        expect(entries[0]).toMatchObject({ seq: 0, kind: "chain", prev: "0".repeat(64) });
        expect(entries[0].chain).toMatch(/^[0-9a-f]{32}$/);
    });

    it("chains every line to the one before it, by the SHA-256 of its bytes", () => {
        const all = lines();
        all.forEach((line, i) => {
            const entry = JSON.parse(line);
            expect(entry.seq).toBe(i);
            if (i > 0) expect(entry.prev).toBe(sha256(all[i - 1]));
        });
    });

    it("keeps hostile text in one escaped line: newlines, quotes, terminal escapes, invalid UTF-8", () => {
        const nasty = Buffer.concat([Buffer.from('echo "}\n{\\"kind\\":\\"end\\"}\r\x1b[2K\x07 '), Buffer.from([0xff, 0xfe])]);
        const before = lines().length;
        const reply = talk(broker.socket, `record-begin command=${b64(nasty)} env=- image= connection=\nrecord-end exit=0\n`);
        expect(reply.lines.slice(1)).toEqual(["ok", "ok"]);
        const added = lines().slice(before);
        expect(added).toHaveLength(2);
        expect(added[0]).toMatch(/^[\x20-\x7e]+$/);
        expect(JSON.parse(added[0]).command).toBe('echo "}\n{\\"kind\\":\\"end\\"}\r\x1b[2K\x07 \\xff\\xfe');
        expect(JSON.parse(added[0])).toMatchObject({ image: null, image_id: null, session: null, source: null });
    });

    it("refuses every malformed request with one error line and leaves the record alone", () => {
        const value = ["ghp", "notARealTokenButShapedLikeOne0123456789"].join("_");
        const refused: [string, string | Buffer, RegExp][] = [
            ["unknown verb", "rm-record\n", /^error unknown verb rm-record$/],
            ["verb with shell syntax", "record-begin;id\n", /^error unknown verb$/],
            ["missing arguments", `record-begin command=${b64("ls")}\n`, /missing env, image, connection/],
            ["unknown argument", begin("ls", "-", " extra=1"), /unexpected argument extra/],
            ["argument twice", begin("ls", "-", ` command=${b64("id")}`), /command given twice/],
            ["not base64", begin("ls").replace(/command=\S+/, "command=$(id)"), /command: expected base64/],
            ["base64 with a bad tail", begin("ls").replace(/command=\S+/, "command=bHM"), /command: expected base64/],
            ["a value where names go", begin("ls", `GITHUB_TOKEN=${value}`), /env: expected distinct variable names/],
            ["lower-case names", begin("ls", "github_token"), /env: expected distinct/],
            ["names twice", begin("ls", "A,A"), /env: expected distinct/],
            ["image not from docker inspect", begin("ls").replace(/image=\S+/, `image=${b64("sha256:x; rm -rf /")}`), /image: expected/],
            ["connection that is not SSH_CONNECTION", begin("ls").replace(/connection=\S+/, `connection=${b64("1.2.3.4 22")}`), /connection: expected/],
            ["empty command", begin(""), /command: empty/],
            ["command over the kernel's limit", begin("x".repeat(128 * 1024 + 1)), /command: longer than 131072 bytes/],
            ["two spaces", begin("ls").replace(" env", "  env"), /printable ASCII words/],
            ["a tab", begin("ls").replace(" env", "\tenv"), /printable ASCII words/],
            ["a NUL byte", Buffer.concat([Buffer.from("record-end exit=0"), Buffer.from([0]), Buffer.from("\n")]), /printable ASCII words/],
            ["non-ASCII", "record-end exit=\u0660\n", /printable ASCII words/],
            ["exit out of range", "record-end exit=256\n", /exit: expected 0 to 255/],
            ["exit not a number", "record-end exit=0x1\n", /exit: expected a whole number/],
            ["end without a begin", "record-end exit=0\n", /no record is open on this connection/],
            ["read with a malformed chain", "record-read chain=../../etc start=0 nonce=" + "0".repeat(32) + "\n", /chain: malformed/],
            ["read with a malformed nonce", "record-read chain=- start=0 nonce=../x\n", /nonce: malformed/],
        ];
        const before = fs.readFileSync(broker.recordFile);
        for (const [what, request, expected] of refused) {
            const reply = talk(broker.socket, request);
            expect(reply.lines, what).toHaveLength(1);
            expect(reply.lines[0], what).toMatch(expected);
        }
        expect(fs.readFileSync(broker.recordFile).equals(before)).toBe(true);
    });

    it("answers an over-long line once and then hangs up", () => {
        const reply = talk(broker.socket, `record-end exit=${"1".repeat(300 * 1024)}\nrecord-end exit=0\n`);
        expect(reply.lines).toEqual([expect.stringMatching(/^error a request is one line of at most 262144 bytes$/)]);
    });

    it("one open record per connection, and an end only for it", () => {
        const reply = talk(broker.socket, begin("sleep 1") + begin("id") + "record-end exit=0\nrecord-end exit=0\n");
        expect(reply.lines.slice(1)).toEqual(["ok", "error a record is already open on this connection", "ok", "error no record is open on this connection"]);
    });

    it("completes the record itself when the client goes away without an end", () => {
        const reply = talk(broker.socket, begin("sleep 600"));
        expect(reply.lines[1]).toBe("ok");
        const seq = Number(reply.lines[0].slice(5));
        const ended = recordEntries(broker.recordFile).find((e) => e.kind === "end" && e.of === seq);
        expect(ended).toMatchObject({ exit: null, ended: "client-gone" });
    });

    it("keeps one linear chain under concurrent connections", async () => {
        const before = lines().length;
        const clients = Array.from({ length: 16 }, (_, i) =>
            new Promise<void>((resolve) => {
                const { spawn } = require("node:child_process") as typeof import("node:child_process");
                const socat = spawn("socat", ["-t", "5", "-", `UNIX-CONNECT:${broker.socket}`], { stdio: ["pipe", "ignore", "ignore"] });
                socat.stdin.end(begin(`echo ${i}`) + "record-end exit=0\n");
                socat.on("exit", () => resolve());
            }),
        );
        await Promise.all(clients);
        const all = lines();
        expect(all.length - before).toBe(32);
        all.forEach((line, i) => {
            expect(JSON.parse(line).seq).toBe(i);
            if (i > 0) expect(JSON.parse(line).prev).toBe(sha256(all[i - 1]));
        });
        const ends = recordEntries(broker.recordFile).filter((e) => e.kind === "end").map((e) => e.of);
        expect(new Set(ends).size).toBe(ends.length);
    });

    it("reads the record back from a sequence number of its chain, or whole for another chain, then signs its head", () => {
        const chain = recordEntries(broker.recordFile)[0].chain;
        const total = lines().length;
        const nonce = "5e".repeat(16);
        const from = talk(broker.socket, `record-read chain=${chain} start=${total - 2} nonce=${nonce}\n`).lines;
        expect(from.slice(0, -2)).toEqual(lines().slice(-2).map((l) => `data ${l}`));
        expect(from.at(-1)).toBe("ok");
        // The head of what was sent, with the reader's nonce, verifies against the sandbox's public key only.
        const signature = Buffer.from(from.at(-2)!.replace(/^data signature /, ""), "base64");
        const head = (n: string) => `airlock-record-head v1\nchain ${chain}\nseq ${total - 1}\nhash ${sha256(lines().at(-1)!)}\nnonce ${n}\n`;
        const verify = (statement: string, publicKey = broker.signingPublicKey) => {
            const where = tempDir("signers");
            fs.writeFileSync(path.join(where, "allowed"), `sandbox ${publicKey}\n`);
            fs.writeFileSync(path.join(where, "sig"), signature);
            return run("ssh-keygen", ["-Y", "verify", "-f", path.join(where, "allowed"), "-I", "sandbox", "-n", "airlock-record@airlock", "-s", path.join(where, "sig")], { input: statement }).status;
        };
        expect(verify(head(nonce))).toBe(0);
        expect(verify(head("00".repeat(16)))).not.toBe(0);
        const other = path.join(tempDir("other-key"), "key");
        run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", other]);
        expect(verify(head(nonce), fs.readFileSync(`${other}.pub`, "utf8").split(" ").slice(0, 2).join(" "))).not.toBe(0);
        expect(talk(broker.socket, `record-read chain=${"0".repeat(32)} start=${total - 2} nonce=${nonce}\n`).lines).toHaveLength(total + 2);
        expect(talk(broker.socket, `record-read chain=- start=5 nonce=${nonce}\n`).lines).toHaveLength(total + 2);
        expect(talk(broker.socket, `record-read chain=- start=5\n`).lines).toEqual(["error record-read: missing nonce"]);
    });

    it("refuses new records (and so commands) when the record's last line is incomplete", () => {
        const before = fs.readFileSync(broker.recordFile);
        fs.appendFileSync(broker.recordFile, '{"v":1,"seq":');
        try {
            const reply = talk(broker.socket, begin("ls"));
            expect(reply.lines).toEqual([expect.stringMatching(/^error the command record ends in an incomplete line; move .* aside to start a new chain$/)]);
        } finally {
            fs.writeFileSync(broker.recordFile, before);
        }
    });

    it("puts the undo verbs on the record itself, ran, refused or failed, before the agent hears the answer, and the changing ones before they run; the gateway's checker takes them", () => {
        // A stand-in engine with the real one's exits: restore 7 works, 11 fails on the way (1), anything else is refused (2).
        const engine = path.join(dir, "engine");
        fs.writeFileSync(
            engine,
            '#!/bin/sh\ncase "$1 $4" in "restore 7") echo "airlock: restored workspace shared to checkpoint 7";; "restore 11") echo "airlock: the workspace is restored to checkpoint 11, but its container did not start" >&2; exit 1;; "create "*) echo "checkpoint 4 of shared (manual)";; *) echo "airlock: no checkpoint 9 in workspace shared" >&2; exit 2;; esac\n',
            { mode: 0o755 },
        );
        const before = lines().length;
        const asked = talk(broker.socket, "checkpoint workspace=shared label=" + b64("before the refactor") + "\nrestore workspace=shared id=7\nrestore workspace=shared id=9\nrestore workspace=shared id=11\n");
        expect(asked.lines).toEqual(["data checkpoint 4 of shared (manual)", "ok", "data restored workspace shared to checkpoint 7", "ok", "error no checkpoint 9 in workspace shared", "error the workspace is restored to checkpoint 11, but its container did not start"]);
        const verbs = recordEntries(broker.recordFile).slice(before);
        const me = process.getuid!();
        expect(verbs.map((e) => [e.kind, e.verb, e.workspace, e.args, e.outcome, e.detail, e.uid])).toEqual([
            ["verb", "checkpoint", "shared", { label: "before the refactor" }, "started", "", me],
            ["verb", "checkpoint", "shared", { label: "before the refactor" }, "ok", "checkpoint 4 of shared (manual)", me],
            ["verb", "restore", "shared", { id: "7" }, "started", "", me],
            ["verb", "restore", "shared", { id: "7" }, "ok", "restored workspace shared to checkpoint 7", me],
            ["verb", "restore", "shared", { id: "9" }, "started", "", me],
            ["verb", "restore", "shared", { id: "9" }, "refused", "no checkpoint 9 in workspace shared", me],
            ["verb", "restore", "shared", { id: "11" }, "started", "", me],
            ["verb", "restore", "shared", { id: "11" }, "failed", "the workspace is restored to checkpoint 11, but its container did not start", me],
        ]);
        // The gateway's checker reads them as records of the chain.
        const copy = tempDir("verbs-copy");
        fs.copyFileSync(broker.recordFile, path.join(copy, "record.jsonl"));
        const audit = (...args: string[]) => run("/usr/bin/python3", ["-IS", AUDIT_PROGRAM, "--config", "-", "--dir", copy, ...args]);
        expect(audit("verify").status).toBe(0);
        expect(audit("show").stdout).toMatch(/^#\d+ \S+ {2}restore shared id=7 {2}by (root|uid \d+) {2}ok\n {4}restored workspace shared to checkpoint 7$/m);
    });

    it("a session the engine refused or failed to start is on the record from that attempt (red team 5: a creation whose container did not start was never recorded)", () => {
        const engine = path.join(dir, "engine");
        fs.writeFileSync(engine, '#!/bin/sh\ncase "$2" in s-full) echo "airlock: 8 sessions exist already" >&2; exit 2;; *) echo "airlock: cannot start container agent-$2: name in use" >&2; exit 1;; esac\n', { mode: 0o755 });
        const before = lines().length;
        expect(talk(broker.socket, `session workspace=s-web connection=${CONNECTION}\n`).lines).toEqual(["error cannot start container agent-s-web: name in use"]);
        expect(talk(broker.socket, `session workspace=s-full connection=${CONNECTION}\n`).lines).toEqual(["error 8 sessions exist already"]);
        const recorded = recordEntries(broker.recordFile).slice(before);
        expect(recorded.map((e) => [e.verb, e.workspace, e.outcome, e.detail])).toEqual([
            ["session-create", "s-web", "failed", "cannot start container agent-s-web: name in use"],
            ["session-create", "s-full", "refused", "8 sessions exist already"],
        ]);
    });

    it("writes no record the gateway's checker refuses: each kind at its limits, in invalid UTF-8, control and astral characters (red team 4: one such label stopped every later pull)", () => {
        const engine = path.join(dir, "engine");
        fs.writeFileSync(engine, '#!/bin/sh\nprintf "checkpoint 5 of shared (manual) "; head -c 3000 /dev/zero | tr "\\0" "\\377"; echo\n', { mode: 0o755 });
        const invalid = (n: number) => Buffer.alloc(n, 0xff);
        const mixed = (n: number) => Buffer.concat(Array.from({ length: n }, (_, i) => [Buffer.from([0xf4, 0x90, 0x80, 0x80]), Buffer.from("\x1b\x07"), Buffer.from("😀")][i % 3]));
        const before = lines().length;
        const commandOf = (bytes: Buffer) => `record-begin command=${b64(bytes)} env=- image=${IMAGE} connection=${CONNECTION}\nrecord-end exit=0\n`;
        for (const text of [invalid(128 * 1024), mixed(32 * 1024)]) {
            const said = talk(broker.socket, commandOf(text));
            expect(said.lines.at(-1), `${said.status} ${said.stderr} ${said.lines}`).toBe("ok");
        }
        for (const label of [invalid(1000), mixed(250)]) {
            expect(talk(broker.socket, `checkpoint workspace=shared label=${b64(label)}\n`).lines.at(-1)).toBe("ok");
            talk(broker.socket, `restore workspace=shared label=${b64(label)}\n`);
        }
        if (isRoot()) expect(talk(broker.socket, `record-event workspace=s-x event=session-removed detail=${b64(invalid(1000))}\n`).lines).toEqual(["ok"]);
        const written = lines().slice(before);
        expect(written.length).toBeGreaterThanOrEqual(isRoot() ? 9 : 8);
        const copy = tempDir("worst-copy");
        fs.copyFileSync(broker.recordFile, path.join(copy, "record.jsonl"));
        const verified = run("/usr/bin/python3", ["-IS", AUDIT_PROGRAM, "--config", "-", "--dir", copy, "verify"]);
        expect(verified.stdout + verified.stderr).toMatch(/chain intact/);
        expect(verified.status).toBe(0);
    });

    it.runIf(isRoot())("refuses new records when the record's filesystem is nearly full", async () => {
        const small = tempDir("broker-full");
        expect(run("mount", ["-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", small]).status).toBe(0);
        const files = installBrokerFiles(renderHosts(readStackFile(stackFile("dev"))).sandbox, tempDir("broker-full-files"));
        const full = await startBroker(files.broker, files.socket, small);
        try {
            expect(talk(full.socket, begin("ls")).lines).toEqual(["error less than 256 MiB free for the command record"]);
            expect(fs.existsSync(path.join(small, "record.jsonl")) && fs.statSync(path.join(small, "record.jsonl")).size).toBeFalsy();
        } finally {
            await full.stop();
            run("umount", [small]);
        }
    });
});
