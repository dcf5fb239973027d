import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { evaluateChecklist } from "../cli/checklist";
import { MIN_PULUMI_CLI, runDoctor, SHIPPED_EXAMPLE_KEYS } from "../cli/doctor";
import { forkStack, ForkRefused } from "../cli/fork";
import { gatePlan } from "../cli/gate";
import { planStack, StackPlan, stackFilePath } from "../cli/offline";
import { ConfigError, readStackFile } from "../components/config/load";
import { airlock as run } from "./helpers/cli";
import { editedStack, REPO, stackFile, STACKS_DIR, tempDir, withOwnKeys } from "./helpers/stacks";

const airlock = (args: string[], env: NodeJS.ProcessEnv = process.env) => run(args, { env });

/** A copy of the shipped stacks to fork into. */
function stacksCopy(): string {
    const dir = tempDir("stacks");
    for (const f of fs.readdirSync(STACKS_DIR)) fs.copyFileSync(path.join(STACKS_DIR, f), path.join(dir, f));
    return dir;
}

/** Every name that must be unique across customers: cloud names, tags, hostnames, built images. */
function globalNames(plan: StackPlan): string[] {
    const names: string[] = [];
    for (const r of plan.resources) {
        if (typeof r.inputs.name === "string" && r.type.startsWith("hcloud:")) names.push(`hcloud:${r.inputs.name}`);
        if (r.type === "tailscale:index/tailnetKey:TailnetKey") names.push(...(r.inputs.tags as string[]));
        if (r.type === "docker:index/image:Image") names.push(String(r.inputs.imageName));
        if (r.inputs.b2Kind === "bucket") names.push(`b2:${r.inputs.bucketName}`);
    }
    names.push(plan.config.hostnames.gateway, plan.config.hostnames.sandbox);
    return names;
}

