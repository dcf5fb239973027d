import { spawn } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { ensureArchiveKey } from "./archive-key";
import { ensureCa } from "./ca";
import { HOST_SUITE, TWIN_CACHE_DIR } from "./contract";
import { TWIN_SOURCES } from "./sources";
import { BEFORE_PACKAGES_DIRS } from "../components/render/bundle";

/**
 * The twin's base image: Debian 13 as a cloud server, close to Hetzner's
 * debian-13 image. mmdebstrap builds the tree from Debian's registry (the
 * packages in base-image/packages), the customize hook makes it a cloud image
 * that trusts the twin's CA and archive key, mkfs.ext4 -d writes it into the
 * first partition of a raw disk (no loop device, no boot loader: QEMU boots
 * the kernel and initrd extracted here with root=/dev/vda1), qemu-img makes it
 * qcow2. Guests run on overlays of it. Cached under base-<hash of every input>/
 * and built in a temporary directory renamed into place, so a cached image is
 * always complete.
 */

const SOURCES = path.join(TWIN_SOURCES, "base-image");
export const BASE_PACKAGES_FILE = path.join(SOURCES, "packages");
const CUSTOMIZE_HOOK = path.join(SOURCES, "customize");
const HOST_PACKAGES_HOOK = path.join(SOURCES, "host-packages");
const FILES = path.join(SOURCES, "files");

/** How the image is made, beyond its source files: a change here is a new image too. */
const RECIPE = {
    suite: HOST_SUITE,
    variant: "apt",
    // The build fetches from Debian; the guests' own sources are in files/etc/apt/sources.list.
    mirrors: [
        `deb http://deb.debian.org/debian ${HOST_SUITE} main`,
        `deb http://deb.debian.org/debian ${HOST_SUITE}-updates main`,
        `deb http://deb.debian.org/debian-security ${HOST_SUITE}-security main`,
    ],
    /**
     * The disk of the smallest server type the stacks use (Hetzner's cx23: 40 GB local disk),
     * so the fixed-size filesystems user_data reserves (stateGb, resolverLogGb) fit as they would
     * on the real server; the qcow2 holds only what is written.
     */
    diskBytes: 40 * 1000 ** 3,
    /** The partition starts at 1 MiB, as partitioning tools place it. */
    partitionOffset: 1024 ** 2,
    fsLabel: "twin-root",
};

/** root= on the guest's kernel command line. */
export const BASE_ROOT_DEVICE = "/dev/vda1";

export interface BaseImage {
    dir: string;
    kernel: string;
    initrd: string;
    /** qcow2; guests boot overlays of it, never the file itself. */
    disk: string;
    /** `<package> <version>` per line: every package installed in the image. */
    manifest: string;
    /** The image's /var/lib/dpkg/status: what apt in a guest starts from (the mirror resolves against it). */
    dpkgStatus: string;
}

/**
 * A host's image: the base image with the packages the host's user_data names
 * already installed (base-image/host-packages), the twin's one departure from a
 * fresh server for time: under emulation their installation took 14 of the
 * gateway's 26 minutes of first boot, and a replaced sandbox paid it again.
 * cloud-init's packages module still runs at boot (update, upgrade, install),
 * after the same files and before the same commands as on a real server, and
 * finds them installed.
 */
export interface HostPackages {
    packages: string[];
    /** What user_data writes that apt or the packages' maintainer scripts read while they install. */
    earlyFiles: Record<string, { content: string; permissions: string }>;
}

/** Where user_data's files are read while packages install: apt's settings, PostgreSQL's cluster creation (so the host image installs them first). */
export const EARLY_FILE_DIRS = BEFORE_PACKAGES_DIRS;

export interface BaseImageInputs {
    packages: string[];
    /** The host's packages, installed after the base's (a host image); none for the base image. */
    hostPackages: string[];
    /** Every file that shapes the image, by a name stable across checkouts, with its content. */
    files: Record<string, string>;
}

/** The package names of a package list file (comments and blank lines skipped). */
export function readPackageList(file: string): string[] {
    return fs
        .readFileSync(file, "utf8")
        .split("\n")
        .map((line) => line.replace(/#.*/, "").trim())
        .filter((line) => line !== "");
}

function listFiles(dir: string, prefix = ""): string[] {
    return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
        const rel = path.join(prefix, entry.name);
        return entry.isDirectory() ? listFiles(path.join(dir, entry.name), rel) : [rel];
    });
}

