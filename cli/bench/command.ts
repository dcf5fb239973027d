/**
 * The cost of one agent command through the real path: ssh from a "gateway"
 * namespace to the rendered sshd in a "sandbox" namespace, through the ForceCommand
 * wrapper and a real `docker exec` into the rendered agent-sandbox-shell container,
 * against the floor of a bare local `docker exec` of the same command. Needs root
 * (namespaces, dockerd); the test helpers build the same rig the e2e tests use.
 */
import * as fs from "node:fs";
import * as path from "node:path";
import { readStackFile } from "../../components/config/load";
import { SANDBOX_WRAPPER_PATH, SSHD_TEMPLATE_PATH } from "../../components/render/hosts";
import { renderSandboxCompose } from "../../components/workloads/compose";
import { importTestImage, startDockerd } from "../../test/helpers/dockerd";
import { createTestNet, spawnInNamespace, waitForPort, inNamespace } from "../../test/helpers/netns";
import { editedStack, renderHosts, sandboxSshConfigAt } from "../../test/helpers/stacks";
import { enforceEgress, installSandboxSshd, pinnedKnownHosts, startSandboxBroker } from "../../test/helpers/sshdRig";
import { hasCommand, isRoot, run } from "../../test/helpers/tools";

export interface Series {
    runs: number;
    p50: number;
    p95: number;
    mean: number;
}

export interface CommandCost {
    floor: Series;
    wrapperOnly: Series;
    sshCold: Series;
    sshMultiplexed: Series;
}

const USER = "airlock-bench";
const IMAGE = "airlock-bench/shell:1";

export function series(samples: number[]): Series {
    const sorted = [...samples].sort((a, b) => a - b);
    const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
    return { runs: samples.length, p50: at(0.5), p95: at(0.95), mean: samples.reduce((a, b) => a + b, 0) / samples.length };
}

/** Runs `once` up to `runs` times or until `seconds` pass; every run must succeed. */
let debugLog = () => "";

/**
 * Runs `command` in a bash loop (as `prefix` says: in a namespace, as a user) up to
 * `runs` times or `seconds`, timing each run with $EPOCHREALTIME around it, so every
 * series pays the same per-run cost: starting the client program, nothing else.
 */
function measure(label: string, prefix: string[], command: string, runs: number, seconds: number, env: NodeJS.ProcessEnv, log: (line: string) => void): Series {
    const script = `err=$(mktemp); end=$((SECONDS + ${seconds})); for ((i = 0; i < ${runs} && SECONDS < end; i++)); do t0=$EPOCHREALTIME; ${command} >/dev/null 2>"$err" || { echo "FAIL $i $(cat "$err")"; exit 1; }; t1=$EPOCHREALTIME; echo "$t0 $t1"; done; rm -f "$err"`;
    const result = run(prefix[0] ?? "bash", [...prefix.slice(1), ...(prefix.length > 0 ? ["bash"] : []), "-c", script], { env, timeout: (seconds + 60) * 1000 });
    if (result.status !== 0) throw new Error(`${label}: ${result.stdout.split("\n").find((l) => l.startsWith("FAIL")) ?? `exit ${result.status} ${result.stderr.trim()}`}${process.env.AIRLOCK_DEBUG ? `\n${debugLog()}` : ""}`);
    const samples = result.stdout
        .trim()
        .split("\n")
        .map((line) => line.split(" ").map(Number))
        .map(([t0, t1]) => (t1 - t0) * 1000);
    const s = series(samples);
    log(`  ${label}: ${s.runs} runs, p50 ${s.p50.toFixed(1)} ms, p95 ${s.p95.toFixed(1)} ms`);
    return s;
}

export function commandCostUnavailable(): string | undefined {
    if (!isRoot()) return "needs root (network namespaces, a test dockerd)";
    const missing = ["ip", "sshd", "ssh", "ssh-keygen", "dockerd", "docker", "docker-compose", "busybox", "useradd"].filter((t) => !hasCommand(t));
    return missing.length > 0 ? `missing ${missing.join(", ")}` : undefined;
}

