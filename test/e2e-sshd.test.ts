import { ChildProcess } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { RenderedHost, SSHD_TEMPLATE_PATH } from "../components/render/hosts";
import * as YAML from "yaml";
import { createTestNet, inNamespace, spawnInNamespace, TestNet, waitForPort } from "./helpers/netns";
import { editedStack, REPO, tempDir, renderHosts, renderedFile, sandboxSshConfigAt } from "./helpers/stacks";
import { TestBroker } from "./helpers/broker";
import { agentSshArgs, enforceEgress, installSandboxSshd, newHostKey, pinnedKnownHosts, startSandboxBroker } from "./helpers/sshdRig";
import { isRoot, run, toolsAvailable } from "./helpers/tools";
import { hostSshd } from "./helpers/hostTools";

/** The hosts' sshd (Debian 13's OpenSSH), not this machine's. */
const HOST_SSHD = hostSshd().sshd;

/**
 * End to end: the rendered sandbox sshd, started by the rendered boot script, in a
 * network namespace with a "tailnet" and a "public" address; the client runs in a
 * second namespace with the rendered gateway ssh config.
 */

const AGENT = "airlock-e2e";
/** A GitHub-token-shaped value, assembled at run time. */
const TOKEN = ["ghp", "e2eTESTtoken0123456789abcdefABCDEF"].join("_");

const file = renderedFile;

/** Builds the stack the e2e uses: dev, with a test agent user (and its uid) and the test client's key. */
function e2eHosts(clientPublicKey: string, uid: number) {
    const stack = editedStack("dev", (c) => {
        c["airlock:agent"].user = AGENT;
        c["airlock:agent"].uid = uid;
        c["airlock:agent"].authorizedKeys = [clientPublicKey];
    });
    const cfg = readStackFile(stack);
    return { cfg, sandbox: renderHosts(cfg).sandbox, gateway: renderHosts(cfg).gateway };
}

/** The login shell cloud-init gives the agent on the sandbox. */
function agentShell(clientPublicKey: string): string {
    const { cfg, sandbox } = e2eHosts(clientPublicKey, 1500);
    return YAML.parse(sandbox.cloudInit).users.find((u: { name: string }) => u.name === cfg.agent.user).shell;
}

const canRun = isRoot() && toolsAvailable("e2e sshd in network namespaces", ["ip", "sshd", "ssh", "ssh-keygen", "useradd", "socat", "systemd-socket-activate"]);
if (!isRoot()) console.warn("SKIPPED e2e sshd in network namespaces: needs root (CI runs it as root)");

