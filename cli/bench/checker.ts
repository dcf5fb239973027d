/**
 * The checker's cost: start-up of `airlock check FILE` as a ratio to `node -e 0`,
 * files/s on real files, MB/s on generated inputs growing to the size cap (to show
 * the cost is linear), and the memory of the largest input judged.
 */
import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as os from "node:os";
import * as path from "node:path";
import { checkFile, CheckKind, MAX_INPUT_BYTES } from "../check";
import { toPreviewJson } from "../plan";
import type { StackPlan } from "../offline";
import { syntheticPlan } from "./rules";

const REPO = path.resolve(__dirname, "..", "..");
const BIN = path.join(REPO, "cli", "airlock.js");
const KINDS: CheckKind[] = ["compose", "sshd", "cloud-init", "preview"];

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)];
const quantile = (xs: number[], q: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(q * xs.length))];

function timed(cmd: string, args: string[]): number {
    const started = performance.now();
    const result = spawnSync(cmd, args, { cwd: REPO, stdio: "ignore" });
    if (result.status !== 0 && result.status !== 1) throw new Error(`${cmd} ${args.join(" ")} exited ${result.status}`);
    return performance.now() - started;
}

export interface Startup {
    runs: number;
    nodeP50: number;
    checkP50: number;
    checkP90: number;
    ratio: number;
}

/** `airlock check FILE` as a whole process against `node -e 0`, interleaved so both see the same machine. */
export function startup(runs: number, file: string): Startup {
    const node: number[] = [];
    const check: number[] = [];
    timed(process.execPath, [BIN, "check", file]); // warm the file cache
    for (let i = 0; i < runs; i++) {
        node.push(timed(process.execPath, ["-e", "0"]));
        check.push(timed(process.execPath, [BIN, "check", file]));
    }
    return { runs, nodeP50: median(node), checkP50: median(check), checkP90: quantile(check, 0.9), ratio: median(check) / median(node) };
}

/** Generated inputs of about `bytes` of each kind; `plan` seeds the preview. */
export function generate(kind: CheckKind, bytes: number, plan: StackPlan): string {
    const chunks: string[] = [];
    let size = 0;
    const add = (text: string) => {
        chunks.push(text);
        size += text.length;
    };
    switch (kind) {
        case "compose":
            add("services:\n");
            for (let i = 0; size < bytes; i++) {
                add(`  s${i}:\n    image: registry.example/app:${i}@sha256:${"a".repeat(64)}\n    cap_drop: [ALL]\n    security_opt: ["no-new-privileges:true"]\n    pids_limit: 64\n    mem_limit: 256m\n    ports: ["127.0.0.1:${8000 + (i % 1000)}:80"]\n    volumes: ["./data/${i}:/data"]\n`);
            }
            return chunks.join("");
        case "sshd":
            add("ListenAddress 100.100.7.1:22\nPermitRootLogin no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nDisableForwarding yes\nAllowUsers ops agent\nMatch User agent\n    ForceCommand /usr/local/libexec/airlock/sandbox-shell\n");
            for (let i = 0; size < bytes; i++) add(`Match User u${i} Address 100.64.${i % 250}.${i % 200}\n    PermitTTY no\n    X11Forwarding no\n`);
            return chunks.join("");
        case "cloud-init":
            add("#cloud-config\nssh_pwauth: false\nruncmd:\n");
            for (let i = 0; size < bytes / 2; i++) add(`  - [sh, -c, "echo step ${i} >> /var/log/setup.log"]\n`);
            add("write_files:\n");
            for (let i = 0; size < bytes; i++) add(`  - path: /etc/app/conf.d/${i}.conf\n    permissions: "0644"\n    content: |\n      # part ${i}\n      key_${i}=value\n`);
            return chunks.join("");
        case "preview": {
            const perCopy = JSON.stringify(toPreviewJson(plan), null, 2).length;
            return JSON.stringify(toPreviewJson(syntheticPlan(plan, Math.max(1, Math.round(bytes / perCopy)))), null, 2);
        }
    }
}

export interface Throughput {
    kind: CheckKind;
    realFiles: number;
    filesPerSecond: number;
    series: { mib: number; ms: number; mbPerSecond: number }[];
    /** The largest input judged (just under the cap), and the whole process's peak memory for it. */
    largest: { mib: number; seconds: number; maxRssMb: number };
    capMib: number;
}

/** The whole process for one file: wall time and peak memory (read by a preload at exit). */
function processCost(file: string): { seconds: number; maxRssMb: number } {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-bench-rss-"));
    const preload = path.join(dir, "rss.js");
    const out = path.join(dir, "rss.txt");
    fs.writeFileSync(preload, `process.on("exit", () => require("fs").writeFileSync(${JSON.stringify(out)}, String(process.resourceUsage().maxRSS)));\n`);
    const started = performance.now();
    const result = spawnSync(process.execPath, ["--require", preload, BIN, "check", file], { cwd: REPO, stdio: "ignore" });
    if (result.status !== 0 && result.status !== 1) throw new Error(`check ${file} exited ${result.status}`);
    return { seconds: (performance.now() - started) / 1000, maxRssMb: Number(fs.readFileSync(out, "utf8")) / 1024 };
}

/** Names `airlock check` recognises, so the whole-process run detects the kind as a user's would. */
const nameFor = (kind: CheckKind, tag: string) =>
    ({ compose: `compose.${tag}.yml`, sshd: `sshd_config.${tag}`, "cloud-init": `cloud-init.${tag}.yaml`, preview: `preview.${tag}.json` })[kind];

export function throughput(plan: StackPlan, log: (line: string) => void): Throughput[] {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "airlock-bench-checker-"));
    const real = (kind: CheckKind) => {
        const folder = path.join(REPO, "test/fixtures/real-world", kind);
        return fs.existsSync(folder) ? fs.readdirSync(folder).map((f) => path.join(folder, f)) : [];
    };
    const results: Throughput[] = [];
    for (const kind of KINDS) {
        log(`checker: ${kind}...`);
        const files = real(kind);
        let filesPerSecond = 0;
        if (files.length > 0) {
            for (const f of files) checkFile(f, kind); // warm-up
            const rounds = 20;
            const started = performance.now();
            for (let r = 0; r < rounds; r++) for (const f of files) checkFile(f, kind);
            filesPerSecond = (files.length * rounds * 1000) / (performance.now() - started);
        }
        const series = [];
        for (const mib of [0.5, 1, 2, 4]) {
            if (mib * 2 ** 20 > MAX_INPUT_BYTES[kind]) continue;
            const file = path.join(dir, nameFor(kind, String(mib)));
            fs.writeFileSync(file, generate(kind, mib * 2 ** 20 * 0.98, plan));
            checkFile(file, kind);
            const started = performance.now();
            checkFile(file, kind);
            const ms = performance.now() - started;
            series.push({ mib: fs.statSync(file).size / 2 ** 20, ms, mbPerSecond: fs.statSync(file).size / 2 ** 20 / (ms / 1000) });
        }
        const largestFile = path.join(dir, nameFor(kind, "largest"));
        fs.writeFileSync(largestFile, generate(kind, MAX_INPUT_BYTES[kind] * 0.97, plan));
        const cost = processCost(largestFile);
        results.push({
            kind,
            realFiles: files.length,
            filesPerSecond,
            series,
            largest: { mib: fs.statSync(largestFile).size / 2 ** 20, ...cost },
            capMib: MAX_INPUT_BYTES[kind] / 2 ** 20,
        });
    }
    fs.rmSync(dir, { recursive: true, force: true });
    return results;
}