export async function commandCost(runs: number, secondsPerSeries: number, log: (line: string) => void): Promise<CommandCost> {
    const cleanup: (() => unknown)[] = [];
    try {
        const dir = fs.mkdtempSync("/tmp/airlock-bench-");
        cleanup.push(() => run("rm", ["-rf", dir]));
        if (run("id", [USER]).status !== 0) {
            if (run("useradd", ["--create-home", "--shell", "/bin/bash", USER]).status !== 0) throw new Error(`useradd ${USER} failed`);
            cleanup.push(() => run("userdel", ["--remove", USER]));
        }
        cleanup.push(() => run("pkill", ["--uid", USER]));
        const uid = run("id", ["-u", USER]).stdout.trim();

        // The agent user's "rootless" socket path, served by a test dockerd.
        const runtimeDir = `/run/user/${uid}`;
        const createdRuntimeDir = !fs.existsSync(runtimeDir);
        fs.mkdirSync(runtimeDir, { recursive: true, mode: 0o700 });
        run("chown", [`${USER}:${USER}`, runtimeDir]);
        if (createdRuntimeDir) cleanup.push(() => fs.rmSync(runtimeDir, { recursive: true, force: true }));
        log("starting a test dockerd...");
        const dockerd = await startDockerd(dir, [`${runtimeDir}/docker.sock`]);
        cleanup.push(() => dockerd.stop());
        run("chown", [USER, `${runtimeDir}/docker.sock`]);
        importTestImage(dockerd, dir, IMAGE);

        const clientDir = fs.mkdtempSync("/tmp/airlock-bench-client-");
        cleanup.push(() => run("rm", ["-rf", clientDir]));
        const clientKey = path.join(clientDir, "id_ed25519");
        run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", clientKey]);
        const cfg = readStackFile(
            editedStack("dev", (c) => {
                c["airlock:agent"].user = USER;
                c["airlock:agent"].uid = Number(uid);
                c["airlock:agent"].authorizedKeys = [fs.readFileSync(`${clientKey}.pub`, "utf8").trim()];
                c["airlock:workloads"].browser = { enabled: false };
            }),
        );
        const images = { sandboxShell: IMAGE, browser: IMAGE, postgres: IMAGE, redis: IMAGE, api: IMAGE, adguard: IMAGE, agent: IMAGE, agentMemoryDb: IMAGE, services: {} };
        fs.mkdirSync(path.join(dir, "workspace"));
        const compose = path.join(dir, "compose.yml");
        fs.writeFileSync(compose, renderSandboxCompose(cfg, images).replace("- /workspace:/workspace", `- ${dir}/workspace:/workspace`));
        const up = run("docker-compose", ["--project-name", "airlockbench", "--file", compose, "up", "--detach"], { env: dockerd.env, timeout: 180_000 });
        if (up.status !== 0) throw new Error(`compose up: ${up.stderr}`);
        cleanup.push(() => run("docker-compose", ["--project-name", "airlockbench", "--file", compose, "down", "--timeout", "1"], { env: dockerd.env, timeout: 120_000 }));

        // The sandbox's sshd from the rendered files, in its namespace.
        const net = createTestNet("bcm");
        cleanup.push(() => net.close());
        const hosts = renderHosts(cfg);
        const root = fs.mkdtempSync("/run/airlock-bench-");
        cleanup.push(() => fs.rmSync(root, { recursive: true, force: true }));
        const hostPublicKey = installSandboxSshd(hosts.sandbox, root);
        // Every command goes on the record through the root broker, as on the sandbox.
        const broker = await startSandboxBroker(root, USER);
        cleanup.push(() => broker.stop());
        // As at boot: the agent's egress rules in force, or the wrapper refuses every command.
        enforceEgress(net.server, hosts.sandbox, Number(uid), "198.18.7.2");
        const stubBin = path.join(root, "stub-bin");
        fs.mkdirSync(stubBin);
        fs.writeFileSync(path.join(stubBin, "tailscale"), `#!/bin/sh\necho ${net.serverTailnet}\n`, { mode: 0o755 });
        const rendered = inNamespace(net.server, [`${root}/usr/local/sbin/airlock-tailnet-render`, path.join(root, SSHD_TEMPLATE_PATH), `${root}/etc/ssh/sshd_config`, "/usr/sbin/sshd", "-t", "-f"], {
            env: { PATH: `${stubBin}:/usr/sbin:/usr/bin:/sbin:/bin`, AIRLOCK_TAILNET_WAIT_SECONDS: "5" },
        });
        if (rendered.status !== 0) throw new Error(`airlock-tailnet-render: ${rendered.stderr}`);
        const sshd = spawnInNamespace(net.server, `exec /usr/sbin/sshd -D -e -f ${root}/etc/ssh/sshd_config`, path.join(clientDir, "sshd.log"));
        cleanup.push(() => sshd.kill("SIGTERM"));
        await waitForPort(net.client, net.serverTailnet, 22);

        const sshConfig = path.join(clientDir, "ssh_config");
        fs.writeFileSync(sshConfig, sandboxSshConfigAt(hosts.gateway, net.serverTailnet));
        fs.writeFileSync(path.join(clientDir, "known_hosts"), pinnedKnownHosts(hosts.gateway, hostPublicKey));
        const sshArgs = (extra: string) =>
            `ssh ${extra} -F ${sshConfig} -o HostName=${net.serverTailnet} -o IdentityFile=${clientKey} -o UserKnownHostsFile=${clientDir}/known_hosts -o ControlPath=${clientDir}/cm-%C sandbox true`;
        const clientEnv = { PATH: process.env.PATH ?? "/usr/bin:/bin", HOME: clientDir };
        const inClient = ["ip", "netns", "exec", net.client];
        cleanup.push(() => inNamespace(net.client, ["bash", "-c", `ssh -F ${sshConfig} -o HostName=${net.serverTailnet} -o ControlPath=${clientDir}/cm-%C -O exit sandbox`]));

        const wrapper = `${root}${SANDBOX_WRAPPER_PATH}`;
        debugLog = () => fs.readFileSync(path.join(clientDir, "sshd.log"), "utf8").split("\n").slice(-15).join("\n");
        log(`measuring (up to ${runs} runs or ${secondsPerSeries} s per series)...`);
        const floor = measure("bare docker exec", [], "docker exec -i -w /workspace agent-sandbox-shell bash -lc true", runs, secondsPerSeries, dockerd.env, log);
        const wrapperOnly = measure("wrapper (no ssh)", ["ip", "netns", "exec", net.server, "runuser", "-u", USER, "--"], `SSH_ORIGINAL_COMMAND=true ${wrapper}`, runs, secondsPerSeries, { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" }, log);
        const sshCold = measure("ssh, new connection each", inClient, sshArgs("-o ControlPath=none"), runs, secondsPerSeries, clientEnv, log);
        inNamespace(net.client, ["bash", "-c", sshArgs("")], { env: clientEnv }); // opens the ControlMaster
        const sshMultiplexed = measure("ssh, multiplexed (ControlMaster)", inClient, sshArgs(""), runs, secondsPerSeries, clientEnv, log);
        return { floor, wrapperOnly, sshCold, sshMultiplexed };
    } finally {
        for (const undo of cleanup.reverse()) await undo();
    }
}
