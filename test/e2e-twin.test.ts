import { spawnSync } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { StackConfig } from "../components/config/schema";
import { renderBundle } from "../components/render/bundle";
import { DNS_CAPTURE_LOG } from "../components/render/hosts";
import { RESOLVER_WORK_DIR, RUNTIME_SSH_KEY } from "../components/workloads/compose";
import { planStack } from "../cli/offline";
import { collectArtifacts } from "../cli/plan";
import { B2_DOWNLOAD_HOST, GUESTS, HOST_ADDRESS, twinNetns } from "../twin/contract";
import { BACKUP_URL, backupStorage } from "../twin/backup";
import { publishedUserData } from "../twin/metadata";
import { decodeUserData } from "../policies/engine/userData";
import { runDirOf } from "../twin/network";
import { twinB2Dir } from "../twin/standins";
import { logFile, readState, start, stop } from "../twin/twin";
import { substitutions } from "../twin/userdata";
import { HERMES_VERSION } from "./helpers/hermes";
import { editedStack, tempDir } from "./helpers/stacks";
import { isRoot, toolsAvailable } from "./helpers/tools";

/**
 * The acceptance suite of issue 15 on the twin: both hosts of a stack booted as
 * QEMU guests from their rendered user_data, probed from outside (the twin's
 * namespace), as root in each guest (the guest agent) and as the hostile agent
 * (`airlock twin agent`: the gateway's agent user, its ssh config, the sandbox's
 * sshd, wrapper and docker exec). The pair boots once; replace boots a second
 * sandbox, and the boot-order test reboots it while the gateway is down.
 *
 * The stack: dev, building its sandbox shell (airlock:workloads.registry), so the
 * shell is the product's own Dockerfile (git in it, for the checkpoint scenario).
 */

// About 20 minutes: a developer may leave it out (AIRLOCK_TWIN_E2E=0), CI never does.
const optedOut = process.env.AIRLOCK_TWIN_E2E === "0";
if (optedOut && process.env.CI === "true") throw new Error("the twin (e2e) cannot be left out under CI (AIRLOCK_TWIN_E2E=0)");
if (optedOut) console.warn("SKIPPED the twin (e2e): left out with AIRLOCK_TWIN_E2E=0");
if (!optedOut && !isRoot()) console.warn("SKIPPED the twin (e2e): needs root (network namespaces, taps, QEMU)");
const canRun =
    !optedOut &&
    isRoot() &&
    toolsAvailable("the twin (e2e)", ["qemu-system-x86_64", "qemu-img", "dnsmasq", "nft", "ip", "mmdebstrap", "mkfs.ext4", "ssh-keygen", "gpg", "openssl", "skopeo", "docker-registry"]);

const STACK = "e2e";
const ROOT = path.resolve(__dirname, "..");
const MINUTE = 60_000;

