import * as hcloud from "@pulumi/hcloud";
import * as pulumi from "@pulumi/pulumi";
import type { StackConfig } from "./config/schema";
import { HostArgs, provisionHost } from "./host";
import { renderSandbox } from "./render/hosts";
import type { ResolvedImages } from "./workloads/compose";

export interface SandboxHostArgs extends HostArgs {
    config: StackConfig;
    images: pulumi.Output<ResolvedImages>;
    workspaceVolumeGb: number;
    protectWorkspace: boolean;
    /** Keep the volume when the stack is destroyed or the volume replaced (retainOnDelete). */
    keepWorkspaceOnDelete: boolean;
}

/**
 * The agent's "hands": every command runs here, in a container, behind sshd's
 * ForceCommand. The server is cattle; /workspace lives on a Volume that survives it.
 */
export class SandboxHost extends pulumi.ComponentResource {
    readonly serverId: pulumi.Output<string>;
    readonly workspaceVolumeId: pulumi.Output<string>;
    readonly hostname: string;

    constructor(name: string, args: SandboxHostArgs, opts?: pulumi.ComponentResourceOptions) {
        super("airlock:index:SandboxHost", name, {}, opts);
        this.hostname = args.config.hostnames.sandbox;
        const rendered = args.images.apply((images) => renderSandbox(args.config, images));
        const { server } = provisionHost(this, name, "sandbox", args, rendered, this.hostname);

        const workspace = new hcloud.Volume(
            `${name}-workspace`,
            {
                name: `${this.hostname}-workspace`,
                size: args.workspaceVolumeGb,
                location: args.server.location,
                // Unformatted: airlock-mount-workspace makes it btrfs on first use (checkpoints need
                // snapshots). Dropping `format` from an existing ext4 volume changes nothing on it.
                labels: { airlock: args.prefix, "airlock-role": "workspace" },
                deleteProtection: args.protectWorkspace,
            },
            { parent: this, protect: args.protectWorkspace, retainOnDelete: args.keepWorkspaceOnDelete },
        );
        // Mounted by airlock-mount-workspace at boot, not by Hetzner's automount.
        new hcloud.VolumeAttachment(
            `${name}-workspace-attachment`,
            { serverId: server.id.apply(Number), volumeId: workspace.id.apply(Number), automount: false },
            { parent: this },
        );

        this.serverId = server.id;
        this.workspaceVolumeId = workspace.id;
        this.registerOutputs({ serverId: this.serverId, workspaceVolumeId: this.workspaceVolumeId, hostname: this.hostname });
    }
}
