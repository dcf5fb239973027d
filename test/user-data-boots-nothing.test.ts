import { gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { judgeResources } from "../policies/engine/judge";
import { CONTEXT } from "./policies/helpers";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * Seen by a red team (2026-12-06), low: strings the gate judges as a clean #cloud-config that cloud-init does not
 * boot as one (it boots none of it). The gate should say cloud-init-parses, as it does for a
 * newline after the base64.
 */
const SERVER = "hcloud:index/server:Server";

function cloudInitTypes(sent: string[]): string[][] {
    const program = [
        "import json, sys, tempfile",
        "from cloudinit.sources.helpers.hetzner import maybe_b64decode",
        "from cloudinit.user_data import UserDataProcessor",
        "d = tempfile.mkdtemp()",
        "class P:",
        "    def get_cpath(self, *a): return d",
        "    def get_ipath(self, *a): return d",
        "    def get_ipath_cur(self, *a): return d",
        "print(json.dumps([[p.get_content_type() for p in UserDataProcessor(P()).process(maybe_b64decode(s.encode())).walk() if p.get_content_maintype() != 'multipart'] for s in json.load(sys.stdin)]))",
    ].join("\n");
    const result = run("/usr/bin/python3", ["-c", program], { input: JSON.stringify(sent) });
    if (result.status !== 0) throw new Error(result.stderr);
    return JSON.parse(result.stdout);
}

describe.runIf(toolsAvailable("cloud-init", ["cloud-init"]))("smuggled user_data: judged as cloud-config, booted as nothing", () => {
    const doc = "#cloud-config\nssh_pwauth: false\n";
    const samples = {
        "a UTF-8 BOM before #cloud-config (the gate strips it; cloud-init's type_from_starts_with does not)": gzipSync(Buffer.from(`\ufeff${doc}`)).toString("base64"),
        "gzip, a NUL, then bytes that are no gzip member (Node stops at the NUL; Python's gzip fails, so cloud-init keeps the raw bytes)": Buffer.concat([gzipSync(doc), Buffer.from("\0XYZ", "latin1")]).toString("base64"),
    };
    it("cloud-init boots none of them", () => {
        for (const types of cloudInitTypes(Object.values(samples))) expect(types).toEqual(["text/x-not-multipart"]);
    });
    it.each(Object.entries(samples))("the gate flags %s", (_, userData) => {
        const rules = judgeResources([{ urn: "urn:s", type: SERVER, name: "s", inputs: { firewallIds: [1], userData } } as any], CONTEXT).map((f) => f.rule);
        expect(rules).toContain("cloud-init-parses");
    });
});
