import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeUserData } from "../policies/engine/userData";
import { readQueryLog } from "../cli/querylog";
import { readStackFile } from "../components/config/load";
import type { StackConfig } from "../components/config/schema";
import { TEMPLATES_DIR } from "../components/render/templates";
import { adguardDataDir, GATEWAY_AGENT_PATHS, renderAdguardConfig, renderGatewayCompose, renderSandboxCompose, ResolvedImages, RESOLVER_WORK_DIR } from "../components/workloads/compose";
import { configuredImages } from "../components/workloads/images";
import { REGISTRY_ADDRESS } from "../twin/contract";
import { planStack } from "../cli/offline";
import { COMPOSE_TEMPLATE_PATH, GATEWAY_KNOWN_HOSTS_PATH } from "../components/render/hosts";
import { buildTwinImages, TwinImage, twinImageAnswers, twinImageList, twinImages, twinRegistryNames } from "../twin/images";
import { fillRegistry, RunningRegistry, startRegistry } from "../twin/registry";
import { twinResolverUpstreams } from "../twin/userdata";
import { startDockerd, TestDocker } from "./helpers/dockerd";
import { inNamespace } from "./helpers/netns";
import { pinnedKnownHosts } from "./helpers/sshdRig";
import { deployedValues, editedStack, renderHosts, resourceNamed, sandboxSshConfigAt, SHIPPED_STACKS, stackFile } from "./helpers/stacks";
import { installFiles, isRoot, run, TEST_TAILNET_DOMAIN, toolsAvailable, withTailnetValues } from "./helpers/tools";

/**
 * The twin's images and registry, for real: every image the shipped stacks run is
 * built from Debian packages, pushed into Debian's docker-registry, served over TLS
 * in a network namespace of this test under the stack's registry names, pulled by
 * digest by a real dockerd that trusts the test's CA, and run from the rendered
 * compose files with their hardening (read-only roots, no capabilities, tmpfs).
 */

const canRun =
    isRoot() &&
    toolsAvailable("twin images and registry", ["mmdebstrap", "buildah", "skopeo", "docker-registry", "dockerd", "docker", "docker-compose", "openssl", "curl", "dnsmasq", "dig", "ip"]);
if (!isRoot()) console.warn("SKIPPED twin images and registry: building images and a test dockerd need root (CI runs it as root)");

const NS = `airlock-ti-${process.pid}`;
/** A "tailnet" address in the namespace: the compose files publish on it, and the resolver allows it. */
const TAILNET = "100.100.9.1";
/** The fake upstream resolver (dnsmasq) behind Docker's embedded DNS, and what it answers. */
const UPSTREAM = "10.77.0.1";
const UPSTREAM_ANSWER = "192.0.2.7";
const SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";
const ACCEPT = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

function must(result: ReturnType<typeof run>, what: string): string {
    if (result.status !== 0) throw new Error(`${what}: ${result.stderr || result.stdout}`);
    return result.stdout;
}

/** A CA and a certificate for `names` (twin/ca.ts makes the twin's own). */
function testCa(dir: string, names: string[]): { ca: string; cert: string; key: string } {
    const f = (name: string) => path.join(dir, name);
    must(run("openssl", ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f("ca.key"), "-out", f("ca.crt"), "-days", "2", "-subj", "/CN=airlock twin test CA", "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"]), "CA");
    must(run("openssl", ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f("registry.key"), "-out", f("registry.csr"), "-subj", `/CN=${names[0]}`]), "CSR");
    fs.writeFileSync(f("leaf.ext"), `subjectAltName=${names.map((n) => `DNS:${n}`).join(",")}\nextendedKeyUsage=serverAuth\n`);
    must(run("openssl", ["x509", "-req", "-in", f("registry.csr"), "-CA", f("ca.crt"), "-CAkey", f("ca.key"), "-CAcreateserial", "-days", "2", "-extfile", f("leaf.ext"), "-out", f("registry.crt")]), "certificate");
    return { ca: f("ca.crt"), cert: f("registry.crt"), key: f("registry.key") };
}

