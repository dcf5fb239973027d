import { execFileSync, spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import GithubSlugger from "github-slugger";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { AIRLOCK_BIN } from "./helpers/cli";
import { readStackFile } from "../components/config/load";
import { docFiles, readDoc } from "./helpers/docs";
import { editedStack, REPO, STACKS_DIR, tempDir } from "./helpers/stacks";

/**
 * The docs' test: README.md, every page of docs/ and the CHANGELOG. Every airlock
 * command in them is run, every sample output is what the command prints, every link
 * and anchor leads somewhere, and every page is reachable from the README, so the
 * docs cannot drift. A code block is either a shell block (each airlock command in it
 * runs; other tools are listed below as external), or carries a
 * `<!-- doc-test: NAME -->` marker naming how it is checked.
 */

interface Block {
    file: string;
    lang: string;
    text: string;
    line: number;
    marker?: string;
}

const FILES = docFiles();

function blocksOf(file: string): Block[] {
    const out: Block[] = [];
    const lines = readDoc(file).split("\n");
    for (let i = 0; i < lines.length; i++) {
        const open = /^```(\S*)$/.exec(lines[i]);
        if (!open) continue;
        const end = lines.indexOf("```", i + 1);
        const marker = /^<!-- doc-test: ([\w-]+) -->$/.exec(lines[i - 1] ?? "")?.[1];
        out.push({ file, lang: open[1], text: lines.slice(i + 1, end).join("\n"), line: i + 1, marker });
        i = end;
    }
    return out;
}

/** A page's prose: its lines outside code blocks, with inline code blanked (a link shown as code is not a link). */
function prose(file: string): { line: number; text: string }[] {
    let inCode = false;
    return readDoc(file)
        .split("\n")
        .flatMap((text, i) => {
            if (/^```/.test(text)) {
                inCode = !inCode;
                return [];
            }
            return inCode ? [] : [{ line: i + 1, text: text.replace(/`[^`]*`/g, "``") }];
        });
}

/** The anchors GitHub gives a page's headings. */
function anchors(file: string): Set<string> {
    const slugger = new GithubSlugger();
    return new Set(prose(file).flatMap(({ line }) => {
        const heading = /^#{1,6} (.*)$/.exec(readDoc(file).split("\n")[line - 1]);
        return heading ? [slugger.slug(heading[1])] : [];
    }));
}

/** Relative links of a page: [text](target) and their line, outside code. */
function links(file: string): { line: number; target: string }[] {
    return prose(file).flatMap(({ line, text }) => [...text.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => ({ line, target: m[1] })).filter((l) => !/^[a-z]+:/.test(l.target)));
}

