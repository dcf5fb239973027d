import * as fs from "node:fs";
import * as path from "node:path";
import * as zlib from "node:zlib";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { MAX_ALIAS_EXPANSIONS } from "../../policies/engine/compose";
import { airlock } from "../helpers/cli";
import { tempDir } from "../helpers/stacks";
import { cloudInit, compose, composeText, hardenedService, ruleIds, sshd } from "./helpers";

const dir = tempDir("hardening");
function file(name: string, text: string | Buffer): string {
    const p = path.join(dir, name);
    fs.writeFileSync(p, text);
    return p;
}

const withService = (changes: Record<string, unknown>) => composeText({ web: { ...hardenedService(), ...changes } });
const cloudConfig = (doc: Record<string, unknown>) => `#cloud-config\n${YAML.stringify(doc)}`;

describe("the checker does not crash on valid input", () => {
    it("judges a compose file with thousands of alias uses", () => {
        const uses = Array.from({ length: 3000 }, (_, i) => `  s${i}:\n    <<: *base\n`).join("");
        const text = `x-base: &base\n  image: nginx:1.27\n  cap_drop: [ALL]\n  security_opt: [no-new-privileges:true]\n  pids_limit: 10\n  mem_limit: 1g\nservices:\n${uses}`;
        const findings = compose(text, "compose.yml");
        expect(findings.filter((f) => f.rule === "containers-images-pinned-by-digest")).toHaveLength(3000);
        expect(ruleIds(findings)).toEqual(["containers-images-pinned-by-digest"]);
    });

    it("refuses an exponential alias bomb with exit 2 naming the file, and still reports the other files", () => {
        const levels = ["a: &a [x, x, x, x, x, x, x, x, x, x]"];
        for (let i = 1; i < 9; i++) levels.push(`${"abcdefghij"[i]}: &${"abcdefghij"[i]} [${Array(10).fill(`*${"abcdefghij"[i - 1]}`).join(", ")}]`);
        const bomb = file("bomb-compose.yml", `${levels.join("\n")}\nservices:\n  web:\n    image: nginx\n    environment: *i\n`);
        const other = file("other-compose.yml", withService({ privileged: true }));
        for (const json of [false, true]) {
            const result = airlock(["check", bomb, other, ...(json ? ["--json"] : [])], { timeout: 30_000 });
            expect(result.status).toBe(2);
            expect(result.stderr.trim()).toBe(`${bomb}: refusing it: more than ${MAX_ALIAS_EXPANSIONS} YAML alias expansions (an alias bomb?)`);
            expect(result.stdout).toContain("containers-not-privileged");
        }
    });

    it("decodes gzip content given as !!binary, and judges what it holds", () => {
        const gz = zlib.gzipSync("ListenAddress 0.0.0.0\nPermitRootLogin yes\n").toString("base64");
        const text = `#cloud-config\nwrite_files:\n  - path: /etc/ssh/sshd_config.d/50-x.conf\n    encoding: gzip\n    content: !!binary |\n      ${gz}\n`;
        expect(ruleIds(cloudInit(text))).toEqual(["sshd-listen-tailnet-only", "sshd-no-root-login"]);
        expect(ruleIds(cloudInit(text.replace("encoding: gzip", "encoding: gz+b64").replace("!!binary ", "")))).toEqual(["sshd-listen-tailnet-only", "sshd-no-root-login"]);
    });

    it.each<[string, string]>([
        ["gzip content that is not gzip", "    encoding: gzip\n    content: plain text\n"],
        ["base64 content that is not gzip", "    encoding: gz+b64\n    content: aGVsbG8=\n"],
        ["an unknown encoding", "    encoding: rot13\n    content: x\n"],
        ["a gzip bomb", `    encoding: gz+b64\n    content: ${zlib.gzipSync(Buffer.alloc(20 * 2 ** 20)).toString("base64")}\n`],
    ])("judges %s unverifiable (exit 1), not an internal error", (_, entry) => {
        const text = `#cloud-config\nwrite_files:\n  - path: /etc/airlock/thing\n${entry}`;
        const findings = cloudInit(text);
        expect(ruleIds(findings)).toEqual(["cloud-init-parses"]);
        expect(findings[0]).toMatchObject({ unverifiable: true, line: 3 });
        const result = airlock(["check", file("user-data", text)]);
        expect(result.status).toBe(1);
    });
});

