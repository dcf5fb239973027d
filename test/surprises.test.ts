import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { detectKind } from "../cli/check";
import { airlock } from "./helpers/cli";
import { tempDir } from "./helpers/stacks";

/** Where a line of output says it is: every finding starts with `file:line: `. */
const LOCATED = /^(\S+):(\d+): /;

describe("plan --out never deletes what it did not write", () => {
    it("refuses a folder holding someone else's files, and leaves them", () => {
        const out = tempDir("mine");
        fs.writeFileSync(path.join(out, "thesis.txt"), "precious\n");
        const result = airlock(["plan", "--stack", "dev", "--out", out]);
        expect(result.status).toBe(2);
        expect(result.stderr.trim()).toBe(`${out}: is not empty and is not an airlock plan output (no .airlock-plan); refusing to replace it - pass a new or empty folder`);
        expect(fs.readdirSync(out)).toEqual(["thesis.txt"]);
        expect(fs.readdirSync(path.dirname(out)).filter((e) => e.includes(path.basename(out)) && e !== path.basename(out))).toEqual([]);
    });

    it("never replaces a file with a folder, nor follows a symbolic link", () => {
        const dir = tempDir("file");
        const file = path.join(dir, "notes");
        fs.writeFileSync(file, "keep\n");
        const onFile = airlock(["plan", "--stack", "dev", "--out", file]);
        expect(onFile.status).toBe(2);
        expect(onFile.stderr.trim()).toBe(`${file}: exists and is not a folder; refusing to replace it with the plan`);
        expect(fs.readFileSync(file, "utf8")).toBe("keep\n");

        const link = path.join(dir, "link");
        fs.symlinkSync(dir, link);
        const onLink = airlock(["plan", "--stack", "dev", "--out", link]);
        expect(onLink.status).toBe(2);
        expect(onLink.stderr).toMatch(/is a symbolic link/);
        expect(fs.readlinkSync(link)).toBe(dir);
    });

    it("fails at once on a path it cannot create", () => {
        const started = Date.now();
        const result = airlock(["plan", "--stack", "dev", "--out", "/proc/airlock-plan"], { timeout: 60_000 });
        expect(result.status).toBe(2);
        expect(result.stderr.trim()).toMatch(/^\/proc\/airlock-plan: cannot (create|write in) /);
        expect(result.stderr.trim().split("\n")).toHaveLength(1);
        expect(Date.now() - started).toBeLessThan(60_000);
    });

    it("creates missing parents, replaces its own previous output (also one from before the marker), and accepts an empty folder", () => {
        const root = tempDir("replace");
        const out = path.join(root, "a", "b");
        expect(airlock(["plan", "--stack", "dev", "--out", out]).status).toBe(0);
        expect(fs.readdirSync(out).sort()).toEqual([".airlock-plan", "bundle", "gateway", "preview.json", "sandbox", "tailnet"]);
        fs.writeFileSync(path.join(out, "gateway", "stale-file"), "from an older plan\n");
        expect(airlock(["plan", "--stack", "dev", "--out", out]).status).toBe(0);
        expect(fs.existsSync(path.join(out, "gateway", "stale-file"))).toBe(false);

        fs.rmSync(path.join(out, ".airlock-plan"));
        expect(airlock(["plan", "--stack", "dev", "--out", out]).status).toBe(0);
        expect(fs.readdirSync(root)).toEqual(["a"]);
        expect(fs.readdirSync(path.join(root, "a"))).toEqual(["b"]);

        const empty = tempDir("empty");
        expect(airlock(["plan", "--stack", "dev", "--out", empty]).status).toBe(0);
    }, 180_000);
});