/** Commands of other tools, shown for the reader to run against real clouds or hosts. */
const EXTERNAL = /^(pulumi |ssh |ssh-keygen |b2 |git add |sudo test\/run\.sh|export |creds=|for |done$|GITHUB_TOKEN=|#)/;
const AIRLOCK = /^(npm run -s airlock -- |npm run plan|npx airlock |airlock )/;
/**
 * Commands that need a deployed gateway: `airlock secrets` (run with stand-ins in
 * secrets-cli.test.ts, against the real sshd rig in e2e-secrets.test.ts, which also
 * compare the samples marked secrets-push and secrets-status) and the gateway's own
 * tools behind sudo (github-token.test.ts runs the approval). `airlock twin` boots
 * QEMU guests as root: e2e-twin.test.ts runs every verb.
 */
const DEPLOYED = /(airlock -- secrets |^sudo airlock-|airlock -- twin )/;

/**
 * A workspace shaped like the repository root for the commands: the stacks, the
 * test fixtures the README's samples read, an npm script and an `airlock` on PATH
 * for the bin. Nothing a command writes lands in the repository.
 */
function workspace(): string {
    const dir = tempDir("readme");
    fs.copyFileSync(path.join(REPO, "Pulumi.yaml"), path.join(dir, "Pulumi.yaml"));
    fs.cpSync(STACKS_DIR, path.join(dir, "stacks"), { recursive: true });
    fs.cpSync(path.join(REPO, "test/fixtures"), path.join(dir, "test/fixtures"), { recursive: true });
    fs.writeFileSync(path.join(dir, "package.json"), JSON.stringify({ name: "readme-workspace", private: true, scripts: { airlock: `node ${AIRLOCK_BIN}`, plan: `node ${AIRLOCK_BIN} plan --stack dev` } }));
    fs.mkdirSync(path.join(dir, ".bin"));
    fs.writeFileSync(path.join(dir, ".bin", "airlock"), `#!/bin/sh\nexec ${process.execPath} ${AIRLOCK_BIN} "$@"\n`, { mode: 0o755 });
    return dir;
}

function sh(command: string, cwd: string) {
    const env = { ...process.env, npm_config_loglevel: "error", PATH: `${path.join(cwd, ".bin")}:${process.env.PATH}` };
    const result = spawnSync("bash", ["-o", "pipefail", "-c", command], { cwd, encoding: "utf8", env, timeout: 300_000 });
    return { status: result.status, stdout: result.stdout, stderr: result.stderr.split("\n").filter((l) => !/^npm warn/.test(l)).join("\n") };
}

/** `$ command` lines and the output the README shows after each. */
function transcript(text: string): { command: string; output: string }[] {
    const steps: { command: string; output: string[] }[] = [];
    for (const line of text.split("\n")) {
        if (line.startsWith("$ ")) steps.push({ command: line.slice(2), output: [] });
        else steps[steps.length - 1].output.push(line);
    }
    return steps.map((s) => ({ command: s.command, output: s.output.length > 0 ? `${s.output.join("\n")}\n` : "" }));
}

const all = FILES.flatMap(blocksOf);
const at = (b: Block) => `${b.file}:${b.line}`;

describe("the docs", () => {
    it("every code block is a shell block or names its doc test", () => {
        expect(all.length).toBeGreaterThan(30);
        for (const b of all) expect(b.lang === "sh" || b.marker !== undefined, `${at(b)}: a \`\`\`${b.lang} block without a doc-test marker`).toBe(true);
    });

    it("the README is a front door: under 2,000 words, every page of docs/ reachable from it", () => {
        const words = readDoc("README.md").split(/\s+/).filter((w) => /\w/.test(w)).length;
        expect(words, "README.md's words").toBeLessThan(2000);
        const reached = new Set(["README.md"]);
        const queue = ["README.md"];
        while (queue.length > 0) {
            const file = queue.shift()!;
            for (const { target } of links(file)) {
                const page = path.normalize(path.join(path.dirname(file), target.split("#")[0]));
                if (page.endsWith(".md") && !reached.has(page) && fs.existsSync(path.join(REPO, page))) {
                    reached.add(page);
                    queue.push(page);
                }
            }
        }
        for (const file of FILES) expect(reached.has(file), `${file} is linked from no page the README leads to`).toBe(true);
    });

    it.each(FILES)("every link and anchor of %s leads somewhere", (file) => {
        const broken: string[] = [];
        for (const { line, target } of links(file)) {
            const [to, anchor] = target.split("#");
            const resolved = to === "" ? file : path.normalize(path.join(path.dirname(file), to));
            if (!fs.existsSync(path.join(REPO, resolved))) broken.push(`${file}:${line}: ${target} does not exist`);
            else if (anchor !== undefined && resolved.endsWith(".md") && !anchors(resolved).has(anchor)) broken.push(`${file}:${line}: ${resolved} has no heading #${anchor}`);
        }
        expect(broken).toEqual([]);
        expect(readDoc(file), `${file} points outside the repository`).not.toMatch(/\.\.\/shared|DESIGN\.md/);
    });

    it.each(FILES.filter((f) => f.startsWith("docs/")))("%s says what the reader will do first and where to go next last", (file) => {
        const lines = readDoc(file).trim().split("\n");
        expect(lines[0], file).toMatch(/^# /);
        expect(lines.at(-1), `${file} ends without a Next: line`).toMatch(/^Next: .*\]\(/);
    });

    it("the reference pages state current behaviour: no development history", () => {
        const history = FILES.filter((f) => f !== "CHANGELOG.md").flatMap((file) =>
            prose(file).flatMap(({ line, text }) => (/seen first|\(before: |\bred teams? \d|\bissue \d+/i.test(text) ? [`${file}:${line}: ${text.trim().slice(0, 100)}`] : [])),
        );
        expect(history, "history belongs in CHANGELOG.md").toEqual([]);
    });

    it.each(all.filter((b) => b.marker === "topology").map((b) => [at(b), b] as const))("the topology at %s draws the plan's ports, and only those", (_, block) => {
        const cwd = workspace();
        const hosts = JSON.parse(sh("npm run -s airlock -- plan --stack dev --json", cwd).stdout).hosts as { role: string; internetInbound: string[]; tailnetInbound: string[] }[];
        // Ports as proto:port, however written: udp/41641, tcp:22, 53/udp,tcp.
        const ports = (text: string) => [
            ...[...text.matchAll(/\b(tcp|udp)[:/](\d+)/g)].map((m) => `${m[1]}:${m[2]}`),
            ...[...text.matchAll(/\b(\d+)\/((?:tcp|udp)(?:,(?:tcp|udp))*)/g)].flatMap((m) => m[2].split(",").map((p) => `${p}:${m[1]}`)),
        ];
        const drawn = new Set(ports(block.text));
        const sandboxAdmits = ports(hosts.find((h) => h.role === "sandbox")!.tailnetInbound.join(" "));
        // The gateway's tailnet ports for the sandbox (not the operators' ssh).
        const gatewayAdmits = ports(hosts.find((h) => h.role === "gateway")!.tailnetInbound.filter((r) => / from tag:/.test(r)).join(" "));
        const internet = hosts.flatMap((h) => ports(h.internetInbound.join(" ")));
        for (const port of [...sandboxAdmits, ...gatewayAdmits, ...internet]) expect(drawn, `the plan admits ${port}; the diagram does not draw it`).toContain(port);
        for (const port of drawn) expect([...sandboxAdmits, ...gatewayAdmits, ...internet], `the diagram draws ${port}, which the plan does not admit`).toContain(port);
    });

    it("the plan's files the README points at exist", () => {
        const cwd = workspace();
        expect(sh("npm run -s airlock -- plan --stack dev", cwd).status).toBe(0);
        const named = [...readDoc("README.md").matchAll(/`(out\/dev\/[^`*]+)`/g)].map((m) => m[1].replace(/\/$/, ""));
        expect(named.length).toBeGreaterThan(1);
        for (const file of named) expect(fs.existsSync(path.join(cwd, file)), file).toBe(true);
    });

    it.each(all.filter((b) => b.lang === "sh").map((b) => [at(b), b] as const))("the shell block at %s: airlock commands run, the rest are other tools", (_, block) => {
        const cwd = workspace();
        const lines = block.text.split("\n").filter((l) => l.trim() !== "" && !/^\s/.test(l));
        for (const line of lines) {
            const command = line.replace(/\s+#.*$/, "");
            if (command === "npm ci && npm run plan") continue; // run from a clean clone below
            if (DEPLOYED.test(command)) continue;
            if (!AIRLOCK.test(command)) {
                expect(command, `${at(block)}: neither an airlock command nor a known external tool`).toMatch(EXTERNAL);
                // Every `up` the docs show is gated: copied as it stands, it runs the pack.
                if (/^pulumi (up|preview)\b/.test(command)) expect(command, `${at(block)}: ${command} without the policy pack`).toMatch(/--policy-pack policies --policy-pack-config policies\/config\.json/);
                continue;
            }
            const result = sh(command, cwd);
            expect(result.stderr, command).not.toMatch(/internal error|Error:/);
            // doctor reports what this machine lacks (exit 1); every other command succeeds here.
            expect(result.status, `${command}\n${result.stdout}${result.stderr}`).toBe(/ doctor /.test(command) ? 1 : 0);
            if (/\| jq /.test(command)) expect(result.stdout).toMatch(/"hostname": "airlock-prod-(gateway|sandbox)"/);
        }
    });

    it("npm ci && npm run plan works from a clean clone, offline", () => {
        const clone = tempDir("clean-clone");
        const files = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], { cwd: REPO, encoding: "utf8" }).split("\0").filter(Boolean);
        for (const file of files.filter((f) => fs.existsSync(path.join(REPO, f)))) fs.cpSync(path.join(REPO, file), path.join(clone, file));
        const result = sh("npm ci --offline --no-audit --no-fund >/dev/null && npm run plan", clone);
        expect(result.status, result.stdout + result.stderr).toBe(0);
        expect(result.stdout).toMatch(/^gate: clean$/m);
        expect(fs.existsSync(path.join(clone, "out/dev/.airlock-plan"))).toBe(true);
    }, 600_000);

    it.each(all.filter((b) => b.marker === "json-shape").map((b) => [at(b), b] as const))("the JSON shown at %s has the keys the command prints", (_, block) => {
        const [command, ...json] = block.text.split("\n");
        const shown = JSON.parse(json.join("\n"));
        const printed = JSON.parse(sh(command.replace(/^\$ /, ""), workspace()).stdout);
        // The same keys at the top, and in the first element of every list of objects shown.
        const same = (a: unknown, b: unknown, where: string) => {
            if (Array.isArray(a)) {
                expect(Array.isArray(b), `${where} is a list`).toBe(true);
                if (a.length > 0 && typeof a[0] === "object" && (b as unknown[]).length > 0) same(a[0], (b as unknown[])[0], `${where}[0]`);
                return;
            }
            if (a === null || typeof a !== "object") return;
            expect(Object.keys(b as object).sort(), where).toEqual(Object.keys(a).sort());
            for (const [k, v] of Object.entries(a)) same(v, (b as Record<string, unknown>)[k], `${where}.${k}`);
        };
        same(shown, printed, command);
    });

    it.each(all.filter((b) => b.lang === "console" && b.marker !== "json-shape").map((b) => [`${b.marker} (${at(b)})`, b] as const))("sample output %s is what the commands print", (_, block) => {
        const marker = block.marker;
        const cwd = workspace();
        if (marker === "bad-stack") {
            const file = path.join(cwd, "stacks/Pulumi.dev.yaml");
            const doc = YAML.parseDocument(fs.readFileSync(file, "utf8"));
            doc.setIn(["config", "airlock:sandbox", "workspaceVolumeGb"], "ten");
            doc.setIn(["config", "airlock:agent", "envAllowlist"], ["GITHUB_TOKEN", "LD_PRELOAD"]);
            fs.writeFileSync(file, doc.toString());
        }
        for (const step of transcript(block.text)) {
            const cat = /^cat (\S+)$/.exec(step.command);
            // A file the README shows with `cat` is the file the next commands read.
            if (cat) fs.writeFileSync(path.join(cwd, cat[1]), step.output);
            const result = sh(step.command, cwd);
            expect(result.stdout + result.stderr, step.command).toBe(step.output);
        }
    });

    it.each(all.filter((b) => b.marker === "plan-layout").map((b) => [at(b), b] as const))("the files plan writes are the ones listed at %s", (_, block) => {
        const cwd = workspace();
        expect(sh("npm run -s airlock -- plan --stack dev", cwd).status).toBe(0);
        for (const line of block.text.split("\n")) {
            const listed = line.split(/\s+/)[0].replace(/\/\.\.\.$/, "");
            expect(fs.existsSync(path.join(cwd, listed)), listed).toBe(true);
        }
    });

    it("the record's format is the one the gateway's records have", () => {
        const blocks = all.filter((b) => b.marker === "record-format");
        expect(blocks.length).toBeGreaterThan(1);
        const fixture = fs.readdirSync(path.join(REPO, "test/fixtures/record")).find((f) => f.endsWith(".jsonl"))!;
        const real = fs.readFileSync(path.join(REPO, "test/fixtures/record", fixture), "utf8").trim().split("\n").map((l) => JSON.parse(l));
        for (const line of blocks.flatMap((b) => b.text.split("\n"))) {
            const shown = JSON.parse(line);
            const same = real.find((r) => r.kind === shown.kind);
            expect(same, shown.kind).toBeDefined();
            expect(Object.keys(shown)).toEqual(Object.keys(same));
        }
    });

    it.each(["agent-config", "github-config"])("the %s snippet is valid stack config", (marker) => {
        const snippet = YAML.parse(all.find((b) => b.marker === marker)!.text) as Record<string, Record<string, unknown>>;
        const file = editedStack("dev", (c) => {
            c["airlock:gateway"] = { ...c["airlock:gateway"], ...snippet["airlock:gateway"] };
            if (marker === "github-config") c["airlock:gateway"].agent ??= { image: "registry.example/agent:1" };
        });
        const cfg = readStackFile(file);
        expect(marker === "agent-config" ? cfg.gateway.agent?.memoryDb.enabled : cfg.gateway.github?.maxPermissions).toBeTruthy();
    });

    it("every pre-commit snippet is a whole .pre-commit-config.yaml using the hook .pre-commit-hooks.yaml defines", () => {
        const snippets = all.filter((b) => b.marker === "pre-commit");
        expect(snippets.length).toBeGreaterThanOrEqual(2);
        const hooks = YAML.parse(fs.readFileSync(path.join(REPO, ".pre-commit-hooks.yaml"), "utf8"));
        for (const block of snippets) {
            const config = YAML.parse(block.text);
            expect(Object.keys(config)).toEqual(["repos"]);
            expect(config.repos[0].hooks).toEqual([{ id: hooks[0].id }]);
            expect(Object.keys(config.repos[0])).toEqual(["repo", "rev", "hooks"]);
        }
    });

    it("the layout lists what is in the repository", () => {
        const block = all.find((b) => b.marker === "layout")!;
        let parent = "";
        for (const line of block.text.split("\n")) {
            const m = /^(\s*)(\S+)\s/.exec(line);
            if (!m || m[1].length > 2 || /^[a-z]/.test(m[2]) === false && !m[2].startsWith(".") && !/^[A-Z]/.test(m[2])) continue;
            const entry = m[1].length === 0 ? m[2] : path.join(parent, m[2]);
            if (m[1].length === 0) parent = m[2];
            expect(fs.existsSync(path.join(REPO, entry)), entry).toBe(true);
        }
    });
});
