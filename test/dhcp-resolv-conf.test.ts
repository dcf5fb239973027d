import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { DHCP_KEEP_RESOLV_CONF_PATH, DHCPCD_ENTER_HOOK_PATH } from "../components/render/hosts";
import { debianRootfs, extractRootfs } from "./helpers/nspawn";
import { renderedFile, renderHosts, SHIPPED_STACKS, stackFile, tempDir } from "./helpers/stacks";
import { isRoot, toolsAvailable } from "./helpers/tools";

/**
 * Debian's dhclient-script (isc-dhcp-client, what a Hetzner Debian image runs on eth0)
 * writes the lease's resolvers into /etc/resolv.conf at boot and at every renewal. The
 * sandbox's resolv.conf names only the gateway's resolver, and the gateway's is
 * Tailscale's: the rendered enter hook keeps both. Here the real dhclient-script runs a
 * lease (BOUND, then RENEW) on a dummy interface, in a network and mount namespace of its
 * own, over a private /etc/resolv.conf and hook directories, once without the hook and
 * once with it. Debian 13's ifupdown recommends dhcpcd instead (the twin's guests run it):
 * its dhcpcd-run-hooks, from a root filesystem of the hosts' release, runs the same lease
 * with and without the rendered enter hook.
 */

const canRun = isRoot() && toolsAvailable("dhclient-script's resolv.conf", ["dhclient-script", "unshare", "mount", "ip"]);
if (!isRoot()) console.warn("SKIPPED dhclient-script's resolv.conf: needs root (namespaces)");

const OURS = "# airlock: the gateway's AdGuard Home is the only resolver.\nnameserver 100.100.7.2\noptions edns0\n";
/** Every shipped stack's two hosts: each renders both hooks. */
const HOSTS = SHIPPED_STACKS.flatMap((stack) => (["gateway", "sandbox"] as const).map((role) => [stack, role] as const));
const LEASE = "new_ip_address=192.0.2.10 new_subnet_mask=255.255.255.0 new_broadcast_address=192.0.2.255 new_routers=192.0.2.1 new_domain_name_servers='185.12.64.1 185.12.64.2'";

/** resolv.conf after a lease is bound and renewed, with `hook` (or nothing) in the enter hooks. */
function afterLease(hook: string | undefined): string {
    const dir = tempDir("dhcp");
    for (const sub of ["enter", "exit"]) fs.mkdirSync(path.join(dir, sub));
    if (hook !== undefined) fs.writeFileSync(path.join(dir, "enter", path.basename(DHCP_KEEP_RESOLV_CONF_PATH)), hook, { mode: 0o644 });
    const resolv = path.join(dir, "resolv.conf");
    fs.writeFileSync(resolv, OURS);
    const script = [
        "set -e",
        `mount --bind ${resolv} /etc/resolv.conf`,
        `mount --bind ${dir}/enter /etc/dhcp/dhclient-enter-hooks.d`,
        `mount --bind ${dir}/exit /etc/dhcp/dhclient-exit-hooks.d`,
        "ip link add d0 type dummy && ip link set d0 up",
        `env reason=BOUND interface=d0 ${LEASE} dhclient-script`,
        `env reason=RENEW interface=d0 old_ip_address=192.0.2.10 ${LEASE} dhclient-script`,
    ].join("\n");
    const ran = spawnSync("unshare", ["--mount", "--net", "bash", "-c", script], { encoding: "utf8" });
    expect(ran.status, ran.stderr).toBe(0);
    return fs.readFileSync(resolv, "utf8");
}

describe.runIf(canRun)("a DHCP lease and resolv.conf", () => {
    it("without the hook, dhclient-script puts the lease's resolvers in resolv.conf (what the hook is for)", () => {
        expect(afterLease(undefined)).toMatch(/^nameserver 185\.12\.64\.1$/m);
    });

    it.each(HOSTS)(
        "%s/%s: with the rendered hook, a lease at boot and its renewal leave resolv.conf as it was",
        (stack, role) => {
            const hook = renderedFile(renderHosts(readStackFile(stackFile(stack)))[role], DHCP_KEEP_RESOLV_CONF_PATH);
            expect(afterLease(hook)).toBe(OURS);
        },
    );
});

const canRunDhcpcd = isRoot() && toolsAvailable("dhcpcd-run-hooks' resolv.conf", ["mmdebstrap", "chroot", "tar"]);
if (!isRoot()) console.warn("SKIPPED dhcpcd-run-hooks' resolv.conf: needs root (chroot)");

describe.runIf(canRunDhcpcd)("a dhcpcd lease and resolv.conf (Debian 13's DHCP client)", () => {
    const tarball = canRunDhcpcd ? debianRootfs(["dhcpcd-base"]) : "";

    /** resolv.conf after dhcpcd's hooks run a lease bound and renewed, with `hook` (or nothing) as its enter hook. */
    function afterDhcpcdLease(hook: string | undefined): string {
        const root = path.join(tempDir("dhcpcd"), "root");
        extractRootfs(tarball, root);
        if (hook !== undefined) fs.writeFileSync(path.join(root, DHCPCD_ENTER_HOOK_PATH), hook, { mode: 0o644 });
        const resolv = path.join(root, "etc/resolv.conf");
        fs.rmSync(resolv, { force: true });
        fs.writeFileSync(resolv, OURS);
        // What dhcpcd exports to its hooks for a configured, up interface (dhcpcd-run-hooks(8)).
        const lease = ["interface=d0", "protocol=dhcp", "if_configured=true", "if_up=true", "if_down=false", "new_domain_name_servers=185.12.64.1 185.12.64.2"];
        for (const reason of ["BOUND", "RENEW"]) {
            const ran = spawnSync("chroot", [root, "env", "-i", "PATH=/usr/sbin:/usr/bin", `reason=${reason}`, ...lease, "/usr/lib/dhcpcd/dhcpcd-run-hooks"], { encoding: "utf8" });
            expect(ran.status, ran.stderr).toBe(0);
        }
        const text = fs.readFileSync(resolv, "utf8");
        fs.rmSync(path.dirname(root), { recursive: true, force: true });
        return text;
    }

    it("without the hook, dhcpcd's 20-resolv.conf puts the lease's resolvers in resolv.conf (what the hook is for)", () => {
        expect(afterDhcpcdLease(undefined)).toMatch(/^nameserver 185\.12\.64\.1$/m);
    });

    it.each(HOSTS)(
        "%s/%s: with the rendered enter hook, a lease and its renewal leave resolv.conf as it was",
        (stack, role) => {
            const hook = renderedFile(renderHosts(readStackFile(stackFile(stack)))[role], DHCPCD_ENTER_HOOK_PATH);
            expect(afterDhcpcdLease(hook)).toBe(OURS);
        },
    );
});
