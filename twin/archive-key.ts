import { spawnSync } from "node:child_process";
import * as fs from "node:fs";
import * as path from "node:path";
import { TWIN_CACHE_DIR } from "./contract";

/**
 * The twin's archive signing key (GnuPG): it signs the local apt mirror's
 * Release files, for Debian's suites and for the Tailscale stand-in repository
 * alike. The base image trusts it in /etc/apt/trusted.gpg.d/, so apt in a guest
 * verifies every index as it does against Debian; the twin substitutes its
 * fingerprint for the pinned Tailscale one in airlock-install-tailscale.
 * Made once, kept under the twin's cache; the secret key stays in a 0700 GnuPG home.
 */

const USER_ID = "airlock twin archive <archive@twin.airlock.invalid>";

export interface ArchiveKey {
    /** GnuPG home holding the secret key (root only). */
    home: string;
    /** The public key, binary (what apt's trusted.gpg.d and a `.noarmor.gpg` download hold). */
    publicKey: string;
    /** The primary key's fingerprint, as `gpg --with-colons` prints it (40 hex digits). */
    fingerprint: string;
}

export function gpg(home: string, args: string[], input?: string): string {
    const result = spawnSync("gpg", ["--batch", "--quiet", "--no-tty", "--homedir", home, ...args], { encoding: "utf8", input });
    if (result.status !== 0) throw new Error(`gpg ${args.join(" ")}: ${(result.stderr || String(result.error ?? "")).trim()}`);
    return result.stdout;
}

/** Stops the gpg-agent a GnuPG home started, so no process outlives the call. */
export function stopAgent(home: string): void {
    spawnSync("gpgconf", ["--homedir", home, "--kill", "gpg-agent"]);
}

/** The first `fpr` of a key file: the primary key's fingerprint (how airlock-install-tailscale reads it). */
export function keyFileFingerprint(file: string): string {
    const result = spawnSync("gpg", ["--batch", "--show-keys", "--with-colons", file], { encoding: "utf8" });
    const fpr = result.stdout.split("\n").find((line) => line.startsWith("fpr:"));
    if (result.status !== 0 || !fpr) throw new Error(`${file}: not an OpenPGP public key (${result.stderr.trim()})`);
    return fpr.split(":")[9];
}

export function ensureArchiveKey(cacheDir = TWIN_CACHE_DIR): ArchiveKey {
    const dir = path.join(cacheDir, "archive-key");
    const publicKey = path.join(dir, "archive-key.gpg");
    if (fs.existsSync(publicKey)) return { home: path.join(dir, "gnupg"), publicKey, fingerprint: keyFileFingerprint(publicKey) };
    fs.mkdirSync(cacheDir, { recursive: true });
    const staging = fs.mkdtempSync(path.join(cacheDir, ".archive-key-"));
    const home = path.join(staging, "gnupg");
    fs.mkdirSync(home, { mode: 0o700 });
    try {
        gpg(home, ["--pinentry-mode", "loopback", "--passphrase", "", "--quick-generate-key", USER_ID, "ed25519", "sign", "never"]);
        const fingerprint = gpg(home, ["--with-colons", "--list-secret-keys"]).split("\n").find((l) => l.startsWith("fpr:"))!.split(":")[9];
        const exported = spawnSync("gpg", ["--batch", "--homedir", home, "--export", fingerprint]);
        if (exported.status !== 0 || exported.stdout.length === 0) throw new Error(`gpg --export: ${String(exported.stderr)}`);
        fs.writeFileSync(path.join(staging, "archive-key.gpg"), exported.stdout, { mode: 0o644 });
        stopAgent(home);
        fs.chmodSync(staging, 0o755);
        fs.renameSync(staging, dir);
    } catch (err) {
        stopAgent(home);
        fs.rmSync(staging, { recursive: true, force: true });
        if (fs.existsSync(publicKey)) return ensureArchiveKey(cacheDir);
        throw err;
    }
    return { home: path.join(dir, "gnupg"), publicKey, fingerprint: keyFileFingerprint(publicKey) };
}

/** Writes InRelease (clear-signed) and Release.gpg (detached) beside `release`. */
export function signRelease(key: ArchiveKey, release: string): void {
    const dir = path.dirname(release);
    try {
        const common = ["--local-user", key.fingerprint, "--digest-algo", "SHA512", "--yes"];
        gpg(key.home, [...common, "--clearsign", "--output", path.join(dir, "InRelease"), release]);
        gpg(key.home, [...common, "--armor", "--detach-sign", "--output", path.join(dir, "Release.gpg"), release]);
    } finally {
        stopAgent(key.home);
    }
}
