import * as hcloud from "@pulumi/hcloud";
import * as pulumi from "@pulumi/pulumi";
import type * as tailscale from "@pulumi/tailscale";
import { Artifacts, artifactStash } from "./artifacts";
import { HostRole, RenderedHost, withBuiltImage, withSandboxHostKey, withTailnetKey } from "./render/hosts";
import { withBundleUrl } from "./render/bundle";
import { encodeUserData } from "../policies/engine/userData";
import { BUILT_SANDBOX_SHELL_PLACEHOLDER } from "./workloads/compose";
import { JOIN_GENERATION_LABEL } from "./joinGeneration";
import { createHash } from "node:crypto";
import type { Tailnet } from "./tailnet";

/** What a host needs from the stack config, whichever role it plays. */
export interface HostServerArgs {
    serverType: string;
    location: string;
    image: string;
    protect: boolean;
    extraInboundRules: ExtraInboundRule[];
}

export interface ExtraInboundRule {
    protocol: string;
    port?: string;
    sourceIps: string[];
    description?: string;
}

/** Arguments shared by GatewayHost and SandboxHost. */
export interface HostArgs {
    prefix: string;
    server: HostServerArgs;
    tailnet: Tailnet;
    tailnetTag: string;
    /** The hcloud SSH key used only through Hetzner's rescue system. */
    breakGlassSshKeyId: pulumi.Input<string>;
    /** The built sandbox-shell reference, when the stack builds it (filled into user_data at deploy). */
    builtSandboxShell?: pulumi.Output<string>;
    /** Where the host downloads the host code bundle its user_data names (HostBundle). */
    bundleUrl: pulumi.Output<string>;
    /** The host's join key generation (joinGeneration): a new one replaces its join key. */
    joinGeneration: string;
    /** The sandbox's ssh host key: the sandbox gets the pair, the gateway pins the public half. */
    sandboxHostKey: { publicKey: pulumi.Output<string>; privateKey?: pulumi.Output<string> };
}

/** The one inbound port a host opens to the internet: Tailscale's direct (peer-to-peer) UDP. */
export const TAILSCALE_DIRECT_PORT = "41641";
const ANYWHERE = ["0.0.0.0/0", "::/0"];

/**
 * Inbound rules for every host: Tailscale direct connections and ICMP, and no TCP
 * at all. Everything else reaches a host over the tailnet, which this firewall
 * never sees (it is encrypted inside the UDP flow).
 */
export function hostFirewallRules(extra: ExtraInboundRule[] = []): hcloud.types.input.FirewallRule[] {
    return [
        { direction: "in", protocol: "udp", port: TAILSCALE_DIRECT_PORT, sourceIps: ANYWHERE, description: "Tailscale direct connections" },
        { direction: "in", protocol: "icmp", sourceIps: ANYWHERE, description: "ICMP (path MTU discovery, ping)" },
        // Stack-configured loosening; the policy gate judges each one.
        ...extra.map((rule) => ({ direction: "in", ...rule })),
    ];
}

export interface HostResources {
    firewall: hcloud.Firewall;
    joinKey: tailscale.TailnetKey;
    server: hcloud.Server;
}

/**
 * Firewall, join key, rendered artifacts and server for one host. The server is
 * created with its firewall attached (never a moment without it), and names and
 * labels are fixed so a firewall is never renamed (renaming has dropped rules).
 */