describe.runIf(canRun)("sandbox sshd end to end", () => {
    let net: TestNet;
    let root: string;
    let sshd: ChildProcess | undefined;
    let sshdLog = "";
    let createdUser = false;
    let clientKey: string;
    let clientDir: string;
    let gatewayConfig: string;
    let sandbox: RenderedHost;
    let gateway: RenderedHost;
    let broker: TestBroker | undefined;

    beforeAll(async () => {
        net = createTestNet("ssh");
        clientDir = tempDir("client");
        clientKey = path.join(clientDir, "id_ed25519");
        expect(run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", clientKey]).status).toBe(0);
        const clientPublicKey = fs.readFileSync(`${clientKey}.pub`, "utf8").trim();
        if (run("id", [AGENT]).status !== 0) {
            expect(run("useradd", ["--create-home", "--shell", agentShell(clientPublicKey), AGENT]).status).toBe(0);
            createdUser = true;
        }
        const uid = Number(run("id", ["-u", AGENT]).stdout.trim());
        const hosts = e2eHosts(clientPublicKey, uid);
        sandbox = hosts.sandbox;
        gateway = hosts.gateway;

        // A root-owned tree (sshd's StrictModes checks every directory up to /).
        root = fs.mkdtempSync("/run/airlock-e2e-");
        const hostPublicKey = installSandboxSshd(sandbox, root);
        broker = await startSandboxBroker(root, AGENT);
        const state = path.join(root, "state");
        const workspace = path.join(root, "workspace");
        const stubBin = path.join(root, "stub-bin");
        for (const dir of [state, workspace, stubBin]) fs.mkdirSync(dir, { mode: 0o755 });
        run("chown", [AGENT, state, workspace]);
        fs.writeFileSync(
            path.join(stubBin, "docker"),
            fs
                .readFileSync(path.join(REPO, "test/fixtures/docker-exec-stub"), "utf8")
                .replace("@STATE_DIR@", state)
                .replace("@WORKSPACE@", workspace),
            { mode: 0o755 },
        );
        fs.writeFileSync(path.join(stubBin, "tailscale"), `#!/bin/sh\necho ${net.serverTailnet}\n`, { mode: 0o755 });

        // As at boot: the agent's home becomes root's, and its egress rules are in force
        // (with a route out, so that the rules, not a missing route, decide).
        const home = run(`${root}/usr/local/sbin/airlock-agent-home`, []);
        expect(home.status, home.stderr).toBe(0);
        enforceEgress(net.server, sandbox, uid, "198.18.7.2");

        // The real boot script renders the live config from the tailnet address.
        const rendered = renderSshdConfig(net.serverTailnet);
        expect(rendered.stderr).toBe("");
        expect(rendered.status).toBe(0);

        // sshd runs with the stub docker in place of /usr/local/bin, in its own mount namespace.
        sshdLog = path.join(clientDir, "sshd.log");
        sshd = spawnInNamespace(
            net.server,
            `mount --bind ${stubBin} /usr/local/bin && mount --bind ${root}/etc/pam.d/sshd /etc/pam.d/sshd && exec ${HOST_SSHD} -D -e -f ${root}/etc/ssh/sshd_config`,
            sshdLog,
        );
        await waitForPort(net.client, net.serverTailnet, 22);

        // The gateway's rendered client config, unchanged; test paths come in as -o
        // options, which ssh reads before the file (first value wins).
        gatewayConfig = path.join(clientDir, "ssh_config");
        fs.writeFileSync(gatewayConfig, sandboxSshConfigAt(hosts.gateway, net.serverTailnet));
        // The gateway's rendered known_hosts, filled as at deploy with the sandbox key the stack generated.
        fs.writeFileSync(path.join(clientDir, "known_hosts"), pinnedKnownHosts(hosts.gateway, hostPublicKey));
        const otherPublicKey = newHostKey(path.join(clientDir, "other_host_key"));
        fs.writeFileSync(path.join(clientDir, "known_hosts.other"), pinnedKnownHosts(hosts.gateway, otherPublicKey));
    }, 60_000);

    afterAll(async () => {
        // Stop the ControlPersist master, the listener, and any session left behind.
        if (sshd) ssh(["-O", "exit"]);
        sshd?.kill("SIGTERM");
        await broker?.stop();
        run("pkill", ["--uid", AGENT]);
        net?.close();
        if (root) fs.rmSync(root, { recursive: true, force: true });
        if (createdUser) {
            run("userdel", [AGENT]);
            run("rm", ["-rf", `/home/${AGENT}`]);
        }
        if (sshdLog && process.env.AIRLOCK_DEBUG) console.log(fs.readFileSync(sshdLog, "utf8"));
    });

    function renderSshdConfig(address: string, target = `${root}/etc/ssh/sshd_config`) {
        const stubTailscale = path.join(root, "stub-bin", "tailscale");
        fs.writeFileSync(stubTailscale, `#!/bin/sh\necho ${address}\n`, { mode: 0o755 });
        // Exactly the ExecStartPre of the rendered ssh.service drop-in, with the test tree's paths.
        return inNamespace(
            net.server,
            [`${root}/usr/local/sbin/airlock-tailnet-render`, path.join(root, SSHD_TEMPLATE_PATH), target, HOST_SSHD, "-t", "-f"],
            { env: { PATH: `${root}/stub-bin:/usr/sbin:/usr/bin:/sbin:/bin`, AIRLOCK_TAILNET_WAIT_SECONDS: "2" } },
        );
    }

    /**
     * ssh from the client namespace with the gateway's config. `options` come first,
     * so they win over the test defaults (ssh keeps the first value).
     */
    function ssh(options: string[], command: string[] = [], env: Record<string, string> = {}, address = net.serverTailnet) {
        return inNamespace(
            net.client,
            [
                "ssh",
                ...options,
                ...agentSshArgs({ config: gatewayConfig, address: address, user: AGENT, key: clientKey, dir: clientDir }),
                "sandbox",
                ...command,
            ],
            { env: { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: clientDir, ...env } },
        );
    }

    it("the boot script wrote a config that listens on the tailnet address only", () => {
        const live = fs.readFileSync(`${root}/etc/ssh/sshd_config`, "utf8");
        expect(live.match(/^ListenAddress .*$/gm)).toEqual([`ListenAddress ${net.serverTailnet}:22`]);
    });

    it("the boot script refuses an address outside the tailnet, or one not on this host", () => {
        for (const address of [net.serverPublic, "100.101.1.1", ""]) {
            const target = `${root}/etc/ssh/sshd_config.refused`;
            const result = renderSshdConfig(address, target);
            expect(result.status, address).toBe(1);
            expect(result.stderr).toContain("no tailnet IPv4 address");
            expect(fs.existsSync(target)).toBe(false);
        }
        renderSshdConfig(net.serverTailnet, `${root}/etc/ssh/sshd_config.again`);
    });

    it("the gateway's config pins the sandbox host key: the stack's key connects, any other is rejected", () => {
        expect(ssh(["-o", "ControlPath=none"], ["true"]).status).toBe(0);
        const other = ssh(["-o", "ControlPath=none", "-o", `UserKnownHostsFile=${clientDir}/known_hosts.other`], ["true"]);
        expect(other.status).toBe(255);
        expect(other.stderr).toMatch(/Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED/);
    });

    it("is the hosts' sshd (Debian 13's OpenSSH 10), not this machine's", () => {
        const banner = inNamespace(net.client, ["bash", "-c", `exec 3<>/dev/tcp/${net.serverTailnet}/22 && head -n 1 <&3`]);
        expect(banner.stdout).toMatch(/^SSH-2\.0-OpenSSH_10\.\d+p\d+ Debian-/);
    });

    it("logins the sandbox refuses (a key it does not know) never lock the gateway's next connection out: no per-source penalty on the tailnet", () => {
        // OpenSSH 9.8+ refuses a source address after failed logins (PerSourcePenalties: authfail 5 s,
        // noauth 1 s, enforced from 15 s, up to 600 s). The gateway is the only peer that reaches this
        // port: whatever fails to log in from it (a process with a stale key, a replaced sandbox's
        // host key refused) would keep the agent's commands, root's backups and record pulls out.
        const stranger = path.join(clientDir, "stranger_key");
        if (!fs.existsSync(stranger)) newHostKey(stranger);
        for (let i = 0; i < 5; i++) {
            const refused = inNamespace(net.client, ["ssh", "-F", "/dev/null", "-i", stranger, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", `${AGENT}@${net.serverTailnet}`, "true"]);
            expect(refused.status).toBe(255);
        }
        const next = ssh(["-o", "ControlPath=none"], ["true"]);
        expect(next.stderr).toBe("");
        expect(next.status).toBe(0);
    });

    it("port 22 on the public address is refused", () => {
        const result = ssh([], ["true"], {}, net.serverPublic);
        expect(result.status).toBe(255);
        expect(result.stderr).toMatch(/Connection refused/);
    });

    it("a command over the tailnet runs through the wrapper, in /workspace of agent-sandbox-shell", () => {
        const result = ssh([], ['echo "ran in $STUB_CONTAINER:$STUB_WORKDIR"']);
        expect(result.stderr).toBe("");
        expect(result.stdout.trim()).toBe("ran in agent-sandbox-shell:/workspace");
        const args = fs.readFileSync(`${root}/state/docker-args`, "utf8").trim().split("\n");
        expect(args.slice(0, 2)).toEqual(["exec", "-i"]);
        expect(args.slice(args.indexOf("-w"), args.indexOf("-w") + 6)).toEqual(["-w", "/workspace", "agent-sandbox-shell", "bash", "--noprofile", "--norc"]);
    });

    it("GITHUB_TOKEN sent with SendEnv arrives in the container; other variables do not", () => {
        const result = ssh(["-o", "SendEnv=OTHER_SECRET"], ['echo "token=${GITHUB_TOKEN:-absent} other=${OTHER_SECRET:-absent}"'], {
            GITHUB_TOKEN: TOKEN,
            OTHER_SECRET: "must-not-arrive",
        });
        expect(result.stdout.trim()).toBe(`token=${TOKEN} other=absent`);
        // The token travels in the environment, never on the docker command line.
        expect(fs.readFileSync(`${root}/state/docker-args`, "utf8")).not.toContain(TOKEN);
    });

    it("port forwarding is refused by the server, local and remote", () => {
        // The gateway's config already clears forwardings; lift that to test the server.
        const stdio = ssh(["-o", "ControlPath=none", "-W", "127.0.0.1:22"]);
        expect(stdio.status).not.toBe(0);
        expect(stdio.stderr).toMatch(/administratively prohibited|open failed|refused by peer/);

        const remote = ssh(["-o", "ClearAllForwardings=no", "-o", "ExitOnForwardFailure=yes", "-o", "ControlPath=none", "-R", "127.0.0.1:2222:127.0.0.1:22", "-N"]);
        expect(remote.status).toBe(255);
        expect(remote.stderr).toMatch(/remote port forwarding failed/);
    });

    it("no interactive shell and no PTY", () => {
        const interactive = ssh([]);
        expect(interactive.status).toBe(2);
        expect(interactive.stderr).toContain("interactive sessions are disabled");

        const tty = ssh(["-tt", "-o", "ControlPath=none"], ["tty"]);
        expect(tty.stderr).toMatch(/PTY allocation request failed/);
        expect(tty.stdout).not.toMatch(/\/dev\/pts/);
    });

    it("commands share one multiplexed connection (ControlMaster)", () => {
        expect(ssh([], ["true"]).status).toBe(0);
        const check = ssh(["-O", "check"]);
        expect(check.stderr).toMatch(/Master running/);
    });

    it("the agent cannot write startup files into its home (it is root's)", () => {
        for (const attempt of ['echo "echo PLANTED" >>~/.bashrc', "echo x >>~/.profile", "echo 'BASH_ENV DEFAULT=/tmp/x' >~/.pam_environment", "mkdir -p ~/.ssh", "ln -s /tmp ~/.config/x"]) {
            const result = run("runuser", ["-u", AGENT, "--", "bash", "--norc", "--noprofile", "-c", attempt]);
            expect(result.status, attempt).not.toBe(0);
            expect(result.stderr, attempt).toMatch(/Permission denied/);
        }
    });

    it("startup files in the agent's home are never read before the wrapper, even if they got there", () => {
        // As if the agent had written them (the test plants them as root): a shell rc
        // file, and a PAM environment file that points bash at a script.
        const home = `/home/${AGENT}`;
        const planted = [`${home}/.bashrc`, `${home}/.pam_environment`, `${home}/evil.sh`];
        fs.writeFileSync(planted[0], "echo PLANTED-BASHRC >&2\n");
        fs.writeFileSync(planted[1], `BASH_ENV DEFAULT=${home}/evil.sh\n`);
        fs.writeFileSync(planted[2], "echo PLANTED-BASH-ENV >&2\n");
        try {
            const result = ssh(["-o", "ControlPath=none"], ["echo ran"], { GITHUB_TOKEN: TOKEN });
            expect(result.stdout.trim()).toBe("ran");
            expect(result.stderr).not.toContain("PLANTED");
        } finally {
            for (const file of planted) fs.rmSync(file, { force: true });
        }
    });

    /** ssh-audit's text report as [algorithm, level] pairs for every fail and warn. */
    function auditFindings(report: string): [string, string][] {
        // ANSI colours off (-n); lines look like "(kex) name  -- [warn] why".
        return [...report.matchAll(/^\((?:kex|key|enc|mac)\) (\S+)\s+-- \[(fail|warn)\]/gm)].map((m) => [m[1], m[2]] as [string, string]);
    }

    /**
     * Warnings ssh-audit 2.5.0 (Debian 12) gives that are not weaknesses: the strict
     * key exchange marker (the Terrapin countermeasure, newer than the tool), and the
     * post-quantum hybrid key exchange OpenSSH has made its default since 9.0.
     */
    const TOOL_TOO_OLD = new Set(["kex-strict-s-v00@openssh.com", "kex-strict-c-v00@openssh.com", "sntrup761x25519-sha512@openssh.com"]);

    it.runIf(toolsAvailable("ssh-audit", ["ssh-audit"]))("ssh-audit: the sandbox's sshd offers no weak algorithm", () => {
        const audit = inNamespace(net.client, ["ssh-audit", "--no-colors", "--timeout=5", net.serverTailnet]);
        expect(audit.stdout, audit.stderr).toMatch(/\(kex\) /);
        const findings = auditFindings(audit.stdout).filter(([algorithm, level]) => level === "fail" || !TOOL_TOO_OLD.has(algorithm));
        expect(findings).toEqual([]);
    });

    it.runIf(toolsAvailable("ssh-audit", ["ssh-audit"]))("ssh-audit: the gateway's sshd and its ssh client to the sandbox offer no weak algorithm", async () => {
        // The gateway's rendered sshd, on the client namespace's tailnet address.
        const gatewayRoot = fs.mkdtempSync("/run/airlock-e2e-gw-");
        try {
            const key = path.join(gatewayRoot, "host_key");
            newHostKey(key);
            const config = path.join(gatewayRoot, "sshd_config");
            fs.writeFileSync(config, hostSshd().configLines + file(gateway, SSHD_TEMPLATE_PATH).replace("@TAILNET_IPV4@", "100.100.7.2").replace("HostKey /etc/ssh/ssh_host_ed25519_key", `HostKey ${key}`), { mode: 0o600 });
            const gatewaySshd = spawnInNamespace(net.client, `exec ${HOST_SSHD} -D -e -f ${config}`, path.join(gatewayRoot, "log"));
            try {
                await waitForPort(net.server, "100.100.7.2", 22);
                const audit = inNamespace(net.server, ["ssh-audit", "--no-colors", "--timeout=5", "100.100.7.2"]);
                expect(audit.stdout, audit.stderr).toMatch(/\(kex\) /);
                expect(auditFindings(audit.stdout).filter(([algorithm, level]) => level === "fail" || !TOOL_TOO_OLD.has(algorithm))).toEqual([]);
            } finally {
                gatewaySshd.kill("SIGTERM");
            }

            // The client side: ssh-audit poses as a server and reports what the gateway's ssh offers.
            const clientAudit = spawnInNamespace(net.server, `exec ssh-audit --no-colors --client-audit --port=2222 --timeout=10`, path.join(gatewayRoot, "client-audit.txt"));
            // It audits the first connection it gets: no port probe before the client's.
            await new Promise((resolve) => setTimeout(resolve, 1500));
            ssh(["-o", "ControlPath=none", "-o", "Port=2222"], ["true"]);
            await new Promise<void>((resolve) => (clientAudit.exitCode !== null ? resolve() : clientAudit.once("exit", () => resolve())));
            const report = fs.readFileSync(path.join(gatewayRoot, "client-audit.txt"), "utf8");
            expect(report).toMatch(/\(kex\) /);
            expect(auditFindings(report).filter(([algorithm, level]) => level === "fail" || !TOOL_TOO_OLD.has(algorithm))).toEqual([]);
        } finally {
            fs.rmSync(gatewayRoot, { recursive: true, force: true });
        }
    });
});
