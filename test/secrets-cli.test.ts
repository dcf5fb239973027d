import { spawnSync } from "node:child_process";
import { generateKeyPairSync, randomBytes } from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { airlock as airlockBin } from "./helpers/cli";
import { docSample, docsText } from "./helpers/docs";
import { editedStack, tempDir } from "./helpers/stacks";

/**
 * `airlock secrets push|status` on the operator's side, with stand-ins for the two
 * programs it drives: `ssh` (records its arguments and stdin, answers like the
 * gateway's tool) and `pulumi` (answers `config get` like the real CLI). The real
 * gateway side is proven in e2e-secrets.test.ts.
 */

const values = () => ({
    ANTHROPIC_API_KEY: ["sk", "ant", "api03", randomBytes(24).toString("base64url")].join("-"),
    SLACK_BOT_TOKEN: ["xoxb", "1234567890", randomBytes(12).toString("hex")].join("-"),
});

/** A stack dir whose dev stack declares `names` as agent secrets (ciphertext placeholders, as Pulumi writes them). */
function stackDeclaring(names: string[], more: (c: Record<string, any>) => void = () => {}): string {
    const dir = tempDir("secrets-stacks");
    editedStack(
        "dev",
        (c) => {
            c["airlock:gateway"].agent.secrets = Object.fromEntries(names.map((n) => [n, { secure: `v1:${n}` }]));
            more(c);
        },
        dir,
    );
    return dir;
}

/** Stand-in programs on PATH; each records what it got under `dir`. */
function fakeBin(answer: { ssh: string; sshExit?: number; pulumi?: Record<string, string> }): { bin: string; dir: string } {
    const dir = tempDir("fake-bin");
    const bin = path.join(dir, "bin");
    fs.mkdirSync(bin);
    fs.writeFileSync(path.join(dir, "ssh-answer"), answer.ssh);
    fs.writeFileSync(
        path.join(bin, "ssh"),
        `#!/bin/bash\nprintf '%s\\n' "$@" > ${dir}/ssh-argv\ncat > ${dir}/ssh-stdin\nif [[ ${answer.sshExit ?? 0} == 0 ]]; then cat ${dir}/ssh-answer; else cat ${dir}/ssh-answer >&2; fi\nexit ${answer.sshExit ?? 0}\n`,
        { mode: 0o755 },
    );
    fs.writeFileSync(path.join(dir, "pulumi-values.json"), JSON.stringify(answer.pulumi ?? {}));
    // `pulumi config get --path --json --stack S KEY`: {"value": ..., "secret": true}, like the real CLI.
    fs.writeFileSync(
        path.join(bin, "pulumi"),
        `#!/usr/bin/python3\nimport json, sys\nopen("${dir}/pulumi-argv", "a").write(json.dumps(sys.argv[1:]) + "\\n")\nvalues = json.load(open("${dir}/pulumi-values.json"))\nname = sys.argv[-1].split(".")[-1]\nif name not in values:\n    print("error: configuration key '" + sys.argv[-1] + "' not found for stack 'dev'", file=sys.stderr)\n    sys.exit(255)\nprint(json.dumps({"value": values[name], "secret": True}))\n`,
        { mode: 0o755 },
    );
    return { bin, dir };
}

/** The CLI as users run it, with the stand-ins first on PATH. */
function airlock(args: string[], bin: string, stdin = "") {
    return airlockBin(args, { input: stdin, env: { ...process.env, PATH: `${bin}:${process.env.PATH}` } });
}

const pushed = (dir: string) => ({ argv: fs.readFileSync(path.join(dir, "ssh-argv"), "utf8"), stdin: fs.readFileSync(path.join(dir, "ssh-stdin"), "utf8") });

