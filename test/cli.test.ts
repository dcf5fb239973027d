import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { Command } from "commander";
import { describe, expect, it } from "vitest";
import { COMMANDS } from "../cli/commands";
import { AIRLOCK_BIN, airlock } from "./helpers/cli";
import { REPO, tempDir } from "./helpers/stacks";

/** Runs the bin with a preload that records every module file the process loaded. */
function loadedModules(args: string[]): { status: number | null; modules: string[] } {
    const dir = tempDir("modules");
    const record = path.join(dir, "loaded.txt");
    const preload = path.join(dir, "record.js");
    fs.writeFileSync(preload, `process.on("exit", () => require("fs").writeFileSync(${JSON.stringify(record)}, Object.keys(require.cache).join("\\n")));\n`);
    const result = spawnSync(process.execPath, ["--require", preload, AIRLOCK_BIN, ...args], { cwd: REPO, encoding: "utf8" });
    return { status: result.status, modules: fs.readFileSync(record, "utf8").split("\n") };
}

describe("the airlock command", () => {
    const dir = tempDir("fast");
    const compose = path.join(dir, "compose.yml");
    fs.writeFileSync(compose, "services:\n  web:\n    image: nginx:1.27\n    privileged: true\n");
    const preview = path.join(dir, "preview.json");
    const urn = "urn:pulumi:dev::airlock::hcloud:index/firewall:Firewall::fw";
    const rules = [{ direction: "in", protocol: "tcp", port: "22", sourceIps: ["0.0.0.0/0"] }];
    fs.writeFileSync(preview, JSON.stringify({ steps: [{ op: "create", urn, newState: { type: "hcloud:index/firewall:Firewall", urn, inputs: { rules } } }] }));

    it.each([["check", ["check", compose]], ["gate --preview", ["gate", "--preview", preview]]])(
        "%s runs compiled JavaScript and never loads Pulumi, zod or the components",
        (_, args) => {
            const { status, modules } = loadedModules(args);
            expect(status).toBe(1);
            expect(modules).toContain(path.join(REPO, "dist/cli/main.js"));
            expect(modules.filter((m) => /node_modules\/(@pulumi|zod|tsx|typescript)\/|\/components\/|\.ts$/.test(m))).toEqual([]);
        },
    );

    it("loads only the command it runs", () => {
        const { modules } = loadedModules(["check", compose]);
        const commands = modules.filter((m) => m.includes("/dist/cli/commands/")).map((m) => path.basename(m));
        expect(commands.sort()).toEqual(["check.js", "index.js"]);
    });

    it("every command in cli/commands/index.ts loads and defines an action, and --help lists them all", async () => {
        for (const [name, [summary, load]] of Object.entries(COMMANDS)) {
            const action = (await load()).define(new Command(name), { stacksDir: "stacks", outDir: (stack) => `out/${stack}` });
            expect(typeof action, name).toBe("function");
            expect(summary.length, name).toBeGreaterThan(20);
        }
        const help = airlock(["--help"]);
        expect(help.status).toBe(0);
        for (const name of Object.keys(COMMANDS)) expect(help.stdout).toMatch(new RegExp(`^  ${name}\\s`, "m"));
        const checkHelp = airlock(["help", "check"]);
        expect(checkHelp.stdout).toContain("--kind <kind>");
    });

    it("is the package's bin, and `npm run -s airlock --` runs it", () => {
        const pkg = JSON.parse(fs.readFileSync(path.join(REPO, "package.json"), "utf8"));
        expect(path.join(REPO, pkg.bin.airlock)).toBe(AIRLOCK_BIN);
        expect(fs.statSync(AIRLOCK_BIN).mode & 0o111).not.toBe(0);
        const result = spawnSync("npm", ["run", "-s", "airlock", "--", "check", compose], { cwd: REPO, encoding: "utf8" });
        expect(result.status).toBe(1);
        expect(result.stdout).toContain(`${compose}:4: containers-not-privileged`);
    });
});

