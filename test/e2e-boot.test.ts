import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as YAML from "yaml";
import { RenderedHost, SANDBOX_WRAPPER_PATH } from "../components/render/hosts";
import { AGENT_WORKLOADS_STATE_SCRIPT } from "../twin/guests";
import { bootRootfs, BootedHost, sandboxRootfs } from "./helpers/nspawn";
import { isRoot, run, toolsAvailable } from "./helpers/tools";

/**
 * The sandbox's rendered units booted under a real systemd (systemd-nspawn), in a
 * network namespace of the test's own: the runcmd of the rendered cloud-init runs
 * as cloud-init's final stage would, with stand-ins only for what this machine
 * cannot have (tailscale, the Docker engine, the hcloud volume). The attack is the
 * one a review found: the gateway is not on the tailnet yet (both servers are
 * created in parallel), so airlock-tailnet-config fails; do the agent's processes
 * run without their egress rules?
 */

const canRun = isRoot() && toolsAvailable("boot order under systemd-nspawn", ["systemd-nspawn", "mmdebstrap", "nsenter", "ip"]);
if (!isRoot()) console.warn("SKIPPED boot order under systemd-nspawn: needs root (CI runs it as root)");

const SELF = "100.100.7.1";
const GATEWAY = "100.100.7.53";
const OTHER_TAILNET_NODE = "100.100.8.9";

/** tailscale, as far as our scripts use it; its state is a directory the test controls from outside. */
const TAILSCALE_STUB = `#!/bin/bash
state=/var/lib/fake-tailnet
case "$1" in
up) exit 0 ;;
ip)
	shift
	[[ "\${1:-}" == "-4" ]] && shift
	if [[ -z "\${1:-}" ]]; then cat "$state/self"; exit; fi
	[[ -f "$state/peer-$1" ]] || { echo "no such peer $1" >&2; exit 1; }
	cat "$state/peer-$1" ;;
*) exit 0 ;;
esac
`;

/**
 * What an agent process does first when it wants out: send to the metadata service
 * (which serves user_data), to another tailnet node, and to a loopback service.
 * Datagrams, because a dropped datagram fails at once with EPERM (a dropped TCP SYN
 * just times out): EPERM means a rule dropped it; a send that succeeds left.
 */
const PROBE = `#!/bin/bash
out="/var/lib/fake-tailnet/probes/$1"
{
	echo "uid=$(id -u)"
	for target in 169.254.169.254/80 ${OTHER_TAILNET_NODE}/22 127.0.0.1/9; do
		if err="$(LC_ALL=C bash -c "printf x >/dev/udp/\${target%/*}/\${target#*/}" 2>&1)"; then
			echo "$target left-the-host"
		elif [[ "$err" == *"Operation not permitted"* ]]; then
			echo "$target blocked"
		else
			echo "$target failed otherwise: $err"
		fi
	done
} >"$out.tmp" && mv "$out.tmp" "$out"
`;

/** The Docker engine's parts the host units start, as stand-ins that probe as the agent when they start. */
const DOCKERD_STUB = `#!/bin/bash
/usr/local/bin/airlock-test-probe dockerd
systemd-notify --ready
exec sleep infinity
`;
const COMPOSE_STUB = `#!/bin/bash
[[ " $* " == *" up "* ]] && /usr/local/bin/airlock-test-probe containers
exit 0
`;
/** docker exec, for the wrapper: runs the command's bash here, as the container would. */
const DOCKER_STUB = `#!/bin/bash
echo "$*" >/var/lib/fake-tailnet/probes/docker-args
exit 0
`;
const SYSTEM_DOCKER_UNIT = "[Unit]\nDescription=stand-in for docker.io's rootful daemon\n[Service]\nExecStart=/bin/sleep infinity\n[Install]\nWantedBy=multi-user.target\n";
/** tailscaled's unit as Tailscale ships it (RuntimeDirectoryMode=0755), its LocalAPI socket open to all (0666) as tailscaled makes it. */
const TAILSCALED_UNIT = "[Unit]\nDescription=stand-in for tailscaled\n[Service]\nRuntimeDirectory=tailscale\nRuntimeDirectoryMode=0755\nExecStart=/usr/bin/socat UNIX-LISTEN:/run/tailscale/tailscaled.sock,fork,mode=0666 SYSTEM:'read -r _; echo localapi'\n[Install]\nWantedBy=multi-user.target\n";
const SYSTEM_DOCKER_SOCKET = "[Unit]\nDescription=stand-in\n[Socket]\nListenStream=/run/docker-stand-in.sock\n[Install]\nWantedBy=sockets.target\n";