describe.runIf(canRun)("the twin", () => {
    let stacksDir: string;
    let stackFile: string;
    let cfg: StackConfig;
    const timings: Record<string, number> = {};
    const suiteStarted = Date.now();

    /** `airlock twin ...` as a user runs it. */
    function twin(args: string[], timeoutMs = 5 * MINUTE, input = "") {
        const result = spawnSync(process.execPath, [path.join(ROOT, "cli", "airlock.js"), "--stacks-dir", stacksDir, "twin", ...args], {
            cwd: ROOT,
            encoding: "utf8",
            timeout: timeoutMs,
            input,
        });
        return { code: result.status, stdout: result.stdout, stderr: result.stderr };
    }
    const asRoot = (role: "gateway" | "sandbox", command: string, timeoutMs?: number) => twin(["exec", role, "--stack", STACK, "--", command], timeoutMs);
    /** On the operator's laptop (`airlock twin operator`): the README's steps as written, over the tailnet. */
    const asOperator = (command: string, input = "", timeoutMs = 5 * MINUTE) => twin(["operator", "--stack", STACK, "--", command], timeoutMs, input);
    const asAgent = (command: string, env: string[] = [], timeoutMs?: number) => twin(["agent", "--stack", STACK, ...env.flatMap((e) => ["--env", e]), "--", command], timeoutMs);
    /** From the twin's namespace: the internet, as far as the guests can tell. */
    const fromOutside = (command: string) => spawnSync("ip", ["netns", "exec", twinNetns(STACK), "bash", "-c", command], { encoding: "utf8", timeout: 30_000 });
    const tailnetIp = (role: "gateway" | "sandbox") => asRoot(role, "tailscale ip -4").stdout.trim();
    /** The agent's rootless Docker CLI, as root runs it on a host. */
    const agentDocker = () => `runuser -u ${cfg.agent.user} -- env XDG_RUNTIME_DIR=/run/user/${cfg.agent.uid} DOCKER_HOST=unix:///run/user/${cfg.agent.uid}/docker.sock docker`;
    /** io_uring_setup (425 on x86_64) by raw syscall: "io_uring made", or the errno's message. */
    const IO_URING_PROBE = `python3 -c "import ctypes, os; libc = ctypes.CDLL(None, use_errno=True); r = libc.syscall(425, 1, ctypes.create_string_buffer(120)); print('io_uring', 'made' if r >= 0 else os.strerror(ctypes.get_errno()))"`;
    /** One word for sh: single-quoted. */
    const shq = (text: string) => `'${text.replace(/'/g, `'\\''`)}'`;
    /**
     * The names the gateway's resolver has on record, read as the product reads them:
     * airlock-audit's reader over the files its config names (AdGuard's query log, and
     * its own log for failed lookups).
     */
    const resolvedOnGateway = () => {
        const reader = [
            "import json, runpy",
            'audit = runpy.run_path("/usr/local/sbin/airlock-audit")',
            'queries, _ = audit["querylog"](json.load(open("/etc/airlock/audit.json"))["querylog"])',
            'print("\\n".join(q[2] for q in queries))',
        ].join("\n");
        return asRoot("gateway", `python3 -I -c ${shq(reader)}`).stdout.split("\n");
    };
    /** What explains a DNS path that does not work: both guests' tailnet, the resolver's container and log, the coordinator's log. */
    const dnsPathState = () =>
        [
            ...(["gateway", "sandbox"] as const).map((role) => `${role}: ${asRoot(role, "tailscale status; tailscale ip -4").stdout}`),
            asRoot("gateway", `runuser -u ${cfg.agent.user} -- env XDG_RUNTIME_DIR=/run/user/${cfg.agent.uid} DOCKER_HOST=unix:///run/user/${cfg.agent.uid}/docker.sock sh -c 'docker ps -a; docker logs --tail 40 airlock-adguard 2>&1'`).stdout,
            asRoot("gateway", `tail -n 20 ${RESOLVER_WORK_DIR}/data/adguardhome.log`).stdout,
            `coordinator: ${fs.existsSync(path.join(runDirOf(STACK), "coordinator.log")) ? fs.readFileSync(path.join(runDirOf(STACK), "coordinator.log"), "utf8").slice(-3000) : "(no log)"}`,
        ].join("\n");
    /** Several probes at once, as the agent (one command: each deadline runs beside the others). */
    const probesAsAgent = (targets: [string, number][]) => {
        const script = targets.map(([host, port], i) => `( r=$(${probe(host, port)}); echo "${i} $r" ) &`).join("\n") + "\nwait";
        const answers = new Map(asAgent(script).stdout.trim().split("\n").map((line) => [Number(line.split(" ")[0]), line.split(" ")[1]]));
        return targets.map((_, i) => answers.get(i));
    };
    /** A TCP connect with a deadline: "open", "refused" or "timeout". */
    const probe = (host: string, port: number) =>
        `e=$(mktemp); if timeout 5 bash -c 'exec 3<>/dev/tcp/${host}/${port}' 2>"$e"; then echo open; elif grep -q refused "$e"; then echo refused; else echo timeout; fi; rm -f "$e"`;

    beforeAll(() => {
        stacksDir = tempDir("twin-stacks");
        stackFile = editedStack("dev", (config) => {
            config["airlock:workloads"].registry = "ghcr.io/example-co/airlock";
            // No browser: its image (244 MB) would be most of what the sandbox pulls, twice (first
            // boot, replacement), and unpacking is the slowest thing an emulated guest does (the 81 MB
            // shell took over four minutes); no test here drives it. Its service runs for real in
            // e2e-docker (its own network, hardened) and rootless publishing in e2e-rootless-publish.
            config["airlock:workloads"].browser = { enabled: false };
            // One runtime secret, delivered by the operator with `airlock secrets push` (README).
            config["airlock:gateway"].agent.secrets = { ANTHROPIC_API_KEY: { secure: "v1:twin" } };
        }, stacksDir);
        fs.renameSync(stackFile, path.join(stacksDir, `Pulumi.${STACK}.yaml`));
        stackFile = path.join(stacksDir, `Pulumi.${STACK}.yaml`);
        cfg = readStackFile(stackFile);
        // AIRLOCK_TWIN_REUSE=1 (with AIRLOCK_TWIN_KEEP=1 on the run before): test a twin that is up already.
        if (process.env.AIRLOCK_TWIN_REUSE === "1" && readState(STACK)) return;
        twin(["down", "--stack", STACK]);
        const started = Date.now();
        // Within BOOT_TIMEOUT_MS (twin/twin.ts) and a little for what comes after the boot.
        const up = twin(["up", "--stack", STACK], 60 * MINUTE);
        timings.up = (Date.now() - started) / 1000;
        console.log(`twin up: ${timings.up.toFixed(0)} s\n${fs.existsSync(logFile(STACK)) ? fs.readFileSync(logFile(STACK), "utf8") : up.stderr}`);
        if (up.code !== 0) throw new Error(`twin up failed (${up.code}):\n${up.stderr}`);
    }, 65 * MINUTE);

    afterAll(() => {
        console.log(`twin timings (s): ${JSON.stringify(timings)}`);
        if (process.env.AIRLOCK_TWIN_FIGURES === "1") {
            // For BENCHMARKS.md: `npm run bench -- --only twin`.
            // test/run.sh sets AIRLOCK_TWIN_BESIDE_SUITE: the rest of the suite shared the machine.
            const beside = process.env.AIRLOCK_TWIN_BESIDE_SUITE === "1";
            const cold = process.env.AIRLOCK_TWIN_COLD === "1";
            const figures = {
                measured: new Date().toISOString().slice(0, 10),
                loadAverage: os.loadavg()[0],
                ...(timings.up !== undefined ? (cold ? { upColdSeconds: timings.up, upColdBesideSuite: beside } : { upCachedSeconds: timings.up, besideSuite: beside }) : {}),
                ...(timings.replaceToReady !== undefined ? { replaceToReadySeconds: timings.replaceToReady } : {}),
                ...(timings.firstAgentCommandAfterReplace !== undefined ? { firstAgentCommandAfterReplaceSeconds: timings.firstAgentCommandAfterReplace } : {}),
                ...(timings.bootOrderConverged !== undefined ? { bootOrderConvergedSeconds: timings.bootOrderConverged } : {}),
                // Only a run that reached the last test timed the whole suite.
                ...(timings.bootOrderConverged !== undefined ? { suiteSeconds: (Date.now() - suiteStarted) / 1000 } : {}),
            };
            // A cold run and a cached one add up: what this run did not measure, an earlier one's file keeps.
            const file = path.join(ROOT, "out", "twin-figures.json");
            const earlier = fs.existsSync(file) ? (JSON.parse(fs.readFileSync(file, "utf8")) as Record<string, unknown>) : {};
            fs.mkdirSync(path.dirname(file), { recursive: true });
            fs.writeFileSync(file, `${JSON.stringify({ ...earlier, ...figures }, null, 2)}\n`);
        }
        // What each guest printed (its console, QEMU's own log) outlives the twin, for a failed run's reader.
        const logs = path.join(ROOT, "out", "twin-logs");
        fs.rmSync(logs, { recursive: true, force: true });
        for (const role of ["gateway", "sandbox"] as const) {
            for (const file of ["console.log", "qemu.log"]) {
                const from = path.join(runDirOf(STACK), role, file);
                if (fs.existsSync(from)) fs.cpSync(from, path.join(logs, `${role}-${file}`));
            }
        }
        if (process.env.AIRLOCK_TWIN_KEEP !== "1") twin(["down", "--stack", STACK]);
    });

    it("both guests finish cloud-init done, no unit failed, every airlock unit in its state", () => {
        for (const role of ["gateway", "sandbox"] as const) {
            const status = asRoot(role, "cloud-init status --long");
            expect(status.stdout, role).toMatch(/^status: done$/m);
            // Apart: cloud-init 25's status --long prints braces of its own ("recoverable_errors: {}").
            expect(JSON.parse(asRoot(role, "cat /run/cloud-init/result.json").stdout).v1.errors, role).toEqual([]);
            expect(asRoot(role, "systemctl --failed --plain --no-legend").stdout.trim(), role).toBe("");
            // The agent's own manager: its rootless Docker and workloads.
            const user = asRoot(role, `systemctl --user --machine=${cfg.agent.user}@ is-active docker.service airlock-workloads.service`);
            expect(user.stdout.trim().split("\n"), role).toEqual(["active", "active"]);
            // The units the rendered boot check requires, and what runcmd enabled.
            const required = /^readonly REQUIRED=\((.*)\)$/m.exec(asRoot(role, "cat /usr/local/sbin/airlock-boot-check").stdout)?.[1].split(" ") ?? [];
            expect(required.length, role).toBeGreaterThan(3);
            const active = asRoot(role, `systemctl is-active ${required.join(" ")} tailscaled.service airlock-tailnet-config.service`);
            expect(active.stdout.trim().split("\n"), role).toEqual(Array(required.length + 2).fill("active"));
            // apt installed what user_data names and its dependencies, no recommendation (needrestart, git, criu),
            // and gpg without the rest of gnupg (its agent, dirmngr).
            const recommended = asRoot(role, "dpkg-query -W -f '${db:Status-Status} ${Package}\\n' needrestart git criu gpg-agent dirmngr gpg apparmor 2>/dev/null | grep '^installed'");
            expect(recommended.stdout.trim().split("\n").sort(), role).toEqual(["installed apparmor", "installed gpg"]);
        }
        // What `twin status` reports of the ready pair (and its exit code says).
        const status = twin(["status", "--stack", STACK, "--json"]);
        expect(status.code, status.stderr).toBe(0);
        const reported = JSON.parse(status.stdout) as { firewall: boolean; guests: { role: string; state: string; publicAddress: string; tailnetAddress?: string; cloudInit?: string; workloads?: string }[] };
        expect(reported.firewall).toBe(true);
        for (const role of ["gateway", "sandbox"] as const) {
            const guest = reported.guests.find((g) => g.role === role)!;
            expect(guest, role).toMatchObject({ state: "running", publicAddress: GUESTS[role].address, cloudInit: "done", workloads: "active" });
            expect(guest.tailnetAddress, role).toBe(tailnetIp(role));
        }
        // Timers enabled by first boot are waiting, not failed.
        expect(asRoot("gateway", "systemctl is-active airlock-backup-gateway.timer airlock-audit-pull.timer").stdout.trim().split("\n")).toEqual(["active", "active"]);
        expect(asRoot("sandbox", "systemctl is-active airlock-egress-refresh.timer airlock-checkpoints.timer").stdout.trim().split("\n")).toEqual(["active", "active"]);
    }, 10 * MINUTE);

    it("boots the plan's user_data, changed only in deploy-time values and the pinned Tailscale fingerprint", async () => {
        const plan = await planStack(stackFile, STACK);
        const artifacts = collectArtifacts(plan);
        for (const role of ["gateway", "sandbox"] as const) {
            const planned = artifacts.get(role)!["cloud-init.yaml"];
            // Served as Hetzner serves it, base64 of the document's gzip: cloud-init in the guest decoded
            // it (its Hetzner datasource's maybe_b64decode, then gunzip). `cloud-init query` prints it and a newline.
            const sent = publishedUserData(STACK, role)!;
            expect(sent).toMatch(/^H4sI[A-Za-z0-9+/]+=*$/);
            const booted = decodeUserData(sent).text;
            expect(asRoot(role, "cloud-init query userdata").stdout).toBe(`${booted}\n`);
            for (const change of substitutions(planned, booted)) {
                // The twin's operator key, added beside the stack's (twin/operator.ts).
                if (role === "gateway" && change.planned === "" && / twin-operator$/.test(change.twin)) continue;
                expect(
                    /@TAILNET_AUTH_KEY@|@BUNDLE_URL@|@sha256:0{64}|@SANDBOX_HOST_(PUBLIC_)?KEY@|"fingerprint":"[0-9A-F]{40}"|^\s+restrict ssh-ed25519 |"@SANDBOX_SHELL_IMAGE@"|^\s+(upstream_dns|bootstrap_dns): \[/.test(change.planned),
                    `unexplained change:\n- ${change.planned}\n+ ${change.twin}`,
                ).toBe(true);
            }
        }
    }, 5 * MINUTE);

    it("both hosts installed the host code from the bundle on B2's download host, by its sha256; one byte changed there and the installer refuses it, changing nothing", () => {
        const bundle = renderBundle();
        for (const role of ["gateway", "sandbox"] as const) {
            expect(asRoot(role, "cat /var/lib/airlock/bundle/installed").stdout, role).toBe(`${bundle.sha256}\n`);
            // Fetched over HTTPS from the download host's URL shape (the mirror answers as B2's f000).
            expect(asRoot(role, "cat /etc/airlock/bundle.json").stdout, role).toContain(`"url": "https://${B2_DOWNLOAD_HOST}/file/`);
            expect(asRoot(role, "grep -c 'airlock-bundle-install: installed' /var/log/cloud-init-output.log").stdout.trim(), role).toBe("1");
        }
        // The served object altered by one byte, the gateway's verified copy gone: a run of the installer refuses it.
        const served = fs.readdirSync(path.join(twinB2Dir(STACK), "file"), { recursive: true }).map(String).find((f) => f.endsWith(bundle.name))!;
        const servedFile = path.join(twinB2Dir(STACK), "file", served);
        const before = asRoot("gateway", "sha256sum /usr/local/sbin/airlock-backup /etc/systemd/system/airlock-dns-capture.service").stdout;
        fs.writeFileSync(servedFile, bundle.text.replace('"format"', '"formaT"'));
        try {
            const refused = asRoot("gateway", `mv /var/lib/airlock/bundle/${bundle.sha256}.json /root/kept-bundle.json && /usr/local/sbin/airlock-bundle-install; echo "exit $?"`, 15 * MINUTE);
            expect(refused.stdout + refused.stderr).toContain(`has sha256 ${crypto.createHash("sha256").update(fs.readFileSync(servedFile)).digest("hex")}, user_data names ${bundle.sha256}`);
            expect(refused.stdout).toMatch(/exit 1\n$/);
            expect(asRoot("gateway", "sha256sum /usr/local/sbin/airlock-backup /etc/systemd/system/airlock-dns-capture.service").stdout).toBe(before);
        } finally {
            fs.writeFileSync(servedFile, bundle.text);
            asRoot("gateway", `test -e /root/kept-bundle.json && mv /root/kept-bundle.json /var/lib/airlock/bundle/${bundle.sha256}.json`);
        }
    }, 20 * MINUTE);

    it("public port 22 is dropped by the firewall stand-in, and refused by sshd with it off; on the tailnet only gateway -> sandbox:22", () => {
        for (const role of ["gateway", "sandbox"] as const) expect(fromOutside(probe(GUESTS[role].address, 22)).stdout.trim(), role).toBe("timeout");
        expect(twin(["firewall", "off", "--stack", STACK]).code).toBe(0);
        try {
            for (const role of ["gateway", "sandbox"] as const) expect(fromOutside(probe(GUESTS[role].address, 22)).stdout.trim(), role).toBe("refused");
        } finally {
            expect(twin(["firewall", "on", "--stack", STACK]).code).toBe(0);
        }
        const sandboxIp = tailnetIp("sandbox");
        const gatewayIp = tailnetIp("gateway");
        expect(sandboxIp).toMatch(/^100\./);
        expect(asRoot("gateway", `runuser -u ${cfg.agent.user} -- bash -c ${shq(probe(sandboxIp, 22))}`).stdout.trim()).toBe("open");
        expect(asRoot("sandbox", probe(gatewayIp, 22)).stdout.trim()).not.toBe("open");
        // The gateway's sshd is up (its admin's door): what the sandbox cannot reach exists.
        expect(asRoot("gateway", probe(gatewayIp, 22)).stdout.trim()).toBe("open");
        // sshd has no other door: systemd's ssh generator (Debian 13) gave it an AF_UNIX socket
        // for every local user at first boot, stopped by runcmd and never generated again.
        for (const role of ["gateway", "sandbox"] as const) {
            const doors = asRoot(role, "systemctl list-sockets --no-legend --plain | grep -c ssh; ss -xl | grep -c ssh-unix");
            expect(doors.stdout.trim().split("\n"), `${role}: ${doors.stdout}`).toEqual(["0", "0"]);
        }
    }, 10 * MINUTE);

    it("the operator's laptop reaches the gateway's operator login over the tailnet, by its MagicDNS name, with sudo, and nothing else of either host", () => {
        const gateway = `${cfg.gateway.adminUser}@${cfg.hostnames.gateway}`;
        const login = asOperator(`ssh ${gateway} 'sudo -n true && id -un'`);
        expect(login.stdout.trim(), login.stderr).toBe(cfg.gateway.adminUser);
        // README, first deployment: the agent's public key from the console log, read as the operator.
        const printed = asOperator(`ssh ${gateway} "sudo grep -h 'airlock: gateway agent public key' /var/log/cloud-init-output.log"`);
        expect(printed.stdout, printed.stderr).toMatch(/^airlock: gateway agent public key: ssh-ed25519 AAAA\S+/m);
        // The policy's operator grant is the gateway's 22 alone; the public address is behind the firewall.
        const sandboxIp = tailnetIp("sandbox");
        const gatewayIp = tailnetIp("gateway");
        const probes = asOperator([[gatewayIp, 22], [gatewayIp, 10053], [sandboxIp, 22], [sandboxIp, 9222], [GUESTS.gateway.address, 22]].map(([host, port]) => `echo "$(${probe(String(host), Number(port))})"`).join("; "));
        expect(probes.stdout.trim().split("\n"), probes.stderr).toEqual(["open", "timeout", "timeout", "timeout", "timeout"]);
        // And the guest's own view: the operator's device is a tailnet peer owned by a user, not a tag.
        type Peer = { HostName: string; Tags?: string[]; TailscaleIPs: string[] };
        const peers = Object.values(JSON.parse(asRoot("gateway", "tailscale status --json").stdout).Peer) as Peer[];
        const laptop = peers.find((p) => p.HostName === "operator-laptop");
        expect(laptop, JSON.stringify(peers)).toBeDefined();
        expect(laptop!.Tags ?? []).toEqual([]);
    }, 10 * MINUTE);

    it("twin agent runs in agent-sandbox-shell, in /workspace, under rootless Docker; only allowlisted variables cross; no PTY, forwarding or sftp", () => {
        const marker = crypto.randomBytes(6).toString("hex");
        const run = asAgent(`id -u; pwd; cat /proc/1/cgroup; head -1 /proc/self/uid_map; echo ${marker} > /tmp/marker`);
        expect(run.code, run.stderr).toBe(0);
        const [uid, cwd, ...rest] = run.stdout.trim().split("\n");
        expect(uid).toBe("0");
        expect(cwd).toBe("/workspace");
        // Container uid 0 is the agent's uid on the host: rootless Docker.
        expect(rest.at(-1)!.trim().split(/\s+/)).toEqual(["0", String(cfg.agent.uid), "1"]);
        const inShell = asRoot("sandbox", `runuser -u ${cfg.agent.user} -- env XDG_RUNTIME_DIR=/run/user/${cfg.agent.uid} DOCKER_HOST=unix:///run/user/${cfg.agent.uid}/docker.sock docker exec agent-sandbox-shell cat /tmp/marker`);
        expect(inShell.stdout.trim()).toBe(marker);

        const allowed = cfg.agent.envAllowlist[0];
        const secret = ["ghp", crypto.randomBytes(8).toString("hex")].join("_");
        const other = ["other", crypto.randomBytes(4).toString("hex")].join("-");
        const env = asAgent(`echo "\${${allowed}:-unset}"; echo "\${AIRLOCK_TWIN_OTHER:-unset}"`, [`${allowed}=${secret}`, `AIRLOCK_TWIN_OTHER=${other}`]);
        expect(env.stdout.trim().split("\n")).toEqual([secret, "unset"]);

        const ssh = (args: string, input = "") => asRoot("gateway", `runuser -u ${cfg.agent.user} -- ${args} <<'EOF'\n${input}\nEOF`);
        const sandbox = cfg.hostnames.sandbox;
        const pty = ssh(`ssh -o ControlPath=none -tt ${sandbox} tty`);
        expect(pty.stdout + pty.stderr).toMatch(/PTY allocation request failed|not a tty/);
        const forward = ssh(`ssh -o ControlPath=none -W 127.0.0.1:22 ${sandbox}`);
        expect(forward.code).not.toBe(0);
        expect(forward.stdout).not.toMatch(/^SSH-2.0/m);
        const sftp = ssh(`sftp -o ControlPath=none -b - ${sandbox}`, "ls /");
        expect(sftp.code).not.toBe(0);
    }, 10 * MINUTE);

    /** How much slower than hardware the twin's sandbox answers one command, rounded up (see the Hermes test). */
    const TIMEOUT_SCALE = 6;

    it("the gateway's agent runtime, Hermes through its own loader and ssh terminal, runs the agent's command in the sandbox and on its record, not on the gateway", async () => {
        // The agent's rootless Docker (the same user on both hosts), as root there asks it.
        const docker = agentDocker();
        // The runtime's ssh config names the sandbox's node by its address once it has joined, by its
        // full MagicDNS name before (the gateway boots first): whichever it was when the runtime started.
        const domain = asRoot("gateway", "tailscale status --json | jq -r .MagicDNSSuffix").stdout.trim();
        expect(domain).toMatch(/^[a-z0-9.-]+$/);
        const sandboxFqdn = `${cfg.hostnames.sandbox}.${domain}`;
        // Up, past its preflight (Python under emulation: give it time).
        const passed = `airlock-hermes-preflight: Hermes ${HERMES_VERSION} runs every command over ssh as ${cfg.agent.user}@`;
        const sandboxNamed = [`${passed}${sandboxFqdn} in /workspace`, `${passed}${tailnetIp("sandbox")} in /workspace`];
        let logs = "";
        for (let i = 0; i < 60 && !sandboxNamed.some((line) => logs.includes(line)); i++) {
            logs = asRoot("gateway", `${docker} logs airlock-agent 2>&1 | tail -20`).stdout;
            if (!sandboxNamed.some((line) => logs.includes(line))) await new Promise((r) => setTimeout(r, 10_000));
        }
        expect(sandboxNamed.some((line) => logs.includes(line)), logs).toBe(true);
        expect(asRoot("gateway", "ssh -G -F /etc/airlock/agent/ssh/ssh_config sandbox | grep '^hostname '").stdout.trim()).toBe(`hostname ${tailnetIp("sandbox")}`);
        expect(asRoot("gateway", `${docker} inspect --format '{{.State.Running}}' airlock-agent`).stdout.trim()).toBe("true");
        // The sandbox's short name is the tailnet's alone: asked as it is (absolute), no public
        // resolver knows it (the twin's answers as Hetzner's would). The runtime's container has
        // no search domain (none completes a short name into another tailnet node's): it knows
        // the sandbox by its full name, through the tailnet's resolver.
        expect(asRoot("gateway", `getent hosts ${cfg.hostnames.sandbox}.`).code).toBe(2);
        expect(asRoot("gateway", `${docker} exec --user hermes airlock-agent getent ahostsv4 ${cfg.hostnames.sandbox}`).code).not.toBe(0);
        const found = asRoot("gateway", `${docker} exec --user hermes airlock-agent getent ahostsv4 ${sandboxFqdn}`).stdout;
        expect(found.split(/\s+/)[0], found).toBe(tailnetIp("sandbox"));

        const marker = `hermes-${crypto.randomBytes(6).toString("hex")}`;
        // Hermes gives each of its ssh calls a fixed 10-15 s (tools/environments/ssh.py). Under the
        // twin's emulation one command through the sandbox's wrapper takes 9-11 s (about 0.1 s on
        // hardware, BENCHMARKS.md), so the driver scales the timeout of every subprocess.run in
        // its own process (Hermes's ssh calls among them) by TIMEOUT_SCALE; nothing else changes,
        // and test/e2e-hermes.test.ts runs the same Hermes at native speed unscaled.
        const drive = [
            "import json, subprocess, hermes_cli.main, cli",
            "_run = subprocess.run",
            `subprocess.run = lambda *a, **kw: _run(*a, **{**kw, **({"timeout": kw["timeout"] * ${TIMEOUT_SCALE}} if kw.get("timeout") else {})})`,
            "from tools.terminal_tool import terminal_tool",
            `print(terminal_tool(command=${JSON.stringify(`echo ${marker} > ${marker}.txt && cat ${marker}.txt && pwd`)}))`,
        ].join("\n");
        const ran = asRoot("gateway", `${docker} exec --user hermes airlock-agent python3 -c ${shq(drive)}`, 10 * MINUTE);
        expect(ran.code, ran.stderr).toBe(0);
        const result = JSON.parse(ran.stdout.trim().split("\n").at(-1)!);
        // What explains a terminal that does not reach the sandbox: the name and the connection, from the runtime's container, as its user.
        const reach = () =>
            asRoot(
                "gateway",
                `${docker} exec --user hermes airlock-agent sh -c ${shq(`getent hosts ${sandboxFqdn}; cat /etc/resolv.conf; ssh -v -o ConnectTimeout=20 -i ${RUNTIME_SSH_KEY} ${cfg.agent.user}@sandbox true 2>&1 | tail -25`)}`,
                5 * MINUTE,
            ).stdout + ran.stderr.slice(-3000);
        if (result.exit_code !== 0) expect(result, reach()).toMatchObject({ exit_code: 0 });
        expect(result).toMatchObject({ exit_code: 0, output: `${marker}\n/workspace` });
        // In the sandbox's shell, not in the runtime's container.
        expect(asRoot("sandbox", `${docker} exec agent-sandbox-shell cat /workspace/${marker}.txt`).stdout.trim()).toBe(marker);
        expect(asRoot("gateway", `${docker} exec airlock-agent sh -c 'ls /workspace/${marker}.txt /opt/data/${marker}.txt /tmp/${marker}.txt 2>/dev/null | wc -l'`).stdout.trim()).toBe("0");
        // On the sandbox's record, from the gateway's tailnet address.
        const records = asRoot("sandbox", `grep -F ${shq(`echo ${marker} >`)} /var/lib/airlock/record/record.jsonl`).stdout.trim().split("\n").filter(Boolean).map((line) => JSON.parse(line));
        expect(records.filter((r) => r.kind === "begin")).toHaveLength(1);
        expect(records[0].session.split(":")[0]).toBe(tailnetIp("gateway"));
    }, 20 * MINUTE);

    it("as the agent: no metadata service (IPv4, IPv6), DNS only to the gateway's resolver (which logs it), no other gateway port, no Docker socket, nothing planted runs", () => {
        // Positive control: root on the sandbox does reach the metadata service.
        expect(asRoot("sandbox", "curl -s -m 5 http://169.254.169.254/hetzner/v1/metadata/hostname").stdout.trim()).toBe(cfg.hostnames.sandbox);
        const [metadata4, metadataMapped] = probesAsAgent([
            ["169.254.169.254", 80],
            // IPv6: Hetzner's metadata has no IPv6 address; the way there over an IPv6 socket is the IPv4-mapped one.
            ["::ffff:169.254.169.254", 80],
        ]);
        expect(metadata4).toMatch(/^(refused|timeout)$/);
        expect(metadataMapped).toMatch(/^(refused|timeout)$/);
        expect(asRoot("sandbox", probe("::ffff:169.254.169.254", 80)).stdout.trim()).toBe("open");

        const gatewayIp = tailnetIp("gateway");
        const name = `twin-${crypto.randomBytes(4).toString("hex")}.example.com`;
        asAgent(`getent hosts ${name}; cat /etc/resolv.conf`);
        expect(resolvedOnGateway(), dnsPathState()).toContain(name);
        // The sandbox never asked the twin's own DNS (the "public" resolver) for it: no way around the resolver
        // (the gateway's resolver may forward it there; that query comes from the gateway).
        const asked = fs.readFileSync(path.join(runDirOf(STACK), "dnsmasq.log"), "utf8").split("\n").filter((line) => line.includes(name));
        expect(asked.filter((line) => line.includes(`from ${GUESTS.sandbox.address}`))).toEqual([]);
        const ports = [22, 80, 443, 3000, 9222];
        const [otherResolver, resolver, ...others] = probesAsAgent([[HOST_ADDRESS, 53], [gatewayIp, 53], ...ports.map((port): [string, number] => [gatewayIp, port])]);
        expect(otherResolver).toMatch(/^(refused|timeout)$/);
        expect(resolver).toBe("open");
        ports.forEach((port, i) => expect(others[i], `gateway port ${port}`).toMatch(/^(refused|timeout)$/));

        const sockets = asAgent(`ls /var/run/docker.sock /run/docker.sock /run/user/${cfg.agent.uid}/docker.sock 2>&1; echo "exit $?"`);
        expect(sockets.stdout).toMatch(/exit [12]/);
        expect(sockets.stdout).not.toMatch(/^srw/m);

        const planted = `/tmp/planted-${crypto.randomBytes(4).toString("hex")}`;
        const payload = `touch ${planted}`;
        const plant = asAgent(
            [".bashrc", ".profile", ".bash_profile", ".bash_login", ".bash_logout", ".envrc"].map((f) => `echo '${payload}' > /workspace/${f}`).join("; ") + `; printf '#!/bin/sh\\n${payload}\\n' > /workspace/ls; chmod +x /workspace/ls`,
        );
        expect(plant.code).toBe(0);
        const next = asAgent(`ls ${planted} 2>&1; echo done`);
        expect(next.stdout).toMatch(/No such file/);
        asAgent("rm -f /workspace/.bashrc /workspace/.profile /workspace/.bash_profile /workspace/.bash_login /workspace/.bash_logout /workspace/.envrc /workspace/ls");
    }, 10 * MINUTE);

    it("a DHCP renewal leaves /etc/resolv.conf as it was on both hosts: the sandbox keeps the gateway's resolver", async () => {
        const acks = (role: "gateway" | "sandbox") =>
            fs.readFileSync(path.join(runDirOf(STACK), "dnsmasq.log"), "utf8").split("\n").filter((line) => line.includes(`DHCPACK`) && line.includes(GUESTS[role].mac)).length;
        const resolvConf = (role: "gateway" | "sandbox") => asRoot(role, "sha256sum /etc/resolv.conf; grep '^nameserver' /etc/resolv.conf").stdout;
        const before = { gateway: resolvConf("gateway"), sandbox: resolvConf("sandbox") };
        const acked = { gateway: acks("gateway"), sandbox: acks("sandbox") };
        // A lease is 2 minutes (twin/network/dnsmasq.conf): each client renews within about one.
        const deadline = Date.now() + 4 * MINUTE;
        while ((acks("gateway") <= acked.gateway || acks("sandbox") <= acked.sandbox) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10_000));
        for (const role of ["gateway", "sandbox"] as const) {
            expect(acks(role), `${role} renewed its lease`).toBeGreaterThan(acked[role]);
            expect(resolvConf(role), role).toBe(before[role]);
        }
        expect(before.sandbox.split("\n")[1]).toBe(`nameserver ${tailnetIp("gateway")}`);
    }, 6 * MINUTE);

    it("the checkpoint scenario of issue 12 through twin agent: files back byte for byte, git works again", () => {
        const first = crypto.randomBytes(2048).toString("base64");
        const second = crypto.randomBytes(4096).toString("hex");
        expect(asAgent(`mkdir -p /workspace/app/migrations && printf '%s' '${first}' > /workspace/app/migrations/001.sql && printf '%s' '${second}' > /workspace/app/migrations/002.sql && git --version`).code).toBe(0);
        const checkpoint = asAgent("airlock checkpoint --label before-rm");
        expect(checkpoint.code, checkpoint.stderr).toBe(0);
        asAgent("rm -rf /workspace/app /usr/bin/git");
        expect(asAgent("git --version").code).not.toBe(0);
        const restore = asAgent("airlock restore last", [], 5 * MINUTE);
        expect(restore.code, restore.stderr + restore.stdout).toBe(0);
        const back = asAgent("cat /workspace/app/migrations/001.sql; echo; cat /workspace/app/migrations/002.sql; echo; git --version");
        expect(back.stdout.split("\n").slice(0, 2)).toEqual([first, second]);
        expect(back.stdout).toMatch(/^git version /m);
    }, 10 * MINUTE);

    it("as the agent: no btrfs subvolume, reflink or io_uring (the booted dockerd's seccomp profile), while ordinary ioctls and cp work", () => {
        // BTRFS_IOC_SUBVOL_CREATE on /workspace, by raw ioctl; under Docker's own profile it makes /workspace/nested.
        const made = asAgent(`python3 -c "import fcntl, os; fd = os.open('/workspace', os.O_RDONLY); args = bytearray(4096); args[8:14] = b'nested'; fcntl.ioctl(fd, 0x5000940e, args)" 2>&1; ls -d /workspace/nested 2>&1; python3 -c "import fcntl, os, struct, termios; r, w = os.pipe(); print('FIONREAD', struct.unpack('i', fcntl.ioctl(r, termios.FIONREAD, bytes(4)))[0])"`);
        expect(made.stdout).toMatch(/PermissionError: \[Errno 1\] Operation not permitted/);
        expect(made.stdout).toMatch(/cannot access '\/workspace\/nested'/);
        expect(made.stdout).toContain("FIONREAD 0");
        // cp (coreutils 9, reflink=auto) falls back to copying; a reflink it insists on is refused.
        const copied = asAgent("head -c 1048576 /dev/urandom > /workspace/cp-a && cp /workspace/cp-a /workspace/cp-b && cmp /workspace/cp-a /workspace/cp-b && echo copied; cp --reflink=always /workspace/cp-a /workspace/cp-c 2>&1; rm -f /workspace/cp-a /workspace/cp-b /workspace/cp-c");
        expect(copied.stdout).toContain("copied");
        expect(copied.stdout).toMatch(/failed to clone .*Operation not permitted/);
        // io_uring_setup (425 on x86_64) answers ENOSYS, as on a kernel without it.
        const ring = asAgent(IO_URING_PROBE);
        expect(ring.stdout.trim(), ring.stderr).toBe("io_uring Function not implemented");
        // And after an escape to its host user, on either host: the kernel makes none for anyone.
        for (const role of ["sandbox", "gateway"] as const) {
            expect(asRoot(role, "sysctl -n kernel.io_uring_disabled").stdout.trim(), role).toBe("2");
            const escaped = asRoot(role, `runuser -u ${cfg.agent.user} -- ${IO_URING_PROBE}`);
            expect(escaped.stdout.trim(), `${role}: ${escaped.stderr}`).toBe("io_uring Operation not permitted");
        }
    }, 5 * MINUTE);

    it("backups and the restore drill pass against the twin's B2 stand-in, and the drill fails once the stand-in's data is truncated", () => {
        // The operator's step (README "Backups"), from their laptop over the tailnet: credentials
        // delivered to the operator login, each repository initialised once (the twin's stand-in
        // speaks restic's REST protocol, so the lines are RESTIC_REPOSITORY and the password).
        const password = ["restic", crypto.randomBytes(12).toString("hex")].join("-");
        const gateway = `${cfg.gateway.adminUser}@${cfg.hostnames.gateway}`;
        const steps = [
            "set -e",
            "read -r password",
            "for m in gateway sandbox; do",
            `  printf 'RESTIC_REPOSITORY=%s\\nRESTIC_PASSWORD=%s\\n' "rest:${BACKUP_URL}/$m/" "$password" |`,
            `    ssh ${gateway} "sudo install -D -m 0600 /dev/stdin /etc/airlock/backup/$m.env"`,
            `  ssh ${gateway} "sudo airlock-backup-init $m"`,
            "done",
        ].join("\n");
        const init = asOperator(steps, `${password}\n`, 10 * MINUTE);
        expect(init.code, init.stdout + init.stderr).toBe(0);
        expect(init.stdout.match(/[0-9a-f]{64}/g) ?? [], init.stdout).toHaveLength(2);
        expect(asRoot("gateway", "stat -c '%U %a' /etc/airlock/backup/gateway.env /etc/airlock/backup/sandbox.env").stdout.trim().split("\n")).toEqual(["root 600", "root 600"]);
        expect(asAgent("mkdir -p /workspace/drill && seq 1 2000 > /workspace/drill/numbers && echo kept > /workspace/drill/note").code).toBe(0);
        // The weekly checks after them: restic check starts only when no lock is left, so a backup that could not
        // remove its lock from the append-only repository (restic 0.14 on B2) fails every check after it.
        for (const unit of ["airlock-backup-gateway.service", "airlock-backup-sandbox.service", "airlock-restic-check-gateway.service", "airlock-restic-check-sandbox.service"]) {
            const backup = asRoot("gateway", `systemctl start ${unit}; systemctl is-failed ${unit}; journalctl -u ${unit} --no-pager | tail -5`, 10 * MINUTE);
            expect(backup.stdout, unit).toMatch(/^active$|^inactive$/m);
        }
        for (const m of ["gateway", "sandbox"]) expect(fs.readdirSync(path.join(backupStorage(STACK), m, "locks")), `${m}'s locks`).toEqual([]);
        const drill = asRoot("gateway", "airlock-restore-drill", 10 * MINUTE);
        expect(drill.code, drill.stdout + drill.stderr).toBe(0);
        // The stand-in's storage is on this machine: cut every pack of the sandbox's repository short.
        const packs = fs.readdirSync(path.join(backupStorage(STACK), "sandbox", "data"), { recursive: true, encoding: "utf8" }).filter((f) => /[0-9a-f]{64}$/.test(f));
        expect(packs.length).toBeGreaterThan(0);
        for (const pack of packs) {
            const file = path.join(backupStorage(STACK), "sandbox", "data", pack);
            fs.truncateSync(file, Math.floor(fs.statSync(file).size / 2));
        }
        const broken = asRoot("gateway", "airlock-restore-drill", 10 * MINUTE);
        expect(broken.code, broken.stdout + broken.stderr).not.toBe(0);
    }, 30 * MINUTE);

    it("the operator pushes the runtime's secrets from their laptop (airlock secrets push): the gateway holds them, root-only, and the runtime has them", () => {
        const value = ["sk", "ant", crypto.randomBytes(12).toString("hex")].join("-");
        const airlock = `node ${shq(path.join(ROOT, "cli", "airlock.js"))} --stacks-dir ${shq(stacksDir)}`;
        const pushed = asOperator(`${airlock} secrets push --stack ${STACK} --stdin`, JSON.stringify({ ANTHROPIC_API_KEY: value }), 10 * MINUTE);
        expect(pushed.code, pushed.stdout + pushed.stderr).toBe(0);
        expect(pushed.stdout + pushed.stderr).not.toContain(value);
        const status = asOperator(`${airlock} secrets status --stack ${STACK}`);
        expect(status.stdout, status.stderr).toMatch(/1 of 1 declared secrets present/);
        // The runtime's container has it; the agent user on the gateway cannot read where it rests.
        const runtime = asRoot("gateway", `runuser -u ${cfg.agent.user} -- env XDG_RUNTIME_DIR=/run/user/${cfg.agent.uid} DOCKER_HOST=unix:///run/user/${cfg.agent.uid}/docker.sock sh -c 'for c in $(docker ps -q); do docker exec "$c" printenv ANTHROPIC_API_KEY 2>/dev/null; done'`);
        expect(runtime.stdout.trim().split("\n")).toContain(value);
        expect(asRoot("gateway", `runuser -u ${cfg.agent.user} -- cat /etc/airlock/agent/secrets.json 2>&1`).stdout).not.toContain(value);
    }, 15 * MINUTE);

    it("replace: a new sandbox on the same volume keeps /workspace, matches the gateway's pinned host key, and the first command works, though Tailscale named it NAME-1", () => {
        const content = crypto.randomBytes(16).toString("hex");
        expect(asAgent(`printf '%s' ${content} > /workspace/survivor && sync`).code).toBe(0);
        const before = readState(STACK)!.guests.sandbox!.instanceId;
        const started = Date.now();
        const replaced = twin(["replace", "--stack", STACK], 30 * MINUTE);
        timings.replaceToReady = (Date.now() - started) / 1000;
        expect(replaced.code, replaced.stderr).toBe(0);
        expect(readState(STACK)!.guests.sandbox!.instanceId).not.toBe(before);
        const firstStarted = Date.now();
        const first = asAgent("cat /workspace/survivor");
        timings.firstAgentCommandAfterReplace = (Date.now() - firstStarted) / 1000;
        expect(first.stderr).not.toMatch(/REMOTE HOST IDENTIFICATION|Host key verification failed/);
        expect(first.stdout).toBe(content);
        // Tailscale keeps the old node's name (the twin's coordinator too): the new sandbox is NAME-1,
        // and the gateway reaches it because it follows the sandbox's tag, not its name.
        type Peer = { DNSName: string; Tags?: string[]; Online: boolean; TailscaleIPs: string[] };
        const peers = (Object.values(JSON.parse(asRoot("gateway", "tailscale status --json").stdout).Peer) as Peer[]).filter((p) => p.Tags?.includes(cfg.tailnet.sandboxTag));
        const online = peers.filter((p) => p.Online);
        expect(online.map((p) => p.DNSName.split(".")[0])).toEqual([`${cfg.hostnames.sandbox}-1`]);
        expect(online[0].TailscaleIPs[0]).toBe(tailnetIp("sandbox"));
        for (const config of ["/etc/ssh/ssh_config.d/20-airlock-sandbox.conf", "/etc/airlock/agent/ssh/ssh_config"]) {
            expect(asRoot("gateway", `ssh -G -F ${config} sandbox | grep '^hostname '`).stdout.trim(), config).toBe(`hostname ${tailnetIp("sandbox")}`);
        }
        // The running runtime sees the new one too: its folder is mounted, and the file was renamed into it.
        expect(asRoot("gateway", `${agentDocker()} exec airlock-agent ssh -G sandbox | grep '^hostname '`).stdout.trim()).toBe(`hostname ${tailnetIp("sandbox")}`);
        const pinned = asRoot("gateway", "cat /etc/airlock/known_hosts").stdout.trim().split(/\s+/).slice(1, 3).join(" ");
        const served = asRoot("sandbox", "cat /etc/ssh/ssh_host_ed25519_key.pub").stdout.trim().split(/\s+/).slice(0, 2).join(" ");
        expect(served).toBe(pinned);
        // The operator's step after a replacement (README, the command record): the gateway's pull
        // names the new server's chain and takes it only on the operator's word.
        const refused = asRoot("gateway", "systemctl start airlock-audit-pull.service; journalctl -u airlock-audit-pull.service -n 50 --no-pager", 5 * MINUTE);
        const chain = /accept-chain ([0-9a-f]{32})/.exec(refused.stdout)?.[1];
        expect(chain, refused.stdout).toBeDefined();
        const accepted = asOperator(`ssh ${cfg.gateway.adminUser}@${cfg.hostnames.gateway} "sudo airlock-audit accept-chain ${chain}"`);
        expect(accepted.code, accepted.stderr).toBe(0);
        const pulled = asRoot("gateway", "systemctl start airlock-audit-pull.service; systemctl is-failed airlock-audit-pull.service", 5 * MINUTE);
        expect(pulled.stdout.trim(), pulled.stderr).toBe("inactive");
    }, 35 * MINUTE);

    it("boot order: the sandbox rebooted while the gateway is down runs nothing of the agent without its egress rules, and converges when the gateway comes up", async () => {
        // A reboot, not a first boot: the agent's containers exist and come back on their own,
        // so this is where a late tailnet could leave them running unconfined.
        await stop(STACK, "sandbox");
        await stop(STACK, "gateway");
        await start(STACK, "sandbox");
        const booted = asRoot("sandbox", "systemctl is-system-running --wait", 10 * MINUTE);
        expect(booted.stdout, booted.stderr).toMatch(/^(running|degraded)$/m);
        // The rules were loaded before the agent's user manager started, on this boot.
        const at = (unit: string, property: string) => Number(asRoot("sandbox", `systemctl show -P ${property} ${unit}`).stdout.trim());
        const rulesLoaded = at("airlock-egress.service", "ActiveEnterTimestampMonotonic");
        const agentStarted = at(`user@${cfg.agent.uid}.service`, "InactiveExitTimestampMonotonic");
        expect(rulesLoaded).toBeGreaterThan(0);
        expect(agentStarted).toBeGreaterThan(0);
        expect(rulesLoaded).toBeLessThanOrEqual(agentStarted);
        // While the gateway is down, whatever of the agent runs is behind them: not its host user, not its container.
        expect(asRoot("sandbox", "nft list chain inet airlock agent").stdout).toMatch(/agent: metadata service/);
        expect(asRoot("sandbox", `runuser -u ${cfg.agent.user} -- bash -c ${shq(probe("169.254.169.254", 80))}`).stdout.trim()).not.toBe("open");
        const docker = agentDocker();
        const running = asRoot("sandbox", `${docker} ps --format '{{.Names}}'`).stdout;
        if (running.includes("agent-sandbox-shell")) {
            expect(asRoot("sandbox", `${docker} exec agent-sandbox-shell bash -c ${shq(probe("169.254.169.254", 80))}`).stdout.trim()).not.toBe("open");
        }
        // Not ready, and `twin status` says so: the gateway is stopped.
        const down = twin(["status", "--stack", STACK]);
        expect(down.code).toBe(1);
        expect(down.stdout).toMatch(/^gateway\s+stopped /m);
        const started = Date.now();
        await start(STACK, "gateway");
        // Converged: the agent's command runs in its shell, and its DNS goes to the gateway's resolver (logged there).
        const name = `converged-${crypto.randomBytes(4).toString("hex")}.example.com`;
        let converged = false;
        while (!converged && Date.now() - started < 12 * MINUTE) {
            await new Promise((resolve) => setTimeout(resolve, 10_000));
            const ran = asAgent(`getent hosts ${name}; echo ran`, [], MINUTE);
            converged = ran.stdout.includes("ran") && resolvedOnGateway().includes(name);
        }
        timings.bootOrderConverged = (Date.now() - started) / 1000;
        // What to look at when it did not: the units between the gateway's return and the agent's command.
        const state = converged
            ? ""
            : [
                  asRoot("sandbox", "systemctl --no-pager status airlock-tailnet-config.service airlock-egress.service; journalctl --no-pager -b -n 60 -u airlock-tailnet-config.service -u airlock-egress-refresh.service; nft list table inet airlock").stdout,
                  asRoot("gateway", `systemctl --no-pager --failed; tail -c 2000 ${RESOLVER_WORK_DIR}/data/querylog.json`).stdout,
                  dnsPathState(),
                  asAgent(`getent hosts ${name}; echo "getent: $?"`, [], MINUTE).stdout,
              ].join("\n");
        // Within 12 minutes: before the 15-minute egress refresh timer could have helped.
        expect(converged, `the sandbox did not converge within 12 minutes of the gateway's return:\n${state}`).toBe(true);
        // The gateway's capture has the lookup too: tcpdump (under Debian's AppArmor profile) writes through
        // its pipe to the capture writer, and AppArmor denied it nothing.
        const captured = asRoot("gateway", `grep -c -F ${shq(name)} ${DNS_CAPTURE_LOG}; journalctl -k --no-pager | grep -c 'apparmor="DENIED".*tcpdump'`);
        expect(captured.stdout.trim().split("\n"), captured.stderr).toEqual([expect.stringMatching(/^[1-9]\d*$/), "0"]);
        // Nothing that failed while the gateway was away stays failed: the record's pull (the
        // first thing the gateway tries on its return) and the sandbox's refreshes recover by themselves.
        // start waits for the oneshot and fails with it; is-failed could catch the timer's next run "activating".
        const pulled = asRoot("gateway", "systemctl start airlock-audit-pull.service && echo 'pull: succeeded'; journalctl --no-pager -b -u airlock-audit-pull.service | tail -8", 10 * MINUTE);
        expect(pulled.stdout, pulled.stdout).toMatch(/^pull: succeeded$/m);
        for (const role of ["gateway", "sandbox"] as const) {
            const failed = asRoot(role, "systemctl --failed --plain --no-legend").stdout.trim();
            const why = failed ? asRoot(role, `for unit in $(systemctl --failed --plain --no-legend | awk '{print $1}'); do journalctl --no-pager -b -u "$unit" | tail -8; done`).stdout : "";
            expect(failed, `${role}: units left failed after the gateway's return:\n${why}`).toBe("");
        }
    }, 40 * MINUTE);
});
