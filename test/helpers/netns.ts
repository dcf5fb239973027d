import { ChildProcess, spawn } from "node:child_process";
import * as fs from "node:fs";
import { run } from "./tools";

/**
 * Two network namespaces joined by two veth links: a "tailnet" link inside
 * 100.64.0.0/10 and a "public" link. Every packet of the e2e tests stays between
 * these namespaces; nothing reaches the machine's own network.
 */
export interface TestNet {
    client: string;
    server: string;
    serverTailnet: string;
    serverPublic: string;
    close(): void;
}

function ip(...args: string[]): void {
    const result = run("ip", args);
    if (result.status !== 0) throw new Error(`ip ${args.join(" ")}: ${result.stderr.trim()}`);
}

/**
 * `label`: up to three letters no other test file uses. Files run side by side, and one
 * that took another's namespace names would delete its namespaces on the way in (tags
 * made of pid arithmetic alone collided whenever two workers' pids were a step apart).
 */
export function createTestNet(label: string): TestNet {
    if (!/^[a-z]{1,3}$/.test(label)) throw new Error(`createTestNet: label ${JSON.stringify(label)} is not one to three lowercase letters`);
    // Interface names below stay within Linux's 15 characters: "al" + 3 + 7 digits of a pid + 2.
    const tag = `${label}${process.pid}`;
    const client = `al-${tag}-c`;
    const server = `al-${tag}-s`;
    const links = [
        // name pair, server address, client address
        { c: `al${tag}tc`, s: `al${tag}ts`, server: "100.100.7.1", client: "100.100.7.2" },
        { c: `al${tag}pc`, s: `al${tag}ps`, server: "198.18.7.1", client: "198.18.7.2" },
    ];
    const close = () => {
        run("ip", ["netns", "del", client]);
        run("ip", ["netns", "del", server]);
    };
    close();
    try {
        ip("netns", "add", client);
        ip("netns", "add", server);
        for (const ns of [client, server]) ip("-n", ns, "link", "set", "lo", "up");
        for (const link of links) {
            ip("link", "add", link.c, "netns", client, "type", "veth", "peer", "name", link.s, "netns", server);
            ip("-n", server, "addr", "add", `${link.server}/24`, "dev", link.s);
            ip("-n", client, "addr", "add", `${link.client}/24`, "dev", link.c);
            ip("-n", server, "link", "set", link.s, "up");
            ip("-n", client, "link", "set", link.c, "up");
        }
    } catch (err) {
        close();
        throw err;
    }
    return { client, server, serverTailnet: links[0].server, serverPublic: links[1].server, close };
}

/** Runs a command inside a namespace and waits for it. */
export function inNamespace(ns: string, cmd: string[], options: { env?: NodeJS.ProcessEnv; input?: string } = {}) {
    return run("ip", ["netns", "exec", ns, ...cmd], { env: options.env ?? process.env, input: options.input, timeout: 30_000 });
}

/**
 * Starts a long-running command inside a namespace, its output going straight to
 * `logFile`: a pipe would fill while the tests block in spawnSync, and then block it.
 */
export function spawnInNamespace(ns: string, script: string, logFile: string): ChildProcess {
    const log = fs.openSync(logFile, "a");
    const child = spawn("ip", ["netns", "exec", ns, "bash", "-c", script], { stdio: ["ignore", log, log] });
    fs.closeSync(log);
    return child;
}

/** Waits until a TCP port accepts connections from inside `ns`. */
export async function waitForPort(ns: string, host: string, port: number, seconds = 10): Promise<void> {
    for (let i = 0; i < seconds * 10; i++) {
        if (inNamespace(ns, ["bash", "-c", `exec 3<>/dev/tcp/${host}/${port}`]).status === 0) return;
        await new Promise((resolve) => setTimeout(resolve, 100));
    }
    throw new Error(`${host}:${port} not listening after ${seconds}s`);
}
