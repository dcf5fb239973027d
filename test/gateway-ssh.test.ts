import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { AUDIT_CONFIG_PATH, GATEWAY_ROOT_SANDBOX_KEY, SANDBOX_SSH_CONFIG_PATH } from "../components/render/hosts";
import { renderHosts, renderedFile, sandboxSshConfigAt, stackFile, tempDir } from "./helpers/stacks";
import { isRoot, run, toolsAvailable } from "./helpers/tools";

/**
 * Root's jobs on the gateway (backups, the record's pull) reach the sandbox logged in
 * as the agent user. That user may be hostile too (an escape from the agent runtime or
 * the resolver's container): no process of its uid may carry the connection (it could
 * stop it and answer in its place), and what it writes in its own ~/.ssh must not
 * change how root's ssh connects. `ssh -G` prints the settings ssh would use.
 */

const canRun = isRoot() && toolsAvailable("gateway ssh settings", ["ssh", "useradd", "runuser"]);
if (!isRoot()) console.warn("SKIPPED gateway ssh settings: needs root to create a user (CI runs it as root)");

const USER = "airlock-sshg";

describe.runIf(canRun)("root's ssh to the sandbox ignores the agent user's ~/.ssh", () => {
    let dir: string;
    let argv: string[];
    let rootKey: string;

    beforeAll(() => {
        run("userdel", ["--remove", USER]);
        expect(run("useradd", ["--create-home", "--shell", "/bin/sh", USER]).status).toBe(0);
        dir = tempDir("gateway-ssh");
        fs.chmodSync(dir, 0o755);
        const gateway = renderHosts(readStackFile(stackFile("dev"))).gateway;
        const clientConfig = path.join(dir, "20-airlock-sandbox.conf");
        fs.writeFileSync(clientConfig, sandboxSshConfigAt(gateway, "airlock-dev-sandbox"), { mode: 0o644 });
        // Exactly what airlock-audit (and the backup library) runs, with this test's user and file.
        const rendered: string[] = JSON.parse(renderedFile(gateway, AUDIT_CONFIG_PATH)).ssh;
        expect(renderedFile(gateway, "/usr/local/lib/airlock/backup.sh")).toContain(rendered.join(" "));
        rootKey = path.join(dir, "id_ed25519");
        expect(run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", rootKey]).status).toBe(0);
        argv = rendered.map((a) => (a === SANDBOX_SSH_CONFIG_PATH ? clientConfig : a === GATEWAY_ROOT_SANDBOX_KEY ? rootKey : a));
        // What a hostile agent user writes in its own ssh config.
        const home = `/home/${USER}`;
        fs.mkdirSync(`${home}/.ssh`, { mode: 0o700 });
        fs.writeFileSync(`${home}/.ssh/config`, "Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  KexAlgorithms diffie-hellman-group1-sha1\n  ProxyCommand sh -c 'cat /etc/airlock/backup/*.env >/tmp/stolen'\n  ControlPath /tmp/planted-master\n");
        run("chown", ["-R", `${USER}:${USER}`, `${home}/.ssh`]);
    });

    afterAll(() => {
        run("userdel", ["--remove", USER]);
        if (dir) fs.rmSync(dir, { recursive: true, force: true });
    });

    const settings = (args: string[]) => {
        const host = args.at(-1)!;
        const result = run(args[0], [...args.slice(1, -1), "-G", host]);
        expect(result.status, result.stderr).toBe(0);
        const lines = result.stdout.trim().split("\n").map((l) => [l.slice(0, l.indexOf(" ")), l.slice(l.indexOf(" ") + 1)] as [string, string]);
        return Object.assign(new Map(lines), { all: (key: string) => lines.filter(([k]) => k === key).map(([, v]) => v) });
    };

    it("control: run as the agent user, the client would read what that user wrote (the attack the rendered command prevents)", () => {
        const loose = settings(["runuser", "-u", USER, "--", ...argv.filter((a, i) => a !== "-F" && argv[i - 1] !== "-F")]);
        expect(loose.get("stricthostkeychecking")).toBe("false");
        expect(loose.get("proxycommand")).toContain("stolen");
    });

    it("the rendered command runs ssh itself, as root, with root's copy of the key, logged in as the agent", () => {
        expect(argv[0]).toBe("ssh");
        const s = settings(argv);
        expect(s.get("user")).toBe(readStackFile(stackFile("dev")).agent.user);
        expect(argv).toContain(rootKey);
        expect(s.all("identityfile")).toContain(rootKey);
    });

    it("the rendered command keeps the pinned host key, the modern algorithms, and no proxy or shared master", () => {
        const s = settings(argv);
        expect(s.get("stricthostkeychecking")).toBe("true");
        expect(s.get("userknownhostsfile")).toBe("/etc/airlock/known_hosts");
        expect(s.get("kexalgorithms")).not.toMatch(/sha1|nistp/);
        expect(s.has("proxycommand")).toBe(false);
        // ControlPath=none: ssh -G prints no control path at all.
        expect(s.has("controlpath")).toBe(false);
    });
});
