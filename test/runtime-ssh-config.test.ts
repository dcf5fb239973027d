import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { afterAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { COMPOSE_TEMPLATE_PATH, SANDBOX_SSH_CONFIG_PATH } from "../components/render/hosts";
import { AGENT_SERVICE, GATEWAY_AGENT_PATHS } from "../components/workloads/compose";
import { renderedFile, renderHosts, sandboxSshConfigAt, stackFile, tempDir } from "./helpers/stacks";
import { isRoot, TEST_TAILNET_DOMAIN, toolsAvailable } from "./helpers/tools";

/**
 * The runtime's container sees the gateway's pinned ssh config through the agent's rootless
 * Docker, where a file of the host's root belongs to an unmapped uid (nobody). ssh reads its
 * system-wide ssh_config without asking who owns it, but refuses an Include'd file owned by
 * anyone but root or the user ("Bad owner or permissions"): in the twin the runtime's
 * preflight failed on exactly that, and the runtime never started. Here ssh reads the
 * rendered config where the rendered compose mounts it, owned by nobody, under a private
 * /etc/ssh (a mount namespace): as the container does.
 */

const canRun = isRoot() && toolsAvailable("the runtime's ssh config", ["ssh", "unshare", "mount"]);
if (!isRoot()) console.warn("SKIPPED the runtime's ssh config: needs root (a mount namespace)");

describe.runIf(canRun)("the runtime's ssh config, owned by nobody as under rootless Docker", () => {
    const cfg = readStackFile(stackFile("dev"));
    const gateway = renderHosts(cfg).gateway;
    // The runtime's, with the tailnet's domain as airlock-tailnet-render fills it at boot; the host's own.
    const runtimeConfig = sandboxSshConfigAt(gateway, `${cfg.hostnames.sandbox}.${TEST_TAILNET_DOMAIN}`);
    const hostConfig = sandboxSshConfigAt(gateway, `${cfg.hostnames.sandbox}.${TEST_TAILNET_DOMAIN}`);
    const compose = YAML.parse(renderedFile(gateway, COMPOSE_TEMPLATE_PATH));
    const work = tempDir("runtime-ssh-config");
    afterAll(() => fs.rmSync(work, { recursive: true, force: true }));

    /** `ssh -G` for the alias Hermes uses, with the config at `target` in a private /etc/ssh (Debian's ssh_config includes ssh_config.d). */
    const sshResolves = (target: string, config: string) => {
        const etcSsh = fs.mkdtempSync(path.join(work, "etc-ssh-"));
        fs.mkdirSync(path.join(etcSsh, "ssh_config.d"));
        fs.writeFileSync(path.join(etcSsh, "ssh_config"), "Include /etc/ssh/ssh_config.d/*.conf\nHost *\n    SendEnv LANG LC_*\n");
        const file = path.join(etcSsh, path.relative("/etc/ssh", target));
        fs.writeFileSync(file, config, { mode: 0o644 });
        fs.chownSync(file, 65534, 65534);
        const script = 'mount --bind "$1" /etc/ssh && exec ssh -G -p 22 "$2"';
        return spawnSync("unshare", ["--mount", "--propagation", "private", "sh", "-c", script, "sh", etcSsh, `${cfg.agent.user}@sandbox`], { encoding: "utf8" });
    };

    it("is mounted as the container's system-wide ssh_config (its folder over /etc/ssh), where ssh reads it whoever owns it", () => {
        const mount = (compose.services[AGENT_SERVICE].volumes as string[]).find((v) => v.startsWith(`${GATEWAY_AGENT_PATHS.sshFolder}:`));
        expect(mount).toBeDefined();
        expect(mount!.split(":").slice(1)).toEqual(["/etc/ssh", "ro"]);
        const target = path.posix.join(mount!.split(":")[1], path.posix.relative(GATEWAY_AGENT_PATHS.sshFolder, GATEWAY_AGENT_PATHS.sshConfig));
        expect(target).toBe("/etc/ssh/ssh_config");
        const resolved = sshResolves(target, runtimeConfig);
        expect(resolved.stderr).toBe("");
        // The sandbox by its full MagicDNS name: the container has no search domain to complete a short one.
        expect(resolved.stdout).toMatch(new RegExp(`^hostname ${`${cfg.hostnames.sandbox}.${TEST_TAILNET_DOMAIN}`.replace(/\./g, "\\.")}$`, "m"));
        expect(resolved.stdout).toMatch(new RegExp(`^hostkeyalias ${cfg.hostnames.sandbox}$`, "m"));
        expect(resolved.stdout).toMatch(/^stricthostkeychecking true$/m);
    });

    it("in ssh_config.d (where the gateway itself keeps it) ssh would refuse it", () => {
        const refused = sshResolves(SANDBOX_SSH_CONFIG_PATH, hostConfig);
        expect(refused.status).not.toBe(0);
        expect(refused.stderr).toMatch(/Bad owner or permissions on \/etc\/ssh\/ssh_config\.d\/20-airlock-sandbox\.conf/);
    });
});
