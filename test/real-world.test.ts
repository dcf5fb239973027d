import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import type { Finding } from "../policies/engine/finding";
import { airlock } from "./helpers/cli";
import { REPO } from "./helpers/stacks";

/**
 * `airlock check` over public files nobody here wrote (test/fixtures/real-world).
 * What each file holds is read here independently, with plain YAML and line
 * matching; the checker must report at least that, and must never crash.
 */
const ROOT = path.join(REPO, "test/fixtures/real-world");
const files = (kind: string) => fs.readdirSync(path.join(ROOT, kind)).map((f) => path.join(ROOT, kind, f));
const ALL = [...files("compose"), ...files("sshd"), ...files("cloud-init")];

/** Real files that hold nothing any rule forbids (or cannot be judged): never silently clean otherwise. */
const CLEAN_ON_PURPOSE = new Map([
    ["cloud-init.cloud-config-add-apt-repos.user-data", "apt sources and keys only"],
    ["cloud-init.cloud-config-ansible-pull.user-data", "ansible pull from a repository, no download-and-run"],
    ["cloud-init.cloud-config-apt.user-data", "apt configuration only"],
    ["cloud-init.cloud-config-boot-cmds.user-data", "local commands only"],
    ["cloud-init.cloud-config-disk-setup.user-data", "disk layout only"],
    ["cloud-init.cloud-config-install-packages.user-data", "package names only"],
    ["cloud-init.cloud-config-mount-points.user-data", "mounts only"],
    ["cloud-init.cloud-config-run-cmds.user-data", "downloads to a file, never runs a download"],
    ["cloud-init.cloud-config-write-files.user-data", "writes files with unknown keys (compression), nothing judged as forbidden"],
    ["cloud-init.seed.user-data", "a password-less seed"],
    ["sin1227488801-cloud-app-starter.user_data.tpl.user-data", "pipes a key into gpg, not into a shell"],
    ["MusicDin-kubitect.cloud_init.tpl.user-data", "key-only login; passwordless sudo for a user that is not the agent"],
    ["hashicorp-learn-terraform-provisioning.add-ssh-web-app.yaml.user-data", "a placeholder key, no password, no download-and-run"],
    ["sudo-kraken-oci-free-terraform-a1-max.a1-cloud-init.yaml.tpl.user-data", "adds Docker's package repository; no password, no download-and-run"],
    ["trawler-dev-setup.controller.sh.user-data", "downloads get-docker.sh to a file, then runs it: not a pipe"],
]);

const report = (() => {
    let cached: { status: number | null; findings: Finding[]; stderr: string } | undefined;
    return () => {
        if (!cached) {
            const result = airlock(["check", ...ALL, "--json"], { timeout: 120_000 });
            cached = { status: result.status, findings: JSON.parse(result.stdout).findings, stderr: result.stderr };
        }
        return cached;
    };
})();
const findingsOf = (file: string) => report().findings.filter((f) => f.file === file);

