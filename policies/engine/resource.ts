import { STASH_TYPE } from "../contract";

/** A resource as every front end sees it: preview steps, stack exports, CrossGuard args, mocks. */
export interface PlannedResourceLike {
    urn: string;
    type: string;
    name: string;
    parent?: string;
    inputs: Record<string, unknown>;
}

export const TYPES = {
    server: "hcloud:index/server:Server",
    firewall: "hcloud:index/firewall:Firewall",
    tailnetKey: "tailscale:index/tailnetKey:TailnetKey",
    acl: "tailscale:index/acl:Acl",
    stash: STASH_TYPE,
    dockerContainer: "docker:index/container:Container",
} as const;
