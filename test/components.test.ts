import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { describe, expect, it } from "vitest";
import { decodeUserData } from "../policies/engine/userData";
import { collectArtifacts, writePlan } from "../cli/plan";
import { artifactsOf } from "../components/artifacts";
import { TAILNET_AUTH_KEY_PATH, withBuiltImage } from "../components/render/hosts";
import { BUILT_IMAGE, editedStack, fakeTailnetKey, testHostKey, planShipped, resourceNamed, resourcesOfType, SHIPPED_STACKS, tempDir, deployedValues } from "./helpers/stacks";
import { planStack, UNKNOWN } from "../cli/offline";

const T = {
    stack: "pulumi:pulumi:Stack",
    deployment: "airlock:index:Deployment",
    gateway: "airlock:index:GatewayHost",
    sandbox: "airlock:index:SandboxHost",
    tailnet: "airlock:index:Tailnet",
    sshKey: "hcloud:index/sshKey:SshKey",
    firewall: "hcloud:index/firewall:Firewall",
    server: "hcloud:index/server:Server",
    volume: "hcloud:index/volume:Volume",
    attachment: "hcloud:index/volumeAttachment:VolumeAttachment",
    key: "tailscale:index/tailnetKey:TailnetKey",
    acl: "tailscale:index/acl:Acl",
    stash: "pulumi:index:Stash",
    workloads: "airlock:index:Workloads",
    image: "docker:index/image:Image",
    hostKey: "tls:index/privateKey:PrivateKey",
    backups: "airlock:index:BackupBucket",
    bundle: "airlock:index:HostBundle",
    b2: "pulumi-nodejs:dynamic:Resource",
};

