import * as pulumi from "@pulumi/pulumi";
import type { StackConfig } from "./config/schema";
import { HostArgs, provisionHost } from "./host";
import { renderGateway } from "./render/hosts";
import type { ResolvedImages } from "./workloads/compose";

export interface GatewayHostArgs extends HostArgs {
    config: StackConfig;
    images: pulumi.Output<ResolvedImages>;
}

/** The agent's "brain": its runtime, the sandbox's DNS resolver, the ssh client. */
export class GatewayHost extends pulumi.ComponentResource {
    readonly serverId: pulumi.Output<string>;
    readonly ipv4Address: pulumi.Output<string>;
    readonly hostname: string;

    constructor(name: string, args: GatewayHostArgs, opts?: pulumi.ComponentResourceOptions) {
        super("airlock:index:GatewayHost", name, {}, opts);
        this.hostname = args.config.hostnames.gateway;
        const rendered = args.images.apply((images) => renderGateway(args.config, images));
        const { server } = provisionHost(this, name, "gateway", args, rendered, this.hostname);

        this.serverId = server.id;
        this.ipv4Address = server.ipv4Address;
        this.registerOutputs({ serverId: this.serverId, hostname: this.hostname });
    }
}