export function provisionHost(
    parent: pulumi.ComponentResource,
    name: string,
    role: HostRole,
    args: HostArgs,
    rendered: pulumi.Output<RenderedHost>,
    hostname: string,
): HostResources {
    const labels = { airlock: args.prefix, "airlock-role": role };

    const firewall = new hcloud.Firewall(
        `${name}-firewall`,
        { name: `${hostname}-firewall`, labels, rules: hostFirewallRules(args.server.extraInboundRules) },
        { parent },
    );

    // What the host's server is created from, but its join key: a single-use key is good for
    // one server, so whatever creates a server anew creates its key anew (its trigger). The
    // sandbox is replaced when its document or a deploy-time value in it changes; the gateway
    // only when it has no server (a new generation), since it reads all of it once.
    const serverInputs = pulumi
        .all([rendered, args.builtSandboxShell ?? "", args.sandboxHostKey.publicKey, args.bundleUrl])
        .apply(([host, built, hostPublicKey, bundleUrl]) =>
            createHash("sha256")
                .update(JSON.stringify([host.cloudInit, built, hostPublicKey, bundleUrl, args.server.image, args.server.location, hostname]))
                .digest("hex"),
        );
    const joinKey = args.tailnet.joinKey(
        `${name}-join-key`,
        {
            tag: args.tailnetTag,
            ephemeral: role === "sandbox",
            description: `airlock ${hostname}`,
            replacementTrigger: role === "sandbox" ? pulumi.interpolate`${args.joinGeneration}:${serverInputs}` : args.joinGeneration,
        },
        parent,
    );

    // The document and the bundle it names: every file the host writes is derived from them (the plan
    // writes them out, the gate judges each as the host's installer fills it in).
    artifactStash(`${name}-artifacts`, rendered.apply((host): Artifacts => ({ "cloud-init.yaml": host.cloudInit, [host.bundle.name]: host.bundle.text })), parent);

    // The rendered document plus what only exists at deploy time: the join key, the
    // sandbox's host key (its pair on the sandbox, its public half on the gateway),
    // the bundle's URL and the built image's digest-pinned reference.
    const userData = pulumi
        .all([rendered, joinKey.key, args.builtSandboxShell ?? "", args.sandboxHostKey.publicKey, args.sandboxHostKey.privateKey, args.bundleUrl])
        .apply(([host, key, built, hostPublicKey, hostPrivateKey, bundleUrl]) => {
            const withKeys = withBundleUrl(withSandboxHostKey(withTailnetKey(host.cloudInit, key), hostPublicKey, hostPrivateKey), bundleUrl);
            // Sent as base64 of its gzip (cloud-init's Hetzner datasource decodes it): about a third of its length.
            return encodeUserData(built ? withBuiltImage(withKeys, BUILT_SANDBOX_SHELL_PLACEHOLDER, built) : withKeys);
        });

    const server = new hcloud.Server(
        `${name}-server`,
        {
            name: hostname,
            serverType: args.server.serverType,
            image: args.server.image,
            location: args.server.location,
            labels: { ...labels, [JOIN_GENERATION_LABEL]: args.joinGeneration },
            firewallIds: [firewall.id.apply(Number)],
            // An SSH key also stops Hetzner from e-mailing a root password.
            sshKeys: [args.breakGlassSshKeyId],
            publicNets: [{ ipv4Enabled: true, ipv6Enabled: true }],
            userData,
            // Deleted (replaced, destroyed) only after a clean shutdown: the workspace's or state's
            // filesystem and the record's last lines are on disk before the volume detaches.
            shutdownBeforeDeletion: true,
            deleteProtection: args.server.protect,
            rebuildProtection: args.server.protect,
        },
        // hcloud server names are unique: the old server must go before its replacement.
        // Its SSH keys are read once, at creation (the break-glass way in is the rescue
        // system, which takes its keys when enabled): a key that changes since, or moves
        // to another stack's copy, never replaces the server. The gateway is a pet (it
        // holds the agent's state, keys and record copies): its user_data is read once,
        // and so are its image and location, because Pulumi creates a replacement from
        // the ignored inputs' recorded values (the old document, its used join key). A
        // changed template, image or setting never replaces it; rebuilding it is the
        // operator's explicit act (docs/day-two.md), which creates it from the current one.
        {
            parent,
            deleteBeforeReplace: true,
            protect: args.server.protect,
            ignoreChanges: role === "gateway" ? ["sshKeys", "userData", "image", "location"] : ["sshKeys"],
        },
    );

    return { firewall, joinKey, server };
}