/** The stack's images as the twin's compose pins them. */
function pinnedImages(cfg: StackConfig, pinned: Record<string, string>): ResolvedImages {
    const configured = configuredImages(cfg);
    const pin = (reference: string) => pinned[reference] ?? reference;
    return {
        ...configured,
        sandboxShell: pin(configured.sandboxShell),
        browser: pin(configured.browser),
        postgres: pin(configured.postgres),
        redis: pin(configured.redis),
        adguard: pin(configured.adguard),
        agent: pin(configured.agent),
        agentMemoryDb: pin(configured.agentMemoryDb),
    };
}

describe.runIf(canRun)("the twin's images and registry", () => {
    let dir: string;
    let dev: StackConfig;
    let prod: StackConfig;
    let devPinned: Record<string, string>;
    let prodPinned: Record<string, string>;
    let images: TwinImage[];
    let tls: { ca: string; cert: string; key: string };
    let registry: RunningRegistry | undefined;
    let dockerd: TestDocker | undefined;
    let root: string;
    const composeFiles: string[] = [];
    const timings: string[] = [];
    const netnsEtc = `/etc/netns/${NS}`;

    const compose = (file: string, args: string[]) => run("docker-compose", ["--project-name", "airlock", "--file", file, ...args], { env: dockerd!.env, timeout: 300_000 });
    const exec = (container: string, script: string) => dockerd!.docker(["exec", container, "sh", "-c", script]);
    const curl = (args: string[]) => inNamespace(NS, ["curl", "--silent", "--show-error", "--max-time", "20", ...args]);

    beforeAll(async () => {
        dir = fs.mkdtempSync("/tmp/airlock-twin-images-");
        dev = readStackFile(stackFile("dev"));
        prod = readStackFile(stackFile("prod"));
        const log = (line: string) => console.log(line);

        let started = Date.now();
        devPinned = await buildTwinImages(dev, log);
        prodPinned = await buildTwinImages(prod, log);
        timings.push(`build (cold or cached, as found): ${Math.round((Date.now() - started) / 1000)} s`);
        started = Date.now();
        images = [...(await twinImages(dev, log)), ...(await twinImages(prod, log))];
        timings.push(`cached path, both stacks: ${Date.now() - started} ms`);

        // The namespace: the registry's address, the fake upstream's, and a tailnet address.
        run("ip", ["netns", "del", NS]);
        must(run("ip", ["netns", "add", NS]), "netns");
        must(run("ip", ["-n", NS, "link", "set", "lo", "up"]), "lo");
        // A veth pair inside the namespace carries its addresses (the kernel here has no dummy links).
        must(run("ip", ["-n", NS, "link", "add", "twin0", "type", "veth", "peer", "name", "twin1"]), "veth");
        must(run("ip", ["-n", NS, "link", "set", "twin1", "up"]), "up");
        for (const address of [`${REGISTRY_ADDRESS}/24`, `${UPSTREAM}/24`, `${TAILNET}/32`]) must(run("ip", ["-n", NS, "addr", "add", address, "dev", "twin0"]), address);
        must(run("ip", ["-n", NS, "link", "set", "twin0", "up"]), "up");

        // What the twin's DNS does for the guests: the stack's registry names lead to the registry.
        const names = [...new Set([...twinRegistryNames(dev), ...twinRegistryNames(prod)])];
        tls = testCa(dir, names);
        fs.mkdirSync(netnsEtc, { recursive: true });
        fs.writeFileSync(path.join(netnsEtc, "hosts"), `127.0.0.1 localhost\n${REGISTRY_ADDRESS} ${names.join(" ")}\n`);
        fs.writeFileSync(path.join(netnsEtc, "resolv.conf"), `nameserver ${UPSTREAM}\n`);
        // Inside the namespace the system's trust store also holds the CA, as the twin's base image
        // installs it (dockerd trusts docker.io's registry through the system store only, never certs.d).
        fs.copyFileSync(SYSTEM_BUNDLE, path.join(dir, "system-ca.crt"));
        fs.mkdirSync(path.join(netnsEtc, "ssl", "certs"), { recursive: true });
        fs.writeFileSync(path.join(netnsEtc, "ssl", "certs", "ca-certificates.crt"), fs.readFileSync(SYSTEM_BUNDLE, "utf8") + fs.readFileSync(tls.ca, "utf8"));

        started = Date.now();
        const storageDir = path.join(dir, "registry");
        await fillRegistry({ storageDir, images, log, workDir: path.join(dir, "fill") });
        timings.push(`registry fill: ${Math.round((Date.now() - started) / 1000)} s`);
        registry = await startRegistry({ netns: NS, address: REGISTRY_ADDRESS, port: 443, certFile: tls.cert, keyFile: tls.key, storageDir, logFile: path.join(dir, "registry.log") });

        const upstream = run("ip", ["netns", "exec", NS, "dnsmasq", "--no-resolv", "--no-hosts", `--listen-address=${UPSTREAM}`, "--bind-interfaces", `--address=/#/${UPSTREAM_ANSWER}`, `--pid-file=${path.join(dir, "dnsmasq.pid")}`, "--user=root"]);
        must(upstream, "dnsmasq");
        fs.mkdirSync(path.join(dir, "docker"));
        dockerd = await startDockerd(path.join(dir, "docker"), [], NS);
        root = path.join(dir, "hosts");
    }, 1_800_000);

    afterAll(async () => {
        for (const file of composeFiles) compose(file, ["down", "--volumes", "--timeout", "1"]);
        await dockerd?.stop();
        await registry?.stop();
        const pidFile = dir && path.join(dir, "dnsmasq.pid");
        if (pidFile && fs.existsSync(pidFile)) process.kill(Number(fs.readFileSync(pidFile, "utf8")), "SIGTERM");
        run("ip", ["netns", "del", NS]);
        fs.rmSync(netnsEtc, { recursive: true, force: true });
        if (dir) fs.rmSync(dir, { recursive: true, force: true });
        console.log(`twin images: ${timings.join("; ")}`);
    }, 120_000);

    it("serves every image of both stacks by its digest over TLS, under the stack's registry names", () => {
        expect(twinRegistryNames(prod)).toEqual(["ghcr.io", "registry-1.docker.io"]);
        expect(images.length).toBeGreaterThanOrEqual(8);
        for (const image of images) {
            const host = image.registry;
            const url = `https://${host}/v2/${image.repository}/manifests/${image.digest}`;
            const resolve = ["--resolve", `${host}:443:${REGISTRY_ADDRESS}`];
            const manifest = path.join(dir, "manifest");
            const headers = curl(["--fail", "--cacert", tls.ca, ...resolve, "-H", `Accept: ${ACCEPT}`, "--dump-header", "-", "--output", manifest, url]);
            expect(headers.status, `${url}: ${headers.stderr}`).toBe(0);
            expect(`sha256:${crypto.createHash("sha256").update(fs.readFileSync(manifest)).digest("hex")}`, url).toBe(image.digest);
            expect(headers.stdout.toLowerCase()).toContain(`docker-content-digest: ${image.digest}`);
            // The tag names the same manifest.
            const byTag = curl(["--fail", "--cacert", tls.ca, ...resolve, "-H", `Accept: ${ACCEPT}`, "--head", url.replace(image.digest, image.tag)]);
            expect(byTag.stdout.toLowerCase(), image.reference).toContain(`docker-content-digest: ${image.digest}`);
            // The certificate is checked: with the machine's own trust store only, no connection.
            expect(curl(["--fail", "--cacert", path.join(dir, "system-ca.crt"), ...resolve, "--output", "/dev/null", url]).status, url).not.toBe(0);
        }
        // Guests only pull: the registry refuses uploads.
        const upload = curl(["--cacert", tls.ca, "--resolve", `registry-1.docker.io:443:${REGISTRY_ADDRESS}`, "-X", "POST", "--output", "/dev/null", "--write-out", "%{http_code}", "https://registry-1.docker.io/v2/library/debian/blobs/uploads/"]);
        expect(upload.stdout).toBe("405");
    });

    it("a real dockerd pulls debian:bookworm-slim by digest from registry-1.docker.io and runs it", () => {
        const pinned = devPinned["debian:bookworm-slim"];
        expect(pinned).toMatch(/^debian:bookworm-slim@sha256:[0-9a-f]{64}$/);
        const started = Date.now();
        const pull = dockerd!.docker(["pull", pinned]);
        expect(pull.status, pull.stderr).toBe(0);
        timings.push(`debian pull: ${Date.now() - started} ms`);
        const version = dockerd!.docker(["run", "--rm", "--network", "none", pinned, "cat", "/etc/debian_version"]);
        expect(version.stdout).toMatch(/^12\.\d+/);
        // The slim image's dpkg settings: no manuals, as in Debian's own slim image.
        const slim = dockerd!.docker(["run", "--rm", "--network", "none", pinned, "sh", "-c", "ls /usr/share/man | wc -l; ls /usr/share/locale | wc -l; dpkg -s apt >/dev/null && echo apt"]);
        expect(slim.stdout.split("\n").slice(0, 3)).toEqual(["0", "0", "apt"]);
    });

    it("the sandbox compose runs the built shell, the browser with CDP on 9222, PostgreSQL and Redis", () => {
        const file = path.join(dir, "sandbox-compose.yml");
        fs.mkdirSync(path.join(dir, "workspace"));
        const rendered = renderSandboxCompose(prod, pinnedImages(prod, prodPinned));
        expect(rendered).toContain(prodPinned["@SANDBOX_SHELL_IMAGE@"]);
        expect(prodPinned["@SANDBOX_SHELL_IMAGE@"]).toMatch(/^ghcr\.io\/example-co\/airlock\/airlock-sandbox-shell@sha256:[0-9a-f]{64}$/);
        fs.writeFileSync(file, rendered.replaceAll("@TAILNET_IPV4@", TAILNET).replace("- /workspace:/workspace", `- ${dir}/workspace:/workspace`));
        composeFiles.push(file);
        const started = Date.now();
        const up = compose(file, ["up", "--detach"]);
        expect(up.status, up.stderr).toBe(0);
        timings.push(`sandbox compose pull + up: ${Math.round((Date.now() - started) / 1000)} s`);

        // The shell: what the Dockerfile promises.
        const tools = exec("agent-sandbox-shell", "for t in bash curl git jq less make ssh psql ps python3 unzip xz; do command -v $t >/dev/null || echo missing $t; done; pwd; echo $LANG; find / -xdev -perm /6000 -type f | wc -l");
        expect(tools.stdout.trim().split("\n"), tools.stderr).toEqual(["/workspace", "C.UTF-8", "0"]);
        expect(exec("agent-sandbox-shell", "cat /etc/gitconfig").stdout).toBe(fs.readFileSync(path.join(TEMPLATES_DIR, "images", "sandbox-shell", "gitconfig"), "utf8"));
        expect(exec("agent-sandbox-shell", "git config --system transfer.credentialsInUrl").stdout.trim()).toBe("die");

        // PostgreSQL and Redis on the internal network, as the shell (and db-dump) reach them.
        let psql = exec("agent-sandbox-shell", "psql -h postgres -U postgres -d agent -Atc 'select 40 + 2'");
        for (let i = 0; i < 60 && psql.stdout.trim() !== "42"; i++) {
            run("sleep", ["1"]);
            psql = exec("agent-sandbox-shell", "psql -h postgres -U postgres -d agent -Atc 'select 40 + 2'");
        }
        expect(psql.stdout.trim(), psql.stderr).toBe("42");
        const ping = exec("agent-sandbox-shell", `bash -c 'exec 3<>/dev/tcp/redis/6379 && printf "PING\\r\\n" >&3 && head -c 5 <&3'`);
        expect(ping.stdout, ping.stderr).toBe("+PONG");
        // Started as root (cap_add for that), the servers run as their own users.
        const owners = (container: string, comm: string) =>
            exec(container, `for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = ${comm} ] && stat -c %U $p; done | sort -u`).stdout.trim();
        expect(owners("agent-postgres", "postgres")).toBe("postgres");
        expect(owners("agent-redis", "redis-server")).toBe("redis");

        // The browser: CDP on the published tailnet address, from a read-only root.
        let version = curl(["--fail", `http://${TAILNET}:9222/json/version`]);
        for (let i = 0; i < 60 && version.status !== 0; i++) {
            run("sleep", ["1"]);
            version = curl(["--fail", `http://${TAILNET}:9222/json/version`]);
        }
        expect(version.status, `${version.stderr} ${dockerd!.docker(["logs", "agent-browser"]).stderr}`).toBe(0);
        expect(JSON.parse(version.stdout).Browser).toMatch(/Chrome\/\d+/);
        expect(JSON.parse(version.stdout).webSocketDebuggerUrl).toMatch(/^ws:\/\//);
    });

    it("the gateway compose runs the real AdGuard Home, which answers, blocks and logs every query", () => {
        // The gateway's rendered files (ssh config, Hermes's managed files...) under a root of the test's own.
        installFiles(renderHosts(prod).gateway, root);
        // The runtime's ssh config, as airlock-sandbox-address writes it at boot (its folder first).
        fs.mkdirSync(path.join(root, GATEWAY_AGENT_PATHS.sshFolder), { recursive: true });
        fs.writeFileSync(path.join(root, GATEWAY_AGENT_PATHS.sshConfig), sandboxSshConfigAt(renderHosts(prod).gateway, `${prod.hostnames.sandbox}.${TEST_TAILNET_DOMAIN}`), { mode: 0o644 });
        // The sandbox's host key pinned as at deploy (the runtime's preflight refuses a known_hosts that pins none).
        const hostKey = path.join(dir, "sandbox_host_ed25519");
        expect(run("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-f", hostKey]).status).toBe(0);
        fs.writeFileSync(path.join(root, GATEWAY_KNOWN_HOSTS_PATH), pinnedKnownHosts(renderHosts(prod).gateway, fs.readFileSync(`${hostKey}.pub`, "utf8").split(" ").slice(0, 2).join(" ")));
        const data = path.join(root, adguardDataDir(prod));
        fs.mkdirSync(path.join(data, "conf"), { recursive: true });
        fs.mkdirSync(path.join(root, RESOLVER_WORK_DIR), { recursive: true });
        // As in the twin: the real AdGuard Home asks the twin's resolver (here, the fake upstream) in plain DNS.
        fs.writeFileSync(path.join(data, "conf", "AdGuardHome.yaml"), twinResolverUpstreams(renderAdguardConfig(prod), UPSTREAM));
        const doc = YAML.parse(withTailnetValues(renderGatewayCompose(prod, pinnedImages(prod, prodPinned)), TAILNET));
        // Host paths move under the test's root; what is not rendered there is made empty.
        const hostPath = (p: string) => path.join(root, p);
        for (const service of Object.values(doc.services) as Record<string, any>[]) {
            service.volumes = (service.volumes ?? []).map((volume: string) => {
                const [source, ...rest] = volume.split(":");
                if (!source.startsWith("/")) return volume;
                if (!fs.existsSync(hostPath(source))) {
                    fs.mkdirSync(path.dirname(hostPath(source)), { recursive: true });
                    if (rest.includes("ro")) fs.writeFileSync(hostPath(source), "");
                    else fs.mkdirSync(hostPath(source));
                }
                return [hostPath(source), ...rest].join(":");
            });
            service.env_file = (service.env_file ?? []).map((file: string) => {
                fs.mkdirSync(path.dirname(hostPath(file)), { recursive: true });
                fs.writeFileSync(hostPath(file), "");
                return hostPath(file);
            });
        }
        for (const volume of Object.values(doc.volumes ?? {}) as Record<string, any>[]) {
            volume.driver_opts.device = hostPath(volume.driver_opts.device);
            fs.mkdirSync(volume.driver_opts.device, { recursive: true });
        }
        const file = path.join(dir, "gateway-compose.yml");
        fs.writeFileSync(file, YAML.stringify(doc));
        composeFiles.push(file);
        const up = compose(file, ["up", "--detach"]);
        expect(up.status, up.stderr).toBe(0);

        // The resolver's own address on the compose network; queries come from a tailnet address.
        const resolverIp = dockerd!.docker(["inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", "airlock-adguard"]).stdout.trim();
        const dig = (name: string, source: string) => inNamespace(NS, ["dig", "+tries=1", "+time=3", "-b", source, `@${resolverIp}`, name, "A"]);
        let allowed = dig("api.github.com", TAILNET);
        for (let i = 0; i < 30 && !allowed.stdout.includes("status: NOERROR"); i++) {
            run("sleep", ["1"]);
            allowed = dig("api.github.com", TAILNET);
        }
        // prod is in allowlist mode: github.com's subdomains are forwarded (to the fake upstream)...
        expect(allowed.stdout, `${allowed.stderr} ${dockerd!.docker(["logs", "airlock-adguard"]).stderr}`).toContain("status: NOERROR");
        expect(allowed.stdout).toMatch(new RegExp(`api\\.github\\.com\\.\\s+\\d+\\s+IN\\s+A\\s+${UPSTREAM_ANSWER.replaceAll(".", "\\.")}`));
        // ...everything else is blocked...
        expect(dig("exfil.example.org", TAILNET).stdout).toContain("status: NXDOMAIN");
        // ...and a client outside allowed_clients gets no answer at all.
        expect(dig("api.github.com", REGISTRY_ADDRESS).stdout).toContain("timed out");

        const log = readQueryLog(path.join(root, RESOLVER_WORK_DIR, "data", "querylog.json"));
        expect(log.unreadable).toBe(0);
        const seen = log.queries.map((q) => ({ name: q.name, client: q.client, type: q.type, blocked: q.blocked }));
        expect(seen).toContainEqual({ name: "api.github.com", client: TAILNET, type: "A", blocked: false });
        expect(seen).toContainEqual({ name: "exfil.example.org", client: TAILNET, type: "A", blocked: true });
        expect(seen.filter((q) => q.client !== TAILNET)).toEqual([]);
        expect(Math.abs(log.queries.at(-1)!.time.getTime() - Date.now())).toBeLessThan(120_000);

        // The agent runtime (Hermes from PyPI): past its preflight, up, its ssh client reading the mounted sandbox config.
        let said = "";
        for (let i = 0; i < 120 && !/airlock-hermes-preflight: /.test(said); i++) {
            run("sleep", ["1"]);
            said = dockerd!.docker(["logs", "airlock-agent"]).stderr;
        }
        expect(said).toMatch(/airlock-hermes-preflight: Hermes \S+ runs every command over ssh/);
        expect(dockerd!.docker(["inspect", "--format", "{{.State.Running}}", "airlock-agent"]).stdout.trim()).toBe("true");
        const ssh = exec("airlock-agent", "ssh -G sandbox | grep -E '^(user|stricthostkeychecking|identitiesonly) '");
        expect(ssh.stdout.split("\n").filter(Boolean).sort(), ssh.stderr).toEqual(["identitiesonly yes", "stricthostkeychecking true", `user ${prod.agent.user}`]);
        // The memory database answers pg_dump the way airlock-memory-dump runs it.
        let dump = exec("airlock-agent-memory-db", "pg_dump --format=custom --no-owner --username=postgres --dbname=memory | head -c 5");
        for (let i = 0; i < 60 && dump.stdout !== "PGDMP"; i++) {
            run("sleep", ["1"]);
            dump = exec("airlock-agent-memory-db", "pg_dump --format=custom --no-owner --username=postgres --dbname=memory | head -c 5");
        }
        expect(dump.stdout, dump.stderr).toBe("PGDMP");
    }, 300_000);

    it("keeps each built image in the cache: a second build of both stacks takes no build", async () => {
        const started = Date.now();
        const lines: string[] = [];
        expect(await buildTwinImages(prod, (line) => lines.push(line))).toEqual(prodPinned);
        expect(await buildTwinImages(dev, (line) => lines.push(line))).toEqual(devPinned);
        expect(lines.filter((line) => line.includes("building"))).toEqual([]);
        expect(Date.now() - started).toBeLessThan(10_000);
    });
});

