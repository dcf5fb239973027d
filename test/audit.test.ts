import { createHash } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { AUDIT_CONFIG_PATH, SANDBOX_WRAPPER_PATH } from "../components/render/hosts";
import { AUDIT_PROGRAM } from "../cli/audit";
import { installBrokerFiles, startBroker, talk, TestBroker } from "./helpers/broker";
import { airlock } from "./helpers/cli";
import { renderHosts, renderedFile, REPO, stackFile, tempDir } from "./helpers/stacks";
import { docTranscript } from "./helpers/docs";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * airlock-audit, the gateway's side of the record: verify names the first break,
 * pull appends only what extends the chain it holds (the sandbox is hostile), show
 * joins the resolver's query log. `airlock audit --from DIR` runs the same program.
 */

const b64 = (text: string) => Buffer.from(text).toString("base64");
const sha256 = (line: string) => createHash("sha256").update(line).digest("hex");
const CONNECTION = b64("100.100.7.2 52000 100.100.7.1 22");
const audit = (args: string[]) => run("/usr/bin/python3", ["-IS", AUDIT_PROGRAM, "--config", "-", ...args]);
const cli = (args: string[]) => airlock(args);

/** A sandbox: rendered wrapper + broker, and a stand-in `ssh` that runs the wrapper with the gateway's request. */
async function sandbox() {
    const dir = tempDir("audit-sandbox");
    const host = renderHosts(readStackFile(stackFile("dev"))).sandbox;
    const files = installBrokerFiles(host, dir);
    fs.writeFileSync(path.join(dir, SANDBOX_WRAPPER_PATH), renderedFile(host, SANDBOX_WRAPPER_PATH), { mode: 0o755 });
    const broker = await startBroker(files.broker, files.socket, files.stateDir);
    const ssh = path.join(dir, "ssh");
    fs.writeFileSync(ssh, `#!/bin/bash\nSSH_ORIGINAL_COMMAND="$1" exec ${path.join(dir, SANDBOX_WRAPPER_PATH)}\n`, { mode: 0o755 });
    const command = (text: string, exit = 0, env = "-") =>
        talk(broker.socket, `record-begin command=${b64(text)} env=${env} image= connection=${CONNECTION}\nrecord-end exit=${exit}\n`);
    return { dir, broker, ssh, command };
}

/**
 * A gateway: its audit directory and a config whose ssh reaches `ssh`, pinning `signer`
 * (the sandbox's host public key, "TYPE BASE64") in a known_hosts file as the gateway does.
 */
function gateway(ssh: string, signer: string) {
    const dir = tempDir("audit-gateway");
    const config = path.join(dir, "audit.json");
    const knownHosts = path.join(dir, "known_hosts");
    const records = path.join(dir, "records");
    const configure = (reach: string[], more: object = {}, key = signer) => {
        fs.writeFileSync(knownHosts, `airlock-dev-sandbox ${key}\n`);
        fs.writeFileSync(config, JSON.stringify({ dir: records, ssh: reach, querylog: [], signer: { known_hosts: knownHosts, host: "airlock-dev-sandbox" }, ...more }));
    };
    configure([ssh]);
    const pull = () => run("/usr/bin/python3", ["-IS", AUDIT_PROGRAM, "--config", config, "pull"]);
    const held = () => fs.readdirSync(records).filter((n) => n.endsWith(".jsonl"));
    return { dir, records, pull, held, config, configure };
}

