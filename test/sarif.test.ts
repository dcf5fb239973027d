import * as fs from "node:fs";
import * as path from "node:path";
import Ajv from "ajv-draft-04";
import addFormats from "ajv-formats";
import { describe, expect, it } from "vitest";
import { ALL_RULES } from "../policies/policy";
import { airlock } from "./helpers/cli";
import { editedStack, REPO, tempDir } from "./helpers/stacks";

/** The official SARIF 2.1.0 schema (oasis-tcs/sarif-spec, sarif-2.1/schema/sarif-schema-2.1.0.json), vendored: nothing is downloaded at test time. */
const schema = JSON.parse(fs.readFileSync(path.join(REPO, "test/fixtures/sarif/sarif-schema-2.1.0.json"), "utf8"));
const ajv = new Ajv({ allErrors: true, strict: false });
addFormats(ajv);
const validate = ajv.compile(schema);

function valid(log: unknown): boolean {
    const ok = validate(log) as boolean;
    if (!ok) console.error(JSON.stringify(validate.errors?.slice(0, 5), null, 2));
    return ok;
}

describe("--format sarif", () => {
    const dir = tempDir("sarif");
    const compose = path.join(dir, "compose.yml");
    fs.writeFileSync(compose, 'services:\n  web:\n    image: nginx:1.27\n    privileged: true\n    ports: ["8080:80"]\n');
    const userData = path.join(dir, "user-data");
    fs.writeFileSync(userData, "#cloud-config\nruncmd:\n  - curl -fsSL https://get.example.sh | sh\nwrite_files:\n  - path: /etc/ssh/sshd_config\n    content: |\n      PermitRootLogin yes\n");

    it("the schema rejects what is not SARIF (the validator can fail)", () => {
        expect(valid({ version: "2.1.0" })).toBe(false);
        expect(valid({ version: "2.0.0", runs: [] })).toBe(false);
        expect(valid({ version: "2.1.0", runs: [{ tool: { driver: { name: "x" } }, results: [{ message: {} }] }] })).toBe(false);
    });

    it("check: valid SARIF 2.1.0, rules with descriptions and help, results at file and line", () => {
        const result = airlock(["check", "--profile", "airlock", compose, userData, "--format", "sarif"], { cwd: dir });
        expect(result.status).toBe(1);
        const log = JSON.parse(result.stdout);
        expect(valid(log)).toBe(true);
        const run = log.runs[0];
        expect(run.tool.driver.name).toBe("airlock");
        expect(run.tool.driver.rules.map((r: { id: string }) => r.id)).toEqual(ALL_RULES.map((r) => r.id));
        for (const rule of run.tool.driver.rules) {
            expect(rule.fullDescription.text.length).toBeGreaterThan(20);
            expect(rule.help.text).toMatch(/^Fix: .{10,}/);
        }
        expect(run.results.length).toBeGreaterThan(5);
        for (const r of run.results) {
            expect(run.tool.driver.rules[r.ruleIndex].id).toBe(r.ruleId);
            expect(r.locations[0].physicalLocation.region.startLine).toBeGreaterThanOrEqual(1);
        }
        const privileged = run.results.find((r: { ruleId: string }) => r.ruleId === "containers-not-privileged");
        expect(privileged.locations[0].physicalLocation).toEqual({ artifactLocation: { uri: "compose.yml", uriBaseId: "%SRCROOT%" }, region: { startLine: 4 } });
        const root = run.results.find((r: { ruleId: string }) => r.ruleId === "sshd-no-root-login");
        expect(root.locations[0].physicalLocation).toEqual({ artifactLocation: { uri: "user-data", uriBaseId: "%SRCROOT%" }, region: { startLine: 7 } });
        expect(root.message.text).toContain("(in /etc/ssh/sshd_config:1)");
        expect(run.invocations[0].executionSuccessful).toBe(true);
    });

    it("check with a missing file: still valid, the error as a notification, exit 2", () => {
        const result = airlock(["check", compose, path.join(dir, "missing.yml"), "--format", "sarif"], { cwd: dir });
        expect(result.status).toBe(2);
        const log = JSON.parse(result.stdout);
        expect(valid(log)).toBe(true);
        expect(log.runs[0].invocations[0]).toMatchObject({ executionSuccessful: false, toolExecutionNotifications: [{ level: "error" }] });
        expect(log.runs[0].results.length).toBeGreaterThan(0);
    });

    it("gate: valid SARIF, a resource's URN as its logical location, clean stacks give an empty run", () => {
        const stacks = tempDir("sarif-gate");
        editedStack("dev", (c) => (c["airlock:sandbox"].extraInboundRules = [{ protocol: "tcp", port: "22", sourceIps: ["0.0.0.0/0"] }]), stacks);
        const failing = airlock(["--stacks-dir", stacks, "gate", "--stack", "dev", "--format", "sarif"]);
        expect(failing.status).toBe(1);
        const log = JSON.parse(failing.stdout);
        expect(valid(log)).toBe(true);
        const [firewall] = log.runs[0].results;
        expect(firewall.ruleId).toBe("hcloud-firewall-no-public-inbound-tcp");
        expect(firewall.locations[0].logicalLocations[0].fullyQualifiedName).toContain("airlock-dev-sandbox-firewall");
        expect(firewall.locations[0].physicalLocation.artifactLocation.uri).toBe("out/dev/preview.json");

        const clean = airlock(["gate", "--all", "--format", "sarif"]);
        expect(clean.status).toBe(0);
        const cleanLog = JSON.parse(clean.stdout);
        expect(valid(cleanLog)).toBe(true);
        expect(cleanLog.runs[0].results).toEqual([]);
    });
});
