import { randomBytes } from "node:crypto";
import * as hcloud from "@pulumi/hcloud";
import * as pulumi from "@pulumi/pulumi";
import type { HostRole } from "./render/hosts";

/** The server label that remembers the join key generation a host was created with. */
export const JOIN_GENERATION_LABEL = "airlock-join-generation";

/** What a preview shows for a host that has no server yet: the `up` draws the real one. */
export const PREVIEW_GENERATION = "preview";

/**
 * The join key generation of one host: the one its server was created with (its label),
 * or a new one when the project has no server of that name and role: a first `up`, an
 * `up` after one that failed before the server existed, or after the server was
 * destroyed to rebuild it. A host's join key is replaced when its generation changes, so
 * a server is never created with a key an earlier `up` minted (expired since, or used by
 * a server that is gone). Hetzner's labels are the memory because they live and die with
 * the server, which Pulumi's state does not when an `up` fails half-way.
 */
export async function joinGeneration(prefix: string, role: HostRole, hostname: string): Promise<string> {
    const { servers } = await hcloud.getServers({ withSelector: `airlock=${prefix},airlock-role=${role}` });
    const remembered = servers.find((server) => server.name === hostname)?.labels?.[JOIN_GENERATION_LABEL];
    if (remembered) return remembered;
    return pulumi.runtime.isDryRun() ? PREVIEW_GENERATION : randomBytes(8).toString("hex");
}
