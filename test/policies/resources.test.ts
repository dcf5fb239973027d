import { describe, expect, it } from "vitest";
import { UNKNOWN } from "../../cli/offline";
import { resource, resources, ruleIds } from "./helpers";

const T = {
    firewall: "hcloud:index/firewall:Firewall",
    server: "hcloud:index/server:Server",
    key: "tailscale:index/tailnetKey:TailnetKey",
    acl: "tailscale:index/acl:Acl",
    stash: "pulumi:index:Stash",
    dynamic: "pulumi-nodejs:dynamic:Resource",
};

const firewall = (rules: unknown) => resource(T.firewall, "fw", { name: "fw", rules });
const tailscaleUdp = { direction: "in", protocol: "udp", port: "41641", sourceIps: ["0.0.0.0/0", "::/0"] };

describe("hcloud rules", () => {
    it("Tailscale UDP and ICMP from anywhere pass", () => {
        expect(resources([firewall([tailscaleUdp, { direction: "in", protocol: "icmp", sourceIps: ["0.0.0.0/0"] }])])).toEqual([]);
    });

    it.each([
        ["tcp/22 from 0.0.0.0/0", { direction: "in", protocol: "tcp", port: "22", sourceIps: ["0.0.0.0/0"] }],
        ["tcp/443 from ::/0", { direction: "in", protocol: "tcp", port: "443", sourceIps: ["::/0"] }],
        ["tcp from a /8", { direction: "in", protocol: "tcp", port: "22", sourceIps: ["10.0.0.0/8"] }],
        ["tcp from the IPv4 internet written IPv4-mapped", { direction: "in", protocol: "tcp", port: "22", sourceIps: ["::ffff:0.0.0.0/96"] }],
        ["tcp with no source list", { direction: "in", protocol: "tcp", port: "22" }],
    ])("inbound %s is refused", (_, rule) => {
        expect(ruleIds(resources([firewall([tailscaleUdp, rule])]))).toEqual(["hcloud-firewall-no-public-inbound-tcp"]);
    });

    it("tcp from one admin address, and outbound tcp, pass", () => {
        const narrow = { direction: "in", protocol: "tcp", port: "22", sourceIps: ["203.0.113.7/32"] };
        const outbound = { direction: "out", protocol: "tcp", port: "443", destinationIps: ["0.0.0.0/0"] };
        expect(resources([firewall([tailscaleUdp, narrow, outbound])])).toEqual([]);
    });

    it("unknown rules are unverifiable", () => {
        const findings = resources([firewall(UNKNOWN)]);
        expect(findings.map((f) => [f.rule, f.unverifiable])).toEqual([["hcloud-firewall-no-public-inbound-tcp", true]]);
    });

    it("a server needs a firewall at creation; an id not known yet counts", () => {
        const base = { name: "s", serverType: "cx23", userData: "#cloud-config\nssh_pwauth: false\n" };
        expect(ruleIds(resources([resource(T.server, "s", { ...base })]))).toEqual(["hcloud-servers-have-firewall"]);
        expect(ruleIds(resources([resource(T.server, "s", { ...base, firewallIds: [] })]))).toEqual(["hcloud-servers-have-firewall"]);
        expect(resources([resource(T.server, "s", { ...base, firewallIds: [UNKNOWN] })])).toEqual([]);
        expect(resources([resource(T.server, "s", { ...base, firewallIds: [42] })])).toEqual([]);
    });

    it("a server's known user_data is judged by the cloud-init rules", () => {
        const server = resource(T.server, "s", { firewallIds: [1], userData: "#cloud-config\nssh_pwauth: true\n" });
        expect(ruleIds(resources([server]))).toEqual(["cloud-init-ssh-password-auth-off"]);
    });

    it("unknown user_data passes only with a rendered cloud-init.yaml stashed beside the server", () => {
        const parent = "urn:pulumi:test::airlock::airlock:index:SandboxHost::sb";
        const server = resource(T.server, "sb-server", { firewallIds: [UNKNOWN], userData: UNKNOWN }, parent);
        expect(ruleIds(resources([server]))).toEqual(["hcloud-servers-user-data-verifiable"]);
        const stash = resource(T.stash, "sb-artifacts", { input: { airlockArtifacts: { "cloud-init.yaml": "#cloud-config\nssh_pwauth: false\n" } } }, parent);
        expect(resources([server, stash])).toEqual([]);
        const elsewhere = { ...stash, parent: "urn:pulumi:test::airlock::airlock:index:GatewayHost::gw" };
        expect(ruleIds(resources([server, elsewhere]))).toEqual(["hcloud-servers-user-data-verifiable"]);
    });

    it("user_data redacted as [secret] in a preview's JSON is treated like unknown", () => {
        const server = resource(T.server, "sb-server", { firewallIds: [1], userData: "[secret]" }, "urn:p");
        expect(ruleIds(resources([server]))).toEqual(["hcloud-servers-user-data-verifiable"]);
    });

    it("a stashed cloud-init.yaml is judged, embedded files included", () => {
        const stash = resource(T.stash, "a", { input: { airlockArtifacts: { "cloud-init.yaml": "#cloud-config\nwrite_files:\n  - path: /etc/ssh/sshd_config.d/x.conf\n    content: PermitRootLogin yes\n" } } });
        expect(ruleIds(resources([stash]))).toEqual(["sshd-no-root-login"]);
    });
});