describe.runIf(toolsAvailable("airlock-audit", ["socat", "systemd-socket-activate", "python3"]))("airlock-audit", () => {
    let sb: Awaited<ReturnType<typeof sandbox>>;
    const brokers: TestBroker[] = [];

    beforeAll(async () => {
        sb = await sandbox();
        brokers.push(sb.broker);
        for (let i = 0; i < 10; i++) expect(sb.command(`step ${i}`, i === 6 ? 2 : 0, i === 3 ? "GITHUB_TOKEN" : "-").lines.at(-1)).toBe("ok");
    });
    afterAll(async () => {
        for (const broker of brokers) await broker.stop();
    });

    /** A copy of the sandbox's record in its own folder, changed by `edit` (lines without their newline). */
    function tamperedCopy(edit: (lines: string[]) => string[]): string {
        const dir = tempDir("audit-copy");
        const lines = fs.readFileSync(sb.broker.recordFile, "utf8").split("\n").filter(Boolean);
        fs.writeFileSync(path.join(dir, "record.jsonl"), edit(lines).map((l) => `${l}\n`).join(""));
        return dir;
    }
    const firstBreak = (dir: string) => {
        const result = audit(["--dir", dir, "verify", "--json"]);
        return { status: result.status, break: JSON.parse(result.stdout).chains[0].break };
    };

    it("verify passes an intact chain", () => {
        const result = audit(["--dir", tamperedCopy((l) => l), "verify"]);
        expect(result.stdout).toMatch(/record\.jsonl: 21 records, chain intact/);
        expect(result.status).toBe(0);
    });

    it("editing one record breaks verify at that record", () => {
        const edited = firstBreak(tamperedCopy((l) => l.map((line, i) => (i === 14 ? line.replace('"exit":2', '"exit":0') : line))));
        expect(JSON.parse(fs.readFileSync(sb.broker.recordFile, "utf8").split("\n")[14])).toMatchObject({ kind: "end", exit: 2 });
        expect(edited).toEqual({ status: 1, break: { seq: 14, line: 15, reason: "record 14 was altered: its hash no longer matches what record 15 holds" } });
        // A command text changed in place, its own prev untouched: the same.
        expect(firstBreak(tamperedCopy((l) => l.map((line, i) => (i === 5 ? line.replace("step 2", "step X") : line)))).break.seq).toBe(5);
    });

    it("deleting one record breaks verify at that record", () => {
        expect(firstBreak(tamperedCopy((l) => l.filter((_, i) => i !== 8)))).toEqual({ status: 1, break: { seq: 8, line: 9, reason: "record 8 is missing (deleted)" } });
    });

    it("reordering two records breaks verify at the first of them", () => {
        const swapped = firstBreak(tamperedCopy((l) => [...l.slice(0, 9), l[10], l[9], ...l.slice(11)]));
        expect(swapped).toEqual({ status: 1, break: { seq: 9, line: 10, reason: "out of order: record 9 comes after record 10" } });
    });

    it("a copy re-chained after an edit passes verify on its own: that is why the gateway keeps its own copy", () => {
        // Re-chaining from the edit on yields a self-consistent file: the chain alone cannot
        // catch that, which is why the gateway pulls and keeps its own copy (next tests).
        const rechained = tamperedCopy((l) => {
            const out = [...l];
            out[14] = out[14].replace('"exit":2', '"exit":0');
            for (let i = 15; i < out.length; i++) out[i] = out[i].replace(/"prev":"[0-9a-f]{64}"/, `"prev":"${sha256(out[i - 1])}"`);
            return out;
        });
        expect(firstBreak(rechained).status).toBe(0);
    });

    it("refuses lines the broker would never write: duplicate keys, other spacing, unknown fields, an end of nothing, half a line", () => {
        const cases: [string, (l: string[]) => string[], number, RegExp][] = [
            ["duplicate key", (l) => l.map((x, i) => (i === 3 ? x.replace('"kind":"begin"', '"kind":"begin","kind":"begin"') : x)), 3, /not a JSON record \(a key appears twice\)/],
            ["spacing", (l) => l.map((x, i) => (i === 3 ? x.replace('"kind":"begin"', '"kind": "begin"') : x)), 3, /not a record as the broker writes it/],
            ["extra field", (l) => l.map((x, i) => (i === 3 ? x.replace('"kind":"begin"', '"kind":"begin","token":"x"') : x)), 3, /unexpected fields/],
            ["half a line", (l) => [...l.slice(0, -1), l.at(-1)!.slice(0, 20)], 20, /not a JSON record/],
        ];
        for (const [what, edit, seq, reason] of cases) {
            const found = firstBreak(tamperedCopy(edit));
            expect(found.status, what).toBe(1);
            expect(found.break.seq, what).toBe(seq);
            expect(found.break.reason, what).toMatch(reason);
        }
        const dir = tempDir("audit-partial");
        fs.writeFileSync(path.join(dir, "record.jsonl"), fs.readFileSync(sb.broker.recordFile, "utf8").slice(0, -5));
        expect(firstBreak(dir).break).toMatchObject({ seq: 20, reason: "an incomplete last line" });
    });

    it("pull brings the record to the gateway, then only what is new", () => {
        const gw = gateway(sb.ssh, sb.broker.signingPublicKey);
        const first = gw.pull();
        expect(first.stderr).toBe("");
        expect(first.stdout).toMatch(/^airlock-audit: pulled 21 new records in chain [0-9a-f]{32}$/m);
        const [file] = gw.held();
        expect(fs.readFileSync(path.join(gw.records, file), "utf8")).toBe(fs.readFileSync(sb.broker.recordFile, "utf8"));
        expect(fs.statSync(gw.records).mode & 0o777).toBe(0o700);
        expect(fs.statSync(path.join(gw.records, file)).mode & 0o777).toBe(0o600);
        expect(gw.pull().stdout).toMatch(/pulled 0 new records/);
        sb.command("one more");
        expect(gw.pull().stdout).toMatch(/pulled 2 new records/);
        expect(fs.readFileSync(path.join(gw.records, file), "utf8")).toBe(fs.readFileSync(sb.broker.recordFile, "utf8"));
        expect(audit(["--dir", gw.records, "verify"]).status).toBe(0);
    });

    it("a sandbox briefly away (ssh exits 255) is tried again in the same run, and the pull recovers without failing", () => {
        const gw = gateway(sb.ssh, sb.broker.signingPublicKey);
        // ssh that cannot connect twice (as while the sandbox reboots), then reaches it.
        const flaky = path.join(gw.dir, "ssh");
        const tries = path.join(gw.dir, "tries");
        fs.writeFileSync(flaky, `#!/bin/bash\necho x >> ${tries}\n[ "$(wc -l < ${tries})" -le 2 ] && { echo 'ssh: connect to host sandbox port 22: No route to host' >&2; exit 255; }\nexec ${sb.ssh} "$@"\n`, { mode: 0o755 });
        gw.configure([flaky], { retry_seconds: 0.1 });
        const recovered = gw.pull();
        expect(recovered.stderr).toMatch(/the sandbox is unreachable \(try 1 of 4\); trying again in 0\.1 s\n[^]*\(try 2 of 4\)/);
        expect(recovered.status).toBe(0);
        expect(recovered.stdout).toMatch(/pulled \d+ new records/);
        // Away for good: four tries, then the run fails (and its unit alerts).
        fs.writeFileSync(flaky, `#!/bin/bash\necho x >> ${tries}\nexit 255\n`, { mode: 0o755 });
        fs.writeFileSync(tries, "");
        const away = gw.pull();
        expect(away.status).toBe(1);
        expect(fs.readFileSync(tries, "utf8").split("\n").filter(Boolean)).toHaveLength(4);
        // The wrapper's own refusal is an answer, not an absence: not tried again.
        fs.writeFileSync(flaky, `#!/bin/bash\necho x >> ${tries}\nexit 1\n`, { mode: 0o755 });
        fs.writeFileSync(tries, "");
        expect(gw.pull().status).toBe(1);
        expect(fs.readFileSync(tries, "utf8").split("\n").filter(Boolean)).toHaveLength(1);
        gw.configure([flaky], { retry_seconds: "soon" });
        const bad = gw.pull();
        expect(bad.status).toBe(2);
        expect(bad.stderr.trim()).toBe(`airlock-audit: ${gw.config}: retry_seconds: expected a number of seconds from 0 to 300`);
    });

    it("a sandbox that rewrites history already pulled is caught at the next pull, and the gateway's copy stays as it was", () => {
        const gw = gateway(sb.ssh, sb.broker.signingPublicKey);
        expect(gw.pull().status).toBe(0);
        const [file] = gw.held();
        const before = fs.readFileSync(path.join(gw.records, file), "utf8");
        const original = fs.readFileSync(sb.broker.recordFile, "utf8");
        // The compromised sandbox rewrites one command's exit status and re-chains everything after it.
        const lines = original.split("\n").filter(Boolean);
        lines[14] = lines[14].replace('"exit":2', '"exit":0');
        for (let i = 15; i < lines.length; i++) lines[i] = lines[i].replace(/"prev":"[0-9a-f]{64}"/, `"prev":"${sha256(lines[i - 1])}"`);
        fs.writeFileSync(sb.broker.recordFile, lines.map((l) => `${l}\n`).join(""));
        try {
            sb.command("after the rewrite");
            const caught = gw.pull();
            expect(caught.status).toBe(1);
            expect(caught.stderr).toMatch(/the sandbox's record DIVERGES from the copy held here at record \d+: history that already left the sandbox was rewritten there; nothing appended/);
            expect(fs.readFileSync(path.join(gw.records, file), "utf8")).toBe(before);
        } finally {
            fs.writeFileSync(sb.broker.recordFile, original);
        }
    });

    /** A sandbox whose answer is whatever `answer` says (a compromised one). */
    function lyingSandbox(answer: string): string {
        const dir = tempDir("audit-liar");
        fs.writeFileSync(path.join(dir, "answer"), answer);
        const ssh = path.join(dir, "ssh");
        fs.writeFileSync(ssh, `#!/bin/bash\ncat ${path.join(dir, "answer")}\n`, { mode: 0o755 });
        return ssh;
    }

    it("from a lying sandbox it appends nothing: forged links, garbage, floods, a forged signature, no signature", () => {
        const lines = fs.readFileSync(sb.broker.recordFile, "utf8").split("\n").filter(Boolean);
        const data = (ls: string[]) => ls.map((l) => `data ${l}\n`).join("");
        const forged = lines[5].replace(/"prev":"[0-9a-f]{64}"/, `"prev":"${"f".repeat(64)}"`);
        const cases: [string, string, RegExp][] = [
            ["a forged link", data([...lines.slice(0, 5), forged, ...lines.slice(6)]) + "ok\n", /the sandbox's answer carries no signature/],
            ["garbage", data(lines.slice(0, 3)) + "rm -rf /\n", /an answer that is not the broker's/],
            ["a huge line", data(lines.slice(0, 2)) + `data ${"x".repeat(1100 * 1024)}\n`, /a line longer than any record/],
            ["no ok at the end", data(lines.slice(0, 4)), /the connection ended without the broker answering ok/],
            ["a signature of nothing", data(lines) + `data signature ${Buffer.from("not an SSHSIG").toString("base64")}\nok\n`, /not signed by its pinned host key/],
            ["terminal escapes in an error", data(lines.slice(0, 2)) + "error \x1b]0;owned\x07\x1b[2J\n", /the pull stopped: error \\x1b\]0;owned\\x07\\x1b\[2J; nothing appended/],
            ["nested too deeply", data(["[".repeat(100_000)]) + "ok\n", /carries no signature/],
        ];
        for (const [what, answer, reason] of cases) {
            const gw = gateway(lyingSandbox(answer), sb.broker.signingPublicKey);
            const result = gw.pull();
            expect(result.status, what).toBe(1);
            expect(result.stderr, what).toMatch(reason);
            expect(result.stderr, what).not.toMatch(/Traceback|[\x00-\x08\x0b-\x1f\x7f]/);
            expect(fs.existsSync(gw.records) ? gw.held() : [], what).toEqual([]);
        }
    });

    it("what the sandbox writes to ssh's stderr (the wrapper's, which the agent's uid can write to) reaches the operator escaped", () => {
        const dir = tempDir("audit-stderr");
        const ssh = path.join(dir, "ssh");
        fs.writeFileSync(ssh, `#!/bin/bash\nprintf '\\033]0;owned\\007\\033[2J\\033[31mpulled 0 new records\\n' >&2\necho "error nothing here"\n`, { mode: 0o755 });
        const result = gateway(ssh, sb.broker.signingPublicKey).pull();
        expect(result.status).toBe(1);
        expect(result.stderr).toContain("ssh: \\x1b]0;owned\\x07\\x1b[2J\\x1b[31mpulled 0 new records\n");
        expect(result.stderr).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f]/);
    });

    it("a pull hijacked by the agent's uid (its wrapper stopped, its stdout answered through /proc/PID/fd/1) appends nothing and fails loudly", () => {
        const gw = gateway(sb.ssh, sb.broker.signingPublicKey);
        expect(gw.pull().status).toBe(0);
        const [file] = gw.held();
        sb.command("step 10 (the one to hide)");
        sb.command("step 11");
        const before = fs.readFileSync(path.join(gw.records, file), "utf8");
        const hijacker = path.join(REPO, "test/fixtures/attacks/hijack-pull");
        // The stand-in ssh starts the real wrapper as the agent's uid does; the attacker (the
        // same uid) catches it stopped, reads the gateway's request from /proc/PID/environ,
        // asks the broker for a genuine signed answer, and writes its own through the
        // wrapper's stdout before killing it.
        const hijacked = (mode: string) => {
            const ssh = path.join(tempDir("audit-hijack"), "ssh");
            fs.writeFileSync(
                ssh,
                `#!/bin/bash\nSSH_ORIGINAL_COMMAND="$1" bash -c 'kill -STOP $$; exec "$0"' ${path.join(sb.dir, SANDBOX_WRAPPER_PATH)} &\n` +
                    `until grep -q '^[0-9]* ([^)]*) T' /proc/$!/stat; do sleep 0.01; done\n` +
                    `python3 ${hijacker} ${mode} $! ${sb.broker.socket}\nkill -KILL $! 2>/dev/null\nwait\n`,
                { mode: 0o755 },
            );
            return ssh;
        };
        const tried: Record<string, ReturnType<typeof gw.pull>> = {};
        for (const mode of ["rewrite", "rewrite-unsigned", "truncate", "replay"]) {
            gw.configure([hijacked(mode)]);
            tried[mode] = gw.pull();
            expect(tried[mode].status, `${mode}: ${tried[mode].stderr}`).toBe(1);
            expect(tried[mode].stderr, mode).toMatch(/not signed by its pinned host key|carries no signature|does not continue|DIVERGES/);
            expect(fs.readFileSync(path.join(gw.records, file), "utf8"), mode).toBe(before);
        }
        expect(tried.rewrite.stderr).toMatch(/not signed by its pinned host key \(forged, cut or altered on the way\); nothing appended/);
        expect(tried.replay.stderr).toMatch(/not signed by its pinned host key/);
        // A key other than the pinned one signs nothing the gateway takes (the sandbox's own answer, another key pinned).
        const other = path.join(tempDir("other-key"), "key");
        run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", other]);
        gw.configure([sb.ssh], {}, fs.readFileSync(`${other}.pub`, "utf8").split(" ").slice(0, 2).join(" "));
        expect(gw.pull().status).toBe(1);
        // The genuine answer, unhindered, is taken: both commands, nothing hidden.
        gw.configure([sb.ssh]);
        const honest = gw.pull();
        expect(honest.stdout).toMatch(/pulled 4 new records/);
        expect(fs.readFileSync(path.join(gw.records, file), "utf8")).toBe(fs.readFileSync(sb.broker.recordFile, "utf8"));
    });

    it("a new chain on the sandbox (a replaced server) waits for the operator's word, then becomes a new file; the old one is kept as it was", async () => {
        const gw = gateway(sb.ssh, sb.broker.signingPublicKey);
        expect(gw.pull().status).toBe(0);
        const [oldFile] = gw.held();
        const old = fs.readFileSync(path.join(gw.records, oldFile), "utf8");
        const fresh = await sandbox();
        brokers.push(fresh.broker);
        fresh.command("on the new server");
        gw.configure([fresh.ssh], {}, fresh.broker.signingPublicKey);
        const refused = gw.pull();
        expect(refused.status).toBe(1);
        const chain = refused.stderr.match(/the sandbox started a new chain ([0-9a-f]{32}) \(a new server, or its record was reset\); chain [0-9a-f]{32} stays as it is\. Take the new chain with: airlock-audit accept-chain \1; nothing appended/)?.[1];
        expect(chain, refused.stderr).toBeDefined();
        expect(gw.held()).toEqual([oldFile]);
        const accepted = run("/usr/bin/python3", ["-IS", AUDIT_PROGRAM, "--config", gw.config, "accept-chain", chain!]);
        expect(accepted.stdout.trim()).toBe(`airlock-audit: chain ${chain} is taken at the next pull; chain ${oldFile.replace(".jsonl", "")} stays as it is`);
        expect(run("/usr/bin/python3", ["-IS", AUDIT_PROGRAM, "--config", gw.config, "accept-chain", "../x"]).status).toBe(2);
        const result = gw.pull();
        expect(result.status).toBe(0);
        expect(result.stdout).toMatch(new RegExp(`took the sandbox's new chain ${chain}; chain [0-9a-f]{32} is kept as it is`));
        expect(gw.held()).toHaveLength(2);
        expect(fs.readFileSync(path.join(gw.records, oldFile), "utf8")).toBe(old);
        expect(audit(["--dir", gw.records, "verify"]).stdout.match(/chain intact/g)).toHaveLength(2);
    });

    it("a pull reads only what is new: it starts from where the last verified pull ended, and verify still reads everything", () => {
        const gw = gateway(sb.ssh, sb.broker.signingPublicKey);
        expect(gw.pull().status).toBe(0);
        const [file] = gw.held();
        // An early record altered in the held copy (which only root on the gateway can write):
        // the next pull does not read it again, the whole-chain check still finds it.
        const held = path.join(gw.records, file);
        const original = fs.readFileSync(held, "utf8");
        fs.writeFileSync(held, original.replace('"command":"step 1"', '"command":"step X"'));
        sb.command("after the edit");
        expect(gw.pull().stdout).toMatch(/pulled 2 new records/);
        expect(audit(["--dir", gw.records, "verify"]).stdout).toMatch(/first break at record 3/);
        // A held copy that is not where the last pull left it (cut short) is verified whole before anything is appended.
        const edited = fs.readFileSync(held, "utf8");
        fs.writeFileSync(held, edited.slice(0, edited.lastIndexOf("\n", edited.length - 2) + 1));
        sb.command("after the cut");
        const cut = gw.pull();
        expect(cut.status).toBe(1);
        expect(cut.stderr).toMatch(/the copy held here is broken at record 3/);
        // Cut short but intact: verified whole, then refilled from the sandbox's signed answer.
        fs.writeFileSync(held, original.slice(0, original.lastIndexOf("\n", original.length - 2) + 1));
        expect(gw.pull().status).toBe(0);
        expect(fs.readFileSync(held, "utf8")).toBe(fs.readFileSync(sb.broker.recordFile, "utf8"));
    });

    it("show joins each command with the names its source resolved while it ran, escapes hostile text, and the CLI agrees", () => {
        const dir = tempDir("audit-show");
        const box = fs.readFileSync(sb.broker.recordFile, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
        const step3 = box.find((e) => e.command === "step 3");
        const at = (ms: number) => new Date(Date.parse(step3.time) + ms).toISOString().replace("Z", "000+00:00");
        const q = (ms: number, host: string, ip = "100.100.7.1", filtered = false) =>
            JSON.stringify({ IP: ip, T: at(ms), QH: host, QT: "A", QC: "IN", CP: "", Result: filtered ? { IsFiltered: true, Reason: 3 } : {}, Elapsed: 1000 });
        const log = path.join(dir, "querylog.json");
        fs.writeFileSync(log, [q(5, "github.com"), q(6, "evil.example", "100.100.7.1", true), q(7, "other.example", "100.64.9.9"), "not json", q(-600_000, "long.ago.example")].join("\n") + "\n");
        const records = path.join(dir, "records");
        fs.mkdirSync(records);
        fs.copyFileSync(sb.broker.recordFile, path.join(records, "record.jsonl"));
        const shown = audit(["--dir", records, "show", "--json", "--querylog", log]);
        expect(shown.status).toBe(0);
        const parsed = JSON.parse(shown.stdout);
        const record = parsed.records.find((r: any) => r.command === "step 3");
        expect(record).toMatchObject({ env: ["GITHUB_TOKEN"], exit: 0, session: "100.100.7.2:52000", source: "100.100.7.1" });
        expect(record.dns.map((d: any) => [d.name, d.blocked])).toEqual([["github.com", false], ["evil.example", true]]);
        expect(parsed.records.find((r: any) => r.command === "step 6")).toMatchObject({ exit: 2 });
        expect(parsed.querylogUnreadableLines).toBe(1);

        const human = audit(["--dir", records, "show", "--querylog", log]).stdout;
        expect(human).toMatch(/session 100\.100\.7\.2:52000 {2}exit 0 {2}\d+\.\d s {2}env GITHUB_TOKEN\n {4}\$ step 3\n {4}dns: github\.com A, evil\.example A \(blocked\)/);
        expect(cli(["audit", "show", "--from", records, "--querylog", log, "--json"]).stdout).toBe(shown.stdout);

        // A lookup whose upstream failed is only in AdGuard's own log (lines as the real one
        // writes them: test/fixtures/adguard/adguardhome.log), once per upstream tried, without its client.
        const adguardTime = (ms: number) => at(ms).replace(/^(\d{4})-(\d\d)-(\d\d)T(.{15}).*$/, "$1/$2/$3 $4");
        const failed = (ms: number, upstream: string) =>
            `${adguardTime(ms)} [error] dnsproxy: exchange failed upstream=${upstream} question=";mfrggzdf.exfil-collector.net.\\tIN\\t TXT" duration=654.427µs err="exchanging with ${upstream} over udp: read: connection refused"`;
        const adguardLog = path.join(dir, "adguardhome.log");
        fs.writeFileSync(adguardLog, [`${adguardTime(0)} [info] dnsproxy: listening to udp addr=0.0.0.0:53`, failed(8, "9.9.9.9:53"), failed(9, "149.112.112.112:53")].join("\n") + "\n");
        const withFailures = JSON.parse(audit(["--dir", records, "show", "--json", "--querylog", log, "--querylog", adguardLog]).stdout);
        const step3dns = withFailures.records.find((r: any) => r.command === "step 3").dns;
        expect(step3dns.filter((d: any) => d.failed).map((d: any) => [d.name, d.type])).toEqual([["mfrggzdf.exfil-collector.net", "TXT"]]);
        expect(withFailures.querylogUnreadableLines).toBe(1);
        expect(audit(["--dir", records, "show", "--querylog", adguardLog]).stdout).toContain("mfrggzdf.exfil-collector.net TXT (failed upstream)");

        // The gateway's capture (tcpdump's lines, as test/fixtures/adguard/dns-queries.log): the lookups AdGuard
        // logged are the same entries (github.com once, the failure now with its client), the one it lost is kept.
        const epoch = (ms: number) => {
            const t = Date.parse(step3.time) + ms;
            return `${Math.floor(t / 1000)}.${String((t % 1000) * 1000).padStart(6, "0")}`;
        };
        const captured = (ms: number, name: string, type = "A") => `${epoch(ms)} IP 100.100.7.1.41234 > 100.100.7.2.53: 4242+ [1au] ${type}? ${name}. (51)`;
        const capture = path.join(dir, "dns-queries.log");
        fs.writeFileSync(capture, [captured(4, "github.com"), captured(7, "mfrggzdf.exfil-collector.net", "TXT"), captured(8, "lost.example")].join("\n") + "\n");
        const all = JSON.parse(audit(["--dir", records, "show", "--json", "--querylog", log, "--querylog", adguardLog, "--querylog", capture]).stdout);
        const merged = all.records.find((r: any) => r.command === "step 3").dns;
        expect(merged.map((d: any) => [d.name, d.blocked, d.failed, d.unlogged])).toEqual([
            ["github.com", false, false, false],
            ["evil.example", true, false, false],
            ["mfrggzdf.exfil-collector.net", false, true, false],
            ["lost.example", false, false, true],
        ]);

        // Hostile text from the sandbox reaches the terminal escaped.
        sb.command("printf done\x1b[2K\r\x1b]0;owned\x07");
        fs.copyFileSync(sb.broker.recordFile, path.join(records, "record.jsonl"));
        const escaped = audit(["--dir", records, "show", "--since", "1h"]).stdout;
        expect(escaped).toContain("$ printf done\\x1b[2K\\x0d\\x1b]0;owned\\x07");
        expect(escaped).not.toMatch(/[\x00-\x08\x0b-\x1f\x7f]/);
    });

    it("the CLI's verify exits like the gateway's: 0 intact, 1 at the first break, 2 for a folder that is not there", () => {
        const intact = tamperedCopy((l) => l);
        expect(cli(["audit", "verify", "--from", intact]).status).toBe(0);
        const broken = tamperedCopy((l) => l.filter((_, i) => i !== 8));
        const result = cli(["audit", "verify", "--from", broken]);
        expect(result.stdout).toMatch(/first break at record 8 \(line 9\): record 8 is missing \(deleted\)/);
        expect(result.status).toBe(1);
        expect(cli(["audit", "verify", "--from", path.join(broken, "nope")]).status).toBe(2);
    });

    it("the docs' samples are what the CLI prints", () => {
        const show = "airlock audit show --from test/fixtures/record --querylog test/fixtures/record/querylog.json";
        expect(cli(show.split(" ").slice(1)).stdout).toBe(docTranscript(show));
        const verify = "airlock audit verify --from test/fixtures/record";
        expect(cli(verify.split(" ").slice(1)).stdout).toBe(docTranscript(verify));
    });

    it("the gateway renders airlock-audit, its settings, and a pull timer with an alert on failure", () => {
        const gatewayHost = renderHosts(readStackFile(stackFile("dev"))).gateway;
        expect(renderedFile(gatewayHost, "/usr/local/sbin/airlock-audit")).toBe(fs.readFileSync(AUDIT_PROGRAM, "utf8"));
        expect(JSON.parse(renderedFile(gatewayHost, AUDIT_CONFIG_PATH))).toEqual({
            dir: "/var/lib/airlock/audit",
            ssh: ["ssh", "-F", "/etc/ssh/ssh_config.d/20-airlock-sandbox.conf", "-i", "/var/lib/airlock/sandbox-ssh/id_ed25519", "-o", "ControlPath=none", "sandbox"],
            signer: { known_hosts: "/etc/airlock/known_hosts", host: "airlock-dev-sandbox" },
            querylog: [
                "/var/lib/airlock/resolver/work/data/querylog.json.1",
                "/var/lib/airlock/resolver/work/data/querylog.json",
                "/var/lib/airlock/resolver/work/data/adguardhome.log",
                ...[7, 6, 5, 4, 3, 2, 1].map((n) => `/var/log/airlock/dns/queries.log.${n}`),
                "/var/log/airlock/dns/queries.log",
            ],
        });
        expect(renderedFile(gatewayHost, "/etc/systemd/system/airlock-audit-pull.service")).toMatch(/OnFailure=airlock-alert@%n\.service[\s\S]*ExecStart=\/usr\/local\/sbin\/airlock-audit pull/);
        expect(renderedFile(gatewayHost, "/etc/systemd/system/airlock-audit-pull.timer")).toContain("OnCalendar=*:0/5");
        expect(gatewayHost.cloudInit).toContain("airlock-audit-pull.timer");
        // The folder exists before the first pull, so the first backup finds it.
        expect(gatewayHost.cloudInit).toMatch(/\[ ?install, -d, -m, "0700", \/var\/lib\/airlock\/audit ?\]/);
        // In the gateway's backups.
        expect(renderedFile(gatewayHost, "/usr/local/sbin/airlock-backup")).toMatch(/restic_ backup --tag gateway .*\/var\/lib\/airlock\/audit/);
    });
});
