import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { GUESTS, GuestRole, METADATA_ADDRESS } from "./contract";
import { fillTwinFile, TWIN_DIR } from "./files";
import { daemonRunning, runDirOf, startDaemon, stopDaemon } from "./network";

/** What Hetzner's metadata service knows about one server. */
export interface ServerMetadata {
    hostname: string;
    /** The server's id: also its SMBIOS serial, which cloud-init compares with it. */
    instanceId: string;
    location: string;
    /** The server's ssh keys (hcloud_server.ssh_keys), as Hetzner lists them. */
    publicKeys: string[];
    userData: string;
}

const metadataDir = (stack: string) => path.join(runDirOf(stack), "metadata");

/**
 * Hetzner's API refuses to create a server whose user_data is longer than this (API reference,
 * "Create a Server", user_data: "Length must be between 0 and 32768"); it counts characters.
 */
export const USER_DATA_MAX_CHARACTERS = 32_768;

/**
 * Publishes a server's metadata and user_data, as creating it does (the service reads them per
 * request): refused, with the API's own words, for user_data Hetzner would refuse.
 */
export function publishMetadata(stack: string, role: GuestRole, server: ServerMetadata): void {
    const length = [...server.userData].length;
    if (length > USER_DATA_MAX_CHARACTERS) throw new Error(`Hetzner refuses the ${role} server: user_data: Length must be between 0 and 32768 (it is ${length})`);
    const dir = path.join(metadataDir(stack), GUESTS[role].address);
    fs.mkdirSync(dir, { recursive: true });
    fs.writeFileSync(
        path.join(dir, "metadata.yaml"),
        fillTwinFile("metadata/metadata.yaml", {
            location: server.location,
            hostname: server.hostname,
            instanceId: server.instanceId,
            mac: GUESTS[role].mac,
            address: GUESTS[role].address,
            publicKeys: JSON.stringify(server.publicKeys),
        }),
    );
    fs.writeFileSync(path.join(dir, "userdata"), server.userData, { mode: 0o600 });
}

/** The metadata a guest is served now (undefined when none is published). */
export function publishedMetadata(stack: string, role: GuestRole): Record<string, unknown> | undefined {
    try {
        return YAML.parse(fs.readFileSync(path.join(metadataDir(stack), GUESTS[role].address, "metadata.yaml"), "utf8"));
    } catch {
        return undefined;
    }
}

export function publishedUserData(stack: string, role: GuestRole): string | undefined {
    try {
        return fs.readFileSync(path.join(metadataDir(stack), GUESTS[role].address, "userdata"), "utf8");
    } catch {
        return undefined;
    }
}

export function startMetadataService(stack: string): void {
    fs.mkdirSync(metadataDir(stack), { recursive: true });
    if (daemonRunning(stack, "metadata")) return;
    startDaemon(stack, "metadata", [process.execPath, path.join(TWIN_DIR, "metadata", "server.js"), metadataDir(stack), METADATA_ADDRESS, "80"]);
}

export function stopMetadataService(stack: string): void {
    stopDaemon(stack, "metadata");
}
