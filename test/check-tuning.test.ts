import * as fs from "node:fs";
import * as path from "node:path";
import Ajv from "ajv-draft-04";
import addFormats from "ajv-formats";
import { describe, expect, it } from "vitest";
import { airlock } from "./helpers/cli";
import { REPO, tempDir } from "./helpers/stacks";
import type { Finding } from "../policies/engine/finding";
import { ALL_RULES } from "../policies/policy";

/**
 * `airlock check` adopted on a repository of someone else's: a baseline of what it
 * already had, inline suppressions with a reason, --only/--skip, folders and stdin,
 * and SARIF that GitHub code scanning can rank, track and show as suppressed.
 */

const schema = JSON.parse(fs.readFileSync(path.join(REPO, "test/fixtures/sarif/sarif-schema-2.1.0.json"), "utf8"));
const ajv = new Ajv({ allErrors: true, strict: false });
addFormats(ajv);
const validate = ajv.compile(schema);

/** A compose service with one violation in each of two rules' reach, and everything else hardened. */
const service = (name: string, extra: string[] = []) =>
    [
        `  ${name}:`,
        `    image: nginx@sha256:${"ab".repeat(32)}`,
        "    cap_drop: [ALL]",
        '    security_opt: ["no-new-privileges:true"]',
        "    pids_limit: 100",
        "    mem_limit: 256m",
        ...extra.map((line) => `    ${line}`),
    ].join("\n");

/** A scratch git repository (a `.git` folder is what marks its root) with `files` in it. */
function scratchRepository(files: Record<string, string>): string {
    const dir = tempDir("check-repo");
    fs.mkdirSync(path.join(dir, ".git"));
    for (const [name, text] of Object.entries(files)) {
        fs.mkdirSync(path.dirname(path.join(dir, name)), { recursive: true });
        fs.writeFileSync(path.join(dir, name), text);
    }
    return dir;
}

const rulesOf = (stdout: string) =>
    stdout
        .split("\n")
        .filter((l) => / -- fix: /.test(l))
        .map((l) => l.split(": ").slice(0, 2).join(": "));

/** What GitHub's code scanning documents it reads from an upload (docs.github.com, "SARIF support for code scanning"). */
function githubProblems(log: any): string[] {
    const problems: string[] = [];
    for (const run of log.runs) {
        if (!run.tool?.driver?.name) problems.push("runs[].tool.driver.name is required");
        if (typeof run.automationDetails?.id !== "string") problems.push("runs[].automationDetails.id: the category, so analyses of different tools and stacks do not replace each other");
        for (const rule of run.tool.driver.rules ?? []) {
            const severity = Number(rule.properties?.["security-severity"]);
            if (typeof rule.properties?.["security-severity"] !== "string" || !(severity >= 0 && severity <= 10)) problems.push(`${rule.id}: security-severity must be a string of a number from 0.0 to 10.0`);
            if (!["very-high", "high", "medium", "low"].includes(rule.properties?.precision)) problems.push(`${rule.id}: precision must be very-high, high, medium or low`);
        }
        for (const result of run.results) {
            if (!result.ruleId || !result.message?.text) problems.push("results[]: ruleId and message.text are required");
            const where = result.locations?.[0]?.physicalLocation;
            if (!where) problems.push(`${result.ruleId}: a result needs a physical location to be shown`);
            else {
                if (where.artifactLocation.uri.startsWith("/") || /^[a-z]+:/.test(where.artifactLocation.uri)) problems.push(`${result.ruleId}: the uri must be relative to the repository's root, not ${where.artifactLocation.uri}`);
                if (!(where.region?.startLine >= 1)) problems.push(`${result.ruleId}: region.startLine is required`);
            }
            if (Object.keys(result.partialFingerprints ?? {}).length === 0) problems.push(`${result.ruleId}: partialFingerprints track an alert across commits`);
        }
    }
    return problems;
}

