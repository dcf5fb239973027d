import { gzipSync } from "node:zlib";
import { describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import { judgeResources } from "../policies/engine/judge";
import { decodeUserData, encodeUserData, UserDataDecodeError } from "../policies/engine/userData";
import { CONTEXT } from "./policies/helpers";
import { planShipped, resourcesOfType, SHIPPED_STACKS } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * airlock sends each host's user_data as base64 of its gzip (policies/engine/userData.ts).
 * What cloud-init makes of a string is decided here by cloud-init itself: Debian's package,
 * its Hetzner datasource's maybe_b64decode and user_data.convert_string, the two steps a
 * Hetzner server runs on what the metadata service serves.
 */

const SERVER = "hcloud:index/server:Server";

/** What cloud-init on a Hetzner server reads from each string: {text} or {bytes: hex} when it is not UTF-8. */
function asCloudInitReads(strings: string[]): ({ text: string } | { bytes: string })[] {
    const program = [
        "import json, sys",
        "from cloudinit.sources.helpers.hetzner import maybe_b64decode",
        "from cloudinit.user_data import convert_string",
        "out = []",
        "for s in json.load(sys.stdin):",
        "    payload = convert_string(maybe_b64decode(s.encode())).get_payload(decode=True)",
        "    try: out.append({'text': payload.decode('utf-8')})",
        "    except UnicodeDecodeError: out.append({'bytes': payload.hex()})",
        "print(json.dumps(out))",
    ].join("\n");
    const result = run("/usr/bin/python3", ["-c", program], { input: JSON.stringify(strings) });
    if (result.status !== 0) throw new Error(result.stderr);
    return JSON.parse(result.stdout);
}

const hasCloudInit = toolsAvailable("cloud-init's own user_data decoding", ["cloud-init"]);

describe.runIf(hasCloudInit)("user_data as cloud-init on Hetzner reads it", () => {
    it.each(SHIPPED_STACKS)("%s: each server's user_data is one line of base64 that cloud-init turns back into the plan's document", async (stack) => {
        const plan = await planShipped(stack, "up");
        const servers = resourcesOfType(plan, SERVER);
        expect(servers).toHaveLength(2);
        const sent = servers.map((s) => String(s.inputs.userData));
        for (const s of sent) expect(s).toMatch(/^[A-Za-z0-9+/]+=*$/);
        const read = asCloudInitReads(sent);
        read.forEach((r, i) => {
            expect(r).toEqual({ text: decodeUserData(sent[i]).text });
            expect((r as { text: string }).text).toMatch(/^#cloud-config\n/);
        });
    });

    it("the gate reads every string as cloud-init does, and refuses to guess where cloud-init would boot something else", () => {
        const doc = "#cloud-config\nssh_pwauth: false\nruncmd:\n  - [echo, é]\n";
        const b64 = (data: Buffer | string) => Buffer.from(data).toString("base64");
        const encoded = encodeUserData(doc);
        const samples = {
            "base64 of gzip": encoded,
            "the same with a newline after it": `${encoded}\n`,
            "one character short": encoded.slice(0, -1),
            "base64 of the plain document": b64(doc),
            "plain": doc,
            "base64 of gzip of Latin-1": b64(gzipSync(Buffer.from(doc, "latin1"))),
            "base64 of gzip with padding inside": `${encoded.slice(0, 8)}=${encoded.slice(9)}`,
        };
        const read = asCloudInitReads(Object.values(samples));
        Object.keys(samples).forEach((name, i) => {
            const sample = Object.values(samples)[i];
            const theirs = read[i];
            let ours: { text: string } | { refused: string };
            try {
                ours = { text: decodeUserData(sample).text };
            } catch (err) {
                if (!(err instanceof UserDataDecodeError)) throw err;
                ours = { refused: err.message };
            }
            // Ours is cloud-init's text, or a refusal where cloud-init gets no text at all.
            if ("text" in theirs) expect(ours, name).toEqual({ text: theirs.text });
            else expect(ours, name).toHaveProperty("refused");
        });
        // What each of them boots as, in words: only the two that decode are the document.
        expect(read.map((r) => "text" in r && r.text === doc)).toEqual([true, false, false, true, true, false, false]);
    });

    it("base64 of gzip hides nothing from the gate: a server's encoded user_data is judged as the document it carries", () => {
        const server = (userData: string) => ({ urn: "urn:s", type: SERVER, name: "s", inputs: { firewallIds: [1], userData } });
        const bad = "#cloud-config\nssh_pwauth: true\nruncmd:\n  - curl -fsSL https://get.example.sh | sh\n";
        const rules = (userData: string) => judgeResources([server(userData)], CONTEXT).map((f) => f.rule);
        expect(rules(encodeUserData(bad))).toEqual(expect.arrayContaining(["cloud-init-ssh-password-auth-off", "cloud-init-no-pipe-to-shell"]));
        expect(rules(encodeUserData(bad)).sort()).toEqual(rules(bad).sort());
        // A newline after the base64: cloud-init reads it as text that is no cloud-config (it boots none of it).
        expect(rules(`${encodeUserData("#cloud-config\nssh_pwauth: false\n")}\n`)).toContain("cloud-init-parses");
        // Counted as sent: the encoded string, not the document.
        const large = `#cloud-config\nwrite_files:\n  - path: /x\n    content: ${JSON.stringify(Buffer.alloc(40_000, 7).toString("base64"))}\n`;
        expect(rules(large)).toContain("cloud-init-within-hetzner-user-data-limit");
        const random = `#cloud-config\nwrite_files:\n  - path: /x\n    content: ${JSON.stringify(randomBytes(30_000).toString("base64"))}\n`;
        expect(rules(encodeUserData(random))).toContain("cloud-init-within-hetzner-user-data-limit");
    });

    it("one document always gives the same user_data (a changed one would replace the server)", () => {
        const doc = `#cloud-config\n${"runcmd:\n  - [true]\n".repeat(50)}`;
        expect(encodeUserData(doc)).toBe(encodeUserData(`${doc}`));
        // No timestamp in the gzip header (bytes 4-7).
        expect(Buffer.from(encodeUserData(doc), "base64").subarray(4, 8)).toEqual(Buffer.alloc(4));
    });
});
