import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { airlock } from "./helpers/cli";
import { editedStack, REPO, SHIPPED_STACKS, stackFile, tempDir } from "./helpers/stacks";


const publicSsh = { protocol: "tcp", port: "22", sourceIps: ["0.0.0.0/0"], description: "just this once" };

describe("airlock plan + gate on the shipped stacks", () => {
    it.each(SHIPPED_STACKS)("plan --stack %s writes the plan, passes the gate, and every artifact passes airlock check", (stack) => {
        const out = path.join(tempDir("plan"), stack);
        const plan = airlock(["plan", "--stack", stack, "--out", out]);
        expect(plan.stderr).toBe("");
        expect(plan.stdout).toContain("gate: clean");
        expect(plan.status).toBe(0);

        const artifacts = ["preview.json", "gateway/cloud-init.yaml", "sandbox/cloud-init.yaml", "gateway/etc/airlock/sshd_config.in", "sandbox/etc/airlock/sshd_config.in"];
        const check = airlock(["check", ...artifacts.map((a) => path.join(out, a))]);
        expect(check.stderr).toBe("");
        expect(check.status).toBe(0);

        // The plan's own preview.json: the same verdict, with or without --stack.
        for (const args of [[], ["--stack", stack]]) {
            const gate = airlock(["gate", "--preview", path.join(out, "preview.json"), ...args]);
            expect(gate.status).toBe(0);
        }
    });

    it("gate --all gates every stack in one process", () => {
        const result = airlock(["gate", "--all", "--json"]);
        expect(result.status).toBe(0);
        const report = JSON.parse(result.stdout);
        expect(report.stacks.map((s: { stack: string }) => s.stack)).toEqual(SHIPPED_STACKS);
        expect(report.violations).toBe(0);
    });
});

describe("a stack edited to break one invariant", () => {
    const dir = tempDir("broken");
    editedStack("dev", (c) => (c["airlock:sandbox"].extraInboundRules = [publicSsh]), dir);

    it("fails airlock plan with the right rule id and exit 1", () => {
        const result = airlock(["--stacks-dir", dir, "plan", "--stack", "dev", "--out", path.join(dir, "out"), "--json"]);
        expect(result.status).toBe(1);
        const report = JSON.parse(result.stdout);
        expect(report.findings.map((f: { rule: string }) => f.rule)).toEqual(["hcloud-firewall-no-public-inbound-tcp"]);
        expect(report.findings[0].resource).toContain("airlock-dev-sandbox-firewall");
    });

    it("fails airlock gate --all, naming the stack", () => {
        fs.copyFileSync(stackFile("prod"), path.join(dir, "Pulumi.prod.yaml"));
        const result = airlock(["--stacks-dir", dir, "gate", "--all"]);
        expect(result.status).toBe(1);
        expect(result.stdout).toMatch(/^dev: 1 violation/m);
        expect(result.stdout).toMatch(/^prod: clean/m);
        // Not a terminal: plain lines, no colour codes.
        expect(result.stdout).not.toMatch(/\u001b\[/);
        expect(result.stdout).toMatch(/hcloud-firewall-no-public-inbound-tcp: rules\[2\] allows inbound tcp\/22 from 0\.0\.0\.0\/0.*-- fix: /);
    });
});

describe("airlock gate --preview", () => {
    const preview = (resources: { type: string; name: string; inputs: Record<string, unknown> }[]) => ({
        steps: resources.map((r) => {
            const urn = `urn:pulumi:dev::airlock::${r.type}::${r.name}`;
            return { op: "create", urn, newState: { type: r.type, urn, inputs: r.inputs } };
        }),
    });

    it("judges a real preview's JSON, and a stack export", () => {
        const dir = tempDir("preview");
        const bad = [{ type: "hcloud:index/firewall:Firewall", name: "fw", inputs: { rules: [{ direction: "in", protocol: "tcp", port: "22", sourceIps: ["0.0.0.0/0"] }] } }];
        fs.writeFileSync(path.join(dir, "preview.json"), JSON.stringify(preview(bad)));
        const result = airlock(["gate", "--preview", path.join(dir, "preview.json")]);
        expect(result.status).toBe(1);
        expect(result.stdout).toContain("hcloud-firewall-no-public-inbound-tcp");

        const exported = { version: 3, deployment: { resources: preview(bad).steps.map((s) => s.newState) } };
        fs.writeFileSync(path.join(dir, "export.json"), JSON.stringify(exported));
        expect(airlock(["gate", "--preview", path.join(dir, "export.json")]).status).toBe(1);
    });
});

describe("airlock check", () => {
    it("detects the kind, names file, line and fix, and exits 1", () => {
        const file = path.join(tempDir("check"), "compose.yml");
        fs.writeFileSync(file, "services:\n  web:\n    image: nginx:latest\n");
        const result = airlock(["check", "--profile", "airlock", file, "--json"]);
        expect(result.status).toBe(1);
        const report = JSON.parse(result.stdout);
        const pinned = report.findings.find((f: { rule: string }) => f.rule === "containers-images-pinned-by-digest");
        expect(pinned).toMatchObject({ file, line: 3, where: "web" });
        expect(pinned.remediation).toContain("sha256");
    });

    it.each<[string, string[], RegExp]>([
        ["a missing file", ["check", "/nonexistent/compose.yml"], /^\/nonexistent\/compose\.yml: cannot read: ENOENT$/],
        ["an unknown kind", ["check", "--kind", "terraform", "x"], /terraform/],
        ["gate without a target", ["gate"], /exactly one of --stack, --all, --preview/],
        ["a preview that is not JSON", ["gate", "--preview", path.join(REPO, "README.md")], /README\.md: not JSON/],
    ])("exits 2 on %s, with one line and no stack trace", (_, args, message) => {
        const result = airlock(args);
        expect(result.status).toBe(2);
        expect(result.stderr.trim()).toMatch(message);
        expect(result.stderr).not.toMatch(/\n\s+at /);
    });

    it("refuses a file whose kind it cannot tell", () => {
        const file = path.join(tempDir("check"), "notes.txt");
        fs.writeFileSync(file, "hello\n");
        const result = airlock(["check", file]);
        expect(result.status).toBe(2);
        expect(result.stderr.trim()).toBe(`${file}: cannot tell whether this is compose, sshd, cloud-init or a preview; pass --kind`);
    });
});