describe("airlock fork", () => {
    it("two customers forked from dev both plan, pass the gate, and share no globally-unique name", async () => {
        const dir = stacksCopy();
        const plans: StackPlan[] = [await planStack(stackFilePath(dir, "dev"), "dev")];
        for (const customer of ["acme", "globex"]) {
            const result = await forkStack({ stacksDir: dir, customer, from: "dev" });
            expect(result.status).toBe("written");
            const plan = await planStack(result.file, customer);
            expect(gatePlan(plan)).toEqual([]);
            plans.push(plan);
        }
        const [dev, acme, globex] = plans.map((p) => new Set(globalNames(p)));
        for (const [a, b] of [[dev, acme], [dev, globex], [acme, globex]]) expect([...a].filter((n) => b.has(n))).toEqual([]);
        expect(acme.size).toBeGreaterThan(8);
    });

    it("into a region outside Europe, takes the CPX type of the same size where the source has a CX type, and says so", async () => {
        const dir = stacksCopy();
        const result = await forkStack({ stacksDir: dir, customer: "acme", from: "dev", region: "ash" });
        expect(result.status).toBe("written");
        const cfg = readStackFile(result.file);
        expect([cfg.gateway.serverType, cfg.sandbox.serverType, cfg.sandbox.location]).toEqual(["cpx22", "cpx22", "ash"]);
        expect(result.changes).toEqual(expect.arrayContaining([`airlock:gateway.serverType: "cx23" -> "cpx22"`, `airlock:sandbox.serverType: "cx23" -> "cpx22"`]));
    });

    it("is deterministic and idempotent, and refuses to overwrite a different stack", async () => {
        const dir = stacksCopy();
        const first = await forkStack({ stacksDir: dir, customer: "acme", from: "prod", region: "hel1" });
        const text = fs.readFileSync(first.file, "utf8");
        const again = await forkStack({ stacksDir: dir, customer: "acme", from: "prod", region: "hel1" });
        expect(again.status).toBe("unchanged");
        expect(fs.readFileSync(first.file, "utf8")).toBe(text);
        await expect(forkStack({ stacksDir: dir, customer: "acme", from: "dev" })).rejects.toThrow(ConfigError);
        expect(fs.readFileSync(first.file, "utf8")).toBe(text);

        const cli = airlock(["--stacks-dir", dir, "fork", "acme", "--from", "dev"]);
        expect(cli.status).toBe(2);
        expect(cli.stderr.trim()).toBe(`${path.join(dir, "Pulumi.acme.yaml")}: exists and differs from a fresh fork of dev; refusing to overwrite it`);
    });

    it("never copies a secret value, and lists what is still needed", async () => {
        const dir = stacksCopy();
        const secretValue = ["v1", "AAABAKq0zPc2w8", "Zy2aVsecretLooking"].join(":");
        const doc = YAML.parse(fs.readFileSync(path.join(dir, "Pulumi.dev.yaml"), "utf8"));
        doc.config["hcloud:token"] = { secure: secretValue };
        doc.config["tailscale:oauthClientSecret"] = { secure: secretValue };
        doc.config["tailscale:tailnet"] = "dev-tailnet.example";
        // The agent's secrets, set with --path, nest inside airlock:gateway.
        doc.config["airlock:gateway"].agent.secrets = { ANTHROPIC_API_KEY: { secure: secretValue } };
        fs.writeFileSync(path.join(dir, "Pulumi.dev.yaml"), YAML.stringify(doc));

        const result = await forkStack({ stacksDir: dir, customer: "acme", from: "dev" });
        const written = fs.readFileSync(result.file, "utf8");
        expect(written).not.toContain(secretValue);
        expect(written).not.toMatch(/secure:|tailscale:|hcloud:/);
        expect(result.stillNeeded.join("\n")).toMatch(/--secret hcloud:token --stack acme +\(prompts for the value\)/);
        expect(result.stillNeeded.join("\n")).toMatch(/TAILSCALE_OAUTH_CLIENT_SECRET/);
        expect(result.stillNeeded).toContain("pulumi config set --secret --path 'airlock:gateway.agent.secrets.ANTHROPIC_API_KEY' --stack acme   (prompts for the value)");
        // A secret is never asked for as an argument, which the shell's history would keep.
        for (const line of result.stillNeeded.filter((l) => / --secret /.test(l))) expect(line).not.toMatch(/<value>/);
        expect(result.stillNeeded.join("\n")).toMatch(/airlock:breakGlassSshPublicKey/);
        expect(result.stillNeeded.join("\n")).not.toContain(secretValue);
    });

    it("keeps the source's flow sequences as written", async () => {
        const dir = stacksCopy();
        const source = fs.readFileSync(path.join(dir, "Pulumi.dev.yaml"), "utf8");
        const flow = source.split("\n").filter((line) => /: \[.+\]/.test(line) && !/authorizedKeys/.test(line));
        expect(flow.length).toBeGreaterThan(0);
        const written = fs.readFileSync((await forkStack({ stacksDir: dir, customer: "flow", from: "dev" })).file, "utf8").split("\n");
        for (const line of flow) expect(written, line).toContain(line);
    });

    it("warns that a fork managing its tailnet's policy replaces the whole policy file, and only then", async () => {
        const dir = stacksCopy();
        const warning = (from: string) => forkStack({ stacksDir: dir, customer: `w${from}`, from }).then((r) => r.stillNeeded.filter((l) => /replaces the tailnet's whole policy file/.test(l)));
        expect(await warning("dev")).toEqual([
            "before the first `pulumi up`: airlock:tailnet.manageAcl is true, so that `up` replaces the tailnet's whole policy file with this stack's: keep it only on a tailnet airlock alone uses, else set manageAcl: false in Pulumi.wdev.yaml and merge out/wdev/tailnet/policy.hujson into your policy",
        ]);
        expect(await warning("prod")).toEqual([]);
    });

    it("makes the derived names unique and drops what belongs to the source's gateway", async () => {
        const dir = stacksCopy();
        const source = YAML.parse(fs.readFileSync(path.join(dir, "Pulumi.dev.yaml"), "utf8"));
        source.config["airlock:tailnet"].sandboxTag = "tag:shared-sandbox";
        fs.writeFileSync(path.join(dir, "Pulumi.dev.yaml"), YAML.stringify(source));
        const result = await forkStack({ stacksDir: dir, customer: "acme", from: "dev" });
        const forked = YAML.parse(fs.readFileSync(result.file, "utf8")).config;
        expect(forked["airlock:prefix"]).toBe("airlock-acme");
        expect(forked["airlock:tailnet"].sandboxTag).toBeUndefined();
        expect(forked["airlock:agent"].authorizedKeys).toEqual([]);
        expect(result.changes).toContain('airlock:prefix: "airlock-dev" -> "airlock-acme"');
    });

    it.each(["dev", "prod"])("rewrites every comment that names the source stack (%s)", async (from) => {
        const dir = stacksCopy();
        expect(fs.readFileSync(path.join(dir, `Pulumi.${from}.yaml`), "utf8")).toMatch(new RegExp(`#.*\\b${from}\\b.*\\n[\\s\\S]*#.*\\b${from}\\b`));
        const result = await forkStack({ stacksDir: dir, customer: "acme", from });
        const comments = fs.readFileSync(result.file, "utf8").split("\n").filter((l) => l.trimStart().startsWith("#"));
        expect(comments[0]).toBe(`# acme: forked from ${from} by \`airlock fork\`. Secrets are not copied: set them`);
        expect(comments.slice(1).filter((c) => new RegExp(`\\b${from}\\b`).test(c))).toEqual([]);
        expect(comments.slice(1).some((c) => /\bacme\b/.test(c))).toBe(true);
    });

    it("refuses a fork that fails the gate, and writes nothing", async () => {
        const dir = stacksCopy();
        editedStack("dev", (c) => (c["airlock:sandbox"].extraInboundRules = [{ protocol: "tcp", port: "22", sourceIps: ["0.0.0.0/0"] }]), dir);
        const refused = forkStack({ stacksDir: dir, customer: "acme", from: "dev" });
        await expect(refused).rejects.toBeInstanceOf(ForkRefused);
        await refused.catch((err: ForkRefused) => expect(err.findings.map((f) => f.rule)).toEqual(["hcloud-firewall-no-public-inbound-tcp"]));
        expect(fs.existsSync(path.join(dir, "Pulumi.acme.yaml"))).toBe(false);
    });

    it.each([
        [["fork", "Acme", "--from", "dev"], /customer "Acme": expected 2-16 lower-case/],
        [["fork", "acme", "--from", "dev", "--region", "mars1"], /--region mars1: expected one of fsn1/],
        [["fork", "acme", "--from", "nope"], /Pulumi\.nope\.yaml: no such stack "nope"; the stacks in .* are dev, prod$/],
    ])("exits 2 on bad input: %j", (args, message) => {
        const result = airlock(["--stacks-dir", stacksCopy(), ...args]);
        expect(result.status).toBe(2);
        expect(result.stderr.trim()).toMatch(message);
    });
});

describe("credentials in the stack file", () => {
    const token = ["hc", "TESTTOKEN", "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdef"].join("_");
    const github = ["ghp", "0123456789abcdefghijABCDEFGHIJ0123456789"].join("_");

    it.each<[string, (c: Record<string, any>) => void, string]>([
        ["a provider token in clear", (c) => (c["hcloud:token"] = token), "hcloud:token is a credential in clear"],
        ["an OAuth secret in clear", (c) => (c["tailscale:oauthClientSecret"] = token), "tailscale:oauthClientSecret is a credential in clear"],
        ["a token pasted into a URL", (c) => (c["airlock:backup"].heartbeatUrl = `https://hc-ping.example/${github}`), "GitHub token (ghp_0123...) in clear at airlock:backup.heartbeatUrl"],
    ])("%s fails plan and the gate (not only doctor), without printing it", (_, edit, message) => {
        const dir = tempDir("clear");
        const file = editedStack("dev", edit, dir);
        for (const args of [["plan", "--stack", "dev", "--out", path.join(dir, "out")], ["gate", "--stack", "dev"], ["gate", "--all"]]) {
            const result = airlock(["--stacks-dir", dir, ...args]);
            expect(result.status, args.join(" ")).toBe(1);
            expect(result.stdout).toMatch(new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:\\d+: stack-secrets-encrypted: ${message.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`, "m"));
            expect(result.stdout + result.stderr).not.toContain(token);
            expect(result.stdout + result.stderr).not.toContain(github);
        }
    });

    it("passes them encrypted", () => {
        const dir = tempDir("secure");
        editedStack("dev", (c) => Object.assign(c, { "hcloud:token": { secure: "v1:AAAA" }, "tailscale:apiKey": { secure: "v1:BBBB" }, "tailscale:tailnet": "example.com" }), dir);
        expect(airlock(["--stacks-dir", dir, "gate", "--stack", "dev"]).status).toBe(0);
    });
});

describe("a stack's agent user against the policy's", () => {
    // The agent-user rules judge the policy's user; a stack deploying another would switch them off.
    it("a stack whose agent user is not the policy's fails plan and the gate, naming both", () => {
        const dir = tempDir("agent-user");
        const file = editedStack("dev", (c) => (c["airlock:agent"].user = "builder"), dir);
        for (const args of [["plan", "--stack", "dev", "--out", path.join(dir, "out")], ["gate", "--stack", "dev"]]) {
            const result = airlock(["--stacks-dir", dir, ...args]);
            expect(result.status, args.join(" ")).toBe(1);
            expect(result.stdout).toMatch(
                new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:\\d+: stack-agent-user-is-the-policys: airlock:agent\\.user is "builder"; the policy judges "agent"`, "m"),
            );
        }
    });

    it("the policy's own user, written out or left to the default, passes", () => {
        const dir = tempDir("agent-user-ok");
        editedStack("dev", (c) => (c["airlock:agent"].user = "agent"), dir);
        expect(airlock(["--stacks-dir", dir, "gate", "--stack", "dev"]).status).toBe(0);
    });
});

describe("airlock checklist", () => {
    async function checklistOf(file: string, stack = "dev") {
        const plan = await planStack(file, stack);
        return evaluateChecklist(plan, gatePlan(plan));
    }

    it("passes every automatic item of the shipped stacks, and marks the rest manual with an instruction", async () => {
        for (const stack of ["dev", "prod"]) {
            const items = await checklistOf(stackFile(stack), stack);
            expect(items.filter((i) => i.status === "fail")).toEqual([]);
            const manual = items.filter((i) => i.status === "manual");
            expect(manual.map((i) => i.id)).toContain("restore-drill-done");
            for (const i of manual) expect(i.detail.length).toBeGreaterThan(20);
            expect(new Set(items.map((i) => i.section))).toEqual(new Set(["architecture", "secrets", "containers", "networking", "automation boundaries", "recovery"]));
        }
    });

    it.each<[string, (c: Record<string, any>) => void, string]>([
        ["a public TCP rule", (c) => (c["airlock:sandbox"].extraInboundRules = [{ protocol: "tcp", port: "443", sourceIps: ["0.0.0.0/0"] }]), "no-public-inbound"],
        ["a docker socket in a service", (c) => (c["airlock:workloads"].services = [{ name: "x", image: "r/x:1", volumes: ["/var/run/docker.sock:/s"] }]), "containers-hardened"],
        ["a published port on every address", (c) => (c["airlock:workloads"].services = [{ name: "x", image: "r/x:1", ports: ["8080:80"] }]), "no-public-inbound"],
    ])("fails the matching item when the plan has %s", async (_, edit, id) => {
        const items = await checklistOf(editedStack("dev", edit));
        expect(items.filter((i) => i.status === "fail").map((i) => i.id)).toContain(id);
    });

    it("exits 1 on a failing item and prints a Markdown checklist", () => {
        const dir = stacksCopy();
        editedStack("dev", (c) => (c["airlock:gateway"].extraInboundRules = [{ protocol: "tcp", port: "22", sourceIps: ["0.0.0.0/0"] }]), dir);
        const result = airlock(["--stacks-dir", dir, "checklist", "--stack", "dev", "--markdown"]);
        expect(result.status).toBe(1);
        expect(result.stdout).toMatch(/^- \[ \] \*\*No inbound TCP from the internet.*\(fail\)/m);
        expect(result.stdout).toMatch(/^- \[x\] \*\*sshd listens on the tailnet address only/m);
    });
});

describe("airlock doctor", () => {
    const token = ["hc", "TESTTOKEN", "0123456789abcdefghijklmnopqrstuvwxyz0123456789abcdef"].join("_");

    it("says what is missing and how to fix it, and never prints a secret", () => {
        const emptyBin = tempDir("bin");
        fs.symlinkSync("/usr/bin/ssh", path.join(emptyBin, "ssh"));
        const result = airlock(["doctor", "--json"], { ...process.env, PATH: `${path.dirname(process.execPath)}:${emptyBin}`, HCLOUD_TOKEN: token, TAILSCALE_API_KEY: token });
        expect(result.status).toBe(1);
        expect(result.stdout + result.stderr).not.toContain(token);
        const report = JSON.parse(result.stdout);
        const byName = Object.fromEntries(report.checks.map((c: any) => [c.name, c]));
        expect(byName["pulumi CLI"]).toMatchObject({ ok: false, detail: "not found on PATH" });
        expect(byName["pulumi CLI"].fix).toMatch(/install the Pulumi CLI/);
        expect(byName["Hetzner Cloud token"]).toMatchObject({ ok: true, detail: "HCLOUD_TOKEN in the environment" });
        expect(byName["Tailscale tailnet"]).toMatchObject({ ok: false });
        expect(byName["Tailscale tailnet"].fix).toBe("export TAILSCALE_TAILNET=<tailnet name> (or pulumi config set tailscale:tailnet <tailnet name> --stack dev)");
        expect(byName["Hetzner Cloud token"].fix).not.toMatch(/<token>/);
    });

    it("passes with a logged-in pulumi, credentials as stack secrets and an ssh client", () => {
        const bin = tempDir("bin");
        fs.writeFileSync(path.join(bin, "pulumi"), `#!/bin/sh\ncase "$1" in version) echo v${MIN_PULUMI_CLI.join(".")} ;; whoami) echo ops ;; esac\n`, { mode: 0o755 });
        const stack = editedStack("dev", withOwnKeys);
        const doc = YAML.parse(fs.readFileSync(stack, "utf8"));
        Object.assign(doc.config, { "hcloud:token": { secure: "x" }, "tailscale:apiKey": { secure: "x" }, "tailscale:tailnet": "example.com" });
        fs.writeFileSync(stack, YAML.stringify(doc));
        const b2 = ["K005", "operatorTestKey0123456789abcdef"].join("");
        const checks = runDoctor({ PATH: `${bin}:/usr/bin:/bin`, B2_APPLICATION_KEY_ID: "0050000000000000000000001", B2_APPLICATION_KEY: b2 }, stack, "dev");
        expect(checks.filter((c) => c.required && !c.ok)).toEqual([]);
    });

    it("fails a Pulumi CLI older than the SDK the kit pins, and says which to install", () => {
        expect(MIN_PULUMI_CLI.join(".")).toBe(JSON.parse(fs.readFileSync(path.join(REPO, "package.json"), "utf8")).dependencies["@pulumi/pulumi"]);
        const check = (version: string) => {
            const bin = tempDir("bin");
            fs.writeFileSync(path.join(bin, "pulumi"), `#!/bin/sh\ncase "$1" in version) echo ${version} ;; whoami) echo ops ;; esac\n`, { mode: 0o755 });
            return runDoctor({ PATH: `${bin}:/usr/bin:/bin` }).find((c) => c.name === "pulumi CLI")!;
        };
        const [major, minor] = MIN_PULUMI_CLI;
        expect(check(`v${major}.${minor - 1}.9`)).toMatchObject({ ok: false, detail: `pulumi v${major}.${minor - 1}.9` });
        expect(check(`v${major}.${minor - 1}.9`).fix).toContain(`install the Pulumi CLI v${MIN_PULUMI_CLI.join(".")} or newer`);
        expect(check(`v${major}.${minor}.0`).ok).toBe(MIN_PULUMI_CLI[2] === 0);
        expect(check(`v${major}.${minor + 1}.0`).ok).toBe(true);
        expect(check("v4.0.0").ok).toBe(true);
        expect(check("dev-build").ok).toBe(false);
    });

    it("fails a stack that still holds the repository's placeholder keys, naming each key path", () => {
        const shipped = new Set(fs.readdirSync(STACKS_DIR).flatMap((f) => [...fs.readFileSync(path.join(STACKS_DIR, f), "utf8").matchAll(/ssh-ed25519 (\S+)/g)].map((m) => m[1])));
        expect([...shipped].filter((k) => !SHIPPED_EXAMPLE_KEYS.includes(k))).toEqual([]);
        const keysCheck = (file: string) => runDoctor({ PATH: "/usr/bin:/bin" }, file, "dev").find((c) => c.name === "ssh keys of your own")!;
        const shippedCheck = keysCheck(stackFile("dev"));
        expect(shippedCheck.ok).toBe(false);
        expect(shippedCheck.required).toBe(true);
        expect(shippedCheck.findings!.map((f) => f.split(" ")[0])).toEqual(["airlock:breakGlassSshPublicKey", "airlock:gateway.adminSshKeys[0]", "airlock:agent.authorizedKeys[0]"]);
        expect(shippedCheck.findings![2]).toMatch(/remove it/);
        // One placeholder left: only it is named.
        const oneLeft = keysCheck(editedStack("dev", (c) => { withOwnKeys(c); c["airlock:gateway"].adminSshKeys.push(fs.readFileSync(stackFile("dev"), "utf8").match(/ssh-ed25519 \S+ ops@example/)![0]); }));
        expect(oneLeft.findings).toEqual(["airlock:gateway.adminSshKeys[1] is the repository's placeholder: put your own public key there"]);
        expect(keysCheck(editedStack("dev", withOwnKeys))).toMatchObject({ ok: true });
    });

    it("fails a token committed in clear", () => {
        const stack = editedStack("dev", (c) => (c["hcloud:token"] = "in-clear"));
        const hcloud = runDoctor({ PATH: "/usr/bin:/bin" }, stack, "dev").find((c) => c.name === "Hetzner Cloud token")!;
        expect(hcloud.ok).toBe(false);
        expect(hcloud.detail).toMatch(/IN CLEAR/);
        expect(JSON.stringify(hcloud)).not.toContain("in-clear");
    });
});
