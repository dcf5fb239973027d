import { ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AUDIT_PROGRAM } from "../cli/audit";
import { readStackFile } from "../components/config/load";
import { SSHD_TEMPLATE_PATH } from "../components/render/hosts";
import { recordEntries, TestBroker } from "./helpers/broker";
import { createTestNet, inNamespace, spawnInNamespace, TestNet, waitForPort } from "./helpers/netns";
import { enforceEgress, installSandboxSshd, pinnedKnownHosts, startSandboxBroker } from "./helpers/sshdRig";
import { editedStack, REPO, renderedFile, renderHosts, sandboxSshConfigAt, tempDir } from "./helpers/stacks";
import { isRoot, run, toolsAvailable } from "./helpers/tools";
import { hostSshd } from "./helpers/hostTools";

/** The hosts' sshd (Debian 13's OpenSSH), not this machine's. */
const HOST_SSHD = hostSshd().sshd;

/**
 * The command record end to end: the rendered sshd and wrapper in a "sandbox"
 * namespace, the root broker behind its socket (owned by root, open to the agent's
 * group), commands sent with the gateway's rendered ssh config, the record pulled
 * by airlock-audit over that same path into a "gateway" folder.
 */

const AGENT = "airlock-rec";
const TOKEN = ["ghp", "recordE2Etoken0123456789abcdefABCDEF"].join("_");

const canRun =
    isRoot() && toolsAvailable("e2e command record", ["ip", "sshd", "ssh", "ssh-keygen", "useradd", "runuser", "socat", "systemd-socket-activate", "python3"]);
if (!isRoot()) console.warn("SKIPPED e2e command record: needs root (CI runs it as root)");