export function baseImageInputs(options: { packagesFile?: string; caCert: string; archiveKey: string; host?: HostPackages }): BaseImageInputs {
    const packagesFile = options.packagesFile ?? BASE_PACKAGES_FILE;
    const files: Record<string, string> = {
        packages: fs.readFileSync(packagesFile, "utf8"),
        customize: fs.readFileSync(CUSTOMIZE_HOOK, "utf8"),
        "ca.crt": fs.readFileSync(options.caCert, "utf8"),
        "archive-key.gpg": fs.readFileSync(options.archiveKey).toString("base64"),
    };
    for (const rel of listFiles(FILES).sort()) files[`files/${rel}`] = fs.readFileSync(path.join(FILES, rel), "utf8");
    if (options.host) {
        files["host-packages"] = fs.readFileSync(HOST_PACKAGES_HOOK, "utf8");
        for (const [file, early] of Object.entries(options.host.earlyFiles)) files[`early${file}`] = `${early.permissions}\n${early.content}`;
    }
    return { packages: readPackageList(packagesFile), hostPackages: [...(options.host?.packages ?? [])].sort(), files };
}

/** The cache key: changes with the package list, the hook, the files, the CA, the archive key and the recipe. */
export function baseImageKey(inputs: BaseImageInputs): string {
    // The base image's key is what it was before host images: they add their packages only.
    const recipe = { recipe: RECIPE, packages: inputs.packages, ...(inputs.hostPackages.length > 0 ? { hostPackages: inputs.hostPackages } : {}) };
    const hash = crypto.createHash("sha256").update(JSON.stringify(recipe));
    for (const name of Object.keys(inputs.files).sort()) hash.update(`\0${name}\0${inputs.files[name]}`);
    return hash.digest("hex").slice(0, 16);
}

function imageIn(dir: string): BaseImage {
    return {
        dir,
        kernel: path.join(dir, "vmlinuz"),
        initrd: path.join(dir, "initrd.img"),
        disk: path.join(dir, "disk.qcow2"),
        manifest: path.join(dir, "manifest"),
        dpkgStatus: path.join(dir, "dpkg-status"),
    };
}

/** The cached image for `key`, or undefined when it has not been built. */
export function cachedBaseImage(key: string, cacheDir = TWIN_CACHE_DIR): BaseImage | undefined {
    const image = imageIn(path.join(cacheDir, `base-${key}`));
    return fs.existsSync(image.disk) ? image : undefined;
}

/** Runs a build step with its output appended to `logFile`; rejects with the log's tail. */
function step(logFile: string, cmd: string, args: string[], env: NodeJS.ProcessEnv = {}): Promise<void> {
    fs.appendFileSync(logFile, `$ ${cmd} ${args.join(" ")}\n`);
    const out = fs.openSync(logFile, "a");
    const child = spawn(cmd, args, { stdio: ["ignore", out, out], env: { ...process.env, ...env } });
    fs.closeSync(out);
    return new Promise((resolve, reject) => {
        child.on("error", reject);
        child.on("exit", (code, signal) => {
            if (code === 0) return resolve();
            const tail = fs.readFileSync(logFile, "utf8").slice(-3000);
            reject(new Error(`${cmd} failed (${signal ?? `exit ${code}`}); the end of ${logFile}:\n${tail}`));
        });
    });
}

function onlyFile(dir: string, prefix: string): string {
    const found = fs.readdirSync(dir).filter((name) => name.startsWith(prefix));
    if (found.length !== 1) throw new Error(`base image: expected one ${prefix}* in ${dir}, found ${found.length}`);
    return path.join(dir, found[0]);
}

/**
 * Removes a failed build, unless something is still mounted inside it (an
 * interrupted mmdebstrap can leave /dev or /proc bound there): deleting through
 * such a mount would delete the host's own files.
 */
function removeUnlessMounted(staging: string): void {
    const mounts = fs.readFileSync("/proc/self/mounts", "utf8").split("\n").map((line) => line.split(" ")[1] ?? "");
    if (mounts.some((mount) => mount.startsWith(staging + "/"))) {
        throw new Error(`base image: ${staging} still has mounts inside; unmount them, then remove it`);
    }
    fs.rmSync(staging, { recursive: true, force: true });
}

/**
 * The base image for the current inputs (with `host`, that host's image): the cached
 * one, or a new build (a few minutes).
 */
