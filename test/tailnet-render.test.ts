import * as fs from "node:fs";
import * as path from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import * as YAML from "yaml";
import { COMPOSE_TEMPLATE_PATH } from "../components/render/hosts";
import { AGENT_SERVICE, GATEWAY_AGENT_PATHS } from "../components/workloads/compose";
import { renderedFile, renderHosts, stackFile, tempDir } from "./helpers/stacks";
import { run, TEST_TAILNET_DOMAIN, TEST_TAILNET_IPV4, toolsAvailable } from "./helpers/tools";

/**
 * The rendered airlock-tailnet-render against a `tailscale` that answers as the real CLI
 * does (`ip -4`, `status --json` with its MagicDNSSuffix) and an `ip` that lists the
 * address as local. The stand-in tailscaled's CLI drives it in test/twin-tailscale.test.ts.
 */
describe.runIf(toolsAvailable("airlock-tailnet-render", ["jq", "bash"]))("airlock-tailnet-render", () => {
    let dir: string;
    let script: string;
    const gateway = renderHosts(readStackFile(stackFile("dev"))).gateway;

    beforeAll(() => {
        dir = tempDir("tailnet-render");
        script = path.join(dir, "airlock-tailnet-render");
        fs.writeFileSync(script, renderedFile(gateway, "/usr/local/sbin/airlock-tailnet-render"), { mode: 0o755 });
        fs.mkdirSync(path.join(dir, "bin"));
        fs.writeFileSync(path.join(dir, "bin", "ip"), `#!/bin/sh\necho "3: tailscale0    inet ${TEST_TAILNET_IPV4}/32 scope global tailscale0"\n`, { mode: 0o755 });
    });

    /** Renders `template` with a tailscale whose status names `suffix` as the tailnet's domain. */
    function render(template: string, suffix: unknown) {
        const bin = fs.mkdtempSync(path.join(dir, "case-"));
        const status = JSON.stringify({ BackendState: "Running", MagicDNSSuffix: suffix });
        fs.writeFileSync(path.join(bin, "status.json"), status);
        fs.writeFileSync(
            path.join(bin, "tailscale"),
            `#!/bin/sh\ncase "$1" in\nip) echo ${TEST_TAILNET_IPV4} ;;\nstatus) cat ${path.join(bin, "status.json")} ;;\n*) exit 1 ;;\nesac\n`,
            { mode: 0o755 },
        );
        const input = path.join(bin, "template.in");
        const output = path.join(bin, "rendered");
        fs.writeFileSync(input, template);
        const result = run(script, [input, output], { env: { PATH: `${bin}:${path.join(dir, "bin")}:/usr/bin:/bin`, AIRLOCK_TAILNET_WAIT_SECONDS: "2" } });
        return { ...result, written: fs.existsSync(output) ? fs.readFileSync(output, "utf8") : undefined, leftovers: fs.readdirSync(bin).filter((f) => f.startsWith("rendered")) };
    }

    it("fills the tailnet's MagicDNS domain where the runtime's ssh config asks for it, and nowhere else", () => {
        const sshConfig = renderedFile(gateway, `${GATEWAY_AGENT_PATHS.sshConfig}.in`);
        expect(sshConfig).toContain("@TAILNET_DOMAIN@");
        const result = render(sshConfig, TEST_TAILNET_DOMAIN);
        expect(result.stderr).toBe("");
        expect(result.status).toBe(0);
        expect(result.written).not.toMatch(/@[A-Z_]+@/);
        expect(result.written).toMatch(new RegExp(`^\tHostName airlock-dev-sandbox\.${TEST_TAILNET_DOMAIN.replaceAll(".", "\\.")}$`, "m"));
        // The pin stays on the short name the stack's known_hosts line carries.
        expect(result.written).toMatch(/^\tHostKeyAlias airlock-dev-sandbox$/m);
        expect(result.stdout).toContain(`(domain ${TEST_TAILNET_DOMAIN})`);
        // The runtime's container gets no search domain: a short name is never completed by one.
        const compose = renderedFile(gateway, COMPOSE_TEMPLATE_PATH);
        expect(compose).not.toContain("@TAILNET_DOMAIN@");
        expect(YAML.parse(compose).services[AGENT_SERVICE].dns_search).toBeUndefined();
    });

    it.each([
        ["no domain (a status without MagicDNSSuffix)", null],
        ["an empty domain", ""],
        ["a domain with a slash (sed's delimiter)", "tail7e57.ts.net/g;s/x"],
        ["a domain with a newline (a second search line)", "tail7e57.ts.net\nnameserver 192.0.2.1"],
        ["a label longer than 63 characters", `${"a".repeat(64)}.ts.net`],
        ["upper case or an underscore", "Tail_7e57.ts.net"],
    ])("refuses %s and writes nothing", (_, suffix) => {
        const result = render("search @TAILNET_DOMAIN@\n", suffix);
        expect(result.status).toBe(1);
        expect(result.stderr).toMatch(/^airlock-tailnet-render: the tailnet's MagicDNS domain is not a DNS name \('[^\n]*'\); \S+ not written\n$/);
        expect(result.leftovers).toEqual([]);
    });

    it("takes a single label (a Headscale base domain may be one)", () => {
        const result = render("search @TAILNET_DOMAIN@\n", "tailnet");
        expect(result.status, result.stderr).toBe(0);
        expect(result.written).toBe("search tailnet\n");
    });

    it("does not ask for the domain where the template has no place for it", () => {
        const result = render("listen @TAILNET_IPV4@\n", null);
        expect(result.status, result.stderr).toBe(0);
        expect(result.written).toBe(`listen ${TEST_TAILNET_IPV4}\n`);
    });
});
