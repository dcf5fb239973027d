import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { readStackFile } from "../components/config/load";
import { DNS_CAPTURE_FILE_BYTES, DNS_CAPTURE_FILES, DNS_CAPTURE_LOG, DNS_CAPTURE_PER_CLIENT_SECOND } from "../components/render/hosts";
import { AUDIT_PROGRAM } from "../cli/audit";
import { NOT_KEPT, readQueryLog } from "../cli/querylog";
import { renderHosts, renderedFile, REPO, stackFile, tempDir } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * The gateway's DNS capture writer (templates/scripts/dns-capture) as rendered: it runs
 * tcpdump (here a stand-in that prints what a hostile packet makes tcpdump print) and
 * must keep the log bounded, line by line and in total, whatever arrives.
 */

const gateway = renderHosts(readStackFile(stackFile("dev"))).gateway;
const unit = renderedFile(gateway, "/etc/systemd/system/airlock-dns-capture.service");

function writer(): string {
    const file = path.join(tempDir("dns-capture"), "dns-capture");
    fs.writeFileSync(file, renderedFile(gateway, "/usr/local/libexec/airlock/dns-capture"), { mode: 0o755 });
    return file;
}

/** The writer over a stand-in tcpdump printing `script`'s lines, into 3 files of 64 KiB: its exit status and the lines kept, oldest first. */
function capture(name: string, script: string): { status: number | null; lines: string[] } {
    const dir = tempDir(name);
    const fakeTcpdump = path.join(dir, "tcpdump");
    fs.writeFileSync(fakeTcpdump, `#!/bin/bash\n${script}`, { mode: 0o755 });
    const { status } = run("python3", [writer(), path.join(dir, "queries.log"), String(64 * 1024), "3", "--", fakeTcpdump], { timeout: 60_000 });
    const files = ["queries.log.2", "queries.log.1", "queries.log"].filter((f) => fs.existsSync(path.join(dir, f)));
    return { status, lines: files.flatMap((f) => fs.readFileSync(path.join(dir, f), "utf8").split("\n").filter(Boolean)) };
}

