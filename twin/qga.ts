import * as net from "node:net";

/**
 * A client of qemu-guest-agent on its virtio-serial socket: how `twin exec` runs
 * a command in a guest as root without any network service in the guest (and
 * without a line of user_data).
 */

export interface ExecResult {
    code: number;
    stdout: string;
    stderr: string;
}

export interface ExecOptions {
    /** Bytes for the command's stdin. */
    input?: string | Buffer;
    /** Environment of the command (qemu-ga's own is not meant for it). */
    env?: Record<string, string>;
    timeoutMs?: number;
}

const DEFAULT_ENV = { PATH: "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", HOME: "/root", LANG: "C.UTF-8" };

export class QgaError extends Error {}

function parsed(line: string): { return?: unknown } | undefined {
    try {
        return JSON.parse(line);
    } catch {
        return undefined;
    }
}

export class Qga {
    private buffer = "";
    private waiters: ((line: string) => void)[] = [];
    private lines: string[] = [];
    private closed?: Error;

    private constructor(private readonly socket: net.Socket) {
        socket.setEncoding("utf8");
        socket.on("data", (chunk: string) => {
            this.buffer += chunk;
            let at: number;
            while ((at = this.buffer.indexOf("\n")) >= 0) {
                const line = this.buffer.slice(0, at).trim();
                this.buffer = this.buffer.slice(at + 1);
                if (!line) continue;
                const waiter = this.waiters.shift();
                if (waiter) waiter(line);
                else this.lines.push(line);
            }
        });
        const fail = (err: Error) => {
            this.closed = err;
            for (const waiter of this.waiters.splice(0)) waiter("");
        };
        socket.on("error", fail);
        socket.on("close", () => fail(new QgaError("guest agent connection closed")));
    }

    /**
     * Connects and synchronises (a previous client may have left answers in the channel).
     * QEMU serves one client at a time and queues the next: the wait covers another
     * command's turn (`twin status` while `twin up` polls) and a guest slow under emulation.
     */
    static async connect(socketPath: string, timeoutMs = 30_000): Promise<Qga> {
        const socket = await new Promise<net.Socket>((resolve, reject) => {
            const s = net.createConnection(socketPath);
            const timer = setTimeout(() => {
                s.destroy();
                reject(new QgaError(`guest agent socket ${socketPath}: no connection`));
            }, timeoutMs);
            s.once("connect", () => {
                clearTimeout(timer);
                resolve(s);
            });
            s.once("error", (err) => {
                clearTimeout(timer);
                reject(new QgaError(`guest agent socket ${socketPath}: ${err.message}`));
            });
        });
        const qga = new Qga(socket);
        try {
            const id = Math.floor(Math.random() * 2 ** 31);
            // Answers left over from an earlier client come before the one to this id.
            socket.write(`${JSON.stringify({ execute: "guest-sync", arguments: { id } })}\n`);
            for (;;) {
                const reply = await qga.nextLine(timeoutMs);
                if (parsed(reply)?.return === id) break;
            }
        } catch (err) {
            qga.close();
            throw err;
        }
        return qga;
    }

    private nextLine(timeoutMs: number): Promise<string> {
        const queued = this.lines.shift();
        if (queued !== undefined) return Promise.resolve(queued);
        if (this.closed) return Promise.reject(this.closed);
        return new Promise((resolve, reject) => {
            const timer = setTimeout(() => {
                this.waiters = this.waiters.filter((w) => w !== waiter);
                reject(new QgaError("guest agent: no answer"));
            }, timeoutMs);
            const waiter = (line: string) => {
                clearTimeout(timer);
                if (this.closed && !line) reject(this.closed);
                else resolve(line);
            };
            this.waiters.push(waiter);
        });
    }

    async request<T = unknown>(execute: string, args?: Record<string, unknown>, timeoutMs = 30_000): Promise<T> {
        this.socket.write(`${JSON.stringify({ execute, ...(args ? { arguments: args } : {}) })}\n`);
        const reply = JSON.parse(await this.nextLine(timeoutMs)) as { return?: T; error?: { desc: string } };
        if (reply.error) throw new QgaError(`guest agent: ${execute}: ${reply.error.desc}`);
        return reply.return as T;
    }

    /** Runs a program (no shell) and waits for it: exit code and captured output. */
    async exec(argv: string[], options: ExecOptions = {}): Promise<ExecResult> {
        const env = { ...DEFAULT_ENV, ...options.env };
        const { pid } = await this.request<{ pid: number }>("guest-exec", {
            path: argv[0],
            arg: argv.slice(1),
            env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
            "capture-output": true,
            ...(options.input !== undefined ? { "input-data": Buffer.from(options.input).toString("base64") } : {}),
        });
        const until = Date.now() + (options.timeoutMs ?? 600_000);
        for (let delay = 50; ; delay = Math.min(delay * 2, 500)) {
            const status = await this.request<{ exited: boolean; exitcode?: number; signal?: number; "out-data"?: string; "err-data"?: string }>("guest-exec-status", { pid });
            if (status.exited) {
                return {
                    code: status.exitcode ?? 128 + (status.signal ?? 0),
                    stdout: Buffer.from(status["out-data"] ?? "", "base64").toString("utf8"),
                    stderr: Buffer.from(status["err-data"] ?? "", "base64").toString("utf8"),
                };
            }
            if (Date.now() > until) throw new QgaError(`guest command timed out: ${argv.join(" ")}`);
            await new Promise((resolve) => setTimeout(resolve, delay));
        }
    }

    close(): void {
        this.socket.destroy();
    }
}

/** One command over a fresh connection (the agent's socket takes one client at a time). */
export async function guestExec(socketPath: string, argv: string[], options: ExecOptions = {}): Promise<ExecResult> {
    const qga = await Qga.connect(socketPath);
    try {
        return await qga.exec(argv, options);
    } finally {
        qga.close();
    }
}