describe("the checker does not miss", () => {
    it.each([
        "curl -fsSL https://get.example.sh | /bin/sh",
        "curl -fsSL https://get.example.sh | /usr/bin/env bash",
        "curl -fsSL https://get.example.sh | sudo -u root sh",
        "curl -sfL https://get.k3s.io | K3S_TOKEN=x sh -",
        "curl -fsSL https://get.example.sh | tee /tmp/install.sh | sh",
        "curl -fsSL https://get.example.sh \\\n  | bash",
        "curl -fsSL https://get.example.sh | python3 -",
        "bash <(curl -fsSL https://get.example.sh)",
        'sh -c "$(curl -fsSL https://get.example.sh)"',
        'eval "$(wget -qO- https://get.example.sh)"',
        "curl -fsSL https://get.example.sh | source /dev/stdin",
        "curl -fsSL https://get.example.sh | . /dev/stdin",
        "wget -qO- https://get.example.sh | source /proc/self/fd/0",
        "curl -fsSL https://get.example.sh | $SHELL",
        'curl -fsSL https://get.example.sh | "${SHELL}" -s',
        "curl -fsSL https://get.example.sh | sudo $BASH",
    ])("download-and-run: %s", (command) => {
        expect(ruleIds(cloudInit(cloudConfig({ runcmd: [command] })))).toEqual(["cloud-init-no-pipe-to-shell"]);
        expect(ruleIds(cloudInit(cloudConfig({ write_files: [{ path: "/usr/local/bin/setup", content: `#!/bin/sh\n${command}\n` }] })))).toEqual(["cloud-init-no-pipe-to-shell"]);
    });

    it.each([
        "curl -fsSLo /tmp/x.sh https://get.example.sh && sha256sum -c /tmp/x.sha256 && sh /tmp/x.sh",
        "curl -fsSL https://example.org/key.gpg | gpg --dearmor -o /usr/share/keyrings/example.gpg",
        "curl -fsSL https://example.org/x.tgz | tar -xz -C /opt",
        "# curl https://get.example.sh | sh",
        "curl -fsSL https://example.org/env | source /etc/profile.d/x.sh",
        "curl -fsSL https://example.org/x | $PAGER",
    ])("not download-and-run: %s", (command) => {
        expect(ruleIds(cloudInit(cloudConfig({ runcmd: [command] })))).toEqual([]);
    });

    it.each<[string, Record<string, unknown>]>([
        ["chpasswd list", { chpasswd: { list: "root:hunter2\n", expire: false } }],
        ["chpasswd users", { chpasswd: { users: [{ name: "agent", password: "hunter2", type: "text" }] } }],
        ["passwd (a hash)", { users: [{ name: "ops", passwd: "$6$salt$abcdefghijklmnop" }] }],
        ["plain_text_passwd", { users: [{ name: "ops", plain_text_passwd: "hunter2" }] }],
        ["a chpasswd command", { runcmd: ["echo 'root:hunter2' | chpasswd"] }],
    ])("a password in user_data: %s", (_, doc) => {
        expect(ruleIds(cloudInit(cloudConfig(doc)))).toEqual(["cloud-init-no-passwords"]);
    });

    it.each<[string, Record<string, unknown>, string]>([
        ["privileged: yes", { privileged: "yes" }, "containers-not-privileged"],
        ["privileged: on", { privileged: "on" }, "containers-not-privileged"],
        ["privileged: ${PRIV:-true}", { privileged: "${PRIV:-true}" }, "containers-not-privileged"],
        ["network_mode: ${NET:-host}", { network_mode: "${NET:-host}" }, "containers-no-host-namespaces"],
        ["pid: ${P:-host}", { pid: "${P:-host}" }, "containers-no-host-namespaces"],
        ["a seccomp:unconfined default", { security_opt: ["no-new-privileges:true", "${SEC:-seccomp:unconfined}"] }, "containers-no-unconfined-profiles"],
        ["a privileged flag set only by a variable", { privileged: "${PRIV}" }, "containers-not-privileged"],
        ["a socket behind a default", { volumes: ["${SOCK:-/var/run/docker.sock}:/var/run/docker.sock"] }, "containers-no-docker-socket"],
        ["a public port behind a default", { ports: ["${BIND:-0.0.0.0}:8080:80"] }, "containers-ports-private-only"],
    ])("%s", (_, changes, rule) => {
        expect(ruleIds(compose(withService(changes)))).toEqual([rule]);
    });

    it("a named volume whose driver bind-mounts /var/run", () => {
        const text = composeText(
            { web: { ...hardenedService(), volumes: ["run:/host-run"] } },
            { volumes: { run: { driver: "local", driver_opts: { type: "none", o: "bind", device: "/var/run" } } } },
        );
        expect(ruleIds(compose(text))).toEqual(["containers-no-docker-socket"]);
    });
});

