import { spawnSync } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { TWIN_CACHE_DIR } from "./contract";
import { TWIN_SOURCES } from "./sources";

/**
 * The twin's certificate authority: made once with openssl and kept under the
 * twin's cache (its key readable by root alone). The base image trusts its
 * certificate, so a guest's curl, apt and dockerd accept the stand-ins it signs
 * for names the twin answers itself (pkgs.tailscale.com, registry-1.docker.io).
 */

const CA_CONFIG = path.join(TWIN_SOURCES, "ca", "ca.cnf");
const LEAF_CONFIG = path.join(TWIN_SOURCES, "ca", "leaf.cnf");
/** Long enough to outlive any cached base image that trusts it. */
const CA_DAYS = "3650";
const LEAF_DAYS = "365";

export interface TwinCa {
    /** PEM certificate, the file the base image installs as trusted. */
    cert: string;
    /** PEM private key, mode 0600. */
    key: string;
}

export interface LeafCert {
    cert: string;
    key: string;
}

function openssl(args: string[], env: NodeJS.ProcessEnv = {}): void {
    const result = spawnSync("openssl", args, { encoding: "utf8", env: { ...process.env, ...env } });
    if (result.status !== 0) throw new Error(`openssl ${args[0]}: ${(result.stderr || String(result.error ?? "")).trim()}`);
}

/** The CA, created on first use. Concurrent first uses all end with the same CA. */
export function ensureCa(cacheDir = TWIN_CACHE_DIR): TwinCa {
    const dir = path.join(cacheDir, "ca");
    const ca = { cert: path.join(dir, "ca.crt"), key: path.join(dir, "ca.key") };
    if (fs.existsSync(ca.cert) && fs.existsSync(ca.key)) return ca;
    fs.mkdirSync(cacheDir, { recursive: true });
    // mkdtemp makes the directory 0700: the key is never readable by others, not even while written.
    const staging = fs.mkdtempSync(path.join(cacheDir, ".ca-"));
    try {
        const key = path.join(staging, "ca.key");
        openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key]);
        fs.chmodSync(key, 0o600);
        openssl(["req", "-x509", "-new", "-config", CA_CONFIG, "-key", key, "-days", CA_DAYS, "-sha256", "-out", path.join(staging, "ca.crt")]);
        fs.chmodSync(staging, 0o755);
        fs.renameSync(staging, dir);
    } catch (err) {
        fs.rmSync(staging, { recursive: true, force: true });
        // Another process made it first (rename onto a non-empty directory fails): use theirs.
        if (fs.existsSync(ca.cert) && fs.existsSync(ca.key)) return ca;
        throw err;
    }
    return ca;
}

/**
 * A fresh server certificate and key in `outDir` (`<name>.crt`, `<name>.key`, key
 * mode 0600), signed by the twin CA, valid for `dnsNames` and `ips`.
 */
export function issueLeaf(opts: { dnsNames: string[]; ips?: string[]; outDir: string; name?: string; cacheDir?: string }): LeafCert {
    const ips = opts.ips ?? [];
    if (opts.dnsNames.length + ips.length === 0) throw new Error("issueLeaf: no DNS name or IP address to certify");
    const ca = ensureCa(opts.cacheDir);
    const name = opts.name ?? (opts.dnsNames[0] ?? ips[0]);
    fs.mkdirSync(opts.outDir, { recursive: true });
    const staging = fs.mkdtempSync(path.join(opts.outDir, ".leaf-"));
    try {
        const key = path.join(staging, "leaf.key");
        const csr = path.join(staging, "leaf.csr");
        const cert = path.join(staging, "leaf.crt");
        openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key]);
        fs.chmodSync(key, 0o600);
        openssl(["req", "-new", "-key", key, "-subj", `/CN=${opts.dnsNames[0] ?? ips[0]}`, "-out", csr]);
        const san = [...opts.dnsNames.map((n) => `DNS:${n}`), ...ips.map((ip) => `IP:${ip}`)].join(",");
        openssl(
            ["x509", "-req", "-in", csr, "-CA", ca.cert, "-CAkey", ca.key, "-set_serial", `0x${crypto.randomBytes(16).toString("hex")}`, "-days", LEAF_DAYS, "-sha256", "-extfile", LEAF_CONFIG, "-out", cert],
            { AIRLOCK_TWIN_SAN: san },
        );
        const leaf = { cert: path.join(opts.outDir, `${name}.crt`), key: path.join(opts.outDir, `${name}.key`) };
        fs.renameSync(key, leaf.key);
        fs.renameSync(cert, leaf.cert);
        return leaf;
    } finally {
        fs.rmSync(staging, { recursive: true, force: true });
    }
}