describe("airlock check, tuned like a linter", () => {
    it("a baseline: the violations a repository already had pass, a new one fails, and the summary says how many were suppressed", () => {
        const repo = scratchRepository({ "deploy/compose.yml": `services:\n${service("old", ["privileged: true"])}\n` });
        const written = airlock(["check", "--write-baseline", "airlock-baseline.json", "deploy"], { cwd: repo });
        expect(written.status, written.stderr).toBe(0);
        expect(written.stdout).toBe("wrote 1 finding to airlock-baseline.json\n");
        const baseline = JSON.parse(fs.readFileSync(path.join(repo, "airlock-baseline.json"), "utf8"));
        expect(baseline.findings).toEqual([expect.objectContaining({ rule: "containers-not-privileged", file: "deploy/compose.yml" })]);

        const before = airlock(["check", "--baseline", "airlock-baseline.json", "deploy"], { cwd: repo });
        expect(before.status, before.stdout).toBe(0);
        expect(before.stdout).toBe("clean (1 suppressed (--format json lists them))\n");

        // Lines added above it move the old finding; a new service brings a new one.
        fs.writeFileSync(path.join(repo, "deploy/compose.yml"), `# the stack's services\nservices:\n${service("new", ["network_mode: host"])}\n${service("old", ["privileged: true"])}\n`);
        const after = airlock(["check", "--baseline", "airlock-baseline.json", "deploy"], { cwd: repo });
        expect(after.status).toBe(1);
        expect(rulesOf(after.stdout)).toEqual(["deploy/compose.yml:9: containers-no-host-namespaces"]);
        expect(after.stdout).toContain("1 violation, 1 suppressed");
        // Without the baseline both fail.
        expect(rulesOf(airlock(["check", "deploy"], { cwd: repo }).stdout)).toHaveLength(2);
    });

    it("a baseline that is not one is bad input, one line naming the file and key; --write-baseline writes nothing when a file cannot be judged", () => {
        const repo = scratchRepository({ "compose.yml": `services:\n${service("web")}\n`, "bad.json": '{"version": 1, "findings": [{"fingerprint": "x"}]}' });
        const bad = airlock(["check", "--baseline", "bad.json", "compose.yml"], { cwd: repo });
        expect(bad.status).toBe(2);
        expect(bad.stderr).toBe("bad.json: findings[0].fingerprint: expected 32 hex digits\n");
        const missing = airlock(["check", "--write-baseline", "base.json", "compose.yml", "gone.yml"], { cwd: repo });
        expect(missing.status).toBe(2);
        expect(missing.stderr).toContain("base.json: not written");
        expect(fs.existsSync(path.join(repo, "base.json"))).toBe(false);
        expect(fs.readdirSync(repo).filter((f) => f.endsWith(".tmp"))).toEqual([]);
    });

    it("an inline suppression with a reason suppresses its rule on its line and the next; without a reason, or naming no rule, it is a finding and suppresses nothing", () => {
        const repo = scratchRepository({
            "ok.yml": `services:\n  # airlock: ignore[containers-not-privileged] the VPN client needs it on this lab box\n${service("vpn", ["privileged: true"]).slice(1)}\n`,
            "other-rule.yml": `services:\n  # airlock: ignore[containers-no-devices] not the rule that fires\n${service("vpn", ["privileged: true"]).slice(1)}\n`,
            "no-reason.yml": `services:\n  # airlock: ignore[containers-not-privileged]\n${service("vpn", ["privileged: true"]).slice(1)}\n`,
            "no-rule.yml": `services:\n  # airlock: ignore[containers-are-fine] because\n${service("vpn", ["privileged: true"]).slice(1)}\n`,
        });
        const ok = airlock(["check", "ok.yml"], { cwd: repo });
        expect(ok.status, ok.stdout).toBe(0);
        expect(ok.stdout).toBe("clean (1 suppressed (--format json lists them))\n");
        const json = JSON.parse(airlock(["check", "ok.yml", "--json"], { cwd: repo }).stdout);
        expect(json.violations).toBe(0);
        expect(json.findings).toEqual([expect.objectContaining({ rule: "containers-not-privileged", suppressed: { kind: "inSource", justification: "the VPN client needs it on this lab box" } })]);

        expect(rulesOf(airlock(["check", "other-rule.yml"], { cwd: repo }).stdout)).toEqual(["other-rule.yml:9: containers-not-privileged"]);
        const noReason = airlock(["check", "no-reason.yml"], { cwd: repo });
        expect(noReason.status).toBe(1);
        expect(rulesOf(noReason.stdout)).toEqual(["no-reason.yml:9: containers-not-privileged", "no-reason.yml:2: suppressions-give-a-reason"]);
        expect(noReason.stdout).toContain("the suppression gives no reason, so it suppresses nothing");
        const noRule = airlock(["check", "no-rule.yml"], { cwd: repo });
        expect(noRule.stdout).toContain("the suppression names 'containers-are-fine', which is not a rule");
        expect(rulesOf(noRule.stdout)).toHaveLength(2);
    });

    it("only a comment suppresses: the same text inside a value (a quoted string, a block) is data and suppresses nothing", () => {
        const repo = scratchRepository({
            // Each would suppress the finding on line 2 (the service's) if it were a comment on line 2 or 1.
            "quoted.yml": `services:\n  vpn: {labels: {note: "# airlock: ignore[containers-not-privileged] data, not a comment"}, privileged: true, image: "nginx@sha256:${"ab".repeat(32)}", cap_drop: [ALL], security_opt: ["no-new-privileges:true"], pids_limit: 100, mem_limit: 256m}\n`,
            "block.yml": `services:\n${service("first", ["command: |", "  echo", "  # airlock: ignore[containers-not-privileged] data, not a comment"])}\n${service("vpn", ["privileged: true"])}\n`,
            "sshd_config": "PermitRootLogin yes # airlock: ignore[sshd-no-root-login] after a keyword\n",
        });
        for (const file of ["quoted.yml", "block.yml"]) {
            const result = airlock(["check", file, "--only", "containers-not-privileged"], { cwd: repo });
            expect(result.status, `${file}: ${result.stdout}`).toBe(1);
        }
        const sshd = airlock(["check", "sshd_config", "--only", "sshd-no-root-login"], { cwd: repo });
        expect(sshd.status, sshd.stdout).toBe(1);
    });

    it("red team 19: a trailing suppression covers its own line only, one suppression never covers two services, and none reaches into an embedded file", () => {
        const line = (name: string) => `  ${name}: {image: "nginx@sha256:${"ab".repeat(32)}", cap_drop: [ALL], security_opt: ["no-new-privileges:true"], pids_limit: 100, mem_limit: 256m, privileged: true}`;
        const embedded = Buffer.from(`services:\n${service("evil", ["privileged: true"])}\n`).toString("base64");
        const repo = scratchRepository({
            "trailing.yml": `services:\n${line("legacy")} # airlock: ignore[containers-not-privileged] the old box needs it\n${line("evil")}\n`,
            "flow.yml": `services: {${line("a").trim().replace(/^a: /, "a: ")}, ${line("b").trim()}} # airlock: ignore[containers-not-privileged] both, at once\n`,
            "user-data.yaml": `#cloud-config\nwrite_files:\n  # airlock: ignore[containers-not-privileged] hides a file nobody can read here\n  - path: /etc/airlock/compose.yml\n    encoding: b64\n    content: ${embedded}\n`,
        });
        const trailing = airlock(["check", "trailing.yml", "--only", "containers-not-privileged"], { cwd: repo });
        expect(rulesOf(trailing.stdout)).toEqual(["trailing.yml:3: containers-not-privileged"]);
        const flow = airlock(["check", "flow.yml", "--only", "containers-not-privileged,suppressions-give-a-reason"], { cwd: repo });
        expect(flow.status).toBe(1);
        expect(flow.stdout).toContain("the suppression covers findings of 2 services or entries (a, b), so it suppresses nothing");
        const cloudInit = airlock(["check", "user-data.yaml", "--only", "containers-not-privileged"], { cwd: repo });
        expect(cloudInit.status, cloudInit.stdout).toBe(1);
    });

    it("red team 19: a baseline entry relabelled as another rule accepts nothing", () => {
        const repo = scratchRepository({ "compose.yml": `services:\n${service("web", ["privileged: true"])}\n` });
        expect(airlock(["check", "--write-baseline", "base.json", "compose.yml"], { cwd: repo }).status).toBe(0);
        const file = path.join(repo, "base.json");
        const baseline = JSON.parse(fs.readFileSync(file, "utf8"));
        baseline.findings[0] = { ...baseline.findings[0], rule: "containers-images-pinned-by-digest", message: "web image is not pinned by digest" };
        fs.writeFileSync(file, JSON.stringify(baseline));
        const result = airlock(["check", "--baseline", "base.json", "compose.yml"], { cwd: repo });
        expect(result.status).toBe(1);
        expect(rulesOf(result.stdout)).toEqual(["compose.yml:8: containers-not-privileged"]);
    });

    it("red team 19: a folder walk judges a linked compose file and a Jinja cloud-init template, and a folder with nothing to judge is never clean", () => {
        const bad = `services:\n${service("web", ["privileged: true"])}\n`;
        const repo = scratchRepository({ "vendor/node_modules/x/app.txt": bad, "boot.yaml": "## template: jinja\n#cloud-config\nruncmd: [\"{{ v1.local_hostname }}\"]\n", "empty/README.md": "nothing\n" });
        fs.symlinkSync("vendor/node_modules/x/app.txt", path.join(repo, "compose.yaml"));
        const result = airlock(["check", ".", "--ignore", "empty/**", "--json"], { cwd: repo });
        expect(result.status).toBe(1);
        const json = JSON.parse(result.stdout);
        expect(json.files).toEqual(["boot.yaml", "compose.yaml"]);
        expect(json.findings.map((f: { rule: string }) => f.rule)).toEqual(expect.arrayContaining(["containers-not-privileged", "cloud-init-parses"]));
        const empty = airlock(["check", "empty"], { cwd: repo });
        expect(empty.status).toBe(2);
        expect(empty.stderr).toBe("empty: holds no compose file, sshd config, cloud-init user data or preview to judge\n");
    });

    it("--only and --skip choose rules; a file that does not parse is reported under --only; an unknown rule is bad input", () => {
        const repo = scratchRepository({ "compose.yml": `services:\n${service("web", ["privileged: true", "network_mode: host"])}\n`, "broken.yml": "services: [\n" });
        expect(rulesOf(airlock(["check", "compose.yml", "--only", "containers-not-privileged"], { cwd: repo }).stdout)).toEqual(["compose.yml:8: containers-not-privileged"]);
        expect(rulesOf(airlock(["check", "compose.yml", "--skip", "containers-not-privileged"], { cwd: repo }).stdout)).toEqual(["compose.yml:9: containers-no-host-namespaces"]);
        const none = airlock(["check", "compose.yml", "--skip", "containers-not-privileged,containers-no-host-namespaces"], { cwd: repo });
        expect([none.status, none.stdout]).toEqual([0, "clean\n"]);
        const broken = airlock(["check", "broken.yml", "--kind", "compose", "--only", "containers-not-privileged"], { cwd: repo });
        expect(broken.status).toBe(1);
        expect(rulesOf(broken.stdout)[0]).toMatch(/compose-parses$/);
        const unknown = airlock(["check", "compose.yml", "--skip", "containers-not-privilegd"], { cwd: repo });
        expect(unknown.status).toBe(2);
        expect(unknown.stderr).toBe("--skip: 'containers-not-privilegd' is not a rule (docs/policy-pack.md lists them)\n");
    });

    it("a folder: walked for what it judges, by name and content; .git, node_modules and --ignore globs left out; other JSON and YAML skipped", () => {
        const bad = `services:\n${service("web", ["privileged: true"])}\n`;
        const repo = scratchRepository({
            "app/docker-compose.yml": bad,
            "app/deploy/stack.yaml": bad, // a compose file by its services mapping
            "app/vendor/compose.yml": bad,
            "node_modules/pkg/compose.yml": bad,
            ".git/compose.yml": bad,
            "app/package.json": '{"name": "app", "version": "1.0.0"}',
            "app/settings.yml": "debug: true\n",
            "app/etc/sshd_config": "PermitRootLogin yes\n",
            "app/preview.json": JSON.stringify({ steps: [{ op: "create", urn: "urn:pulumi:s::p::docker:index/container:Container::web", newState: { urn: "urn:pulumi:s::p::docker:index/container:Container::web", type: "docker:index/container:Container", inputs: { image: "nginx:1", privileged: true } } }] }, null, 2),
        });
        const result = airlock(["check", "app", "--ignore", "vendor/**", "--json"], { cwd: repo });
        expect(result.status).toBe(1);
        expect(JSON.parse(result.stdout).files).toEqual(["app/deploy/stack.yaml", "app/docker-compose.yml", "app/etc/sshd_config", "app/preview.json"]);
        const unignored = JSON.parse(airlock(["check", ".", "--json"], { cwd: repo }).stdout).files;
        expect(unignored).toContain("app/vendor/compose.yml");
        expect(unignored.filter((f: string) => f.includes("node_modules") || f.startsWith(".git"))).toEqual([]);
    });

    it("- reads standard input, by --kind or by what it holds", () => {
        const input = `services:\n${service("web", ["privileged: true"])}\n`;
        const result = airlock(["check", "-"], { input });
        expect(result.status).toBe(1);
        expect(rulesOf(result.stdout)).toEqual(["<stdin>:8: containers-not-privileged"]);
        const sshd = airlock(["check", "-", "--kind", "sshd", "--only", "sshd-no-root-login"], { input: "PermitRootLogin yes\n" });
        expect(rulesOf(sshd.stdout)).toEqual(["<stdin>:1: sshd-no-root-login"]);
    });
});