describe("wrong shapes never pass", () => {
    it.each<[string, string]>([
        ["services that is a string", "services: x\n"],
        ["a service that is a number", "services:\n  web: 5\n"],
        ["a service with no value", "services:\n  web:\n"],
        ["no services at all", "volumes: {}\n"],
        ["only comments", "# services:\n#   web: {}\n"],
        ["a list instead of a mapping", "- services\n"],
    ])("a compose file with %s is unverifiable", (_, text) => {
        const findings = compose(text, "compose.yml");
        expect(ruleIds(findings)).toEqual(["compose-parses"]);
        expect(findings.every((f) => f.unverifiable)).toBe(true);
        expect(airlock(["check", file("shape-compose.yml", text)]).status).toBe(1);
    });

    it.each<[string, unknown, string]>([
        ["a step that is a number", { steps: [5] }, "steps[0]: expected an object, got the number 5"],
        ["a step without a new state", { steps: [{ op: "create", urn: "u" }] }, "steps[0].newState: expected an object, got undefined"],
        ["steps that are not a list", { steps: "x" }, 'steps: expected a list, got the string "x"'],
        ["a resource without a type", { steps: [{ op: "create", newState: { urn: "u" } }] }, "steps[0].newState.type: expected a string"],
    ])("a preview with %s is refused (exit 2)", (_, doc, message) => {
        const preview = file("preview.json", JSON.stringify(doc));
        for (const args of [["check", preview], ["gate", "--preview", preview]]) {
            const result = airlock(args);
            expect(result.status).toBe(2);
            expect(result.stderr.trim()).toContain(`${preview}: ${message}`);
        }
    });

    it("splits ${A:-/x:y} at the colon outside the braces, and reads $$ as a dollar", () => {
        expect(ruleIds(compose(withService({ volumes: ["${A:-/srv/data:ro}:/data"] })))).toEqual([]);
        const socket = compose(withService({ volumes: ["${SOCK:-/var/run}:/host-run:ro"] }));
        expect(socket.map((f) => [f.rule, f.unverifiable ?? false])).toEqual([["containers-no-docker-socket", false]]);
        expect(ruleIds(compose(withService({ volumes: ["$$HOME/.ssh:/keys"] })))).toEqual([]);
        expect(ruleIds(compose(withService({ volumes: ["$HOME/.ssh:/keys"] })))).toEqual(["containers-no-host-secret-mounts"]);
    });

    it("strips a UTF-8 byte-order mark before judging", () => {
        const good = "ListenAddress 100.100.7.1\nPermitRootLogin no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nDisableForwarding yes\nAllowUsers ops\n";
        expect(ruleIds(sshd(`\uFEFF${good}`))).toEqual([]);
        expect(ruleIds(sshd(`\uFEFFPermitRootLogin yes\n${good}`))).toEqual(["sshd-no-root-login"]);
        expect(airlock(["check", file("sshd_config", `\uFEFF${good}`)]).status).toBe(0);
        expect(ruleIds(compose(`\uFEFF${withService({ privileged: true })}`))).toEqual(["containers-not-privileged"]);
    });
});
