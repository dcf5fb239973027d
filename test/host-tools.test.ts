import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { engineOnHostTools, HOST_SSHD_PACKAGES, HOST_TOOLS, hostSshd, hostToolsDir } from "./helpers/hostTools";
import { readStackFile } from "../components/config/load";
import { renderedFile, renderHosts, stackFile } from "./helpers/stacks";
import { CHECKPOINT_ENGINE_PATH } from "../components/render/checkpoints";
import { run } from "./helpers/tools";

/**
 * The rigs run the hosts' restic and Docker Compose (test/helpers/hostTools.ts puts
 * Debian 13's first on PATH), not the CI machine's: restic 0.14 cannot hide a lock
 * with a key that cannot delete, and Compose 1.29 is another program.
 */
const prepared = fs.existsSync(path.join(hostToolsDir(), "versions.json"));
if (!prepared) {
    if (process.env.CI === "true") throw new Error(`CI: the hosts' tools are not in ${hostToolsDir()} (test/helpers/hostTools.ts fetches them as root)`);
    console.warn(`SKIPPED host tools: not fetched (${hostToolsDir()}; the global setup fetches them as root)`);
}

describe.runIf(prepared)("the hosts' tools first on the rigs' PATH", () => {
    const versions = prepared ? (JSON.parse(fs.readFileSync(path.join(hostToolsDir(), "versions.json"), "utf8")) as Record<string, string>) : {};
    const upstream = (name: string) => versions[name].replace(/^\d+:/, "").replace(/-[^-]*$/, "");

    it("has each package's programs", () => expect(Object.keys(versions).sort()).toEqual([...Object.keys(HOST_TOOLS), ...HOST_SSHD_PACKAGES].sort()));

    it.each([
        ["restic", ["version"], "restic", /^restic (\S+) compiled with/],
        ["docker-compose", ["version"], "docker-compose", /^Docker Compose version v?(\S+)/],
    ])("%s on PATH is the hosts' package's", (program, args, pkg, says) => {
        const which = run("sh", ["-c", `command -v ${program}`]);
        expect(which.stdout.trim()).toBe(path.join(hostToolsDir(), "bin", program));
        const version = run(program, args);
        expect(version.status, version.stderr).toBe(0);
        expect(says.exec(version.stdout)?.[1]).toMatch(new RegExp(`^${upstream(pkg).replace(/[.+]/g, "\\$&")}`));
    });

    it("the checkpoint engine, as the rigs run it, recreates containers with the hosts' Compose", () => {
        const engine = engineOnHostTools(renderedFile(renderHosts(readStackFile(stackFile("dev"))).sandbox, CHECKPOINT_ENGINE_PATH));
        const dir = fs.mkdtempSync("/tmp/airlock-engine-path-");
        fs.writeFileSync(path.join(dir, "engine.py"), engine);
        // The engine's own PATH constant, with shutil.which as its subprocess calls resolve a name.
        const found = run("python3", ["-c", "import importlib.util,shutil,sys; s=importlib.util.spec_from_file_location('e', sys.argv[1]); m=importlib.util.module_from_spec(s); s.loader.exec_module(m); print(shutil.which('docker-compose', path=m.PATH))", path.join(dir, "engine.py")]);
        expect(found.stdout.trim(), found.stderr).toBe(path.join(hostToolsDir(), "bin", "docker-compose"));
    });

    it("restic is one that hides locks instead of deleting them (0.15 and later), as the append-only backups need", () => {
        const [major, minor] = upstream("restic").split(".").map(Number);
        expect(major > 0 || minor >= 15).toBe(true);
    });
});

describe.runIf(prepared)("the hosts' sshd, as the rigs run it", () => {
    it("is the hosts' OpenSSH, from its own root, and checks a config with its own keywords", () => {
        const { sshd, configLines } = hostSshd();
        const versions = JSON.parse(fs.readFileSync(path.join(hostToolsDir(), "versions.json"), "utf8")) as Record<string, string>;
        const said = run(sshd, ["-V"]);
        // "OpenSSH_10.0p2 Debian-7+deb13u4" from package 1:10.0p1-7+deb13u4 (Debian's patches move the p).
        const [release, revision] = versions["openssh-server"].replace(/^\d+:/, "").split(/-(.*)/);
        expect(said.stderr).toMatch(new RegExp(`^OpenSSH_${release.replace(/p\d+$/, "").replace(".", "\\.")}p\\d+ Debian-${revision.replace(/[.+]/g, "\\$&")},`));
        const dir = fs.mkdtempSync("/tmp/airlock-host-sshd-");
        const hostKey = path.join(dir, "host_key");
        expect(run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", hostKey]).status).toBe(0);
        fs.mkdirSync("/run/sshd", { recursive: true, mode: 0o755 });
        // OpenSSH 9.8's keyword: this machine's 9.2 refuses it, the hosts' takes it.
        fs.writeFileSync(path.join(dir, "config"), `${configLines}PerSourcePenaltyExemptList 100.64.0.0/10\n`);
        const checked = run(sshd, ["-T", "-f", path.join(dir, "config"), "-h", hostKey]);
        expect(checked.stderr).toBe("");
        expect(checked.stdout).toMatch(/^persourcepenaltyexemptlist 100\.64\.0\.0\/10$/m);
        expect(checked.stdout).toMatch(new RegExp(`^sshdsessionpath ${path.join(hostToolsDir(), "openssh", "bin", "sshd-session")}$`, "m"));
    });
});