describe.runIf(canRun)("the command record through the real sshd", () => {
    let net: TestNet;
    let root: string;
    let clientDir: string;
    let sshd: ChildProcess | undefined;
    let broker: TestBroker | undefined;
    let createdUser = false;
    let sshBase: string[];
    let gatewayDir: string;
    let auditConfig: string;

    const COMMANDS: { command: string; exit: number; token?: boolean }[] = [
        { command: "echo one", exit: 0 },
        { command: "mkdir -p app && cd app && echo x > file", exit: 0 },
        { command: "ls app", exit: 0 },
        { command: 'test -n "$GITHUB_TOKEN" && echo has-token', exit: 0, token: true },
        { command: "cat missing-file", exit: 1 },
        { command: "printf '%s\\n' a b c | wc -l", exit: 0 },
        { command: "true", exit: 0 },
        { command: "echo 'quoted \"text\"'", exit: 0 },
        { command: "pwd", exit: 0 },
        { command: "exit 0", exit: 0 },
    ];

    beforeAll(async () => {
        net = createTestNet("rec");
        if (run("id", [AGENT]).status !== 0) {
            expect(run("useradd", ["--create-home", "--shell", "/bin/bash", AGENT]).status).toBe(0);
            createdUser = true;
        }
        clientDir = tempDir("record-client");
        const clientKey = path.join(clientDir, "id_ed25519");
        expect(run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", clientKey]).status).toBe(0);
        const uid = Number(run("id", ["-u", AGENT]).stdout.trim());
        const cfg = readStackFile(
            editedStack("dev", (c) => {
                c["airlock:agent"].user = AGENT;
                c["airlock:agent"].uid = uid;
                c["airlock:agent"].authorizedKeys = [fs.readFileSync(`${clientKey}.pub`, "utf8").trim()];
            }),
        );
        const hosts = renderHosts(cfg);

        root = fs.mkdtempSync("/run/airlock-record-");
        const hostPublicKey = installSandboxSshd(hosts.sandbox, root);
        broker = await startSandboxBroker(root, AGENT);
        enforceEgress(net.server, hosts.sandbox, uid, "198.18.7.2");
        const stubBin = path.join(root, "stub-bin");
        for (const dir of [path.join(root, "state"), path.join(root, "workspace"), stubBin]) fs.mkdirSync(dir, { mode: 0o755 });
        run("chown", [AGENT, path.join(root, "state"), path.join(root, "workspace")]);
        fs.writeFileSync(
            path.join(stubBin, "docker"),
            fs.readFileSync(path.join(REPO, "test/fixtures/docker-exec-stub"), "utf8").replace("@STATE_DIR@", path.join(root, "state")).replace("@WORKSPACE@", path.join(root, "workspace")),
            { mode: 0o755 },
        );
        fs.writeFileSync(path.join(stubBin, "tailscale"), `#!/bin/sh\necho ${net.serverTailnet}\n`, { mode: 0o755 });
        const rendered = inNamespace(net.server, [`${root}/usr/local/sbin/airlock-tailnet-render`, path.join(root, SSHD_TEMPLATE_PATH), `${root}/etc/ssh/sshd_config`, HOST_SSHD, "-t", "-f"], {
            env: { PATH: `${stubBin}:/usr/sbin:/usr/bin:/sbin:/bin`, AIRLOCK_TAILNET_WAIT_SECONDS: "5" },
        });
        expect(rendered.status, rendered.stderr).toBe(0);
        sshd = spawnInNamespace(net.server, `mount --bind ${stubBin} /usr/local/bin && exec ${HOST_SSHD} -D -e -f ${root}/etc/ssh/sshd_config`, path.join(clientDir, "sshd.log"));
        await waitForPort(net.client, net.serverTailnet, 22);

        const sshConfig = path.join(clientDir, "ssh_config");
        fs.writeFileSync(sshConfig, sandboxSshConfigAt(hosts.gateway, net.serverTailnet));
        fs.writeFileSync(path.join(clientDir, "known_hosts"), pinnedKnownHosts(hosts.gateway, hostPublicKey));
        sshBase = ["ip", "netns", "exec", net.client, "ssh", "-F", sshConfig, "-o", `HostName=${net.serverTailnet}`, "-o", `User=${AGENT}`, "-o", `IdentityFile=${clientKey}`,
            "-o", `UserKnownHostsFile=${clientDir}/known_hosts`, "-o", `ControlPath=${clientDir}/cm-%C`, "-o", "ConnectTimeout=5", "sandbox"];

        // The gateway: airlock-audit's settings as rendered, with this rig's ssh.
        gatewayDir = tempDir("record-gateway");
        auditConfig = path.join(gatewayDir, "audit.json");
        const renderedSettings = JSON.parse(renderedFile(hosts.gateway, "/etc/airlock/audit.json"));
        fs.writeFileSync(auditConfig, JSON.stringify({ ...renderedSettings, dir: path.join(gatewayDir, "audit"), ssh: sshBase, signer: { ...renderedSettings.signer, known_hosts: `${clientDir}/known_hosts` } }));

        for (const { command, token } of COMMANDS) {
            run(sshBase[0], sshBase.slice(1).concat(command), { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: clientDir, ...(token ? { GITHUB_TOKEN: TOKEN } : {}) }, timeout: 30_000 });
        }
    }, 120_000);

    afterAll(async () => {
        if (sshd) run(sshBase[0], [...sshBase.slice(1, -1), "-O", "exit", "sandbox"]);
        sshd?.kill("SIGTERM");
        await broker?.stop();
        run("pkill", ["--uid", AGENT]);
        net?.close();
        if (root) fs.rmSync(root, { recursive: true, force: true });
        if (createdUser) run("userdel", ["--remove", AGENT]);
    });

    const audit = (...args: string[]) => run("/usr/bin/python3", ["-IS", AUDIT_PROGRAM, "--config", auditConfig, ...args], { timeout: 60_000 });

    it("ten commands, ten complete records: commands, exit statuses, the names that crossed", () => {
        const entries = recordEntries(broker!.recordFile);
        const begins = entries.filter((e) => e.kind === "begin");
        expect(begins.map((e) => e.command)).toEqual(COMMANDS.map((c) => c.command));
        for (const [i, begin] of begins.entries()) {
            const end = entries.find((e) => e.kind === "end" && e.of === begin.seq);
            expect(end, COMMANDS[i].command).toMatchObject({ exit: COMMANDS[i].exit, ended: "exited" });
            expect(begin.env).toEqual(COMMANDS[i].token ? ["GITHUB_TOKEN"] : []);
            expect(begin.session).toMatch(/^100\.100\.7\.2:\d+$/);
            expect(begin.source).toBe(net.serverTailnet);
            expect(begin.uid).toBe(Number(run("id", ["-u", AGENT]).stdout.trim()));
            expect(begin.image).toMatch(/@sha256:[0-9a-f]{64}$/);
            expect(begin).toHaveProperty("checkpoint", null);
        }
    });

    it("the gateway pulls the record over the agent's ssh, and verify passes", () => {
        const pulled = audit("pull");
        expect(pulled.stderr).toBe("");
        expect(pulled.stdout).toMatch(/pulled 21 new records in chain [0-9a-f]{32}/);
        const verified = audit("verify");
        expect(verified.stdout).toMatch(/21 records, chain intact/);
        expect(verified.status).toBe(0);
        const shown = JSON.parse(audit("show", "--json").stdout).records;
        expect(shown.map((r: any) => [r.command, r.exit])).toEqual(COMMANDS.map((c) => [c.command, c.exit]));
        // Pulling is not a command: nothing was added to the record by it.
        expect(recordEntries(broker!.recordFile)).toHaveLength(21);
    });

    it("no token value anywhere on disk: record, gateway copy, logs, workspace, rig", () => {
        const searched = [root, clientDir, gatewayDir, path.dirname(broker!.stateDir)];
        const found = run("grep", ["-rlF", "--", TOKEN, ...searched]);
        expect(found.stdout).toBe("");
        expect(found.status).toBe(1); // grep: no match
        // ... while the token did reach the command.
        expect(run(sshBase[0], sshBase.slice(1).concat('echo "${GITHUB_TOKEN:0:4}"'), { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: clientDir, GITHUB_TOKEN: TOKEN } }).stdout.trim()).toBe("ghp_");
    });

    it("editing, deleting or reordering one record makes verify fail at that record", () => {
        const lines = fs.readFileSync(broker!.recordFile, "utf8").split("\n").filter(Boolean);
        const failing = lines.findIndex((l) => l.includes('"kind":"end"') && l.includes('"exit":1,'));
        const variants: [string, string[], number, RegExp][] = [
            ["edited", lines.map((l, i) => (i === failing ? l.replace('"exit":1,', '"exit":0,') : l)), failing, /was altered/],
            ["deleted", lines.filter((_, i) => i !== 7), 7, /missing \(deleted\)/],
            ["reordered", [...lines.slice(0, 11), lines[12], lines[11], ...lines.slice(13)], 11, /out of order/],
        ];
        for (const [what, changed, seq, reason] of variants) {
            const dir = tempDir(`record-${what}`);
            fs.writeFileSync(path.join(dir, "record.jsonl"), changed.map((l) => `${l}\n`).join(""));
            const result = run("/usr/bin/python3", ["-IS", AUDIT_PROGRAM, "--config", "-", "--dir", dir, "verify", "--json"]);
            expect(result.status, what).toBe(1);
            expect(JSON.parse(result.stdout).chains[0].break, what).toMatchObject({ seq, reason: expect.stringMatching(reason) });
        }
    });

    it("the agent user cannot write, replace, remove or even read the record", () => {
        const file = broker!.recordFile;
        const before = fs.readFileSync(file);
        const attempts = [
            `echo forged >> ${file}`,
            `: > ${file}`,
            `rm -f ${file}`,
            `mv ${file} ${file}.old`,
            `ln -sf /dev/null ${file}`,
            `touch ${path.dirname(file)}/planted`,
            `cat ${file}`,
            `chmod 0666 ${file}`,
        ];
        for (const attempt of attempts) {
            const result = run("runuser", ["-u", AGENT, "--", "bash", "-c", attempt]);
            expect(result.status, attempt).not.toBe(0);
            expect(result.stderr, attempt).toMatch(/Permission denied|Operation not permitted/);
        }
        expect(fs.readFileSync(file).equals(before)).toBe(true);
        expect(fs.statSync(file).uid).toBe(0);
        expect(fs.statSync(file).mode & 0o777).toBe(0o600);
        expect(fs.statSync(path.dirname(file)).mode & 0o777).toBe(0o700);
    });

    it("without the broker, the wrapper refuses commands: nothing runs off the record", async () => {
        await broker!.stop();
        const result = run(sshBase[0], sshBase.slice(1).concat("touch /tmp/should-not-run-airlock-rec"), { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: clientDir } });
        expect(result.status).toBe(1);
        expect(result.stderr).toMatch(/airlock: command refused: it cannot be put on the record/);
        expect(fs.readFileSync(path.join(root, "state", "docker-args"), "utf8")).not.toContain("should-not-run");
    });
});
