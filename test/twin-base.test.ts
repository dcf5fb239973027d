import * as fs from "node:fs";
import * as path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureArchiveKey, keyFileFingerprint } from "../twin/archive-key";
import { BASE_PACKAGES_FILE, baseImageInputs, baseImageKey, cachedBaseImage, EARLY_FILE_DIRS, ensureBaseImage } from "../twin/base-image";
import { ensureCa, issueLeaf } from "../twin/ca";
import { HOST_ADDRESS } from "../twin/contract";
import { ensureMirror, mirrorKey, RunningMirror, startMirror, tailscaleKeyFingerprint, userDataPackages } from "../twin/mirror";
import { hostPackages } from "../twin/standins";
import { inNamespace } from "./helpers/netns";
import { tempDir } from "./helpers/stacks";
import { isRoot, run, toolsAvailable } from "./helpers/tools";

/**
 * The twin's foundations: its CA, the base image's cache key, and the local apt
 * mirror, which a real apt (its own state, the twin's key as its only trust)
 * must accept over the names the guests use, served in a network namespace.
 */

const canUseTools = toolsAvailable("twin CA", ["openssl", "gpg"]);

describe.runIf(canUseTools)("the twin CA", () => {
    const cache = tempDir("twin-ca");
    const other = tempDir("twin-ca-other");
    afterAll(() => {
        fs.rmSync(cache, { recursive: true, force: true });
        fs.rmSync(other, { recursive: true, force: true });
    });

    it("is made once, its key readable by its owner only", () => {
        const ca = ensureCa(cache);
        expect(fs.statSync(ca.key).mode & 0o777).toBe(0o600);
        const pem = fs.readFileSync(ca.cert, "utf8");
        expect(ensureCa(cache)).toEqual(ca);
        expect(fs.readFileSync(ca.cert, "utf8")).toBe(pem);
        const text = run("openssl", ["x509", "-in", ca.cert, "-noout", "-text"]).stdout;
        expect(text).toMatch(/CA:TRUE/);
    });

    it("issues a leaf for names and addresses that openssl verifies against it, and not against another CA", () => {
        const leaf = issueLeaf({ dnsNames: ["registry-1.docker.io"], ips: ["10.77.0.2"], outDir: path.join(cache, "leaf"), cacheDir: cache });
        expect(fs.statSync(leaf.key).mode & 0o777).toBe(0o600);
        const san = run("openssl", ["x509", "-in", leaf.cert, "-noout", "-ext", "subjectAltName"]).stdout;
        expect(san).toContain("DNS:registry-1.docker.io");
        expect(san).toContain("IP Address:10.77.0.2");
        expect(run("openssl", ["verify", "-CAfile", ensureCa(cache).cert, leaf.cert]).status).toBe(0);
        expect(run("openssl", ["verify", "-CAfile", ensureCa(other).cert, leaf.cert]).status).not.toBe(0);
        // The pair matches: the leaf's public key is the key's.
        const fromCert = run("openssl", ["x509", "-in", leaf.cert, "-noout", "-pubkey"]).stdout;
        const fromKey = run("openssl", ["pkey", "-in", leaf.key, "-pubout"]).stdout;
        expect(fromCert).toBe(fromKey);
    });
});

