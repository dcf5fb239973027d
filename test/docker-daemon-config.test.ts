import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { renderedFile, renderHosts, stackFile, tempDir } from "./helpers/stacks";
import { isRoot, run, toolsAvailable } from "./helpers/tools";

/**
 * The sandbox's rootless dockerd reads its daemon.json from ~/.config/docker, which
 * airlock-agent-home makes root's (the agent must not change how its daemon runs).
 * Docker 20.10 (Debian 12) also writes its trust key there by default, and a daemon
 * that cannot write it does not start: no containers at all (seen on the first
 * boot of the twin). The rendered daemon.json moves the key into the one directory
 * the agent owns. Proven with this machine's dockerd: its default key location
 * made read-only, as the agent's config directory is for the agent.
 */
const canRun = isRoot() && toolsAvailable("the daemon.json test", ["dockerd", "docker", "unshare"]);

function renderedDaemonJson(): { json: Record<string, unknown>; agent: string } {
    const cfg = readStackFile(stackFile("dev"));
    const template = renderedFile(renderHosts(cfg).sandbox, "/etc/airlock/docker-daemon.json.in");
    // What airlock-tailnet-render fills in on the host.
    return { json: JSON.parse(template.replaceAll("@RESOLVER_IPV4@", "100.100.7.1")), agent: cfg.agent.user };
}

describe.runIf(canRun)("the sandbox's daemon.json on a real dockerd", () => {
    it("starts a daemon whose default key location is not writable, keeps its key in the agent's data directory, and gives its containers the rendered seccomp profile", () => {
        const { json, agent } = renderedDaemonJson();
        const keyPath = String(json["deprecated-key-path"] ?? "");
        expect(keyPath.startsWith(`/home/${agent}/.local/share/docker/`), `key path '${keyPath}' is not in the agent's own data directory`).toBe(true);

        const dir = tempDir("daemon-json");
        // The resolver address is not reachable here; the test daemon also needs its own sockets and no networking.
        // The rendered seccomp profile, from where this test keeps it (a daemon whose profile is missing does not start).
        const seccompProfile = path.join(dir, "docker-seccomp.json");
        fs.writeFileSync(seccompProfile, renderedFile(renderHosts(readStackFile(stackFile("dev"))).sandbox, String(json["seccomp-profile"])));
        const config = { ...json, "seccomp-profile": seccompProfile, "default-address-pools": [{ base: "10.214.0.0/16", size: 24 }] };
        fs.writeFileSync(path.join(dir, "daemon.json"), JSON.stringify(config));
        fs.mkdirSync(path.join(dir, "empty"));
        const script = `set -eu
mount --bind -o ro "${dir}/empty" /etc/docker 2>/dev/null || { mkdir -p /etc/docker && mount --bind -o ro "${dir}/empty" /etc/docker; }
mount -t tmpfs tmpfs /home
install -d -m 0700 "$(dirname "${keyPath}")"
dockerd --data-root "${dir}/data" --exec-root "${dir}/exec" --pidfile "${dir}/dockerd.pid" -H "unix://${dir}/docker.sock" \\
  --iptables=false --ip6tables=false --bridge=none --config-file "${dir}/daemon.json" >"${dir}/dockerd.log" 2>&1 &
daemon=$!
for _ in $(seq 1 300); do
  if DOCKER_HOST="unix://${dir}/docker.sock" docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; then
    test -s "${keyPath}" && echo key-written
    DOCKER_HOST="unix://${dir}/docker.sock" docker info --format '{{json .SecurityOptions}}'
    kill $daemon; wait $daemon || true
    echo started; exit 0
  fi
  kill -0 $daemon 2>/dev/null || { echo "dockerd exited: $(tail -n 3 "${dir}/dockerd.log")"; exit 1; }
  sleep 0.1
done
kill $daemon; exit 1
`;
        const result = run("unshare", ["--mount", "--propagation", "private", "bash", "-c", script], { timeout: 90_000 });
        expect(result.stdout + result.stderr).toContain("started");
        expect(result.stdout).toContain("key-written");
        // Its containers' default profile is the rendered one, not Docker's built-in.
        expect(result.stdout).toContain(`name=seccomp,profile=${seccompProfile}`);
    }, 120_000);
});
