import * as fs from "node:fs";
import * as path from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { RenderedHost, SSHD_TEMPLATE_PATH, withTailnetKey } from "../components/render/hosts";
import { HERMES_RUNTIME } from "../policies/contract";
import { fakeTailnetKey, SHIPPED_STACKS, stackFile, tempDir, renderHosts, renderedFile } from "./helpers/stacks";
import { installFiles, isRoot, run, TEST_TAILNET_IPV4, toolsAvailable, withTailnetValues } from "./helpers/tools";
import { hostSshd } from "./helpers/hostTools";

/** Every rendered artifact is checked by the real program that consumes it. */

const hosts: [string, RenderedHost][] = SHIPPED_STACKS.flatMap((stack) => {
    const cfg = readStackFile(stackFile(stack));
    return [
        [`${stack}/gateway`, renderHosts(cfg).gateway],
        [`${stack}/sandbox`, renderHosts(cfg).sandbox],
    ] as [string, RenderedHost][];
});

const sshdTemplate = (host: RenderedHost) => renderedFile(host, SSHD_TEMPLATE_PATH);

describe.runIf(toolsAvailable("sshd config checks", ["sshd", "ssh-keygen"]) && isRoot())("sshd -t / sshd -T (the hosts' sshd)", () => {
    const sshd = hostSshd();
    let dir: string;
    let hostKey: string;
    beforeAll(() => {
        dir = tempDir("sshd");
        hostKey = path.join(dir, "host_ed25519");
        expect(run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", hostKey]).status).toBe(0);
        fs.mkdirSync("/run/sshd", { recursive: true, mode: 0o755 });
    });

    /** `sshd -T` for a connection from `user`, as a keyword -> values map. */
    function effective(configText: string, user: string): Map<string, string[]> {
        const file = path.join(dir, `sshd_config.${user}`);
        fs.writeFileSync(file, sshd.configLines + configText);
        const result = run(sshd.sshd, ["-T", "-f", file, "-h", hostKey, "-C", `user=${user},host=gateway,addr=100.100.7.2`]);
        expect(result.stderr).toBe("");
        expect(result.status).toBe(0);
        const values = new Map<string, string[]>();
        for (const line of result.stdout.trim().split("\n")) {
            const [key, ...rest] = line.split(" ");
            values.set(key, [...(values.get(key) ?? []), rest.join(" ")]);
        }
        return values;
    }

    it.each(hosts)("%s: sshd -t accepts the rendered config", (_, host) => {
        const file = path.join(dir, "sshd_config.t");
        fs.writeFileSync(file, sshd.configLines + withTailnetValues(sshdTemplate(host)));
        const result = run(sshd.sshd, ["-t", "-f", file, "-h", hostKey]);
        expect(result.stderr).toBe("");
        expect(result.status).toBe(0);
    });

    it.each(hosts)("%s: listens on the tailnet address only, keys only, no forwarding", (_, host) => {
        const user = host.role === "sandbox" ? "agent" : "ops";
        const eff = effective(withTailnetValues(sshdTemplate(host)), user);
        expect(eff.get("listenaddress")).toEqual([`${TEST_TAILNET_IPV4}:22`]);
        expect(eff.get("passwordauthentication")).toEqual(["no"]);
        expect(eff.get("kbdinteractiveauthentication")).toEqual(["no"]);
        expect(eff.get("permitrootlogin")).toEqual(["no"]);
        expect(eff.get("disableforwarding")).toEqual(["yes"]);
        expect(eff.get("allowtcpforwarding")).toEqual(["no"]);
        expect(eff.get("x11forwarding")).toEqual(["no"]);
        expect(eff.get("permittunnel")).toEqual(["no"]);
        expect(eff.get("permituserenvironment")).toEqual(["no"]);
        expect(eff.get("allowusers")).toEqual([user]);
    });

    it.each(hosts.filter(([, h]) => h.role === "sandbox"))("%s: the agent is forced through the wrapper with only the allowlist", (_, host) => {
        const eff = effective(withTailnetValues(sshdTemplate(host)), "agent");
        expect(eff.get("forcecommand")).toEqual(["/usr/local/libexec/airlock/sandbox-shell"]);
        expect(eff.get("acceptenv")).toEqual(["GITHUB_TOKEN"]);
        expect(eff.get("permittty")).toEqual(["no"]);
        // Only the gateway reaches it: no per-source penalty locks it out (test/e2e-sshd.test.ts).
        expect(eff.get("persourcepenaltyexemptlist")).toEqual(["100.64.0.0/10"]);
    });

    it.each(hosts)("%s: a cloud-image drop-in read after it cannot loosen anything (first value wins)", (_, host) => {
        const text = sshdTemplate(host);
        expect(text).not.toMatch(/^\s*Include\b/im);
        const dropIn = [
            "PasswordAuthentication yes",
            "KbdInteractiveAuthentication yes",
            "PermitRootLogin yes",
            "DisableForwarding no",
            "AllowTcpForwarding yes",
            "PermitTunnel yes",
            "X11Forwarding yes",
            "PermitUserEnvironment yes",
        ].join("\n");
        // Global keywords can only be appended before the first Match block.
        const firstMatch = text.search(/^Match /m);
        const loosened = firstMatch < 0 ? `${text}\n${dropIn}\n` : `${text.slice(0, firstMatch)}${dropIn}\n${text.slice(firstMatch)}`;
        const eff = effective(withTailnetValues(loosened), host.role === "sandbox" ? "agent" : "ops");
        for (const [key, value] of [
            ["passwordauthentication", "no"],
            ["kbdinteractiveauthentication", "no"],
            ["permitrootlogin", "no"],
            ["disableforwarding", "yes"],
            ["allowtcpforwarding", "no"],
            ["permittunnel", "no"],
            ["x11forwarding", "no"],
            ["permituserenvironment", "no"],
        ]) {
            expect(eff.get(key), key).toEqual([value]);
        }
    });
});

describe.runIf(toolsAvailable("cloud-init schema", ["cloud-init"]))("cloud-init schema", () => {
    it.each(hosts)("%s: the user_data is valid cloud-config", (_, host) => {
        const file = path.join(tempDir("cloud-init"), "user-data.yaml");
        fs.writeFileSync(file, withTailnetKey(host.cloudInit, fakeTailnetKey()));
        const result = run("cloud-init", ["schema", "--config-file", file]);
        expect(result.stdout + result.stderr).toContain("Valid cloud-config");
        expect(result.stdout + result.stderr).not.toMatch(/deprecat/i);
        expect(result.status).toBe(0);
    });
});

/** Rendered files in a language, by their first line: a shebang or a shellcheck directive for sourced files. */
const filesIn = (language: RegExp) =>
    hosts.flatMap(([label, host]) => host.files.filter((f) => language.test(f.content.split("\n")[0])).map((f) => [`${label}:${f.path}`, f.content] as const));

describe.runIf(toolsAvailable("shellcheck", ["shellcheck"]))("shellcheck", () => {
    const scripts = filesIn(/^(#!\/bin\/bash$|# shellcheck shell=bash)/);

    it("every executable is a bash script or a python one", () => {
        const executables = hosts.flatMap(([, host]) => host.files.filter((f) => f.permissions === "0755"));
        // The host's own Python, isolated; but the runtime's preflight runs in the runtime's container, on Hermes's Python.
        const shebang = (f: { path: string }) => (f.path === HERMES_RUNTIME.preflight ? /^#!\/usr\/bin\/env -S python3 -I$/ : /^#!(\/bin\/bash|\/usr\/bin\/python3 -IS)$/);
        expect(executables.filter((f) => !shebang(f).test(f.content.split("\n")[0])).map((f) => f.path)).toEqual([]);
    });

    it("finds the scripts", () => expect(scripts.length).toBeGreaterThanOrEqual(12));

    it.each(scripts)("%s passes shellcheck", (_, content) => {
        const file = path.join(tempDir("sh"), "script");
        fs.writeFileSync(file, content);
        const result = run("shellcheck", ["--shell=bash", "--severity=style", file]);
        expect(result.stdout).toBe("");
        expect(result.status).toBe(0);
    });
});

describe.runIf(toolsAvailable("python scripts", ["python3", "pyflakes3"]))("python3 and pyflakes", () => {
    const scripts = filesIn(/^#!\/usr\/bin\/(python3 |env -S python3 -I$)/);

    it("finds the scripts", () => expect(scripts.length).toBeGreaterThanOrEqual(2));

    it.each(scripts)("%s compiles and passes pyflakes", (_, content) => {
        const file = path.join(tempDir("py"), "script.py");
        fs.writeFileSync(file, content);
        const compiled = run("/usr/bin/python3", ["-c", "import ast, sys; ast.parse(open(sys.argv[1]).read())", file]);
        expect(compiled.stderr).toBe("");
        const flakes = run("pyflakes3", [file]);
        expect(flakes.stdout + flakes.stderr).toBe("");
        expect(flakes.status).toBe(0);
    });
});

describe.runIf(toolsAvailable("systemd units", ["systemd-analyze"]))("systemd-analyze verify", () => {
    /**
     * A throwaway root holding the distribution's units, the host's rendered files,
     * and the binaries the units execute, so `verify --root` checks what boots.
     */
    function fakeRoot(host: RenderedHost): string {
        const root = tempDir("root");
        fs.cpSync("/usr/lib/systemd/system", path.join(root, "usr/lib/systemd/system"), { recursive: true, verbatimSymlinks: true });
        installFiles(host, root);
        // tailscaled's unit comes with Tailscale's package at boot (not on this machine):
        // a stand-in with the directory settings the rendered drop-in changes.
        fs.writeFileSync(
            path.join(root, "usr/lib/systemd/system/tailscaled.service"),
            "[Unit]\nDescription=Tailscale node agent (stand-in)\n[Service]\nExecStart=/bin/sleep infinity\nRuntimeDirectory=tailscale\nRuntimeDirectoryMode=0755\n[Install]\nWantedBy=multi-user.target\n",
        );
        // Every program a unit executes, from this machine (.ci/run installs them), so verify
        // checks that each one exists and is executable.
        const units = host.files.filter((f) => f.path.startsWith("/etc/systemd/")).map((f) => f.content);
        const programs = new Set(["/lib/systemd/systemd", "/usr/sbin/sshd", "/bin/sleep"]);
        for (const m of units.join("\n").matchAll(/^Exec\w*=[-@:+!]*(\/\S+)/gm)) programs.add(m[1]);
        for (const program of programs) {
            const target = path.join(root, program);
            if (fs.existsSync(target) || !fs.existsSync(program)) continue;
            fs.mkdirSync(path.dirname(target), { recursive: true });
            fs.copyFileSync(fs.realpathSync(program), target);
            fs.chmodSync(target, 0o755);
        }
        return root;
    }

    /** Units to verify for each rendered unit file or drop-in. */
    function unitsOf(host: RenderedHost): { file: string; unit: string; userUnit: boolean }[] {
        return host.files.flatMap((f): { file: string; unit: string; userUnit: boolean }[] => {
            const system = /^\/etc\/systemd\/system\/(?:([^/]+)\.d\/[^/]+\.conf|([^/]+\.(?:service|timer|socket)))$/.exec(f.path);
            if (system) {
                // Templates are verified through an instance.
                const unit = (system[1] ?? system[2]).replace("user@.service", "user@1000.service").replace(/@\.(service|timer)$/, "@test.$1");
                return [{ file: f.path, unit, userUnit: false }];
            }
            const user = /^\/etc\/systemd\/user\/([^/]+\.(?:service|path))$/.exec(f.path);
            return user ? [{ file: f.path, unit: user[1], userUnit: true }] : [];
        });
    }

    const cases = hosts.flatMap(([label, host]) => unitsOf(host).map((u) => [`${label}:${u.file}`, host, u] as const));

    it("finds the units", () => expect(cases.length).toBeGreaterThanOrEqual(8));

    it.each(cases)("%s verifies without warnings", (_, host, { unit, userUnit }) => {
        const root = fakeRoot(host);
        let name = unit;
        if (userUnit) {
            // User units share the unit-file syntax; verify it as a system unit under the fake root.
            name = `airlock-user-${unit}`;
            fs.copyFileSync(path.join(root, "etc/systemd/user", unit), path.join(root, "etc/systemd/system", name));
        }
        const result = run("systemd-analyze", ["verify", `--root=${root}`, name]);
        expect(result.stderr).toBe("");
        expect(result.status).toBe(0);
    });
});
