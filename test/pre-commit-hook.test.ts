import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { REPO } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * Which committed files the pre-commit hook hands to `airlock check`: its `files` and
 * `exclude` patterns, matched as pre-commit matches them (Python's re.search on the
 * path relative to the repository). test/package.test.ts runs the hook for real.
 */
describe.runIf(toolsAvailable("the pre-commit hook's file patterns", ["python3"]))("the pre-commit hook's file patterns", () => {
    const hook = (YAML.parse(fs.readFileSync(path.join(REPO, ".pre-commit-hooks.yaml"), "utf8")) as { files: string; exclude?: string }[])[0];
    const matched = (paths: string[]) => {
        const script = "import json, re, sys\nfiles, exclude, paths = json.loads(sys.argv[1])\nprint(json.dumps([p for p in paths if re.search(files, p) and not (exclude and re.search(exclude, p))]))";
        const result = run("python3", ["-I", "-c", script, JSON.stringify([hook.files, hook.exclude ?? "", paths])]);
        expect(result.stderr).toBe("");
        return JSON.parse(result.stdout) as string[];
    };

    it("takes compose files, sshd configs and cloud-init user data by their usual names", () => {
        const judged = [
            "compose.yaml",
            "deploy/docker-compose.prod.yml",
            "etc/ssh/sshd_config",
            "etc/ssh/sshd_config.d/10-hardening.conf",
            "cloud/user-data",
            "cloud/user-data.yaml",
            "terraform/user_data.yml",
            "seed/userdata.txt",
            "cloud-init.yaml",
            "cloud-config.cfg",
            "templates/compose.yml.in",
        ];
        expect(matched(judged)).toEqual(judged);
    });

    it("leaves GitHub's workflow files and unrelated files alone, whatever they are called", () => {
        expect(matched([".github/workflows/compose.yml", "sub/.github/workflows/docker-compose.yaml", "README.md", "src/user-data.ts", "compose.json"])).toEqual([]);
    });
});