describe.each(SHIPPED_STACKS)("the %s stack under mocks", (stack) => {
    it("builds the resource graph: one component per concept, children parented to it", async () => {
        const plan = await planShipped(stack);
        const p = plan.config.prefix;
        const parentOf = (type: string, name: string) => {
            const parent = plan.resources.find((r) => r.urn === resourceNamed(plan, type, name).parent);
            return parent ? `${parent.type} ${parent.name}` : "none";
        };
        const expected: [string, string, string][] = [
            [T.deployment, p, `${T.stack} airlock-${stack}`],
            [T.sshKey, `${p}-break-glass`, `${T.deployment} ${p}`],
            [T.tailnet, `${p}-tailnet`, `${T.deployment} ${p}`],
            [T.stash, `${p}-tailnet-artifacts`, `${T.tailnet} ${p}-tailnet`],
            [T.gateway, `${p}-gateway`, `${T.deployment} ${p}`],
            [T.sandbox, `${p}-sandbox`, `${T.deployment} ${p}`],
            [T.volume, `${p}-sandbox-workspace`, `${T.sandbox} ${p}-sandbox`],
            [T.attachment, `${p}-sandbox-workspace-attachment`, `${T.sandbox} ${p}-sandbox`],
        ];
        for (const role of ["gateway", "sandbox"] as const) {
            for (const [type, suffix] of [[T.firewall, "firewall"], [T.server, "server"], [T.key, "join-key"], [T.stash, "artifacts"]]) {
                expected.push([type, `${p}-${role}-${suffix}`, `${T[role]} ${p}-${role}`]);
            }
        }
        expected.push([T.workloads, `${p}-workloads`, `${T.deployment} ${p}`]);
        // The host code bundle: uploaded to a bucket of its own unless the stack names a mirror.
        expected.push([T.bundle, `${p}-bundle`, `${T.deployment} ${p}`]);
        if (!plan.config.hosts.bundleUrl) expected.push([T.b2, `${p}-bundle-bucket`, `${T.bundle} ${p}-bundle`], [T.b2, `${p}-bundle-file`, `${T.bundle} ${p}-bundle`]);
        expected.push([T.hostKey, `${p}-sandbox-host-key`, `${T.deployment} ${p}`]);
        for (const machine of ["gateway", "sandbox"]) {
            const component = `${p}-${machine}-backups`;
            expected.push([T.backups, component, `${T.deployment} ${p}`]);
            expected.push([T.b2, `${component}-bucket`, `${T.backups} ${component}`]);
            expected.push([T.b2, `${component}-host-key`, `${T.backups} ${component}`]);
            if (plan.config.backup.pruneKey) expected.push([T.b2, `${component}-prune-key`, `${T.backups} ${component}`]);
        }
        if (plan.config.tailnet.manageAcl) expected.push([T.acl, `${p}-tailnet-policy`, `${T.tailnet} ${p}-tailnet`]);
        // Only a stack with a registry builds the hardened shell image.
        if (plan.config.workloads.registry) expected.push([T.image, `${p}-workloads-sandbox-shell`, `${T.workloads} ${p}-workloads`]);

        for (const [type, name, parent] of expected) expect(parentOf(type, name), `${type} ${name}`).toBe(parent);
        // Nothing beyond the graph above and the stack itself.
        expect(plan.resources).toHaveLength(expected.length + 1);
    });

    it("firewalls open no inbound TCP: only Tailscale's UDP port and ICMP", async () => {
        const plan = await planShipped(stack);
        const firewalls = resourcesOfType(plan, T.firewall);
        expect(firewalls).toHaveLength(2);
        for (const fw of firewalls) {
            const inbound = (fw.inputs.rules as { direction: string; protocol: string; port?: string }[]).filter((r) => r.direction === "in");
            expect(inbound.filter((r) => r.protocol === "tcp")).toEqual([]);
            expect(inbound.map((r) => `${r.protocol}/${r.port ?? "-"}`).sort()).toEqual(["icmp/-", "udp/41641"]);
        }
    });

    it("every server is created with its own firewall attached and fixed, stable names", async () => {
        const plan = await planShipped(stack, "up");
        for (const role of ["gateway", "sandbox"]) {
            const server = resourceNamed(plan, T.server, `${plan.config.prefix}-${role}-server`);
            const firewall = resourceNamed(plan, T.firewall, `${plan.config.prefix}-${role}-firewall`);
            expect(server.inputs.firewallIds).toEqual([Number(firewall.id)]);
            expect(firewall.inputs.name).toBe(`${plan.config.prefix}-${role}-firewall`);
            expect(server.inputs.name).toBe(`${plan.config.prefix}-${role}`);
        }
    });

    it("every server is shut down before Hetzner deletes it (replaced or destroyed), so its volume's filesystem is clean when it detaches", async () => {
        const plan = await planShipped(stack);
        expect(resourcesOfType(plan, T.server).map((s) => [s.name, s.inputs.shutdownBeforeDeletion])).toEqual(
            ["gateway", "sandbox"].map((role) => [`${plan.config.prefix}-${role}-server`, true]),
        );
    });

    it("join keys are single-use, pre-authorized, tagged, short-lived; the sandbox's is ephemeral", async () => {
        const plan = await planShipped(stack);
        const cfg = plan.config;
        const gw = resourceNamed(plan, T.key, `${cfg.prefix}-gateway-join-key`).inputs;
        const sb = resourceNamed(plan, T.key, `${cfg.prefix}-sandbox-join-key`).inputs;
        for (const key of [gw, sb]) {
            expect(key.reusable).toBe(false);
            expect(key.preauthorized).toBe(true);
            expect(key.expiry).toBe(cfg.tailnet.keyExpirySeconds);
            expect(key.expiry).toBeLessThanOrEqual(86400);
        }
        expect(gw.tags).toEqual([cfg.tailnet.gatewayTag]);
        expect(sb.tags).toEqual([cfg.tailnet.sandboxTag]);
        expect(sb.ephemeral).toBe(true);
    });

    it("operators named by login or tag reach the gateway's sshd and nothing of the sandbox, by the policy's own tests", async () => {
        const ops = await planStack(editedStack(stack, (c) => (c["airlock:tailnet"].operators = ["alice@example.com", "tag:ci-operator"])), stack);
        const { gatewayTag: gw, sandboxTag: sb } = ops.config.tailnet;
        const policy = JSON.parse(artifactsOf(resourceNamed(ops, T.stash, `${ops.config.prefix}-tailnet-artifacts`).inputs)!["policy.hujson"]);
        expect(policy.grants.filter((g: any) => !g.src.includes(gw) && !g.src.includes(sb))).toEqual([{ src: ["alice@example.com", "tag:ci-operator"], dst: [gw], ip: ["tcp:22"] }]);
        expect(policy.tagOwners["tag:ci-operator"]).toEqual(["autogroup:admin"]);
        for (const src of ["alice@example.com", "tag:ci-operator"]) {
            expect(policy.tests).toContainEqual({ src, proto: "tcp", accept: [`${gw}:22`], deny: [`${sb}:22`, `${sb}:9222`, `${gw}:10053`] });
        }
    });

    it("the tailnet policy grants exactly gateway->sandbox ssh+CDP, sandbox->gateway DNS and the operators the gateway's ssh, with tests", async () => {
        const plan = await planShipped(stack);
        const { gatewayTag: gw, sandboxTag: sb } = plan.config.tailnet;
        const text = artifactsOf(resourceNamed(plan, T.stash, `${plan.config.prefix}-tailnet-artifacts`).inputs)!["policy.hujson"];
        const policy = JSON.parse(text);
        expect(policy.grants).toEqual([
            { src: [gw], dst: [sb], ip: ["tcp:22", "tcp:9222"] },
            { src: [sb], dst: [gw], ip: ["udp:53", "tcp:53"] },
            // The operator login: the tailnet's admins by default.
            { src: ["autogroup:admin"], dst: [gw], ip: ["tcp:22"] },
        ]);
        expect(policy.acls).toBeUndefined();
        expect(policy.ssh).toBeUndefined();
        const accepts = policy.tests.flatMap((t: any) => (t.accept ?? []).map((a: string) => `${t.src}->${a}`));
        const denies = policy.tests.flatMap((t: any) => (t.deny ?? []).map((a: string) => `${t.src}->${a}`));
        expect(accepts).toContain(`${gw}->${sb}:22`);
        expect(denies).toEqual(expect.arrayContaining([`${sb}->${gw}:22`, `${sb}->${sb}:22`, `${sb}->${gw}:10053`, `${sb}->100.64.0.1:22`]));

        // The tests agree with the grants (Tailscale refuses the policy otherwise): a grant
        // lets src reach dst:port over proto; an IP literal is no tagged node.
        const allowed = (src: string, proto: string, dst: string) => {
            const [host, port] = [dst.slice(0, dst.lastIndexOf(":")), dst.slice(dst.lastIndexOf(":") + 1)];
            return policy.grants.some((g: any) => g.src.includes(src) && g.dst.includes(host) && g.ip.includes(`${proto}:${port}`));
        };
        for (const t of policy.tests) {
            for (const dst of t.accept ?? []) expect(allowed(t.src, t.proto, dst), `${t.src} -> ${t.proto}:${dst} must be granted`).toBe(true);
            for (const dst of t.deny ?? []) expect(allowed(t.src, t.proto, dst), `${t.src} -> ${t.proto}:${dst} must not be granted`).toBe(false);
        }
        // The sandbox's only grant is the gateway's DNS.
        const fromSandbox = policy.grants.filter((g: any) => g.src.includes(sb));
        expect(fromSandbox).toEqual([{ src: [sb], dst: [gw], ip: ["udp:53", "tcp:53"] }]);

        const acls = resourcesOfType(plan, T.acl);
        if (plan.config.tailnet.manageAcl) {
            expect(acls).toHaveLength(1);
            expect(acls[0].inputs.acl).toBe(text);
            expect(acls[0].inputs.resetAclOnDestroy).toBe(false);
        } else {
            expect(acls).toEqual([]);
        }
    });

    it("user_data at preview is unknown only because of the key; the rendered document is known", async () => {
        const plan = await planShipped(stack);
        for (const role of ["gateway", "sandbox"]) {
            expect(resourceNamed(plan, T.server, `${plan.config.prefix}-${role}-server`).inputs.userData).toBe(UNKNOWN);
            const artifacts = artifactsOf(resourceNamed(plan, T.stash, `${plan.config.prefix}-${role}-artifacts`).inputs)!;
            expect(artifacts["cloud-init.yaml"]).toMatch(/^#cloud-config\n/);
        }
    });

    it("user_data holds no secret but the join key (once, in its own file) and the sandbox's host key (in ssh_keys)", async () => {
        const plan = await planShipped(stack, "up");
        const key = fakeTailnetKey();
        for (const role of ["gateway", "sandbox"]) {
            const userData = decodeUserData(String(resourceNamed(plan, T.server, `${plan.config.prefix}-${role}-server`).inputs.userData)).text;
            expect(userData.split(key)).toHaveLength(2);
            const doc = YAML.parse(userData);
            const keyFiles = doc.write_files.filter((f: any) => f.content.includes(key));
            expect(keyFiles.map((f: any) => [f.path, f.permissions])).toEqual([[TAILNET_AUTH_KEY_PATH, "0600"]]);

            // The second exception: the sandbox's own host key, in the ssh_keys module only.
            const hostKey = testHostKey();
            if (role === "sandbox") {
                expect(doc.ssh_keys).toEqual({ ed25519_private: hostKey.privateKeyOpenssh, ed25519_public: hostKey.publicKeyOpenssh });
                expect(userData.split("PRIVATE KEY-----")).toHaveLength(3);
            } else {
                expect(doc.ssh_keys).toBeUndefined();
                const knownHosts = doc.write_files.find((f: any) => f.path === "/etc/airlock/known_hosts").content;
                expect(knownHosts).toBe(`${plan.config.hostnames.sandbox} ${hostKey.publicKeyOpenssh}\n`);
            }
            const rest = YAML.stringify({
                ...doc,
                ssh_keys: undefined,
                write_files: doc.write_files.filter((f: any) => f.path !== TAILNET_AUTH_KEY_PATH),
            });
            expect(rest).not.toMatch(/tskey-/);
            expect(rest).not.toMatch(/-----BEGIN [A-Z ]*PRIVATE KEY-----/);
            expect(rest).not.toMatch(/\b(ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{10,}/);
            expect(rest).not.toMatch(/\b(K0|K00)[0-9A-Za-z]{20,}/); // B2 application keys
            expect(doc.ssh_pwauth).toBe(false);
            expect(userData).not.toMatch(/tailscale\s+up[^\n]*--ssh/);
        }
    });
});

describe("the break-glass key: one per fingerprint in a Hetzner project", () => {
    const publicKey = (stack: string) => YAML.parse(fs.readFileSync(path.join("stacks", `Pulumi.${stack}.yaml`), "utf8")).config["airlock:breakGlassSshPublicKey"] as string;
    /** A project holding these keys, as hcloud's getSshKeys answers. */
    const project = (keys: { id: number; name: string; publicKey: string; labels?: Record<string, string> }[]) => (token: string) =>
        token === "hcloud:index/getSshKeys:getSshKeys" ? { sshKeys: keys.map((k) => ({ fingerprint: "", labels: {}, ...k })) } : undefined;
    const serverKeys = (plan: Awaited<ReturnType<typeof planShipped>>) => resourcesOfType(plan, T.server).map((s) => s.inputs.sshKeys);

    it("uses the key another stack or the console made (the same key, another comment), and creates none", async () => {
        // Hetzner refuses a second key with one fingerprint (uniqueness_error): dev and prod share one.
        const key = publicKey("prod").split(" ").slice(0, 2).join(" ") + " uploaded-in-the-console";
        const plan = await planStack(path.join("stacks", "Pulumi.prod.yaml"), "prod", { mode: "up", deployed: deployedValues, calls: project([{ id: 4711, name: "ops-rescue", publicKey: key, labels: { airlock: "airlock-dev" } }]) });
        expect(resourcesOfType(plan, T.sshKey)).toEqual([]);
        expect(serverKeys(plan)).toEqual([["4711"], ["4711"]]);
    });

    it("keeps managing the key it made itself, and creates its own when the project has no such key", async () => {
        const own = await planStack(path.join("stacks", "Pulumi.dev.yaml"), "dev", {
            mode: "up",
            deployed: deployedValues,
            calls: project([{ id: 99, name: "airlock-dev-break-glass", publicKey: publicKey("dev"), labels: { airlock: "airlock-dev" } }]),
        });
        expect(resourcesOfType(own, T.sshKey).map((r) => r.inputs.name)).toEqual(["airlock-dev-break-glass"]);
        const other = await planStack(path.join("stacks", "Pulumi.dev.yaml"), "dev", {
            mode: "up",
            deployed: deployedValues,
            calls: project([{ id: 7, name: "someone-else", publicKey: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPWKETrPt8oVYVlHKofRu0YtZmqfPRzEon0UODMLMRhF x" }]),
        });
        expect(resourceNamed(other, T.sshKey, "airlock-dev-break-glass").inputs.publicKey).toBe(publicKey("dev"));
        const [gateway, sandbox] = serverKeys(other) as string[][];
        expect(gateway).toEqual(sandbox);
        expect(gateway).toEqual([expect.stringMatching(/^\d+$/)]);
        expect(gateway).not.toEqual(["7"]);
    });
});

describe("backup buckets", () => {
    it("one private bucket per machine, an append-only host key restricted to it, no prune key unless asked", async () => {
        const plan = await planShipped("prod", "up");
        for (const machine of ["gateway", "sandbox"]) {
            const bucket = resourceNamed(plan, T.b2, `airlock-prod-${machine}-backups-bucket`);
            const key = resourceNamed(plan, T.b2, `airlock-prod-${machine}-backups-host-key`);
            expect(bucket.inputs).toMatchObject({ b2Kind: "bucket", retentionDays: 90 });
            expect(String(bucket.inputs.bucketName)).toMatch(new RegExp(`^airlock-prod-${machine}-[0-9a-f]{10}$`));
            expect(key.inputs).toMatchObject({ b2Kind: "applicationKey", purpose: "host", capabilities: ["listBuckets", "listFiles", "readFiles", "writeFiles"] });
            expect(key.inputs.bucketId).toBe(`b2-bucket-of-airlock-prod-${machine}-backups-bucket`);
        }
        expect(plan.resources.filter((r) => r.inputs.purpose === "operator")).toEqual([]);

        const withPrune = await planStack(editedStack("prod", (c) => (c["airlock:backup"].pruneKey = true)), "prod", { deployed: deployedValues });
        const prune = resourceNamed(withPrune, T.b2, "airlock-prod-sandbox-backups-prune-key");
        expect(prune.inputs).toMatchObject({ purpose: "operator", capabilities: expect.arrayContaining(["deleteFiles"]) });
    });

    it("bucket names differ between organisations using the same prefix", async () => {
        const ours = await planShipped("dev");
        const theirs = await planStack(editedStack("dev", (c) => (c["airlock:breakGlassSshPublicKey"] = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPWKETrPt8oVYVlHKofRu0YtZmqfPRzEon0UODMLMRhF other")), "dev");
        const names = (p: typeof ours) => resourcesOfType(p, T.b2).filter((r) => r.inputs.b2Kind === "bucket").map((r) => r.inputs.bucketName);
        expect(names(ours)).toHaveLength(3); // both machines' backups and the host code bundle
        expect(names(ours).filter((n) => names(theirs).includes(n))).toEqual([]);
    });
});

describe("the built sandbox shell", () => {
    it("is filled into user_data at deploy as a digest-pinned reference, and only there", async () => {
        const preview = await planShipped("prod");
        const stashed = collectArtifacts(preview).get("sandbox")!;
        expect(stashed["etc/airlock/compose.yml.in"]).toContain("image: \"@SANDBOX_SHELL_IMAGE@\"");

        const up = await planShipped("prod", "up");
        const userData = decodeUserData(String(resourceNamed(up, T.server, "airlock-prod-sandbox-server").inputs.userData)).text;
        expect(userData).toContain(`image: "${BUILT_IMAGE}"`);
        expect(userData).not.toContain("@SANDBOX_SHELL_IMAGE@");
    });

    it("a build output that is not pinned by digest is refused", () => {
        expect(() => withBuiltImage("image: @X@", "@X@", "ghcr.io/a/b:latest")).toThrow(/not pinned by digest/);
    });
});

describe("offline plan output", () => {
    it("is deterministic: the same stack twice gives byte-identical files", async () => {
        const dirs = [tempDir("plan-a"), tempDir("plan-b")].map((d) => path.join(d, "out"));
        const files: string[][] = [];
        for (const dir of dirs) files.push(writePlan(await planShipped("dev"), dir));
        expect(files[0]).toEqual(files[1]);
        expect(files[0]).toContain("preview.json");
        expect(files[0]).toContain("sandbox/cloud-init.yaml");
        expect(files[0]).toContain("tailnet/policy.hujson");
        for (const file of files[0]) {
            expect(fs.readFileSync(path.join(dirs[1], file)).equals(fs.readFileSync(path.join(dirs[0], file))), file).toBe(true);
        }
    });

    it("preview.json has the shape of `pulumi preview --json`", async () => {
        const dir = path.join(tempDir("plan"), "out");
        writePlan(await planShipped("dev"), dir);
        const preview = JSON.parse(fs.readFileSync(path.join(dir, "preview.json"), "utf8"));
        expect(preview.steps.length).toBeGreaterThan(10);
        for (const step of preview.steps) {
            expect(step.op).toBe("create");
            expect(step.newState.urn).toBe(step.urn);
            expect(typeof step.newState.type).toBe("string");
            expect(typeof step.newState.inputs).toBe("object");
        }
    });

    it("a stack without manageAcl never touches the tailnet policy file", async () => {
        const file = editedStack("dev", (c) => (c["airlock:tailnet"].manageAcl = false));
        const plan = await planStack(file, "dev", { deployed: deployedValues });
        expect(resourcesOfType(plan, T.acl)).toEqual([]);
        const stashed = artifactsOf(resourceNamed(plan, T.stash, "airlock-dev-tailnet-artifacts").inputs)!;
        expect(JSON.parse(stashed["policy.hujson"]).grants).toHaveLength(3);
    });
});
