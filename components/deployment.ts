import * as hcloud from "@pulumi/hcloud";
import * as pulumi from "@pulumi/pulumi";
import * as tls from "@pulumi/tls";
import type { StackConfig } from "./config/schema";
import type { HostRole } from "./render/hosts";
import { GatewayHost } from "./gatewayHost";
import { HostBundle } from "./hostBundle";
import { renderBundle } from "./render/bundle";
import { BackupBucket } from "./backupBucket";
import { SandboxHost } from "./sandboxHost";
import { Tailnet } from "./tailnet";
import { Workloads } from "./workloads/workloads";

export interface DeploymentArgs {
    config: StackConfig;
    /** The id of the project's key with the break-glass public key, when another stack or the console made it (existingBreakGlassKeyId). */
    existingBreakGlassKeyId?: string;
    /** Each host's join key generation (joinGeneration): its server's label, or a new one when it has no server. */
    joinGenerations: Record<HostRole, string>;
}

/** One airlock environment: a gateway and a sandbox on a private tailnet. */
export class Deployment extends pulumi.ComponentResource {
    readonly tailnet: Tailnet;
    readonly gateway: GatewayHost;
    readonly sandbox: SandboxHost;
    readonly workloads: Workloads;
    /** The host code both hosts download at first boot. */
    readonly bundle: HostBundle;
    /** One bucket per machine; both are written by the gateway (the sandbox holds no backup key). */
    readonly backups: Record<"gateway" | "sandbox", BackupBucket>;

    constructor(name: string, args: DeploymentArgs, opts?: pulumi.ComponentResourceOptions) {
        super("airlock:index:Deployment", name, {}, opts);
        const cfg = args.config;

        // One key per fingerprint and project: an existing one is used, never created twice.
        const breakGlassSshKeyId =
            args.existingBreakGlassKeyId ??
            new hcloud.SshKey(
                `${name}-break-glass`,
                { name: `${cfg.prefix}-break-glass`, publicKey: cfg.breakGlassSshPublicKey, labels: { airlock: cfg.prefix } },
                { parent: this },
            ).id;

        this.tailnet = new Tailnet(
            `${name}-tailnet`,
            {
                gatewayTag: cfg.tailnet.gatewayTag,
                sandboxTag: cfg.tailnet.sandboxTag,
                tagOwners: cfg.tailnet.tagOwners,
                operators: cfg.tailnet.operators,
                manageAcl: cfg.tailnet.manageAcl,
                keyExpirySeconds: cfg.tailnet.keyExpirySeconds,
            },
            { parent: this },
        );

        // The sandbox's ssh identity: stable across sandbox replacements, so the
        // gateway's pin stays valid; replace this resource to rotate it.
        const sandboxHostKey = new tls.PrivateKey(`${name}-sandbox-host-key`, { algorithm: "ED25519" }, { parent: this });

        this.workloads = new Workloads(`${name}-workloads`, { config: cfg }, { parent: this });

        this.bundle = new HostBundle(
            `${name}-bundle`,
            {
                prefix: cfg.prefix,
                bundle: renderBundle(),
                mirrorUrl: cfg.hosts.bundleUrl,
                retentionDays: cfg.backup.retentionDays,
                uniqueSeed: cfg.breakGlassSshPublicKey,
            },
            { parent: this },
        );

        const common = {
            prefix: cfg.prefix,
            bundleUrl: this.bundle.url,
            tailnet: this.tailnet,
            breakGlassSshKeyId,
            config: cfg,
            images: this.workloads.images,
        };
        this.gateway = new GatewayHost(
            `${name}-gateway`,
            { ...common, server: cfg.gateway, tailnetTag: cfg.tailnet.gatewayTag, joinGeneration: args.joinGenerations.gateway, sandboxHostKey: { publicKey: sandboxHostKey.publicKeyOpenssh } },
            { parent: this },
        );
        this.sandbox = new SandboxHost(
            `${name}-sandbox`,
            {
                ...common,
                server: cfg.sandbox,
                tailnetTag: cfg.tailnet.sandboxTag,
                joinGeneration: args.joinGenerations.sandbox,
                builtSandboxShell: this.workloads.builtSandboxShell,
                sandboxHostKey: { publicKey: sandboxHostKey.publicKeyOpenssh, privateKey: sandboxHostKey.privateKeyOpenssh },
                workspaceVolumeGb: cfg.sandbox.workspaceVolumeGb,
                protectWorkspace: cfg.sandbox.protectWorkspace,
                keepWorkspaceOnDelete: !cfg.deleteDataOnDestroy,
            },
            { parent: this },
        );

        const backup = (machine: "gateway" | "sandbox") =>
            new BackupBucket(
                `${name}-${machine}-backups`,
                {
                    prefix: cfg.prefix,
                    machine,
                    retentionDays: cfg.backup.retentionDays,
                    objectLockDays: cfg.backup.objectLockDays,
                    pruneKey: cfg.backup.pruneKey,
                    keepOnDelete: !cfg.deleteDataOnDestroy,
                    uniqueSeed: cfg.breakGlassSshPublicKey,
                },
                { parent: this },
            );
        this.backups = { gateway: backup("gateway"), sandbox: backup("sandbox") };

        this.registerOutputs({
            gatewayHostname: this.gateway.hostname,
            sandboxHostname: this.sandbox.hostname,
            tailnetPolicy: this.tailnet.policyText,
        });
    }
}
