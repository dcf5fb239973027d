import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { SANDBOX_WRAPPER_PATH } from "../components/render/hosts";
import { editedStack, REPO, tempDir, renderHosts, renderedFile } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/** The ForceCommand wrapper on its own: what reaches the container, and what does not. */

function installWrapper(allowlist: string[]) {
    const cfg = readStackFile(editedStack("dev", (c) => (c["airlock:agent"].envAllowlist = allowlist)));
    const dir = tempDir("wrapper");
    const wrapper = path.join(dir, "sandbox-shell");
    fs.writeFileSync(wrapper, renderedFile(renderHosts(cfg).sandbox, SANDBOX_WRAPPER_PATH), { mode: 0o755 });
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
        run(wrapper, [], { env: { PATH: `${dir}/bin:/usr/bin:/bin`, ...env } });
    const dockerArgs = () => fs.readFileSync(path.join(dir, "state", "docker-args"), "utf8");
    return { invoke, dockerArgs };
}

describe.runIf(toolsAvailable("wrapper tests", ["bash"]))("sandbox-shell wrapper", () => {
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

    it("runs the command with bash -lc in /workspace of agent-sandbox-shell, as one argument", () => {
        const { invoke, dockerArgs } = installWrapper(["GITHUB_TOKEN"]);
        invoke({ SSH_ORIGINAL_COMMAND: "echo a; echo b" });
        expect(dockerArgs().trim().split("\n").slice(-6)).toEqual(["-w", "/workspace", "agent-sandbox-shell", "bash", "-lc", "echo a; echo b"]);
    });

    it("refuses an interactive session", () => {
        const { invoke } = installWrapper(["GITHUB_TOKEN"]);
        const result = invoke({});
        expect(result.status).toBe(2);
        expect(result.stderr).toContain("interactive sessions are disabled");
    });
});
