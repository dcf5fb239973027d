import * as fs from "node:fs";
import * as path from "node:path";
import { ChildProcess, spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { DNS_REDIRECT_PATH } from "../components/render/hosts";
import { RESOLVER_PUBLISHED_PORT } from "../components/workloads/compose";
import { renderHosts, renderedFile, stackFile, tempDir } from "./helpers/stacks";
import { isRoot, run, toolsAvailable } from "./helpers/tools";

/**
 * The gateway's DNS path, in two network namespaces: the sandbox sends to the
 * gateway's tailnet port 53; the rendered redirect delivers it to a resolver
 * stand-in that an unprivileged user runs on the published port. No user on the
 * gateway needs the right to bind a port below 1024.
 */

const canRun = isRoot() && toolsAvailable("gateway DNS redirect", ["ip", "nft", "socat", "runuser"]);
if (!isRoot()) console.warn("SKIPPED gateway DNS redirect: needs root for network namespaces (CI runs it as root)");

const GATEWAY = "100.100.7.53";
const SANDBOX = "100.100.7.1";

describe.runIf(canRun)("the gateway's tailnet DNS redirect", () => {
    const tag = String(process.pid % 10000);
    const gw = `al-dns-gw-${tag}`;
    const sb = `al-dns-sb-${tag}`;
    const listeners: ChildProcess[] = [];
    const inNs = (ns: string, cmd: string[], input?: string) => run("ip", ["netns", "exec", ns, ...cmd], { input, timeout: 15_000 });

    beforeAll(async () => {
        const gateway = renderHosts(readStackFile(stackFile("dev"))).gateway;
        const rules = path.join(tempDir("dns-redirect"), "dns-redirect.nft");
        fs.writeFileSync(rules, renderedFile(gateway, DNS_REDIRECT_PATH));
        for (const ns of [gw, sb]) run("ip", ["netns", "del", ns]);
        for (const args of [
            ["netns", "add", gw],
            ["netns", "add", sb],
            ["link", "add", "tailscale0", "netns", gw, "type", "veth", "peer", "name", "tailscale0", "netns", sb],
            ["-n", gw, "addr", "add", `${GATEWAY}/24`, "dev", "tailscale0"],
            ["-n", sb, "addr", "add", `${SANDBOX}/24`, "dev", "tailscale0"],
            ["-n", gw, "link", "set", "tailscale0", "up"],
            ["-n", sb, "link", "set", "tailscale0", "up"],
            ["-n", gw, "link", "set", "lo", "up"],
            ["-n", sb, "link", "set", "lo", "up"],
        ]) {
            const result = run("ip", args);
            if (result.status !== 0) throw new Error(`ip ${args.join(" ")}: ${result.stderr}`);
        }
        const loaded = inNs(gw, ["nft", "--file", rules]);
        expect(loaded.status, loaded.stderr).toBe(0);
        // The resolver stand-in, as an unprivileged user (the agent's rootless Docker publishes as the agent).
        // It reads the query before it answers: a TCP listener that closed with the query unread
        // reset the connection, and the client lost the answer (one full run in CI).
        for (const proto of ["UDP4-RECVFROM", "TCP4-LISTEN"]) {
            listeners.push(
                spawn("ip", ["netns", "exec", gw, "runuser", "-u", "nobody", "--", "socat", `${proto}:${RESOLVER_PUBLISHED_PORT},bind=${GATEWAY},fork,reuseaddr`, "SYSTEM:read -r query; echo answer-from-the-resolver"], { stdio: "ignore" }),
            );
        }
        // Listening when a direct query to the published port is answered, over each protocol
        // (a full run once asked over TCP before that listener was up).
        for (const proto of ["UDP4", "TCP4"]) {
            for (let i = 0; i < 50 && !inNs(sb, ["socat", "-T", "1", "-", `${proto}:${GATEWAY}:${RESOLVER_PUBLISHED_PORT}`], "ready?\n").stdout.includes("answer"); i++) {
                await new Promise((resolve) => setTimeout(resolve, 100));
            }
        }
    });

    afterAll(() => {
        for (const listener of listeners) listener.kill("SIGTERM");
        run("pkill", ["-u", "nobody", "-f", `socat .*:${RESOLVER_PUBLISHED_PORT}`]);
        for (const ns of [gw, sb]) run("ip", ["netns", "del", ns]);
    });

    it("the sandbox's DNS to the gateway's port 53 reaches the resolver, over UDP and TCP", () => {
        for (const proto of ["UDP4", "TCP4"]) {
            const query = inNs(sb, ["socat", "-T", "3", "-", `${proto}:${GATEWAY}:53`], "query\n");
            expect(query.stdout, `${proto}: ${query.stderr}`).toContain("answer-from-the-resolver");
        }
    });

    it("an unprivileged user on the gateway cannot bind a port below 1024", () => {
        const bind = inNs(gw, ["runuser", "-u", "nobody", "--", "socat", "-T", "1", `UDP4-RECVFROM:53,bind=${GATEWAY}`, "SYSTEM:true"]);
        expect(bind.status).not.toBe(0);
        expect(bind.stderr).toMatch(/Permission denied/);
    });

    it("nothing the gateway renders lowers the unprivileged port floor", () => {
        const gateway = renderHosts(readStackFile(stackFile("prod"))).gateway;
        expect(gateway.files.filter((f) => /ip_unprivileged_port_start/.test(f.content) && !f.path.endsWith(".nft")).map((f) => f.path)).toEqual([]);
    });
});