describe("airlock secrets push", () => {
    it("--stdin: values go on ssh's stdin only; the command line and the output carry names, never a value", () => {
        const secrets = values();
        const stacks = stackDeclaring(Object.keys(secrets));
        const fake = fakeBin({ ssh: JSON.stringify({ delivered: ["ANTHROPIC_API_KEY", "SLACK_BOT_TOKEN"], removed: ["OLD_TOKEN"], restarted: true }) });
        const result = airlock(["--stacks-dir", stacks, "secrets", "push", "--stack", "dev", "--stdin"], fake.bin, JSON.stringify(secrets));
        expect(result.stderr).toBe("");
        expect(result.stdout).toBe("delivered to airlock-dev-gateway: ANTHROPIC_API_KEY, SLACK_BOT_TOKEN\nremoved: OLD_TOKEN\nruntime restarted\n");
        expect(result.status).toBe(0);
        const { argv, stdin } = pushed(fake.dir);
        expect(argv.trim().split("\n")).toEqual(["-o", "BatchMode=yes", "-o", "ConnectTimeout=15", "-T", "ops@airlock-dev-gateway", "sudo -n /usr/local/sbin/airlock-agent-secrets push"]);
        expect(JSON.parse(stdin)).toEqual(secrets);
        for (const value of Object.values(secrets)) expect(argv + result.stdout + result.stderr).not.toContain(value);
    });

    it("without --stdin: one `pulumi config get --path --json` per declared name, the value read from its stdout", () => {
        const secrets = values();
        const stacks = stackDeclaring(Object.keys(secrets));
        const fake = fakeBin({ ssh: JSON.stringify({ delivered: Object.keys(secrets), removed: [], restarted: true }), pulumi: secrets });
        const result = airlock(["--stacks-dir", stacks, "secrets", "push", "--stack", "dev", "--ssh-config", "/tmp/gw_config"], fake.bin);
        expect(result.status).toBe(0);
        const calls = fs.readFileSync(path.join(fake.dir, "pulumi-argv"), "utf8").trim().split("\n").map((l) => JSON.parse(l));
        expect(calls).toEqual(Object.keys(secrets).map((n) => ["config", "get", "--path", "--json", "--stack", "dev", `airlock:gateway.agent.secrets.${n}`]));
        const { argv, stdin } = pushed(fake.dir);
        expect(argv.startsWith("-F\n/tmp/gw_config\n")).toBe(true);
        expect(JSON.parse(stdin)).toEqual(secrets);
    });

    it("a name Pulumi does not have is one line naming it, and nothing is sent", () => {
        const stacks = stackDeclaring(["ANTHROPIC_API_KEY"]);
        const fake = fakeBin({ ssh: "{}", pulumi: {} });
        const result = airlock(["--stacks-dir", stacks, "secrets", "push", "--stack", "dev"], fake.bin);
        expect(result.status).toBe(2);
        expect(result.stderr).toBe("pulumi config get airlock:gateway.agent.secrets.ANTHROPIC_API_KEY: error: configuration key 'airlock:gateway.agent.secrets.ANTHROPIC_API_KEY' not found for stack 'dev'\n");
        expect(fs.existsSync(path.join(fake.dir, "ssh-argv"))).toBe(false);
    });

    it.each<[string, (s: Record<string, string>) => unknown, RegExp]>([
        ["a missing name", (s) => ({ ANTHROPIC_API_KEY: s.ANTHROPIC_API_KEY }), /^stdin: SLACK_BOT_TOKEN: missing \(declared in airlock:gateway\.agent\.secrets\)\n$/],
        ["an undeclared name", (s) => ({ ...s, AWS_SECRET_ACCESS_KEY: "x" }), /^stdin: AWS_SECRET_ACCESS_KEY: not declared in airlock:gateway\.agent\.secrets\n$/],
        ["a two-line value", (s) => ({ ...s, SLACK_BOT_TOKEN: `${s.SLACK_BOT_TOKEN}\nSECOND=line` }), /^stdin: SLACK_BOT_TOKEN: a runtime secret must be one line without ', \\ or \$\{ \(an env file cannot carry it unambiguously\)\n$/],
        ["a value that compose would interpolate", (s) => ({ ...s, SLACK_BOT_TOKEN: "pre${HOME}post" }), /^stdin: SLACK_BOT_TOKEN: a runtime secret must be one line/],
        ["not JSON (and the input is never echoed)", (s) => `{"ANTHROPIC_API_KEY": "${s.ANTHROPIC_API_KEY}",}`, /^stdin: expected one JSON object of NAME: value\n$/],
    ])("bad input: %s -> exit 2, one line, no value, nothing sent", (_, make, expected) => {
        const secrets = values();
        const stacks = stackDeclaring(Object.keys(secrets));
        const fake = fakeBin({ ssh: "{}" });
        const input = make(secrets);
        const result = airlock(["--stacks-dir", stacks, "secrets", "push", "--stack", "dev", "--stdin"], fake.bin, typeof input === "string" ? input : JSON.stringify(input));
        expect(result.stderr).toMatch(expected);
        expect(result.status).toBe(2);
        for (const value of Object.values(secrets)) expect(result.stdout + result.stderr).not.toContain(value);
        expect(fs.existsSync(path.join(fake.dir, "ssh-argv"))).toBe(false);
    });

    it("the README's CI line: jq builds the object from the environment, the values reach ssh's stdin only", () => {
        const line = /^jq -n .*--stdin$/m.exec(docsText())?.[0];
        expect(line).toBeDefined();
        const pipe = line!.lastIndexOf(" | ");
        const [jq, cli] = [line!.slice(0, pipe), line!.slice(pipe + 3)];
        expect(cli).toBe("npm run -s airlock -- secrets push --stack prod --stdin");
        const key = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey.export({ type: "pkcs1", format: "pem" }).toString();
        const secrets = { ...values(), GITHUB_APP_PRIVATE_KEY: key };
        const json = spawnSync("bash", ["-c", jq], { encoding: "utf8", env: { ...process.env, ...secrets } });
        expect(json.status).toBe(0);
        const fake = fakeBin({ ssh: JSON.stringify({ delivered: Object.keys(secrets).sort(), removed: [], restarted: true }) });
        const result = airlock(["--stacks-dir", stackDeclaring(Object.keys(secrets)), "secrets", "push", "--stack", "dev", "--stdin"], fake.bin, json.stdout);
        expect(result.status).toBe(0);
        expect(JSON.parse(pushed(fake.dir).stdin)).toEqual(secrets);
    });

    it("a stack with a GitHub App must declare the App's key", () => {
        const stacks = stackDeclaring(["ANTHROPIC_API_KEY"], (c) => (c["airlock:gateway"].github = { appId: 1, installationId: 2, maxPermissions: { contents: "read" } }));
        const result = airlock(["--stacks-dir", stacks, "secrets", "push", "--stack", "dev", "--stdin"], fakeBin({ ssh: "{}" }).bin, "{}");
        expect(result.status).toBe(2);
        expect(result.stderr).toMatch(/: airlock:gateway\.agent\.secrets\.GITHUB_APP_PRIVATE_KEY: required by airlock:gateway\.github: pulumi config set --secret --path 'airlock:gateway\.agent\.secrets\.GITHUB_APP_PRIVATE_KEY' < app-private-key\.pem\n$/);
    });

    it("the App key may span lines; a deploy credential is delivered with a warning (the checklist fails it)", () => {
        const key = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey.export({ type: "pkcs1", format: "pem" }).toString();
        const stacks = stackDeclaring(["GITHUB_APP_PRIVATE_KEY", "HCLOUD_TOKEN"]);
        const fake = fakeBin({ ssh: JSON.stringify({ delivered: ["GITHUB_APP_PRIVATE_KEY", "HCLOUD_TOKEN"], removed: [], restarted: true }) });
        const result = airlock(["--stacks-dir", stacks, "secrets", "push", "--stack", "dev", "--stdin"], fake.bin, JSON.stringify({ GITHUB_APP_PRIVATE_KEY: key, HCLOUD_TOKEN: "hc-token-value" }));
        expect(result.status).toBe(0);
        expect(result.stdout.split("\n")[0]).toBe("warning: HCLOUD_TOKEN looks like a deploy credential (Hetzner Cloud); the agent should not hold it (see airlock checklist)");
        expect(JSON.parse(pushed(fake.dir).stdin).GITHUB_APP_PRIVATE_KEY).toBe(key);
    });

    it("the gateway's refusal is passed on as its one line with exit 2; an unreachable gateway is exit 1", () => {
        const secrets = values();
        const stacks = stackDeclaring(Object.keys(secrets));
        const refused = airlock(["--stacks-dir", stacks, "secrets", "push", "--stack", "dev", "--stdin"], fakeBin({ ssh: "airlock-agent-secrets: run it as root (sudo)\n", sshExit: 2 }).bin, JSON.stringify(secrets));
        expect([refused.status, refused.stdout, refused.stderr]).toEqual([2, "", "airlock-agent-secrets: run it as root (sudo)\n"]);
        const down = airlock(["--stacks-dir", stacks, "secrets", "push", "--stack", "dev", "--stdin"], fakeBin({ ssh: "ssh: connect to host airlock-dev-gateway port 22: Connection refused\n", sshExit: 255 }).bin, JSON.stringify(secrets));
        expect([down.status, down.stderr]).toEqual([1, "cannot reach ops@airlock-dev-gateway: ssh: connect to host airlock-dev-gateway port 22: Connection refused\n"]);
    });

    it("delivered but not restarted is exit 1 and says so", () => {
        const secrets = values();
        const fake = fakeBin({ ssh: JSON.stringify({ delivered: Object.keys(secrets), removed: [], restarted: false, restartError: "Cannot connect to the Docker daemon" }) });
        const result = airlock(["--stacks-dir", stackDeclaring(Object.keys(secrets)), "secrets", "push", "--stack", "dev", "--stdin"], fake.bin, JSON.stringify(secrets));
        expect(result.status).toBe(1);
        expect(result.stdout).toContain("runtime NOT restarted: Cannot connect to the Docker daemon; it reads the new secrets when it next starts\n");
    });
});

describe("airlock secrets status", () => {
    it("lists declared names present (with their age), missing, and stored but undeclared; exit 1 unless all present", () => {
        const stacks = stackDeclaring(["ANTHROPIC_API_KEY", "SLACK_BOT_TOKEN"]);
        const now = 1_700_000_000;
        const answer = { now, secrets: [{ name: "ANTHROPIC_API_KEY", updated: now - 3 * 86400 - 5 }, { name: "OLD_TOKEN", updated: now - 120 }] };
        const fake = fakeBin({ ssh: JSON.stringify(answer) });
        const result = airlock(["--stacks-dir", stacks, "secrets", "status", "--stack", "dev"], fake.bin);
        // The README's sample (its first line is the command).
        const [command, ...sample] = docSample("secrets-status").split("\n");
        expect(command).toBe("$ npm run -s airlock -- secrets status --stack dev");
        expect(result.stdout).toBe(sample.join("\n"));
        expect(result.stdout).toContain("  OLD_TOKEN          undeclared: on the gateway, not in the stack (a push removes it)\n");
        expect(result.status).toBe(1);
        expect(pushed(fake.dir).argv.trim().split("\n").pop()).toBe("sudo -n /usr/local/sbin/airlock-agent-secrets status");
        const json = JSON.parse(airlock(["--stacks-dir", stacks, "secrets", "status", "--stack", "dev", "--json"], fake.bin).stdout);
        expect(json.secrets).toEqual([
            { name: "ANTHROPIC_API_KEY", state: "present", ageSeconds: 3 * 86400 + 5 },
            { name: "OLD_TOKEN", state: "undeclared", ageSeconds: 120 },
            { name: "SLACK_BOT_TOKEN", state: "missing" },
        ]);
    });

    it("a stack without a runtime is bad input", () => {
        const dir = tempDir("no-runtime");
        editedStack("dev", (c) => delete c["airlock:gateway"].agent, dir);
        const result = airlock(["--stacks-dir", dir, "secrets", "status", "--stack", "dev"], fakeBin({ ssh: "{}" }).bin);
        expect(result.status).toBe(2);
        expect(result.stderr).toMatch(/Pulumi\.dev\.yaml: airlock:gateway\.agent: not set, so there is no runtime to deliver secrets to\n$/);
    });
});