describe("airlock check --format sarif, for code scanning", () => {
    // A compose finding is on its service's line, so its suppression goes on the line above.
    const compose = (top: string) => `${top}services:\n${service("web", ["privileged: true"])}\n  # airlock: ignore[containers-no-host-namespaces] it routes the lab's traffic\n${service("vpn", ["network_mode: host"])}\n`;

    it("meets GitHub's documented requirements and the schema; paths from the repository's root, from any folder; suppressed results marked", () => {
        const repo = scratchRepository({ "deploy/compose.yml": compose("") });
        const result = airlock(["check", "compose.yml", "--format", "sarif"], { cwd: path.join(repo, "deploy") });
        expect(result.status).toBe(1);
        const log = JSON.parse(result.stdout);
        expect(validate(log), JSON.stringify(validate.errors?.slice(0, 3))).toBe(true);
        expect(githubProblems(log)).toEqual([]);
        const run = log.runs[0];
        expect(run.automationDetails).toEqual({ id: "airlock/check/" });
        expect(run.originalUriBaseIds["%SRCROOT%"].uri).toBe(`file://${fs.realpathSync(repo)}/`.replace(fs.realpathSync(repo), repo));
        const byRule = Object.fromEntries(run.results.map((r: any) => [r.ruleId, r]));
        expect(byRule["containers-not-privileged"].locations[0].physicalLocation.artifactLocation).toEqual({ uri: "deploy/compose.yml", uriBaseId: "%SRCROOT%" });
        expect(byRule["containers-not-privileged"].suppressions).toBeUndefined();
        expect(byRule["containers-no-host-namespaces"].suppressions).toEqual([{ kind: "inSource", justification: "it routes the lab's traffic" }]);
    });

    it("the schema and the requirements check can fail", () => {
        expect(validate({ version: "2.1.0", runs: [{ tool: { driver: { name: "x" } }, results: [{ message: {} }] }] })).toBe(false);
        expect(githubProblems({ runs: [{ tool: { driver: { name: "x", rules: [{ id: "r", properties: { "security-severity": 8 } }] } }, results: [{ ruleId: "r", message: { text: "m" }, locations: [{ physicalLocation: { artifactLocation: { uri: "/abs" }, region: { startLine: 1 } } }] }] }] })).toHaveLength(5);
    });

    it("fingerprints are the same across two runs and across a change to an unrelated line, and differ between findings", () => {
        const repo = scratchRepository({ "compose.yml": compose("") });
        const prints = () => JSON.parse(airlock(["check", "compose.yml", "--format", "sarif"], { cwd: repo }).stdout).runs[0].results.map((r: any) => [r.ruleId, r.partialFingerprints["airlockFinding/v1"], r.locations[0].physicalLocation.region.startLine]);
        const first = prints();
        expect(prints()).toEqual(first);
        fs.writeFileSync(path.join(repo, "compose.yml"), compose("# reviewed 2026-12-07\nname: lab\n"));
        const moved = prints();
        expect(moved.map(([rule, print]: string[]) => [rule, print])).toEqual(first.map(([rule, print]: string[]) => [rule, print]));
        expect(moved.map((r: number[]) => r[2])).toEqual(first.map((r: number[]) => r[2] + 2));
        expect(new Set(first.map((r: string[]) => r[1])).size).toBe(first.length);
    });

    it("a walked folder: an ssh client config is not an sshd config, and a YAML key that is a collection prints no warning", () => {
        const repo = scratchRepository({
            "ssh/sandbox.ssh_config.in": "# how the gateway reaches the sandbox\nHost sandbox\n\tHostName 100.64.0.2\n\tUser agent\n\tPasswordAuthentication no\n",
            "deploy/compose.yml": `services:\n${service("web")}\n    environment:\n      ? { hostname }\n      : x\n`,
        });
        const result = airlock(["check", "."], { cwd: repo });
        expect(result.stderr).toBe("");
        expect(result.stdout).toBe("clean\n");
        expect(result.status).toBe(0);
    });

    it("profiles: generic outside an airlock project, airlock inside one; --profile and --only choose instead", () => {
        const plain = "services:\n  web:\n    image: nginx:1.27\n    cap_add: [NET_BIND_SERVICE, SYS_ADMIN]\n";
        const sshdConfig = "PermitRootLogin no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nListenAddress 0.0.0.0\n";
        const files = { "compose.yml": plain, "sshd_config": sshdConfig };
        const other = scratchRepository(files);
        const ours = scratchRepository({ ...files, "Pulumi.yaml": "name: airlock\nruntime: nodejs\n" });
        const renamed = scratchRepository({ ...files, "Pulumi.yaml": "name: acme-agent\nruntime: nodejs\n", "policies/PulumiPolicy.yaml": fs.readFileSync(path.join(REPO, "policies/PulumiPolicy.yaml"), "utf8") });
        expect(JSON.parse(airlock(["check", "compose.yml", "--json"], { cwd: renamed }).stdout).profiles).toEqual({ "compose.yml": "airlock" });
        const otherPulumi = scratchRepository({ ...files, "Pulumi.yaml": "name: website\nruntime: nodejs\n" });
        expect(JSON.parse(airlock(["check", "compose.yml", "--json"], { cwd: otherPulumi }).stdout).profiles).toEqual({ "compose.yml": "generic" });
        const outside = airlock(["check", "compose.yml", "sshd_config", "--json"], { cwd: other });
        const generic = JSON.parse(outside.stdout);
        // Docker's own default capability is no finding in the generic profile; SYS_ADMIN is.
        expect(generic.findings.map((f: Finding) => `${f.rule}:${f.line}:${f.message}`)).toEqual(["containers-add-only-allowed-capabilities:4:web adds capability SYS_ADMIN"]);
        expect(generic.profiles).toEqual({ "compose.yml": "generic", sshd_config: "generic" });
        const inside = JSON.parse(airlock(["check", "compose.yml", "sshd_config", "--json"], { cwd: ours }).stdout);
        expect(inside.profiles).toEqual({ "compose.yml": "airlock", sshd_config: "airlock" });
        const strict = inside.findings.map((f: Finding) => f.rule);
        for (const rule of ["containers-drop-all-capabilities", "containers-images-pinned-by-digest", "sshd-listen-tailnet-only"]) expect(strict).toContain(rule);
        expect(inside.findings.filter((f: Finding) => f.rule === "containers-add-only-allowed-capabilities")).toHaveLength(2);
        // Judged from elsewhere, a file keeps its own project's profile.
        expect(JSON.parse(airlock(["check", path.join(ours, "compose.yml"), "--json"], { cwd: other }).stdout).violations).toBe(inside.findings.filter((f: Finding) => f.file?.endsWith("compose.yml")).length);
        expect(JSON.parse(airlock(["check", "--profile", "airlock", "compose.yml", "--json"], { cwd: other }).stdout).profiles).toEqual({ "compose.yml": "airlock" });
        expect(rulesOf(airlock(["check", "--only", "containers-images-pinned-by-digest", "compose.yml"], { cwd: other }).stdout)).toEqual(["compose.yml:3: containers-images-pinned-by-digest"]);
        const bad = airlock(["check", "--profile", "strict", "compose.yml"], { cwd: other });
        expect(bad.status).toBe(2);
        expect(bad.stderr).toContain("--profile");
    });

    it("docs/policy-pack.md names exactly the rules of the generic profile", () => {
        const page = fs.readFileSync(path.join(REPO, "docs/policy-pack.md"), "utf8");
        const line = /Rules in the generic profile[^]*?\):([^]*?)\.\n/.exec(page)![1];
        const listed = [...line.matchAll(/`([a-z0-9-]+)`/g)].map((m) => m[1]).sort();
        const generic = ALL_RULES.filter((r) => r.profiles.includes("generic") && !r.id.endsWith("-parses") && r.id !== "suppressions-give-a-reason").map((r) => r.id).sort();
        expect(listed).toEqual(generic);
        expect(generic.length).toBeGreaterThan(10);
        expect(ALL_RULES.every((r) => r.profiles.includes("airlock"))).toBe(true);
    });

    it("red team 23: an aliased list or merge is reported where it is used, so a suppression at its anchor in another service covers nothing; a nested Pulumi.yaml never loosens the profile", () => {
        const repo = scratchRepository({
            "compose.yml": [
                "services:",
                "  ui:",
                "    image: portainer-ui-static",
                "    labels: &paths",
                "      # airlock: ignore[containers-no-docker-socket] ui only shows the socket path as a label",
                '      - "/var/run/docker.sock:/var/run/docker.sock"',
                "  agent:",
                "    image: alpine",
                "    volumes: *paths",
                "",
            ].join("\n"),
            "Pulumi.yaml": "name: airlock\nruntime: nodejs\n",
            "stacks/demo/Pulumi.yaml": "name: demo\n",
            "stacks/demo/compose.yml": "services:\n  web:\n    image: nginx:1.27\n",
        });
        const result = airlock(["check", "compose.yml"], { cwd: repo });
        expect(result.status).toBe(1);
        expect(rulesOf(result.stdout)).toContain("compose.yml:9: containers-no-docker-socket");
        expect(result.stdout).not.toContain("suppressed");
        const nested = JSON.parse(airlock(["check", "stacks/demo/compose.yml", "--json"], { cwd: repo }).stdout);
        expect(nested.profiles).toEqual({ "stacks/demo/compose.yml": "airlock" });
    });
});