describe("the checker on real files", () => {
    it("judges every file in one run without crashing (no exit 3, no error)", () => {
        expect(ALL.length).toBeGreaterThanOrEqual(30);
        expect(report().stderr).toBe("");
        expect(report().status).toBe(1);
    });

    it.each(ALL.map((f) => [path.relative(ROOT, f), f]))("%s: a finding, or clean on purpose", (_, file) => {
        const clean = CLEAN_ON_PURPOSE.get(path.basename(file));
        if (clean) expect(findingsOf(file), clean).toEqual([]);
        else expect(findingsOf(file).length).toBeGreaterThan(0);
    });

    it.each(files("compose").map((f) => [path.basename(f), f]))("%s: every privileged service, socket or system mount, host namespace and extra capability is reported", (_, file) => {
        const doc = YAML.parse(fs.readFileSync(file, "utf8"), { merge: true, maxAliasCount: -1 });
        const expected: [string, string][] = [];
        for (const [name, service] of Object.entries<any>(doc.services ?? {})) {
            if (service.privileged === true) expected.push(["containers-not-privileged", name]);
            if ((service.volumes ?? []).some((v: unknown) => JSON.stringify(v).includes("docker.sock"))) expected.push(["containers-no-docker-socket", name]);
            // A host /proc, /sys or engine state, short syntax or long ("source": ...), by its plain text.
            if ((service.volumes ?? []).some((v: unknown) => /^"?(\{"type":"bind","source":")?\/(proc|sys|var\/lib\/docker)(\/|:|")/.test(JSON.stringify(v).replace(/^"/, "")))) {
                expected.push(["containers-no-host-system-mounts", name]);
            }
            for (const key of ["network_mode", "pid", "ipc"]) if (service[key] === "host") expected.push(["containers-no-host-namespaces", name]);
            if ((service.cap_add ?? []).some((c: string) => !["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"].includes(c))) expected.push(["containers-add-only-allowed-capabilities", name]);
        }
        const found = findingsOf(file).map((f) => [f.rule, f.where]);
        for (const pair of expected) expect(found).toContainEqual(pair);
    });

    it("the oracle found something to compare in the compose files", () => {
        const all = files("compose").map((f) => fs.readFileSync(f, "utf8")).join("\n");
        expect(all).toMatch(/docker\.sock/);
        expect(all).toMatch(/cap_add/);
        expect(all).toMatch(/network_mode: host/);
        expect(all).toMatch(/- \/(proc|sys|var\/lib\/docker)[/:]/);
    });

    it.each(files("sshd").map((f) => [path.basename(f), f]))("%s: root and password logins that the file turns on are reported", (_, file) => {
        const text = fs.readFileSync(file, "utf8");
        const rules = findingsOf(file).map((f) => f.rule);
        if (/^\s*PermitRootLogin\s+yes/im.test(text)) expect(rules).toContain("sshd-no-root-login");
        if (/^\s*PasswordAuthentication\s+yes/im.test(text)) expect(rules).toContain("sshd-no-password-auth");
        if (/^\s*Include\s/im.test(text)) expect(rules).toContain("sshd-parses");
        expect(rules).toContain("sshd-listen-tailnet-only");
    });

    it.each(files("cloud-init").map((f) => [path.basename(f), f]))("%s: download-and-run and passwords are reported", (_, file) => {
        const text = fs.readFileSync(file, "utf8");
        const rules = findingsOf(file).map((f) => f.rule);
        if (/^\s*-\s*curl[^\n#]*\|\s*([A-Z_0-9]+=\S+\s+)*(sh|bash)\b/m.test(text)) expect(rules).toContain("cloud-init-no-pipe-to-shell");
        if (/^\s+(passwd|plain_text_passwd|hashed_passwd):/m.test(text)) expect(rules).toContain("cloud-init-no-passwords");
    });

    it("the generic profile reports exactly the reviewed findings, each on the line that causes it (generic-findings.txt)", () => {
        const result = airlock(["check", "--profile", "generic", "compose", "sshd", "cloud-init", "--json"], { cwd: ROOT, timeout: 120_000 });
        expect(result.stderr).toBe("");
        const lines = (JSON.parse(result.stdout).findings as Finding[])
            .map((f) => {
                const text = f.line === undefined ? "(no line: a keyword not set)" : fs.readFileSync(path.join(ROOT, f.file!), "utf8").split("\n")[f.line - 1].trim().slice(0, 70);
                return { key: [f.file!, f.line ?? 0, f.rule] as const, text: `${f.file}:${f.line ?? "-"}\t${f.rule}\t| ${text}` };
            })
            .sort((a, b) => a.key[0].localeCompare(b.key[0]) || a.key[1] - b.key[1] || a.key[2].localeCompare(b.key[2]))
            .map((l) => l.text);
        const reviewed = fs.readFileSync(path.join(ROOT, "generic-findings.txt"), "utf8").split("\n").filter((l) => l && !l.startsWith("#"));
        expect(lines).toEqual(reviewed);
        // Files a reviewer calls clean get no generic finding at all.
        for (const clean of ["compose/netbox-docker.docker-compose.yml", "sshd/drduh-config.sshd_config", "compose/docker-jitsi-meet.docker-compose.yml", "compose/awesome-compose.gitea-postgres.compose.yaml"]) {
            expect(lines.filter((l) => l.startsWith(`${clean}:`)), clean).toEqual([]);
        }
    });
});
