import * as fs from "node:fs";
import * as path from "node:path";
import { run } from "./tools";

/**
 * A real block device for the volume tests: a sparse file behind a loop device.
 * Every mount under a test directory is undone and the device detached, also
 * when a test fails (call release() from afterAll).
 */
export interface LoopDevice {
    device: string;
    file: string;
    release(): void;
}

export function attachLoop(dir: string, name: string, bytes: number): LoopDevice {
    const file = path.join(dir, `${name}.img`);
    fs.writeFileSync(file, "");
    fs.truncateSync(file, bytes);
    const attached = run("losetup", ["--find", "--show", file]);
    if (attached.status !== 0) throw new Error(`losetup: ${attached.stderr}`);
    const device = attached.stdout.trim();
    let released = false;
    return {
        device,
        file,
        release() {
            if (released) return;
            released = true;
            unmountDevice(device);
            // Unmounting a btrfs filesystem may finish a moment after umount returns.
            for (let i = 0; i < 50 && run("losetup", ["--detach", device]).status !== 0; i++) run("sleep", ["0.1"]);
            fs.rmSync(file, { force: true });
        },
    };
}

/** Every mount point at or below `dir`, deepest first. */
export function mountsUnder(dir: string): string[] {
    const base = fs.realpathSync(dir);
    return fs
        .readFileSync("/proc/self/mountinfo", "utf8")
        .split("\n")
        .map((line) => line.split(" ")[4])
        .filter((point): point is string => point !== undefined && (point === base || point.startsWith(`${base}/`)))
        .map((point) => point.replace(/\\040/g, " "))
        .sort((a, b) => b.length - a.length);
}

/** Every mount of `device` (its bind mounts too), deepest first. */
function mountsOf(device: string): string[] {
    return fs
        .readFileSync("/proc/self/mountinfo", "utf8")
        .split("\n")
        .map((line) => line.split(" "))
        .filter((fields) => fields[fields.indexOf("-") + 2] === device)
        .map((fields) => fields[4].replace(/\\040/g, " "))
        .sort((a, b) => b.length - a.length);
}

export function unmountDevice(device: string): void {
    for (let pass = 0; pass < 5; pass++) {
        const points = mountsOf(device);
        if (points.length === 0) return;
        for (const point of points) {
            if (run("umount", [point]).status !== 0) run("umount", ["--lazy", point]);
        }
    }
}

export function unmountUnder(dir: string): void {
    if (!fs.existsSync(dir)) return;
    for (let pass = 0; pass < 5; pass++) {
        const points = mountsUnder(dir);
        if (points.length === 0) return;
        for (const point of points) {
            if (run("umount", [point]).status !== 0) run("umount", ["--lazy", point]);
        }
    }
}
