/**
 * The twin's fixed addresses, names and paths, shared by its parts (base image,
 * apt mirror, network, stand-ins, guests). Everything lives in one network
 * namespace per stack; nothing in it has a route off this machine.
 */
export const TWIN_CACHE_DIR = "/var/cache/airlock-twin";
/** The Debian release the hosts run (the stacks' default image, debian-13): the twin's guests, mirror and nspawn rigs follow it. */
export const HOST_SUITE = "trixie";
/** Per running twin: /run/airlock-twin/<stack>/ (pids, sockets, overlays, logs). */
export const TWIN_RUN_DIR = "/run/airlock-twin";
export const twinNetns = (stack: string) => `airlock-twin-${stack}`;

/** The guests' "public" network (Hetzner's public interface stand-in). */
export const PUBLIC_SUBNET = "10.77.0.0/24";
/** dnsmasq (DHCP and DNS for the guests) and the apt mirror (HTTP 80; HTTPS 443 as pkgs.tailscale.com and B2's download host). */
export const HOST_ADDRESS = "10.77.0.1";
/** The local registry (HTTPS 443) under the registry names the stack's images use. */
export const REGISTRY_ADDRESS = "10.77.0.2";
/** The Tailscale stand-in's coordinator (HTTP 80) as controlplane.tailscale.com. */
export const CONTROL_ADDRESS = "10.77.0.3";
/** The operator's laptop on the "internet" (twin/operator.ts): it reaches the gateway over the tailnet only. */
export const OPERATOR_ADDRESS = "10.77.0.20";
/** Hetzner's metadata service stand-in. */
export const METADATA_ADDRESS = "169.254.169.254";

export const GUESTS = {
    gateway: { address: "10.77.0.10", mac: "52:54:00:77:00:10" },
    sandbox: { address: "10.77.0.11", mac: "52:54:00:77:00:11" },
} as const;
export type GuestRole = keyof typeof GUESTS;

/**
 * B2's download host as b2_authorize_account names it for an account (apiInfo.storageApi.downloadUrl,
 * f000 to f005 by cluster): the twin's mirror answers as it, serving the host code bundle at
 * /file/<bucket>/<name> as B2 serves a public bucket's file.
 */
export const B2_DOWNLOAD_HOST = "f000.backblazeb2.com";

/** Names the twin's dnsmasq answers with its own services; every other name resolves to nothing. */
export const TWIN_NAMES: Record<string, string> = {
    "deb.debian.org": HOST_ADDRESS,
    "security.debian.org": HOST_ADDRESS,
    "pkgs.tailscale.com": HOST_ADDRESS,
    [B2_DOWNLOAD_HOST]: HOST_ADDRESS,
    "controlplane.tailscale.com": CONTROL_ADDRESS,
    "registry-1.docker.io": REGISTRY_ADDRESS,
};
