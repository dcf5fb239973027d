/** Address classification for listen addresses, published ports and firewall sources. */

export { TAILNET_IPV4_PLACEHOLDER } from "../contract";

export function parseIpv4(text: string): number | undefined {
    const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text);
    if (!m) return undefined;
    const octets = m.slice(1).map(Number);
    if (octets.some((o) => o > 255)) return undefined;
    return ((octets[0] << 24) >>> 0) + (octets[1] << 16) + (octets[2] << 8) + octets[3];
}

/** 8 groups of 16 bits, or undefined. */
export function parseIpv6(text: string): number[] | undefined {
    const zone = text.split("%")[0];
    if (!/^[0-9a-fA-F:.]+$/.test(zone) || !zone.includes(":")) return undefined;
    const halves = zone.split("::");
    if (halves.length > 2) return undefined;
    const parse = (part: string) => (part === "" ? [] : part.split(":"));
    const head = parse(halves[0]);
    const tail = halves.length === 2 ? parse(halves[1]) : [];
    const groups = (list: string[]) => list.map((g) => (/^[0-9a-fA-F]{1,4}$/.test(g) ? parseInt(g, 16) : NaN));
    const h = groups(head);
    const t = groups(tail);
    const missing = 8 - h.length - t.length;
    if (h.some(isNaN) || t.some(isNaN) || (halves.length === 1 ? missing !== 0 : missing < 1)) return undefined;
    return [...h, ...new Array(halves.length === 2 ? missing : 0).fill(0), ...t];
}

function inIpv4Cidr(ip: number, base: string, bits: number): boolean {
    const mask = bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0;
    return ((ip & mask) >>> 0) === ((parseIpv4(base)! & mask) >>> 0);
}

function inIpv6Prefix(ip: number[], prefix: number[], bits: number): boolean {
    for (let i = 0; i < 8 && bits > 0; i++, bits -= 16) {
        const take = Math.min(16, bits);
        const mask = (0xffff << (16 - take)) & 0xffff;
        if ((ip[i] & mask) !== (prefix[i] & mask)) return false;
    }
    return true;
}

/** 100.64.0.0/10 (Tailscale's CGNAT range) or fd7a:115c:a1e0::/48. */
export function isTailnetAddress(address: string): boolean {
    const v4 = parseIpv4(address);
    if (v4 !== undefined) return inIpv4Cidr(v4, "100.64.0.0", 10);
    const v6 = parseIpv6(address);
    return v6 !== undefined && inIpv6Prefix(v6, [0xfd7a, 0x115c, 0xa1e0, 0, 0, 0, 0, 0], 48);
}

export function isLoopbackAddress(address: string): boolean {
    const v4 = parseIpv4(address);
    if (v4 !== undefined) return inIpv4Cidr(v4, "127.0.0.0", 8);
    const v6 = parseIpv6(address);
    return v6 !== undefined && v6.slice(0, 7).every((g) => g === 0) && v6[7] === 1;
}

/**
 * A source range wide enough to count as "the internet": the default routes, or
 * any IPv4 prefix of /16 or shorter, any IPv6 prefix of /32 or shorter.
 */
export function isWideRange(cidr: string): boolean {
    const [address, bitsText] = cidr.split("/");
    const v4 = parseIpv4(address);
    if (v4 !== undefined) return bitsText === undefined ? false : Number(bitsText) <= 16;
    if (parseIpv6(address) !== undefined) return bitsText === undefined ? false : Number(bitsText) <= 32;
    return true; // not an address at all: treat as wide, never as narrow
}

/** "100.64.0.1", "100.64.0.1:22", "[fd7a:115c:a1e0::1]:22" -> the host part. */
export function hostOfListenAddress(value: string): string {
    const bracketed = /^\[([^\]]+)\](?::\d+)?$/.exec(value);
    if (bracketed) return bracketed[1];
    const v4port = /^([^:]+):\d+$/.exec(value);
    if (v4port) return v4port[1];
    return value;
}