describe("cli/airlock.js picks the build or the sources", () => {
    /** A package shaped like airlock's with stub entry points, so the choice is visible. */
    function fakePackage(withTsx: boolean): string {
        const root = tempDir("launcher");
        fs.mkdirSync(path.join(root, "cli"));
        fs.mkdirSync(path.join(root, "dist", "cli"), { recursive: true });
        fs.copyFileSync(AIRLOCK_BIN, path.join(root, "cli", "airlock.js"));
        fs.copyFileSync(path.join(path.dirname(AIRLOCK_BIN), "dist-stamp.js"), path.join(root, "cli", "dist-stamp.js"));
        fs.writeFileSync(path.join(root, "cli", "main.ts"), 'const from: string = "sources";\nconsole.log(from, process.argv.slice(2).join(" "));\n');
        fs.writeFileSync(path.join(root, "dist", "cli", "main.js"), 'console.log("dist", process.argv.slice(2).join(" "));\n');
        if (withTsx) fs.symlinkSync(path.join(REPO, "node_modules"), path.join(root, "node_modules"));
        fs.mkdirSync(path.join(root, ".git")); // a checkout, where sources may be edited
        return root;
    }
    const run = (root: string, cwd = root) => spawnSync(process.execPath, [path.join(root, "cli", "airlock.js"), "check", "x"], { cwd, encoding: "utf8" });
    const setTime = (file: string, seconds: number) => fs.utimesSync(file, seconds, seconds);

    it("runs dist/ when its stamp is as new as every source, the sources when one is newer", () => {
        const root = fakePackage(true);
        const stamp = path.join(root, "dist", ".built");
        fs.writeFileSync(stamp, "");
        setTime(path.join(root, "cli", "main.ts"), 1_000_000);
        setTime(stamp, 2_000_000);
        expect(run(root).stdout).toBe("dist check x\n");

        setTime(path.join(root, "cli", "main.ts"), 3_000_000);
        expect(run(root).stdout).toBe("sources check x\n");
        // From anywhere: the package's own tsx, not one beside the working directory (there was none: ERR_MODULE_NOT_FOUND).
        expect(run(root, tempDir("elsewhere")).stdout).toBe("sources check x\n");

        fs.rmSync(stamp);
        expect(run(root).stdout).toBe("sources check x\n");
    });

    it("a twin file that is not TypeScript (a stand-in's script, copied into dist/) counts as a source", () => {
        const root = fakePackage(true);
        const stamp = path.join(root, "dist", ".built");
        fs.writeFileSync(stamp, "");
        fs.mkdirSync(path.join(root, "twin", "tailscale"), { recursive: true });
        fs.writeFileSync(path.join(root, "twin", "tailscale", "tailscaled"), "#!/usr/bin/python3\n");
        setTime(path.join(root, "cli", "main.ts"), 1_000_000);
        setTime(path.join(root, "twin", "tailscale", "tailscaled"), 1_000_000);
        setTime(stamp, 2_000_000);
        expect(run(root).stdout).toBe("dist check x\n");
        setTime(path.join(root, "twin", "tailscale", "tailscaled"), 3_000_000);
        expect(run(root).stdout).toBe("sources check x\n");
    });

    it("an installed package (no .git: file times are its unpacking's) runs the build it was packed with", () => {
        const root = fakePackage(false);
        fs.rmdirSync(path.join(root, ".git"));
        const stamp = path.join(root, "dist", ".built");
        fs.writeFileSync(stamp, "");
        setTime(stamp, 1_000_000);
        setTime(path.join(root, "cli", "main.ts"), 2_000_000);
        expect(run(root).stdout).toBe("dist check x\n");
    });

    it("without a build or tsx, says what to run (exit 2)", () => {
        const root = fakePackage(false);
        const result = run(root);
        expect(result.status).toBe(2);
        expect(result.stderr.trim()).toBe(`airlock: ${path.join(root, "dist")} is missing or older than the sources; run \`npm run build\` in ${root}`);
    });
});