describe.runIf(canRun)("sandbox boot order under systemd (nspawn)", () => {
    let dir: string;
    let host: BootedHost | undefined;
    let sandbox: RenderedHost;
    let agentUid: number;
    let agent: string;
    let gatewayHost: string;
    const runcmd: { argv: string[]; result: ReturnType<BootedHost["exec"]> }[] = [];
    const netns = `al-boot-${process.pid % 10000}`;
    const voidNs = `${netns}-void`;
    const state = () => path.join(dir, "tailnet");
    const probe = (name: string) => {
        const file = path.join(state(), "probes", name);
        return fs.existsSync(file) ? fs.readFileSync(file, "utf8") : undefined;
    };

    beforeAll(async () => {
        const prepared = sandboxRootfs("boot");
        const { root, cfg } = prepared;
        ({ dir, sandbox } = prepared);
        agentUid = cfg.agent.uid;
        agent = cfg.agent.user;
        gatewayHost = cfg.hostnames.gateway;

        // The network: the tailnet interface with the sandbox's address, and a "public"
        // interface with a default route. Both lead into a namespace that drops whatever
        // arrives, so a packet no rule dropped leaves the host, silently, and times out.
        run("ip", ["netns", "del", netns]);
        run("ip", ["netns", "del", voidNs]);
        for (const args of [
            ["netns", "add", netns],
            ["netns", "add", voidNs],
            ["-n", netns, "link", "set", "lo", "up"],
            ["link", "add", "tailscale0", "netns", netns, "type", "veth", "peer", "name", "ts-void", "netns", voidNs],
            ["link", "add", "eth0", "netns", netns, "type", "veth", "peer", "name", "eth-void", "netns", voidNs],
            ["-n", voidNs, "link", "set", "ts-void", "up"],
            ["-n", voidNs, "link", "set", "eth-void", "up"],
            ["-n", netns, "addr", "add", `${SELF}/32`, "dev", "tailscale0"],
            ["-n", netns, "link", "set", "tailscale0", "up"],
            ["-n", netns, "route", "add", "100.64.0.0/10", "dev", "tailscale0"],
            ["-n", netns, "addr", "add", "10.9.0.2/24", "dev", "eth0"],
            ["-n", netns, "link", "set", "eth0", "up"],
            ["-n", netns, "route", "add", "default", "via", "10.9.0.1"],
        ]) {
            const r = run("ip", args);
            if (r.status !== 0) throw new Error(`ip ${args.join(" ")}: ${r.stderr}`);
        }

        const doc = YAML.parse(sandbox.cloudInit);

        // Stand-ins.
        const put = (file: string, content: string, mode = 0o755) => {
            fs.mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
            fs.writeFileSync(path.join(root, file), content, { mode });
        };
        put("/usr/bin/tailscale", TAILSCALE_STUB);
        put("/usr/local/bin/airlock-test-probe", PROBE);
        put("/usr/share/docker.io/contrib/dockerd-rootless.sh", DOCKERD_STUB);
        put("/usr/bin/docker-compose", COMPOSE_STUB);
        put("/usr/bin/docker", DOCKER_STUB);
        put("/lib/systemd/system/docker.service", SYSTEM_DOCKER_UNIT, 0o644);
        put("/lib/systemd/system/docker.socket", SYSTEM_DOCKER_SOCKET, 0o644);
        put("/lib/systemd/system/tailscaled.service", TAILSCALED_UNIT, 0o644);
        // The hcloud volume is the twin's to prove; here /workspace is a plain directory.
        put("/usr/local/sbin/airlock-mount-workspace", "#!/bin/bash\nmkdir -p /workspace\n");
        fs.mkdirSync(path.join(state(), "probes"), { recursive: true });
        fs.chmodSync(path.join(state(), "probes"), 0o1777);
        fs.writeFileSync(path.join(state(), "self"), `${SELF}\n`);

        host = await bootRootfs(root, netns, [`${state()}:/var/lib/fake-tailnet`]);

        // runcmd, as cloud-init's final stage runs it: in order, a failure does not stop the rest.
        for (const command of doc.runcmd as (string | string[])[]) {
            // The host code is in place already (sandboxRootfs wrote every rendered file), as airlock-bundle-install leaves it:
            // test/bundle.test.ts runs the installer itself.
            if (command === "/usr/local/sbin/airlock-bundle-install || exit 1") continue;
            const argv = Array.isArray(command) ? command.map(String) : ["sh", "-c", command];
            runcmd.push({ argv, result: host.exec(argv, { timeout: 180_000 }) });
        }
    }, 900_000);

    afterAll(async () => {
        if (host && process.env.AIRLOCK_DEBUG) console.log(host.exec(["journalctl", "--no-pager", "-b"]).stdout.slice(-20_000));
        await host?.stop();
        run("ip", ["netns", "del", netns]);
        run("ip", ["netns", "del", voidNs]);
        if (dir) fs.rmSync(dir, { recursive: true, force: true });
    }, 60_000);

    it("with the gateway not on the tailnet yet, no process of the agent runs without its egress rules", async () => {
        // Give the user manager and its units time to start (or not).
        await new Promise((r) => setTimeout(r, 5000));
        const userManager = host!.exec(["systemctl", "is-active", `user@${agentUid}.service`]).stdout.trim();
        const table = host!.exec(["nft", "list", "table", "inet", "airlock"]);
        // An agent process on the host right now (as after a container escape, or an ssh session).
        host!.exec(["runuser", "-u", agent, "--", "/usr/local/bin/airlock-test-probe", "agent-now"]);

        const why = () => host!.exec(["journalctl", "--no-pager", "-b", "-u", "airlock-egress.service", "-u", "airlock-tailnet-config.service", `-u`, `user@${agentUid}.service`]).stdout.slice(-4000);
        for (const started of ["dockerd", "containers"]) {
            const seen = probe(started);
            // Either it has not started, or it started under the rules.
            if (seen !== undefined) expect(seen, `${started} started without its egress rules (user manager ${userManager})`).toMatch(/169\.254\.169\.254\/80 blocked/);
        }
        expect(probe("agent-now"), host!.exec(["nft", "list", "ruleset"]).stdout).toMatch(/169\.254\.169\.254\/80 blocked/);
        expect(table.status, `the egress table is loaded before the tailnet is complete\n${why()}`).toBe(0);
    });

    it("first boot ends in airlock-boot-check, which passes with the gateway still missing", () => {
        const last = runcmd.at(-1)!;
        expect(last.argv).toEqual(["/usr/local/sbin/airlock-boot-check"]);
        expect(last.result.stderr).toBe("");
        expect(last.result.status).toBe(0);
    });

    it("airlock-boot-check fails first boot, naming the unit, when one the host needs is not running", () => {
        expect(host!.exec(["systemctl", "stop", "airlock-broker.socket"]).status).toBe(0);
        try {
            const check = host!.exec(["/usr/local/sbin/airlock-boot-check"]);
            expect(check.status).toBe(1);
            expect(check.stderr).toContain("not active: airlock-broker.socket");
        } finally {
            host!.exec(["systemctl", "start", "airlock-broker.socket"]);
        }
    });

    it("airlock-boot-check fails when a unit of the agent's own manager failed (its rootless Docker, the workloads)", () => {
        // A failed user unit leaves the system "running" and `systemctl --failed` empty.
        const failed = host!.exec(["systemd-run", "--user", "-M", `${agent}@`, "--unit=airlock-probe-fails", "--wait", "/bin/false"], { timeout: 30_000 });
        expect(failed.status).not.toBe(0);
        try {
            expect(host!.exec(["systemctl", "list-units", "--failed", "--plain", "--no-legend"]).stdout.trim()).toBe("");
            const check = host!.exec(["/usr/local/sbin/airlock-boot-check"]);
            expect(check.stderr).toContain(`failed in ${agent}'s manager: airlock-probe-fails.service`);
            expect(check.status).toBe(1);
        } finally {
            host!.exec(["systemctl", "--user", "-M", `${agent}@`, "reset-failed", "airlock-probe-fails.service"]);
        }
        expect(host!.exec(["/usr/local/sbin/airlock-boot-check"]).status).toBe(0);
    });

    it("other users' sessions neither wait for nor depend on the agent's units, nor run its workloads", async () => {
        expect(host!.exec(["useradd", "--uid", "1600", "--create-home", "ops"]).status).toBe(0);
        const started = host!.exec(["systemctl", "start", "user@1600.service"], { timeout: 30_000 });
        expect(started.status, started.stderr).toBe(0);
        const deps = host!.exec(["systemctl", "show", "user@1600.service", "--property=BindsTo,Requires,Wants,After"]).stdout;
        expect(deps).not.toMatch(/airlock-/);
        expect(host!.exec(["systemctl", "show", `user@${agentUid}.service`, "--property=BindsTo"]).stdout).toContain("airlock-egress.service");
        // The workloads (enabled for every user manager) run under the agent's alone.
        const ops = (unit: string) =>
            host!.exec(["runuser", "-u", "ops", "--", "env", "XDG_RUNTIME_DIR=/run/user/1600", "DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/1600/bus", "systemctl", "--user", "is-active", unit]).stdout.trim();
        expect(await host!.waitFor(["test", "-S", "/run/user/1600/bus"], 20)).toBe(true);
        for (const unit of ["airlock-workloads.path", "airlock-workloads.service", "docker.service"]) expect(ops(unit), unit).toBe("inactive");
    });

    it("tailscaled's LocalAPI is root's: the agent cannot ask tailscaled to connect for it (tailscale nc)", async () => {
        expect(host!.exec(["systemctl", "start", "tailscaled.service"]).status).toBe(0);
        expect(await host!.waitFor(["test", "-S", "/run/tailscale/tailscaled.sock"], 10)).toBe(true);
        expect(host!.exec(["stat", "-c", "%a %U", "/run/tailscale"]).stdout.trim()).toBe("700 root");
        const asAgent = host!.exec(["runuser", "-u", agent, "--", "socat", "-T", "2", "-", "UNIX-CONNECT:/run/tailscale/tailscaled.sock"], { input: "GET /localapi/v0/status\n" });
        expect(asAgent.status).not.toBe(0);
        expect(asAgent.stderr).toMatch(/Permission denied/);
        // Root's does (socat waits up to 5 s for the answer after its input ends: a loaded CI machine).
        const asRoot = host!.exec(["socat", "-t", "5", "-T", "10", "-", "UNIX-CONNECT:/run/tailscale/tailscaled.sock"], { input: "x\n" });
        expect(asRoot.stdout, asRoot.stderr).toContain("localapi");
    });

    it("the agent reaches neither another tailnet node nor a host loopback service", () => {
        const seen = probe("agent-now") ?? "";
        expect(seen).toMatch(new RegExp(`${OTHER_TAILNET_NODE.replaceAll(".", "\\.")}/22 blocked`));
        expect(seen).toMatch(/127\.0\.0\.1\/9 blocked/);
    });

    it("the wrapper refuses commands while the rules are missing, and runs them once they are back", () => {
        const wrapper = () => host!.exec(["runuser", "-u", agent, "--", "env", "SSH_ORIGINAL_COMMAND=true", SANDBOX_WRAPPER_PATH]);
        const saved = host!.exec(["nft", "list", "table", "inet", "airlock"]).stdout;
        expect(host!.exec(["nft", "delete", "table", "inet", "airlock"]).status).toBe(0);
        try {
            const refused = wrapper();
            expect(refused.status).not.toBe(0);
            expect(refused.stderr).toMatch(/egress rules are not in force/);
        } finally {
            expect(host!.exec(["nft", "-f", "-"], { input: saved }).status).toBe(0);
        }
        const allowed = wrapper();
        expect(allowed.stderr).toBe("");
        expect(allowed.status).toBe(0);
    });

    it("rules flushed behind their unit's back come back, and the agent's manager is restarted under them", async () => {
        const before = host!.exec(["systemctl", "show", `user@${agentUid}.service`, "--property=ActiveEnterTimestampMonotonic"]).stdout.trim();
        expect(host!.exec(["nft", "flush", "ruleset"]).status).toBe(0);
        expect(await host!.waitFor(["nft", "list", "table", "inet", "airlock"], 60), "the table is back").toBe(true);
        expect(await host!.waitFor(["systemctl", "is-active", "--quiet", `user@${agentUid}.service`], 30)).toBe(true);
        const after = host!.exec(["systemctl", "show", `user@${agentUid}.service`, "--property=ActiveEnterTimestampMonotonic"]).stdout.trim();
        expect(after, "the agent's user manager was restarted").not.toBe(before);
    }, 120_000);

    it("converges when the gateway joins, without waiting for a timer", async () => {
        fs.writeFileSync(path.join(state(), `peer-${gatewayHost}`), `${GATEWAY}\n`);
        const ready = await host!.waitFor(["nft", "list", "set", "inet", "airlock", "resolver4"], 1) && (await host!.waitFor(["sh", "-c", `nft list set inet airlock resolver4 | grep -q ${GATEWAY}`], 60));
        expect(ready, "the resolver's address reaches the egress rules").toBe(true);
        expect(await host!.waitFor(["test", "-f", "/var/lib/fake-tailnet/probes/containers"], 60), "the workloads start").toBe(true);
        expect(probe("containers")).toMatch(/169\.254\.169\.254\/80 blocked/);
        expect(host!.exec(["systemctl", "--failed", "--no-legend", "--plain"]).stdout.trim()).toBe("");
    });

    it("twin status asks the agent's workloads without starting its stopped user manager (systemctl --user -M would, and its egress rules with it)", async () => {
        const ask = () => host!.exec(["sh", "-c", AGENT_WORKLOADS_STATE_SCRIPT, "sh", agent], { timeout: 30_000 });
        const manager = () => host!.exec(["systemctl", "is-active", `user@${agentUid}.service`]).stdout.trim();
        // The workloads are active since the test before (the gateway joined).
        expect(ask().stdout.trim(), "asked while the manager runs").toBe("active");
        expect(host!.exec(["systemctl", "stop", `user@${agentUid}.service`], { timeout: 60_000 }).status).toBe(0);
        try {
            const answer = ask().stdout.trim();
            await new Promise((r) => setTimeout(r, 2000));
            expect(manager(), "the agent's user manager after the question").toBe("inactive");
            expect(answer).toBe("");
        } finally {
            host!.exec(["systemctl", "start", `user@${agentUid}.service`], { timeout: 60_000 });
        }
    }, 120_000);
});