describe("check: kinds, empty files, several files, locations, fixes", () => {
    it("recognises everything plan writes, and passes the shipped plan's artifacts", () => {
        const out = path.join(tempDir("kinds"), "dev");
        expect(airlock(["plan", "--stack", "dev", "--out", out]).status).toBe(0);
        const written = fs.readdirSync(out, { recursive: true }).map(String);
        const judged = written.filter((f) => /(^|\/)(preview\.json|cloud-init\.yaml|compose\.yml\.in|sshd_config\.in)$/.test(f));
        expect(judged.length).toBe(7);
        const result = airlock(["check", "--profile", "airlock", ...judged.map((f) => path.join(out, f))]);
        expect(result.stderr).toBe("");
        expect(result.stdout).toBe("clean\n");
        expect(result.status).toBe(0);
    });

    it.each<[string, string, string | undefined]>([
        ["out/dev/sandbox/etc/airlock/compose.yml.in", "services: {}\n", "compose"],
        ["out/dev/sandbox/etc/airlock/sshd_config.in", "Port 22\n", "sshd"],
        ["etc/ssh/sshd_config.d/50-cloud-init.conf", "PasswordAuthentication yes\n", "sshd"],
        ["docker-compose.override.yml", "version: '3'\n", "compose"],
        ["compose.yaml", "", "compose"],
        ["user-data", "", "cloud-init"],
        ["gateway/cloud-init.yaml", "#cloud-config\n", "cloud-init"],
        ["init.yml", "\uFEFF#cloud-config\n", "cloud-init"],
        ["stack-export.json", "{}", "preview"],
        ["notes.txt", "hello\n", undefined],
    ])("detects %s", (file, text, kind) => {
        // As check reads files: without a byte-order mark.
        expect(detectKind(file, text.replace(/^\uFEFF/, ""))).toBe(kind);
    });

    it.each(["compose", "sshd", "cloud-init", "preview"])("an empty file is unverifiable as %s (exit 1), never clean", (kind) => {
        const file = path.join(tempDir("empty"), "anything");
        fs.writeFileSync(file, "\n  \n");
        const result = airlock(["check", "--profile", "airlock", "--kind", kind, file]);
        expect(result.status).toBe(1);
        expect(result.stdout).toMatch(new RegExp(`^${file}:1: ${kind}-parses: unverifiable: ${file} is empty`));
    });

    it("reports the findings of a good file and the error of a missing one: nothing dropped, exit 2 wins", () => {
        const dir = tempDir("several");
        const a = path.join(dir, "a.yml");
        fs.writeFileSync(a, "services:\n  web:\n    image: nginx:1.27\n");
        const missing = path.join(dir, "missing.yml");
        const text = airlock(["check", "--profile", "airlock", a, missing]);
        expect(text.status).toBe(2);
        expect(text.stdout).toContain(`${a}:3: containers-images-pinned-by-digest`);
        expect(text.stderr.trim()).toBe(`${missing}: cannot read: ENOENT`);
        const json = airlock(["check", "--profile", "airlock", missing, a, "--json"]);
        expect(json.status).toBe(2);
        const report = JSON.parse(json.stdout);
        expect(report.findings.length).toBeGreaterThan(3);
        expect(report.errors).toEqual([`${missing}: cannot read: ENOENT`]);
    });

    it("a clean check says clean", () => {
        const file = path.join(tempDir("clean"), "sshd_config");
        fs.writeFileSync(file, "ListenAddress 100.100.7.1:22\nPermitRootLogin no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nDisableForwarding yes\nAllowUsers ops\n");
        const result = airlock(["check", "--profile", "airlock", file]);
        expect(result).toMatchObject({ status: 0, stdout: "clean\n", stderr: "" });
    });

    it("every finding starts with file:line - in a cloud-init's embedded file at its own line, in a preview with the URN after", () => {
        const dir = tempDir("lines");
        const userData = path.join(dir, "user-data");
        const compose = "services:\n  web:\n    image: nginx:1.27\n    ports: [\"8080:80\"]\n";
        fs.writeFileSync(userData, YAML.stringify({ write_files: [{ path: "/etc/airlock/compose.yml", content: compose }] }).replace(/^/, "#cloud-config\n"));
        const result = airlock(["check", "--profile", "airlock", userData]);
        expect(result.status).toBe(1);
        const lines = result.stdout.trim().split("\n").slice(0, -1);
        expect(lines.length).toBeGreaterThan(3);
        for (const line of lines) expect(line).toMatch(LOCATED);
        // The service `web` is on line 2 of the embedded file; in user-data that is line 2 of the block.
        const textLines = fs.readFileSync(userData, "utf8").split("\n");
        const reported = Number(LOCATED.exec(lines[0])![2]);
        expect(textLines[reported - 1].trim()).toBe("web:");
        expect(lines[0]).toContain("> /etc/airlock/compose.yml:2: ");

        const preview = path.join(dir, "preview.json");
        const urn = "urn:pulumi:dev::airlock::hcloud:index/firewall:Firewall::fw";
        const state = { type: "hcloud:index/firewall:Firewall", urn, inputs: { rules: [{ direction: "in", protocol: "tcp", port: "22", sourceIps: ["0.0.0.0/0"] }] } };
        fs.writeFileSync(preview, JSON.stringify({ steps: [{ op: "create", urn, newState: state }] }, null, 2));
        for (const args of [["check", preview], ["gate", "--preview", preview]]) {
            const out = airlock(args).stdout.split("\n")[0];
            expect(out.startsWith(`${preview}:5: ${urn}: hcloud-firewall-no-public-inbound-tcp: `)).toBe(true);
        }
    });

    it("fix hints fit the case: a published 8080:80 keeps its container port", () => {
        const file = path.join(tempDir("fix"), "compose.yml");
        fs.writeFileSync(file, 'services:\n  web:\n    image: nginx:1.27\n    ports: ["8080:80", "9000:9001/udp"]\n');
        const findings = JSON.parse(airlock(["check", "--profile", "airlock", file, "--json"]).stdout).findings.filter((f: { rule: string }) => f.rule === "containers-ports-private-only");
        expect(findings.map((f: { fix: string }) => f.fix)).toEqual([
            expect.stringContaining('"127.0.0.1:8080:80"'),
            expect.stringContaining('"127.0.0.1:9000:9001/udp"'),
        ]);
        const text = airlock(["check", "--profile", "airlock", file]).stdout;
        expect(text).toContain('fix: Publish it as "127.0.0.1:8080:80"');
        expect(text).toContain("fix: Pin it: `docker buildx imagetools inspect nginx:1.27`");
    });
});
