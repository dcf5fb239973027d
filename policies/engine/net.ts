/** Address classification for listen addresses, published ports and firewall sources. */

import { BlockList, isIP } from "node:net";

export { TAILNET_IPV4_PLACEHOLDER } from "../contract";

/** The family of an address ("fe80::1%eth0" counts without its zone), by the platform's own parser. */
function familyOf(address: string): "ipv4" | "ipv6" | undefined {
    const kind = isIP(address.split("%")[0]);
    return kind === 4 ? "ipv4" : kind === 6 ? "ipv6" : undefined;
}

/** Whether `address` is in `list`; an IPv4-mapped IPv6 address (::ffff:127.0.0.1) is judged as its IPv4 address. */
function within(list: BlockList, address: string): boolean {
    const family = familyOf(address);
    return family !== undefined && list.check(address.split("%")[0], family);
}

const TAILNET = new BlockList();
// Tailscale's CGNAT range and its IPv6 ULA prefix.
TAILNET.addSubnet("100.64.0.0", 10, "ipv4");
TAILNET.addSubnet("fd7a:115c:a1e0::", 48, "ipv6");

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet("127.0.0.0", 8, "ipv4");
LOOPBACK.addAddress("::1", "ipv6");

/** 100.64.0.0/10 (Tailscale's CGNAT range) or fd7a:115c:a1e0::/48. */
export function isTailnetAddress(address: string): boolean {
    return within(TAILNET, address);
}

export function isLoopbackAddress(address: string): boolean {
    return within(LOOPBACK, address);
}

/**
 * A source range wide enough to count as "the internet": the default routes, or
 * any IPv4 prefix of /16 or shorter, any IPv6 prefix of /32 or shorter.
 */
export function isWideRange(cidr: string): boolean {
    const [address, bitsText] = cidr.split("/");
    const family = familyOf(address);
    if (family === undefined) return true; // not an address at all: treat as wide, never as narrow
    if (bitsText === undefined) return false;
    // An IPv4-mapped IPv6 prefix is an IPv4 prefix 96 bits longer.
    const mapped = family === "ipv6" && /^::ffff:/i.test(address) ? 96 : 0;
    return Number(bitsText) - mapped <= (family === "ipv4" || mapped ? 16 : 32);
}

/** "100.64.0.1", "100.64.0.1:22", "[fd7a:115c:a1e0::1]:22" -> the host part. */
export function hostOfListenAddress(value: string): string {
    const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(value);
    if (bracketed) return bracketed[1];
    const v4port = /^([^:]+):\d+$/.exec(value);
    if (v4port) return v4port[1];
    return value;
}
