import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { beforeAll, describe, expect, it } from "vitest";
import { OFFLINE_DIGEST, planStack } from "../cli/offline";
import { collectArtifacts } from "../cli/plan";
import { B2_DOWNLOAD_HOST, GuestRole, HOST_ADDRESS } from "../twin/contract";
import { pinTailscaleKey, renderDeployment, substitutions, TwinDeployment, twinResolverUpstreams } from "../twin/userdata";
import { tempDir } from "./helpers/stacks";

/**
 * The twin boots the SAME user_data the plan renders: only deploy-time values
 * (join keys, image digests, the sandbox's host key, the gateway agent's
 * authorized key) and the pinned Tailscale repository fingerprint differ. Every
 * line that differs is explained here, independently of the twin's code.
 */

const STACK = "dev";
const STACK_FILE = path.join(__dirname, "..", "stacks", `Pulumi.${STACK}.yaml`);
const ROLES: GuestRole[] = ["gateway", "sandbox"];

describe("the twin's user_data", () => {
    let planned: Record<GuestRole, string>;
    let twin: TwinDeployment;
    const hostKey = { pub: "", priv: "" };
    const agentKey = { pub: "" };
    const operatorKey = { pub: "" };
    // Secret-shaped values, built at run time.
    const joinKeys = { gateway: ["tskey", "auth", "twin", "gw"].join("-"), sandbox: ["tskey", "auth", "twin", "sb"].join("-") };
    const digest = (reference: string) => `sha256:${Buffer.from(reference).toString("hex").padEnd(64, "f").slice(0, 64)}`;
    const fingerprint = "0123456789ABCDEF0123456789ABCDEF01234567";

    beforeAll(async () => {
        const dir = tempDir("twin-userdata-");
        for (const [name, target] of [
            ["host", hostKey],
            ["agent", agentKey],
            ["operator", operatorKey],
        ] as const) {
            const file = path.join(dir, name);
            expect(spawnSync("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "", "-f", file]).status).toBe(0);
            target.pub = fs.readFileSync(`${file}.pub`, "utf8").trim().split(" ").slice(0, 2).join(" ");
            if (name === "host") hostKey.priv = fs.readFileSync(file, "utf8");
        }
        const plan = await planStack(STACK_FILE, STACK);
        const artifacts = collectArtifacts(plan);
        planned = { gateway: artifacts.get("gateway")!["cloud-init.yaml"], sandbox: artifacts.get("sandbox")!["cloud-init.yaml"] };
        twin = await renderDeployment(
            STACK_FILE,
            STACK,
            { joinKeys, digestOf: digest, sandboxHostKey: { publicKeyOpenssh: `${hostKey.pub}\n`, privateKeyOpenssh: hostKey.priv }, agentPublicKey: `${agentKey.pub} twin-gateway-agent`, operatorPublicKey: operatorKey.pub },
            path.join(dir, "render"),
        );
        for (const role of ROLES) twin.documents[role] = pinTailscaleKey(twin.documents[role], fingerprint);
        twin.documents.gateway = twinResolverUpstreams(twin.documents.gateway, HOST_ADDRESS);
    }, 60_000);

    /** What each kind of line becomes at deploy time in the twin. */
    function expected(role: GuestRole, line: string): { kind: string; line: string } | undefined {
        if (line.includes("@TAILNET_AUTH_KEY@")) return { kind: "join key", line: line.replace("@TAILNET_AUTH_KEY@", joinKeys[role]) };
        const image = /image: (\S+)@sha256:0{64}/.exec(line);
        if (image) return { kind: "image digest", line: line.replace(OFFLINE_DIGEST, digest(image[1])) };
        if (line.includes('"@SANDBOX_HOST_KEY@"')) return { kind: "sandbox host key", line: line.replace('"@SANDBOX_HOST_KEY@"', JSON.stringify(hostKey.priv)) };
        if (line.includes("@SANDBOX_HOST_PUBLIC_KEY@")) return { kind: "sandbox host public key", line: line.replace("@SANDBOX_HOST_PUBLIC_KEY@", hostKey.pub) };
        if (/"fingerprint":"[0-9A-F]{40}"/.test(line)) return { kind: "Tailscale key fingerprint", line: line.replace(/"fingerprint":"[0-9A-F]{40}"/, `"fingerprint":"${fingerprint}"`) };
        if (role === "gateway" && /^\s+(upstream_dns|bootstrap_dns): \[.+\]$/.test(line)) return { kind: "resolver upstreams", line: line.replace(/\[.+\]$/, `["${HOST_ADDRESS}"]`) };
        if (line.includes("@BUNDLE_URL@")) return { kind: "bundle URL", line: line.replace("@BUNDLE_URL@", `https://${B2_DOWNLOAD_HOST}/${twin.bundle.path}`) };
        if (/^\s+restrict ssh-ed25519 \S+ \S+$/.test(line)) return { kind: "agent's authorized key", line: line.replace(/ssh-ed25519 \S+ \S+$/, `${agentKey.pub} twin-gateway-agent`) };
        return undefined;
    }

    it.each(ROLES)("%s: differs from the plan's only in deploy-time values and the pinned fingerprint", (role) => {
        const changes = substitutions(planned[role], twin.documents[role]);
        const kinds = new Set<string>();
        for (const change of changes) {
            // The one line added: the twin operator's key beside the stack's operator keys (twin/operator.ts).
            if (role === "gateway" && change.planned === "" && change.twin === `    ${operatorKey.pub} twin-operator`) {
                kinds.add("operator's key");
                continue;
            }
            const want = expected(role, change.planned);
            expect(want, `unexplained change in the ${role}'s user_data:\n- ${change.planned}\n+ ${change.twin}`).toBeDefined();
            expect(change.twin).toBe(want!.line);
            kinds.add(want!.kind);
        }
        const always = ["join key", "image digest", "Tailscale key fingerprint", "bundle URL"];
        expect([...kinds].sort()).toEqual(
            (role === "gateway" ? [...always, "sandbox host public key", "resolver upstreams", "operator's key"] : [...always, "sandbox host key", "sandbox host public key", "agent's authorized key"]).sort(),
        );
        // Same length in lines: nothing added (but the operator's key) or dropped.
        expect(twin.documents[role].split("\n").length).toBe(planned[role].split("\n").length + (role === "gateway" ? 1 : 0));
    });

    it("would notice a change that is not a deploy-time value", () => {
        const tampered = twin.documents.sandbox.replace("package_upgrade: true", "package_upgrade: false");
        const unexplained = substitutions(planned.sandbox, tampered).filter((c) => expected("sandbox", c.planned) === undefined);
        expect(unexplained).toEqual([{ planned: "package_upgrade: true", twin: "package_upgrade: false" }]);
    });

    it("the firewall, volume and servers come from the same plan", () => {
        for (const role of ROLES) expect(twin.firewallRules[role].map((r) => `${r.direction} ${r.protocol} ${r.port ?? ""}`)).toEqual(["in udp 41641", "in icmp "]);
        expect(twin.hostnames).toEqual({ gateway: "airlock-dev-gateway", sandbox: "airlock-dev-sandbox" });
        expect(twin.volume.sizeGb).toBe(10);
    });
});
