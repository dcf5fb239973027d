import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { SANDBOX_WRAPPER_PATH } from "../components/render/hosts";
import { egressRulesFor, inEgressNamespace } from "./helpers/egress";
import { editedStack, REPO, tempDir, renderHosts, renderedFile } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/** The ForceCommand wrapper on its own: what reaches the container, and what does not. */

/**
 * The rendered wrapper with a stub `docker`, run in a network namespace of its own
 * where the sandbox's rendered egress rules apply to it (or, with `egress: false`,
 * are missing).
 */
function installWrapper(allowlist: string[], { egress = true } = {}) {
    const cfg = readStackFile(editedStack("dev", (c) => (c["airlock:agent"].envAllowlist = allowlist)));
    const dir = tempDir("wrapper");
    const wrapper = path.join(dir, "sandbox-shell");
    const sandbox = renderHosts(cfg).sandbox;
    fs.writeFileSync(wrapper, renderedFile(sandbox, SANDBOX_WRAPPER_PATH), { mode: 0o755 });
    const rules = path.join(dir, "egress.nft");
    // The namespace's uid 0 stands in for the agent.
    fs.writeFileSync(rules, egressRulesFor(sandbox, cfg.agent.uid, 0));
    for (const sub of ["bin", "state", "workspace"]) fs.mkdirSync(path.join(dir, sub));
    fs.writeFileSync(
        path.join(dir, "bin", "docker"),
        fs
            .readFileSync(path.join(REPO, "test/fixtures/docker-exec-stub"), "utf8")
            .replace("@STATE_DIR@", path.join(dir, "state"))
            .replace("@WORKSPACE@", path.join(dir, "workspace")),
        { mode: 0o755 },
    );
    const invoke = (env: Record<string, string>) =>
        run(inEgressNamespace(egress ? rules : undefined, [wrapper])[0], inEgressNamespace(egress ? rules : undefined, [wrapper]).slice(1), {
            env: { PATH: `${dir}/bin:/usr/sbin:/usr/bin:/sbin:/bin`, ...env },
        });
    const dockerArgs = () => fs.readFileSync(path.join(dir, "state", "docker-args"), "utf8");
    const workspace = path.join(dir, "workspace");
    return { invoke, dockerArgs, workspace };
}

describe.runIf(toolsAvailable("wrapper tests", ["bash", "unshare", "nft", "ip"]))("sandbox-shell wrapper", () => {
    const secret = ["ghp", "wrapperTEST0123456789abcdef"].join("_");

    it("passes only allowlisted variables into the container, by name", () => {
        const { invoke, dockerArgs } = installWrapper(["GITHUB_TOKEN"]);
        const result = invoke({
            SSH_ORIGINAL_COMMAND: 'echo "$GITHUB_TOKEN|${NPM_TOKEN:-none}|${AWS_SECRET_ACCESS_KEY:-none}|${HOME}"',
            GITHUB_TOKEN: secret,
            NPM_TOKEN: "not-for-the-sandbox-either",
            AWS_SECRET_ACCESS_KEY: "not-for-the-sandbox",
        });
        expect(result.stderr).toBe("");
        expect(result.stdout.trim().split("|").slice(0, 3)).toEqual([secret, "none", "none"]);
        const args = dockerArgs().split("\n");
        expect(args).toContain("GITHUB_TOKEN");
        expect(args.join(" ")).not.toContain(secret);
    });

    it("passes every allowlisted name, and none that is unset", () => {
        const { invoke, dockerArgs } = installWrapper(["GITHUB_TOKEN", "TASK_ID"]);
        const result = invoke({ SSH_ORIGINAL_COMMAND: 'echo "${GITHUB_TOKEN:-unset}|$TASK_ID"', TASK_ID: "42" });
        expect(result.stdout.trim()).toBe("unset|42");
        const args = dockerArgs().split("\n");
        expect(args).toContain("TASK_ID");
        expect(args).not.toContain("GITHUB_TOKEN");
    });

    it("runs the command in /workspace of agent-sandbox-shell, as one argument of a bash that reads no startup file", () => {
        const { invoke, dockerArgs } = installWrapper(["GITHUB_TOKEN"]);
        const result = invoke({ SSH_ORIGINAL_COMMAND: "echo a; echo b" });
        expect(result.stdout).toBe("a\nb\n");
        const args = dockerArgs().trim().split("\n");
        expect(args.slice(args.indexOf("-w"), args.indexOf("-w") + 6)).toEqual(["-w", "/workspace", "agent-sandbox-shell", "bash", "--noprofile", "--norc"]);
        expect(args.at(-1)).toBe("echo a; echo b");
    });

    it("runs nothing an earlier command planted in /workspace or HOME before the next command", () => {
        const { invoke, workspace } = installWrapper(["GITHUB_TOKEN"]);
        // Task 1 (hostile) plants startup files where bash, git and friends look for them.
        const planted = invoke({
            SSH_ORIGINAL_COMMAND: [
                // The working directory is /workspace (the stub's stand-in for it).
                "for f in .bash_profile .bash_login .profile .bashrc; do echo 'echo \"$GITHUB_TOKEN\" >>\"$PWD/stolen\"; echo PLANTED' >\"$HOME/$f\"; cp \"$HOME/$f\" \"$PWD/$f\"; done",
                "printf '[alias]\\n\\tstatus = !echo PLANTED\\n' >\"$HOME/.gitconfig\"",
                "echo \"$HOME\" >\"$PWD/home-of-task-1\"",
            ].join("; "),
        });
        expect(planted.status, planted.stderr).toBe(0);
        // Task 2 runs with its own token.
        const token = ["ghp", "task2SECRET0123456789abcdef"].join("_");
        const next = invoke({ SSH_ORIGINAL_COMMAND: 'echo "home=$HOME"; test -e "$HOME/.gitconfig" && echo gitconfig-carried-over; true', GITHUB_TOKEN: token });
        expect(next.stdout).not.toContain("PLANTED");
        expect(next.stdout).not.toContain("gitconfig-carried-over");
        expect(fs.existsSync(path.join(workspace, "stolen")) ? fs.readFileSync(path.join(workspace, "stolen"), "utf8") : "").not.toContain(token);
        // Each command gets a HOME of its own, gone when the command ends.
        const home1 = fs.readFileSync(path.join(workspace, "home-of-task-1"), "utf8").trim();
        expect(home1).not.toBe(workspace);
        expect(fs.existsSync(home1)).toBe(false);
        expect(next.stdout).not.toContain(`home=${home1}\n`);
    });

    it("keeps the command's exit status", () => {
        const { invoke } = installWrapper(["GITHUB_TOKEN"]);
        expect(invoke({ SSH_ORIGINAL_COMMAND: "exit 7" }).status).toBe(7);
    });

    it("refuses every command while the egress rules are not in force", () => {
        const { invoke, dockerArgs } = installWrapper(["GITHUB_TOKEN"], { egress: false });
        const result = invoke({ SSH_ORIGINAL_COMMAND: "echo ran" });
        expect(result.status).toBe(3);
        expect(result.stdout).toBe("");
        expect(result.stderr).toContain("egress rules are not in force");
        expect(() => dockerArgs()).toThrow();
    });

    it("refuses an interactive session", () => {
        const { invoke } = installWrapper(["GITHUB_TOKEN"]);
        const result = invoke({});
        expect(result.status).toBe(2);
        expect(result.stderr).toContain("interactive sessions are disabled");
    });
});