describe("tailscale rules", () => {
    const key = (name: string, inputs: Record<string, unknown>) =>
        resource(T.key, name, { reusable: false, ephemeral: true, preauthorized: true, tags: ["tag:x-sandbox"], ...inputs });

    it("single-use, tagged, pre-authorized keys pass; the gateway's need not be ephemeral", () => {
        expect(resources([key("x-sandbox-join-key", {}), key("x-gateway-join-key", { ephemeral: false, tags: ["tag:x-gateway"] })])).toEqual([]);
    });

    it.each<[string, Record<string, unknown>]>([
        ["reusable", { reusable: true }],
        ["not ephemeral (sandbox)", { ephemeral: false }],
        ["not pre-authorized", { preauthorized: false }],
        ["untagged", { tags: [] }],
        ["reusable unknown", { reusable: UNKNOWN }],
    ])("a sandbox key that is %s fails", (_, change) => {
        expect(ruleIds(resources([key("x-sandbox-join-key", change)]))).toEqual(["tailscale-keys-single-use"]);
    });

    const acl = (policy: unknown) => resource(T.acl, "policy", { acl: typeof policy === "string" ? policy : JSON.stringify(policy) });

    it("airlock's grants pass; wildcards fail", () => {
        const good = { grants: [{ src: ["tag:gw"], dst: ["tag:sb"], ip: ["tcp:22"] }] };
        expect(resources([acl(good)])).toEqual([]);
        expect(ruleIds(resources([acl({ grants: [{ src: ["*"], dst: ["*"], ip: ["*"] }] })]))).toEqual(["tailnet-acl-no-wildcards"]);
        expect(ruleIds(resources([acl({ acls: [{ action: "accept", src: ["tag:a"], dst: ["*:*"] }] })]))).toEqual(["tailnet-acl-no-wildcards"]);
        expect(ruleIds(resources([acl({ acls: [{ action: "accept", src: ["tag:a"], dst: ["tag:sb:*"] }] })]))).toEqual(["tailnet-acl-no-wildcards"]);
    });

    it("reads HuJSON (comments, trailing commas)", () => {
        const text = '{\n  // airlock\n  "grants": [\n    {"src": ["*"], "dst": ["tag:sb"], "ip": ["tcp:22"],},\n  ],\n}';
        expect(ruleIds(resources([acl(text)]))).toEqual(["tailnet-acl-no-wildcards"]);
    });
});

describe("B2 rules", () => {
    const hostKey = (inputs: Record<string, unknown>) =>
        resource(T.dynamic, "host-key", { b2Kind: "applicationKey", purpose: "host", capabilities: ["listBuckets", "listFiles", "readFiles", "writeFiles"], bucketId: "b1", ...inputs });

    it("a least-privilege host key passes, an operator prune key may delete", () => {
        expect(resources([hostKey({})])).toEqual([]);
        expect(resources([hostKey({ purpose: "operator", capabilities: ["deleteFiles", "listFiles"] })])).toEqual([]);
    });

    it.each<[string, Record<string, unknown>]>([
        ["deleteFiles", { capabilities: ["listFiles", "writeFiles", "deleteFiles"] }],
        ["writeBuckets", { capabilities: ["writeBuckets"] }],
        ["key management", { capabilities: ["writeKeys"] }],
        ["no bucket restriction", { bucketId: undefined }],
        ["no purpose given", { purpose: undefined, capabilities: ["deleteFiles"] }],
    ])("a host key with %s fails", (_, change) => {
        expect(ruleIds(resources([hostKey(change)]))).toEqual(["b2-host-keys-least-privilege"]);
    });

    const bucket = (inputs: Record<string, unknown>) => resource(T.dynamic, "bucket", { b2Kind: "bucket", ...inputs });

    it("buckets keep hidden versions at least the retention (default 30 days), or use Object Lock", () => {
        expect(resources([bucket({ lifecycleRules: [{ fileNamePrefix: "", daysFromHidingToDeleting: 30 }] })])).toEqual([]);
        expect(ruleIds(resources([bucket({ lifecycleRules: [{ fileNamePrefix: "", daysFromHidingToDeleting: 1 }] })]))).toEqual(["b2-buckets-retain-hidden-versions"]);
        expect(resources([bucket({ lifecycleRules: [{ daysFromHidingToDeleting: 1 }], defaultRetention: { mode: "compliance", period: { duration: 60, unit: "days" } } })])).toEqual([]);
        expect(ruleIds(resources([bucket({ lifecycleRules: UNKNOWN })]))).toEqual(["b2-buckets-retain-hidden-versions"]);
    });
});
