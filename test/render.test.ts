import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import * as YAML from "yaml";
import { readStackFile } from "../components/config/load";
import { hostFirewallRules } from "../components/host";
import { IO_URING_OFF_PATH, TAILNET_AUTH_KEY_PLACEHOLDER, withTailnetKey } from "../components/render/hosts";
import { renderTemplate } from "../components/render/templates";
import { fakeTailnetKey, SHIPPED_STACKS, stackFile, renderHosts, renderedFile, tempDir } from "./helpers/stacks";

describe("template rendering", () => {
    it("fails on a placeholder without a value", () => {
        expect(() => renderTemplate("scripts/tailnet-join", { hostname: "x" })).toThrow(/no value for \{\{tag\}\}/);
    });

    it("fails on a value without a placeholder", () => {
        expect(() => renderTemplate("scripts/tailnet-render", { stray: "x" })).toThrow(/no placeholder for stray/);
    });
});

describe.each(SHIPPED_STACKS)("rendered hosts of %s", (stack) => {
    const cfg = readStackFile(stackFile(stack));
    const hosts = [renderHosts(cfg).gateway, renderHosts(cfg).sandbox];

    it("leave no render-time placeholder behind", () => {
        for (const host of hosts) {
            for (const file of host.files) expect(file.content, file.path).not.toMatch(/\{\{\w+\}\}/);
            expect(host.cloudInit).not.toMatch(/\{\{\w+\}\}/);
        }
    });

    it("the sandbox installs Tailscale before its egress rules send DNS only to the gateway's resolver (twin finding: the package was never found)", () => {
        const runcmd = (YAML.parse(renderHosts(cfg).sandbox.cloudInit).runcmd as (string | string[])[]).map((line) => (Array.isArray(line) ? line.join(" ") : line));
        const install = runcmd.indexOf("/usr/local/sbin/airlock-install-tailscale");
        const egress = runcmd.findIndex((line) => /enable --now airlock-egress\.service/.test(line));
        expect(install).toBeGreaterThanOrEqual(0);
        expect(egress).toBeGreaterThan(install);
        // Nothing of the agent before the rules: its home, its Docker, the join come after them.
        for (const step of ["airlock-agent-home", "airlock-setup-rootless-docker", "airlock-tailnet-join"]) expect(runcmd.findIndex((line) => line.includes(step)), step).toBeGreaterThan(egress);
    });

    it("install no package's recommendations (apt-config reads the rendered file) and name AppArmor, which only came as one", () => {
        for (const host of hosts) {
            const file = path.join(tempDir("apt-conf"), "90airlock-no-recommends");
            fs.writeFileSync(file, renderedFile(host, "/etc/apt/apt.conf.d/90airlock-no-recommends"));
            const dumped = spawnSync("apt-config", ["-c", file, "dump", "APT::Install-Recommends"], { encoding: "utf8" });
            expect(dumped.status, dumped.stderr).toBe(0);
            expect(dumped.stdout.trim()).toBe('APT::Install-Recommends "false";');
            expect(YAML.parse(host.cloudInit).packages).toContain("apparmor");
        }
    });

    it("carry the join-key placeholder exactly once, and never enable Tailscale SSH", () => {
        for (const host of hosts) {
            expect(host.cloudInit.split(TAILNET_AUTH_KEY_PLACEHOLDER)).toHaveLength(2);
            const join = renderedFile(host, "/usr/local/sbin/airlock-tailnet-join");
            expect(join).toMatch(/tailscale up/);
            expect(join).not.toMatch(/--ssh\b/);
        }
    });

    it("turn io_uring off for every process (sysctl reads the rendered file), loaded right after the bundle on first boot", () => {
        for (const host of hosts) {
            // Its one setting (sysctl.d: every line not a comment or blank is one).
            const settings = renderedFile(host, IO_URING_OFF_PATH).split("\n").filter((line) => line.trim() !== "" && !/^\s*[#;]/.test(line));
            expect(settings).toEqual(["kernel.io_uring_disabled = 2"]);
            const runcmd = (YAML.parse(host.cloudInit).runcmd as (string | string[])[]).map((line) => (Array.isArray(line) ? line.join(" ") : line));
            const bundle = runcmd.indexOf("/usr/local/sbin/airlock-bundle-install || exit 1");
            expect(runcmd[bundle + 1]).toBe(`sysctl --quiet --load=${IO_URING_OFF_PATH} || exit 1`);
            expect(IO_URING_OFF_PATH).toMatch(/^\/etc\/sysctl\.d\/[^/]+\.conf$/);
        }
    });

    it("ship no file that pipes a download into a shell", () => {
        for (const host of hosts) {
            for (const file of host.files) expect(file.content, file.path).not.toMatch(/(curl|wget)[^\n|]*\|\s*(sudo\s+)?(ba|z)?sh\b/);
        }
    });
});

describe("withTailnetKey", () => {
    const cfg = readStackFile(stackFile("dev"));
    const cloudInit = renderHosts(cfg).sandbox.cloudInit;

    it("puts the key where the placeholder was", () => {
        const key = fakeTailnetKey();
        const userData = withTailnetKey(cloudInit, key);
        expect(userData).toContain(key);
        expect(userData).not.toContain(TAILNET_AUTH_KEY_PLACEHOLDER);
    });

    it("refuses a key that could break out of its YAML scalar", () => {
        expect(() => withTailnetKey(cloudInit, "abc\nruncmd: [evil]")).toThrow(/unexpected characters/);
    });
});

describe("host firewall rules", () => {
    it("open no inbound TCP from anywhere", () => {
        const inbound = hostFirewallRules().filter((r) => r.direction === "in");
        expect(inbound.some((r) => r.protocol === "tcp")).toBe(false);
        expect(inbound.map((r) => r.protocol).sort()).toEqual(["icmp", "udp"]);
    });
});