describe("the twin's image list", () => {
    it("its pinned references are what the plan renders into both hosts' compose files", async () => {
        for (const stack of SHIPPED_STACKS) {
            // Digests as buildTwinImages returns them, without a build.
            const cfg = readStackFile(stackFile(stack));
            const pinned = Object.fromEntries(twinImageList(cfg).map((w, i) => [w.reference, w.pin(`sha256:${String(i).repeat(64)}`)]));
            const answers = twinImageAnswers(pinned);
            const plan = await planStack(stackFile(stack), stack, {
                mode: "up",
                deployed: (type, name) => (type === "docker:index/image:Image" ? answers.builtShell : deployedValues!(type, name)),
                calls: answers.calls,
            });
            const composed: string[] = [];
            for (const role of ["gateway", "sandbox"]) {
                const userData = YAML.parse(decodeUserData(String(resourceNamed(plan, "hcloud:index/server:Server", `${plan.config.prefix}-${role}-server`).inputs.userData)).text);
                const compose = YAML.parse(userData.write_files.find((f: { path: string }) => f.path === COMPOSE_TEMPLATE_PATH).content);
                composed.push(...Object.values(compose.services).map((service) => (service as { image: string }).image));
            }
            // Every image a compose file runs is one the twin serves, and every one it builds is run.
            expect(new Set(composed), stack).toEqual(new Set(Object.values(pinned)));
        }
    });

    // A stack whose images the twin cannot stand in for is refused with the key that names it.
    it("names each stack image's stand-in and refuses images it has none for", () => {
        const prodList = twinImageList(readStackFile(stackFile("prod"))).map((w) => [w.reference, w.recipe]);
        expect(prodList).toEqual([
            ["@SANDBOX_SHELL_IMAGE@", "shell"],
            ["chromedp/headless-shell:stable", "browser"],
            ["postgres:15-bookworm", "postgres"],
            ["redis:7-bookworm", "redis"],
            ["adguard/adguardhome:v0.107.63", "resolver"],
            ["nousresearch/hermes-agent:v2026.7.20", "agent"],
            ["pgvector/pgvector:pg15", "postgres"],
        ]);
        const noBrowser = readStackFile(editedStack("dev", (c) => (c["airlock:workloads"].browser = { enabled: false })));
        expect(twinImageList(noBrowser).map((w) => w.recipe)).not.toContain("browser");
        const ubuntu = readStackFile(editedStack("dev", (c) => (c["airlock:workloads"].sandboxShell = { image: "ubuntu:24.04" })));
        expect(() => twinImageList(ubuntu)).toThrow(/airlock:workloads\.sandboxShell\.image: .*ubuntu:24\.04/);
        // Its PostgreSQL is 15: it stands in for no other major (a dump client that refuses a newer server would go unseen).
        const pg16 = readStackFile(editedStack("dev", (c) => (c["airlock:workloads"].postgres = { enabled: true, image: "postgres:16-bookworm" })));
        expect(() => twinImageList(pg16)).toThrow("airlock:workloads.postgres.image: the twin's PostgreSQL is 15 (Debian 12's), not postgres:16-bookworm");
    });
});