export async function ensureBaseImage(log: (line: string) => void, cacheDir = TWIN_CACHE_DIR, host?: HostPackages): Promise<BaseImage> {
    const ca = ensureCa(cacheDir);
    const archiveKey = ensureArchiveKey(cacheDir);
    const inputs = baseImageInputs({ caCert: ca.cert, archiveKey: archiveKey.publicKey, host });
    const key = baseImageKey(inputs);
    const what = host ? "host image" : "base image";
    const cached = cachedBaseImage(key, cacheDir);
    if (cached) {
        log(`${what}: cached ${cached.dir}`);
        return cached;
    }

    const started = Date.now();
    const dir = path.join(cacheDir, `base-${key}`);
    const staging = fs.mkdtempSync(path.join(cacheDir, `.base-${key}-`));
    fs.chmodSync(staging, 0o755);
    const logFile = path.join(staging, "build.log");
    const rootfs = path.join(staging, "rootfs");
    const raw = path.join(staging, "disk.raw");
    const earlyFiles = path.join(staging, "early-files");
    const image = imageIn(staging);
    try {
        log(`${what}: building ${dir} (mmdebstrap, a few minutes; log ${logFile})`);
        for (const [file, early] of Object.entries(host?.earlyFiles ?? {})) {
            fs.mkdirSync(path.dirname(path.join(earlyFiles, file)), { recursive: true });
            fs.writeFileSync(path.join(earlyFiles, file), early.content, { mode: parseInt(early.permissions, 8) });
        }
        await step(
            logFile,
            "mmdebstrap",
            [
                `--variant=${RECIPE.variant}`,
                `--include=${inputs.packages.join(",")}`,
                // The host's packages after the base's, while the build's apt sources are still there.
                ...(host ? [`--customize-hook=${HOST_PACKAGES_HOOK}`] : []),
                `--customize-hook=${CUSTOMIZE_HOOK}`,
                RECIPE.suite,
                rootfs,
                ...RECIPE.mirrors,
            ],
            {
                AIRLOCK_TWIN_FILES: FILES,
                AIRLOCK_TWIN_CA_CERT: ca.cert,
                AIRLOCK_TWIN_ARCHIVE_KEY: archiveKey.publicKey,
                AIRLOCK_TWIN_HOST_PACKAGES: inputs.hostPackages.join(" "),
                AIRLOCK_TWIN_EARLY_FILES: earlyFiles,
            },
        );
        fs.rmSync(earlyFiles, { recursive: true, force: true });
        fs.copyFileSync(onlyFile(path.join(rootfs, "boot"), "vmlinuz-"), image.kernel);
        fs.copyFileSync(onlyFile(path.join(rootfs, "boot"), "initrd.img-"), image.initrd);
        fs.copyFileSync(path.join(rootfs, "var/lib/dpkg/status"), image.dpkgStatus);
        await step(image.manifest + ".log", "sh", ["-c", `dpkg-query --admindir="$1/var/lib/dpkg" -W -f '\${Package} \${Version}\\n' | sort >"$2"`, "sh", rootfs, image.manifest]);
        fs.rmSync(image.manifest + ".log");

        log(`${what}: writing the disk (mkfs.ext4 -d, qemu-img)`);
        fs.writeFileSync(raw, "");
        fs.truncateSync(raw, RECIPE.diskBytes);
        const sfdisk = `label: dos\nstart=${RECIPE.partitionOffset / 512}, type=83, bootable\n`;
        const layout = path.join(staging, "partitions.sfdisk");
        fs.writeFileSync(layout, sfdisk);
        await step(logFile, "sh", ["-c", 'sfdisk --quiet "$1" <"$2"', "sh", raw, layout]);
        const fsKiB = (RECIPE.diskBytes - RECIPE.partitionOffset) / 1024;
        await step(logFile, "mkfs.ext4", ["-q", "-F", "-L", RECIPE.fsLabel, "-d", rootfs, "-E", `offset=${RECIPE.partitionOffset}`, raw, `${fsKiB}k`]);
        fs.rmSync(rootfs, { recursive: true, force: true });
        await step(logFile, "qemu-img", ["convert", "-f", "raw", "-O", "qcow2", raw, image.disk]);
        fs.rmSync(raw);
        fs.rmSync(layout);
        fs.writeFileSync(path.join(staging, "inputs.json"), JSON.stringify({ key, recipe: RECIPE, packages: inputs.packages, hostPackages: inputs.hostPackages }, null, 2) + "\n");
        fs.renameSync(staging, dir);
    } catch (err) {
        removeUnlessMounted(staging);
        // A concurrent build of the same inputs finished first: use it.
        const other = cachedBaseImage(key, cacheDir);
        if (other) return other;
        throw err;
    }
    log(`${what}: built ${dir} in ${Math.round((Date.now() - started) / 1000)} s`);
    return imageIn(dir);
}