describe.runIf(toolsAvailable("DNS capture writer", ["python3"]))("the gateway's DNS capture writer", () => {
    it("the unit runs tcpdump through the writer, as tcpdump's user with only CAP_NET_RAW, into a log bounded by size", () => {
        const execStart = /^ExecStart=(.+)$/m.exec(unit)![1].split(" ");
        expect(execStart.slice(0, 5)).toEqual(["/usr/local/libexec/airlock/dns-capture", DNS_CAPTURE_LOG, String(DNS_CAPTURE_FILE_BYTES), String(DNS_CAPTURE_FILES), "--"]);
        expect(execStart[5]).toBe("/usr/bin/tcpdump");
        expect(unit).toMatch(/^User=tcpdump$/m);
        expect(unit).toMatch(/^AmbientCapabilities=CAP_NET_RAW$/m);
        expect(unit).toMatch(/^CapabilityBoundingSet=CAP_NET_RAW$/m);
        expect(unit).toMatch(/^LogsDirectory=airlock\/dns$/m);
        // Nothing writes the log but the writer: tcpdump's stdout is the writer's pipe.
        expect(unit).not.toMatch(/^StandardOutput=/m);
        // At most 512 MiB on the gateway's disk.
        expect(DNS_CAPTURE_FILE_BYTES * DNS_CAPTURE_FILES).toBeLessThanOrEqual(512 * 1024 * 1024);
    });

    it("cuts a hostile line at 2 KiB and rotates by size, so a flood of them holds at most FILE_BYTES x FILES", () => {
        const dir = tempDir("dns-capture-log");
        const log = path.join(dir, "queries.log");
        // What one crafted datagram makes tcpdump print (189 questions, each a pointer to a 250-byte name): ~190 KB.
        const huge = `TIME.277416 IP 100.100.7.1.51364 > 100.100.7.2.53: 4+ ${"TXT? " + "M-^?".repeat(250) + ". ".repeat(1)}`.repeat(190);
        const fakeTcpdump = path.join(dir, "tcpdump");
        // One pair a second, well within a client's budget: only the size bounds what is kept.
        fs.writeFileSync(
            fakeTcpdump,
            `#!/bin/bash\nhuge='${huge}'\nfor i in $(seq 1 400); do printf '%s\\n' "\${huge/TIME/$((1795802757 + i))}"; printf '%d.277416 IP 100.100.7.1.51364 > 100.100.7.2.53: 5+ A? small-%s.example. (30)\\n' $((1795802757 + i)) "$i"; done\nexit 3\n`,
            { mode: 0o755 },
        );
        const result = run("python3", [writer(), log, String(64 * 1024), "3", "--", fakeTcpdump], { timeout: 60_000 });
        // tcpdump's status is the writer's: systemd starts both again.
        expect(result.status).toBe(3);
        const files = fs.readdirSync(dir).filter((n) => n.startsWith("queries.log")).sort();
        expect(files).toEqual(["queries.log", "queries.log.1", "queries.log.2"]);
        const total = files.reduce((n, f) => n + fs.statSync(path.join(dir, f)).size, 0);
        expect(total).toBeLessThanOrEqual(3 * (64 * 1024 + 2048 + 7));
        const oldestFirst = ["queries.log.2", "queries.log.1", "queries.log"];
        const lines = oldestFirst.flatMap((f) => fs.readFileSync(path.join(dir, f), "utf8").split("\n").filter(Boolean));
        expect(Math.max(...lines.map((l) => l.length))).toBeLessThanOrEqual(2048 + 6);
        expect(lines.filter((l) => l.endsWith(" [cut]")).length).toBeGreaterThan(0);
        // The newest small lines are all there, in order, each whole.
        const small = lines.filter((l) => l.includes("small-"));
        expect(small.at(-1)).toMatch(/A\? small-400\.example\. \(30\)$/);
        expect(fs.statSync(log).mode & 0o777).toBe(0o640);
    });

    it("a flood from one client cannot rotate an earlier lookup out: past its budget a second is counted in one line, which both readers show (red team 4)", () => {
        const second = 1795802757;
        // One lookup to hide, then 5000 queries in three seconds from the same client (about 500 KB, the capture holds 192 KiB).
        const { status, lines } = capture(
            "dns-capture-flood",
            `printf '${second - 60}.000001 IP 100.100.7.1.40000 > 100.100.7.2.53: 1+ TXT? secret-exfil.example. (40)\\n'\n` +
                `for i in $(seq 1 5000); do printf '%d.%06d IP 100.100.7.1.51364 > 100.100.7.2.53: 5+ A? flood-%08d.example.org. (40)\\n' $((${second} + i / 1700)) "$i" "$i"; done\n` +
                `printf '${second + 9}.000001 IP 100.100.7.3.40000 > 100.100.7.2.53: 2+ A? other-client.example. (40)\\n'\n`,
        );
        expect(status).toBe(0);
        const dir = tempDir("dns-capture-readers");
        expect(lines.some((l) => l.includes("secret-exfil.example")), "the lookup before the flood was rotated out").toBe(true);
        const kept = lines.filter((l) => l.includes("A? flood-"));
        const counted = lines.map((l) => /^\d+\.999999 airlock-dns-capture: 100\.100\.7\.1 sent (\d+) more queries this second, not kept$/.exec(l)).filter((m) => m !== null);
        expect(kept.length).toBe(3 * DNS_CAPTURE_PER_CLIENT_SECOND);
        expect(counted.reduce((n, m) => n + Number(m![1]), 0)).toBe(5000 - kept.length);
        expect(lines.at(-1)).toContain("other-client.example");

        // The readers: egress propose flags the flood, airlock-audit show lists its seconds.
        const merged = path.join(dir, "merged.log");
        fs.writeFileSync(merged, lines.map((l) => `${l}\n`).join(""));
        const notKept = readQueryLog(merged).queries.filter((q) => q.type === NOT_KEPT);
        expect(notKept.map((q) => q.client)).toEqual(["100.100.7.1", "100.100.7.1", "100.100.7.1"]);
        expect(notKept.reduce((n, q) => n + Number(q.name), 0)).toBe(5000 - kept.length);
        const shown = run("python3", ["-IS", AUDIT_PROGRAM, "--config", "-", "--dir", path.join(REPO, "test/fixtures/record"), "show", "--querylog", merged]);
        expect(shown.status, shown.stderr).toBe(0);
        expect(shown.stdout).toContain(`(${5000 - kept.length} queries over the capture's budget of a client a second: counted, not kept; a flood)`);
    });

    it("a TCP segment without data spends no budget and is not written; a query over TCP (answered at any rate) is always kept (red team 5)", () => {
        const second = 1795802757;
        const { status, lines } = capture(
            "dns-capture-tcp",
            `for i in $(seq 1 ${DNS_CAPTURE_PER_CLIENT_SECOND}); do printf '${second}.%06d IP 100.64.0.2.%d > 100.64.0.1.53: Flags [S], seq 1, win 64240, options [mss 1460], length 0\\n' "$i" $((40000 + i)); done\n` +
                `printf '${second}.900000 IP 100.64.0.2.39999 > 100.64.0.1.53: Flags [P.], seq 1:44, ack 1, win 502, length 43: 7+ TXT? c2VjcmV0.exfil.attacker.example. (41)\\n'\n` +
                `printf '${second}.900001 IP 100.64.0.2.39998 > 100.64.0.1.53: 8+ A? udp-after-syns.example. (40)\\n'\n`,
        );
        expect(status).toBe(0);
        expect(lines.filter((l) => l.includes("Flags [S]"))).toEqual([]);
        expect(lines.some((l) => l.includes("TXT? c2VjcmV0.exfil.attacker.example."))).toBe(true);
        expect(lines.some((l) => l.includes("A? udp-after-syns.example."))).toBe(true);
        expect(lines.filter((l) => l.includes("not kept"))).toEqual([]);
    });

    it("refuses a command line that is not its own", () => {
        const result = run("python3", [writer(), "/tmp/x.log", "lots", "3", "--", "true"]);
        expect(result.status).toBe(2);
        expect(result.stderr.trim()).toBe("usage: airlock-dns-capture LOG FILE_BYTES FILES -- TCPDUMP ARGS...");
    });
});
