import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { configuredImages } from "../components/workloads/images";
import { renderAdguardConfig } from "../components/workloads/compose";
import { buildGoTool, GO_TOOLS } from "../twin/gotools";
import { SHIPPED_STACKS, stackFile, tempDir } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * The gateway's resolver reads the file airlock renders: the AdGuard Home release the
 * stacks pin, built from its Go module, checks every shipped stack's rendered
 * AdGuardHome.yaml (`--check-config`). A file of another schema fails, so a version
 * bump that breaks the config fails here.
 */

const canRun = toolsAvailable("AdGuard Home's --check-config", ["go"]);

describe.runIf(canRun)("AdGuard Home checks the rendered config", () => {
    let adguardHome: string;
    beforeAll(async () => {
        adguardHome = await buildGoTool("adguardhome", (line) => console.log(line));
    }, 600_000);

    /** --check-config of `config`; its own log goes to a file of the test's (the rendered one is the container's path). */
    function check(config: string) {
        const dir = tempDir("adguard-check");
        fs.mkdirSync(path.join(dir, "work"));
        const parsed = YAML.parse(config);
        parsed.log.file = path.join(dir, "adguardhome.log");
        fs.writeFileSync(path.join(dir, "AdGuardHome.yaml"), YAML.stringify(parsed));
        const result = run(adguardHome, ["--check-config", "--no-check-update", "-c", path.join(dir, "AdGuardHome.yaml"), "-w", path.join(dir, "work")]);
        return { status: result.status, log: fs.existsSync(parsed.log.file) ? fs.readFileSync(parsed.log.file, "utf8") : result.stderr };
    }

    it.each(SHIPPED_STACKS)("%s: the pinned release accepts it", (stack) => {
        const cfg = readStackFile(stackFile(stack));
        expect(configuredImages(cfg).adguard).toBe(`adguard/adguardhome:${GO_TOOLS.adguardhome.version}`);
        const result = check(renderAdguardConfig(cfg));
        expect(result.log).toContain("configuration file is ok");
        expect(result.status, result.log).toBe(0);
    });

    it("a file of the next schema is refused (a release that does not know it would crash-loop)", () => {
        const rendered = renderAdguardConfig(readStackFile(stackFile("prod")));
        const result = check(rendered.replace(/^schema_version: 29$/m, "schema_version: 30"));
        expect(result.status).not.toBe(0);
        expect(result.log).toMatch(/unknown current schema version 30/);
    });
});