describe.runIf(canUseTools)("the base image's cache key", () => {
    const cache = tempDir("twin-base-key");
    afterAll(() => fs.rmSync(cache, { recursive: true, force: true }));
    const trust = () => ({ caCert: ensureCa(cache).cert, archiveKey: ensureArchiveKey(cache).publicKey });

    it("stays the same for the same inputs and changes with the package list, the CA and the archive key", () => {
        const key = baseImageKey(baseImageInputs(trust()));
        expect(baseImageKey(baseImageInputs(trust()))).toBe(key);

        const packages = path.join(cache, "packages");
        fs.writeFileSync(packages, fs.readFileSync(BASE_PACKAGES_FILE, "utf8") + "# a comment changes nothing that is installed, but the file\n");
        const commented = baseImageKey(baseImageInputs({ ...trust(), packagesFile: packages }));
        fs.writeFileSync(packages, fs.readFileSync(BASE_PACKAGES_FILE, "utf8") + "htop\n");
        const withHtop = baseImageInputs({ ...trust(), packagesFile: packages });
        expect(withHtop.packages).toContain("htop");
        expect(baseImageKey(withHtop)).not.toBe(key);
        expect(baseImageKey(withHtop)).not.toBe(commented);

        const otherCa = tempDir("twin-base-key-ca");
        try {
            expect(baseImageKey(baseImageInputs({ ...trust(), caCert: ensureCa(otherCa).cert }))).not.toBe(key);
            expect(baseImageKey(baseImageInputs({ ...trust(), archiveKey: ensureArchiveKey(otherCa).publicKey }))).not.toBe(key);
        } finally {
            fs.rmSync(otherCa, { recursive: true, force: true });
        }
    });

    it("a host's image has a key of its own, which changes with its packages and with the files they read while they install", () => {
        const base = baseImageKey(baseImageInputs(trust()));
        const host = { packages: ["docker.io", "postgresql"], earlyFiles: { "/etc/postgresql-common/createcluster.conf": { content: "create_main_cluster = false\n", permissions: "0644" } } };
        const key = baseImageKey(baseImageInputs({ ...trust(), host }));
        expect(key).not.toBe(base);
        expect(baseImageKey(baseImageInputs({ ...trust(), host: { ...host } }))).toBe(key);
        expect(baseImageKey(baseImageInputs({ ...trust(), host: { ...host, packages: ["docker.io"] } }))).not.toBe(key);
        const created = { "/etc/postgresql-common/createcluster.conf": { content: "create_main_cluster = true\n", permissions: "0644" } };
        expect(baseImageKey(baseImageInputs({ ...trust(), host: { ...host, earlyFiles: created } }))).not.toBe(key);
    });

    it("takes from user_data its packages and only the files apt and their maintainer scripts read while they install; an encoded one is refused", () => {
        const userData = (files: object[]) => `#cloud-config\n${JSON.stringify({ packages: ["docker.io", "postgresql"], write_files: files })}\n`;
        const files = [
            { path: "/etc/apt/apt.conf.d/90airlock-no-recommends", content: 'APT::Install-Recommends "false";\n', permissions: "0644" },
            { path: "/etc/postgresql-common/createcluster.conf", content: "create_main_cluster = false\n" },
            { path: "/etc/airlock/tailnet-authkey", content: "a join key", permissions: "0600" },
            { path: "/etc/systemd/system/ssh.service.d/10-airlock-tailnet.conf", content: "[Service]\n" },
        ];
        const host = hostPackages(userData(files));
        expect(host.packages).toEqual(["docker.io", "postgresql"]);
        expect(host.earlyFiles).toEqual({
            "/etc/apt/apt.conf.d/90airlock-no-recommends": { content: 'APT::Install-Recommends "false";\n', permissions: "0644" },
            "/etc/postgresql-common/createcluster.conf": { content: "create_main_cluster = false\n", permissions: "0644" },
        });
        expect(EARLY_FILE_DIRS).toEqual(["/etc/apt/", "/etc/postgresql-common/"]);
        expect(() => hostPackages(userData([{ path: "/etc/apt/apt.conf.d/x", content: "eA==", encoding: "b64" }]))).toThrow(/\/etc\/apt\/apt.conf.d\/x is b64-encoded/);
    });

    it("ensureBaseImage reuses the image cached under the current key and builds nothing", async () => {
        const key = baseImageKey(baseImageInputs(trust()));
        expect(cachedBaseImage(key, cache)).toBeUndefined();
        const dir = path.join(cache, `base-${key}`);
        fs.mkdirSync(dir);
        fs.writeFileSync(path.join(dir, "disk.qcow2"), "");
        const lines: string[] = [];
        const started = Date.now();
        const image = await ensureBaseImage((line) => lines.push(line), cache);
        expect(image.dir).toBe(dir);
        expect(lines).toEqual([`base image: cached ${dir}`]);
        expect(Date.now() - started).toBeLessThan(5_000);
    });
});

describe.runIf(toolsAvailable("twin scripts", ["shellcheck", "pyflakes3"]))("the twin's own scripts", () => {
    it("the image's hooks pass shellcheck, the mirror's server pyflakes", () => {
        const hook = run("shellcheck", ["customize", "host-packages"].map((hook) => path.join(__dirname, "..", "twin", "base-image", hook)));
        expect(hook.stdout + hook.stderr).toBe("");
        expect(hook.status).toBe(0);
        const server = run("pyflakes3", [path.join(__dirname, "..", "twin", "mirror", "serve.py")]);
        expect(server.stdout + server.stderr).toBe("");
        expect(server.status).toBe(0);
    });
});

describe("the mirror's package list", () => {
    it("is what both hosts' rendered cloud-init installs, for dev and prod", async () => {
        const packages = await userDataPackages(["dev", "prod"]);
        // From the gateway's and from the sandbox's user_data.
        for (const name of ["docker.io", "rootlesskit", "restic", "postgresql", "btrfs-progs", "socat", "nftables"]) expect(packages).toContain(name);
        expect(new Set(packages).size).toBe(packages.length);
    });
});

const canServe =
    isRoot() && toolsAvailable("twin apt mirror", ["ip", "apt-get", "apt-ftparchive", "gpg", "gpgconf", "openssl", "curl", "dpkg-deb", "python3"]);
if (!isRoot()) console.warn("SKIPPED twin apt mirror in a network namespace: needs root (CI runs it as root)");

describe.runIf(canServe)("the twin's apt mirror, served in a network namespace", () => {
    const netns = `alb-mirror-${process.pid}`;
    const cache = tempDir("twin-mirror");
    const logFile = path.join(cache, "run", "mirror.log");
    const apt = path.join(cache, "client");
    let server: RunningMirror | undefined;
    let mirrorDir = "";

    /** A stand-in .deb for the Tailscale repository, built here. */
    function standInDeb(): string {
        const tree = path.join(cache, "deb", "tailscale");
        fs.mkdirSync(path.join(tree, "DEBIAN"), { recursive: true });
        fs.mkdirSync(path.join(tree, "usr", "bin"), { recursive: true });
        fs.writeFileSync(path.join(tree, "DEBIAN", "control"), "Package: tailscale\nVersion: 1.0.0-twin\nArchitecture: amd64\nMaintainer: airlock twin <twin@airlock.invalid>\nDescription: test stand-in\n");
        fs.writeFileSync(path.join(tree, "usr", "bin", "tailscale"), "#!/bin/sh\n", { mode: 0o755 });
        const deb = path.join(cache, "deb", "tailscale_1.0.0-twin_amd64.deb");
        const built = run("dpkg-deb", ["--root-owner-group", "--build", tree, deb]);
        if (built.status !== 0) throw new Error(built.stderr);
        return deb;
    }

    /** A private apt client: its own state and sources, trusting exactly `trusted` (a directory of keys). */
    function aptClient(trusted: string): string {
        for (const sub of ["state/lists/partial", "archives/partial", "cache", "parts", "sources.list.d", "preferences.d"]) fs.mkdirSync(path.join(apt, sub), { recursive: true });
        fs.writeFileSync(path.join(apt, "status"), "");
        fs.writeFileSync(
            path.join(apt, "sources.list"),
            [
                "deb http://deb.debian.org/debian trixie main",
                "deb http://deb.debian.org/debian trixie-updates main",
                "deb http://security.debian.org/debian-security trixie-security main",
                `deb [signed-by=${path.join(apt, "tailscale.gpg")}] https://pkgs.tailscale.com/stable/debian trixie main`,
                "",
            ].join("\n"),
        );
        const conf = path.join(apt, "apt.conf");
        fs.writeFileSync(
            conf,
            [
                `Dir::Etc::main "/dev/null";`,
                `Dir::Etc::parts "${apt}/parts";`,
                `Dir::Etc::sourcelist "${apt}/sources.list";`,
                `Dir::Etc::sourceparts "${apt}/sources.list.d";`,
                `Dir::Etc::preferencesparts "${apt}/preferences.d";`,
                `Dir::Etc::trusted "/dev/null";`,
                `Dir::Etc::trustedparts "${trusted}";`,
                `Dir::State "${apt}/state";`,
                `Dir::State::status "${apt}/status";`,
                `Dir::Cache "${apt}/cache";`,
                `Dir::Cache::archives "${apt}/archives";`,
                `Debug::NoLocking "true";`,
                `APT::Architecture "amd64";`,
                `Acquire::https::CaInfo "${ensureCa(cache).cert}";`,
                // The client lives in a private (0700) temporary directory that apt's _apt user cannot enter.
                `APT::Sandbox::User "root";`,
                "",
            ].join("\n"),
        );
        return conf;
    }

    const aptGet = (conf: string, args: string[]) =>
        inNamespace(netns, ["env", `APT_CONFIG=${conf}`, "DEBIAN_FRONTEND=noninteractive", "apt-get", "-y", ...args]);

    beforeAll(async () => {
        // A small mirror: one package from user_data, resolved against a one-package "image".
        const image = path.join(cache, "image");
        fs.mkdirSync(image);
        fs.writeFileSync(path.join(image, "manifest"), "");
        fs.writeFileSync(path.join(image, "dpkg-status"), "");
        const mirror = await ensureMirror({
            packages: ["jq"],
            image: { manifest: path.join(image, "manifest"), dpkgStatus: path.join(image, "dpkg-status") },
            extraDebs: [standInDeb()],
            log: () => undefined,
            cacheDir: cache,
        });
        mirrorDir = mirror.dir;

        run("ip", ["netns", "del", netns]);
        for (const args of [
            ["netns", "add", netns],
            ["-n", netns, "link", "set", "lo", "up"],
            ["-n", netns, "addr", "add", `${HOST_ADDRESS}/32`, "dev", "lo"],
        ]) {
            const result = run("ip", args);
            if (result.status !== 0) throw new Error(`ip ${args.join(" ")}: ${result.stderr}`);
        }
        // `ip netns exec` puts /etc/netns/<ns>/hosts over /etc/hosts: the names the guests use, resolved as the twin's DNS does.
        fs.mkdirSync(`/etc/netns/${netns}`, { recursive: true });
        fs.writeFileSync(`/etc/netns/${netns}/hosts`, `127.0.0.1 localhost\n${HOST_ADDRESS} deb.debian.org security.debian.org pkgs.tailscale.com\n`);
        server = await startMirror({ netns, dir: mirror.dir, b2Dir: path.join(path.dirname(logFile), "b2"), logFile, cacheDir: cache });
    }, 600_000);

    afterAll(() => {
        server?.stop();
        run("ip", ["netns", "del", netns]);
        fs.rmSync(`/etc/netns/${netns}`, { recursive: true, force: true });
        fs.rmSync(cache, { recursive: true, force: true });
    });

    it("is cached by its inputs: the same inputs give the same mirror, another stand-in .deb another", () => {
        const image = { manifest: path.join(cache, "image", "manifest"), dpkgStatus: path.join(cache, "image", "dpkg-status") };
        const fingerprint = tailscaleKeyFingerprint(cache);
        const key = mirrorKey({ packages: ["jq"], image, extraDebs: [path.join(cache, "deb", "tailscale_1.0.0-twin_amd64.deb")] }, fingerprint);
        expect(mirrorDir).toBe(path.join(cache, `mirror-${key}`, "www"));
        expect(mirrorKey({ packages: ["jq"], image, extraDebs: [] }, fingerprint)).not.toBe(key);
        expect(mirrorKey({ packages: ["jq", "socat"], image, extraDebs: [path.join(cache, "deb", "tailscale_1.0.0-twin_amd64.deb")] }, fingerprint)).not.toBe(key);
    });

    it("serves the Tailscale key where airlock-install-tailscale fetches it, over HTTPS the twin CA vouches for", () => {
        const url = "https://pkgs.tailscale.com/stable/debian/trixie.noarmor.gpg";
        const key = path.join(apt, "tailscale.gpg");
        fs.mkdirSync(apt, { recursive: true });
        const withCa = inNamespace(netns, ["curl", "--fail", "--silent", "--show-error", "--proto", "=https", "--tlsv1.2", "--cacert", ensureCa(cache).cert, "--output", key, url]);
        expect(withCa.stderr).toBe("");
        expect(withCa.status).toBe(0);
        expect(keyFileFingerprint(key)).toBe(tailscaleKeyFingerprint(cache));
        // Without the twin CA the same request is refused: the certificate is what makes it trusted.
        const withoutCa = inNamespace(netns, ["curl", "--fail", "--silent", "--show-error", "--capath", "/nonexistent", "--cacert", "/dev/null", url]);
        expect(withoutCa.status).not.toBe(0);
    });

    it("apt trusting only the twin key updates from it (signatures verified) and downloads from Debian's and Tailscale's paths", () => {
        const trusted = path.join(cache, "trusted");
        fs.mkdirSync(trusted, { recursive: true });
        fs.copyFileSync(ensureArchiveKey(cache).publicKey, path.join(trusted, "airlock-twin.gpg"));
        const conf = aptClient(trusted);
        const update = aptGet(conf, ["update"]);
        expect(update.stderr).not.toMatch(/^(W|E):/m);
        expect(update.status).toBe(0);
        const install = aptGet(conf, ["install", "--download-only", "jq", "tailscale"]);
        expect(install.stderr).not.toMatch(/^(W|E):/m);
        expect(install.status).toBe(0);
        const fetched = fs.readdirSync(path.join(apt, "archives")).filter((f) => f.endsWith(".deb"));
        expect(fetched).toContain("tailscale_1.0.0-twin_amd64.deb");
        expect(fetched.some((f) => f.startsWith("jq_"))).toBe(true);
        expect(fetched.some((f) => f.startsWith("libjq1_"))).toBe(true);
        // Every index and .deb came from the mirror, by the names the guests use.
        const log = fs.readFileSync(logFile, "utf8");
        expect(log).toMatch(/deb\.debian\.org "GET \/debian\/dists\/trixie\/InRelease HTTP\/1\.1" 200/);
        expect(log).toMatch(/security\.debian\.org "GET \/debian-security\/dists\/trixie-security\/InRelease HTTP\/1\.1" 200/);
        expect(log).toMatch(/pkgs\.tailscale\.com "GET \/stable\/debian\/pool\/tailscale_1\.0\.0-twin_amd64\.deb HTTP\/1\.1" 200/);
    });

    it("apt without the twin key refuses the same mirror", () => {
        const untrusted = path.join(cache, "untrusted");
        fs.mkdirSync(untrusted, { recursive: true });
        fs.rmSync(path.join(apt, "state"), { recursive: true, force: true });
        const conf = aptClient(untrusted);
        const update = aptGet(conf, ["update"]);
        expect(update.status).not.toBe(0);
        expect(update.stderr).toMatch(/NO_PUBKEY|not signed/);
    });
});
