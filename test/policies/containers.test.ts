import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { compose, composeText, DIGEST, hardenedService, resource, resources, ruleIds } from "./helpers";
import { tempDir } from "../helpers/stacks";

/** Change ONE property of a hardened service; expect exactly the matching rule (or rules). */
/** Each case names the text of the line its finding must point at: the key or entry that causes it, or the service when a key is missing. */
const violations: [string, (s: Record<string, any>) => void, string | string[], string][] = [
    ["no cap_drop", (s) => delete s.cap_drop, "containers-drop-all-capabilities", "shell:"],
    ["cap_drop without ALL", (s) => (s.cap_drop = ["NET_RAW"]), "containers-drop-all-capabilities", "cap_drop:"],
    ["cap_add NET_ADMIN", (s) => s.cap_add.push("NET_ADMIN"), "containers-add-only-allowed-capabilities", "NET_ADMIN"],
    ["cap_add SYS_ADMIN with CAP_ prefix", (s) => s.cap_add.push("CAP_SYS_ADMIN"), "containers-add-only-allowed-capabilities", "CAP_SYS_ADMIN"],
    ["cap_add ALL", (s) => (s.cap_add = ["ALL"]), "containers-add-only-allowed-capabilities", "- ALL"],
    ["privileged", (s) => (s.privileged = true), "containers-not-privileged", "privileged:"],
    ["no no-new-privileges", (s) => (s.security_opt = []), "containers-no-new-privileges", "security_opt:"],
    ["no-new-privileges:false", (s) => (s.security_opt = ["no-new-privileges:false"]), "containers-no-new-privileges", "no-new-privileges:false"],
    ["seccomp=unconfined", (s) => s.security_opt.push("seccomp=unconfined"), "containers-no-unconfined-profiles", "seccomp=unconfined"],
    ["apparmor:unconfined", (s) => s.security_opt.push("apparmor:unconfined"), "containers-no-unconfined-profiles", "apparmor:unconfined"],
    ["its own seccomp profile", (s) => s.security_opt.push("seccomp=/opt/permissive.json"), "containers-no-own-seccomp-profile", "permissive.json"],
    ["its own seccomp profile, colon form", (s) => s.security_opt.push("seccomp:./profile.json"), "containers-no-own-seccomp-profile", "profile.json"],
    ["network_mode host", (s) => (s.network_mode = "host"), "containers-no-host-namespaces", "network_mode:"],
    ["pid host", (s) => (s.pid = "host"), "containers-no-host-namespaces", "pid:"],
    ["ipc host", (s) => (s.ipc = "host"), "containers-no-host-namespaces", "ipc:"],
    ["userns_mode host", (s) => (s.userns_mode = "host"), "containers-no-host-namespaces", "userns_mode:"],
    ["a device", (s) => (s.devices = ["/dev/fuse:/dev/fuse"]), "containers-no-devices", "/dev/fuse"],
    ["image by tag", (s) => (s.image = "registry.example/agent-shell:1.0"), "containers-images-pinned-by-digest", "image:"],
    ["image :latest", (s) => (s.image = "nginx:latest"), "containers-images-pinned-by-digest", "image:"],
    ["image without tag", (s) => (s.image = "nginx"), "containers-images-pinned-by-digest", "image:"],
    ["build without image", (s) => { delete s.image; s.build = "."; }, "containers-images-pinned-by-digest", "build:"],
    ["rootful socket, short syntax", (s) => s.volumes.push("/var/run/docker.sock:/var/run/docker.sock"), "containers-no-docker-socket", "docker.sock"],
    ["rootful socket under /run", (s) => s.volumes.push("/run/docker.sock:/sock"), "containers-no-docker-socket", "docker.sock"],
    ["rootless socket", (s) => s.volumes.push("/run/user/1000/docker.sock:/var/run/docker.sock"), "containers-no-docker-socket", "docker.sock"],
    ["rootless socket via XDG_RUNTIME_DIR", (s) => s.volumes.push("${XDG_RUNTIME_DIR}/docker.sock:/d.sock"), "containers-no-docker-socket", "docker.sock"],
    ["socket, long syntax", (s) => s.volumes.push({ type: "bind", source: "/var/run/docker.sock", target: "/d.sock" }), "containers-no-docker-socket", "type: bind"],
    ["parent /var/run", (s) => s.volumes.push("/var/run:/host-run"), "containers-no-docker-socket", "/var/run:"],
    ["parent /run/user", (s) => s.volumes.push("/run/user:/x:ro"), "containers-no-docker-socket", "/run/user:"],
    ["/etc", (s) => s.volumes.push("/etc:/host-etc:ro"), "containers-no-host-secret-mounts", "/etc:"],
    ["~/.ssh", (s) => s.volumes.push("~/.ssh:/root/.ssh:ro"), "containers-no-host-secret-mounts", "~/.ssh"],
    ["/root", (s) => s.volumes.push({ type: "bind", source: "/root", target: "/r" }), "containers-no-host-secret-mounts", "type: bind"],
    // /home holds every ~/.ssh and the rootless engine's state (~/.local/share/docker).
    ["/home (parent of ~/.ssh)", (s) => s.volumes.push("/home:/home"), ["containers-no-host-secret-mounts", "containers-no-host-system-mounts"], "/home:"],
    ["/proc (every host process's environment)", (s) => s.volumes.push("/proc:/host/proc:ro"), "containers-no-host-system-mounts", "/proc:"],
    ["one process under /proc", (s) => s.volumes.push("/proc/1/environ:/env:ro"), "containers-no-host-system-mounts", "/proc/1"],
    ["/sys", (s) => s.volumes.push({ type: "bind", source: "/sys", target: "/host/sys", read_only: true }), "containers-no-host-system-mounts", "type: bind"],
    ["/var/lib/docker (another container's config)", (s) => s.volumes.push("/var/lib/docker:/var/lib/docker"), "containers-no-host-system-mounts", "/var/lib/docker:"],
    ["a container's directory under /var/lib/docker", (s) => s.volumes.push("/var/lib/docker/containers:/c:ro"), "containers-no-host-system-mounts", "/var/lib/docker/containers"],
    ["the rootless engine's data root", (s) => s.volumes.push("~/.local/share/docker:/d"), "containers-no-host-system-mounts", ".local/share/docker"],
    ["/var/lib (parent of the engine's state)", (s) => s.volumes.push("/var/lib:/host-lib"), "containers-no-host-system-mounts", "/var/lib:"],
    ["/usr whole", (s) => s.volumes.push("/usr:/host-usr:ro"), "containers-no-host-system-mounts", "/usr:"],
    ["port without host IP", (s) => s.ports.push("3000:3000"), "containers-ports-private-only", "3000:3000"],
    ["port on an IPv4-mapped public address", (s) => s.ports.push("[::ffff:203.0.113.5]:443:443"), "containers-ports-private-only", "::ffff:203.0.113.5"],
    ["port on 0.0.0.0", (s) => s.ports.push("0.0.0.0:3000:3000"), "containers-ports-private-only", "0.0.0.0:3000"],
    ["container port only", (s) => s.ports.push(3000), "containers-ports-private-only", "- 3000"],
    ["long port without host_ip", (s) => s.ports.push({ target: 3000, published: 3000 }), "containers-ports-private-only", "target: 3000"],
    ["port on a public address", (s) => s.ports.push("203.0.113.5:443:443"), "containers-ports-private-only", "203.0.113.5:443"],
    ["port on [::]", (s) => s.ports.push("[::]:443:443"), "containers-ports-private-only", "[::]:443"],
    ["no pids limit", (s) => delete s.pids_limit, "containers-resource-limits", "shell:"],
    ["unlimited pids", (s) => (s.pids_limit = -1), "containers-resource-limits", "pids_limit:"],
    ["no memory limit", (s) => delete s.mem_limit, "containers-resource-limits", "shell:"],
];

describe("container rules on compose", () => {
    it("a hardened service passes every rule", () => {
        expect(compose(composeText({ shell: hardenedService() }))).toEqual([]);
    });

    it.each(violations)("%s -> %s", (_, change, rule, lineText) => {
        const service = hardenedService();
        change(service);
        const text = composeText({ shell: service });
        const findings = compose(text, "compose.yml");
        expect(ruleIds(findings)).toEqual([rule].flat());
        for (const f of findings) expect(text.split("\n")[f.line! - 1], `${f.rule} at line ${f.line}`).toContain(lineText);
        expect(findings[0].file).toBe("compose.yml");
        expect(findings[0].remediation.length).toBeGreaterThan(10);
    });

    it("the browser may not mount /workspace", () => {
        const browser = { ...hardenedService(), image: `chromedp/headless-shell:126@${DIGEST}`, volumes: ["ws:/workspace"], ports: ["100.100.7.1:9222:9222"] };
        expect(ruleIds(compose(composeText({ browser })))).toEqual(["containers-browser-no-workspace"]);
        expect(compose(composeText({ browser: { ...browser, volumes: [] } }))).toEqual([]);
    });

    it.each<[string, (s: Record<string, any>) => void]>([
        ["lower-case cap_drop all", (s) => (s.cap_drop = ["all"])],
        ["no-new-privileges=true spelling", (s) => (s.security_opt = ["no-new-privileges=true"])],
        ["IPv6 loopback port", (s) => s.ports.push("[::1]:8081:80")],
        ["IPv4-mapped loopback port", (s) => s.ports.push("[::ffff:127.0.0.1]:8083:80")],
        ["IPv4-mapped tailnet port", (s) => s.ports.push({ host_ip: "::ffff:100.100.7.1", target: 80, published: 8084 })],
        ["one tool from /usr, read-only", (s) => s.volumes.push("/usr/local/bin/airlock-github-token:/usr/local/bin/airlock-github-token:ro")],
        ["a data directory under /var/lib", (s) => s.volumes.push("/var/lib/airlock/agent-state:/data")],
        ["tailnet IPv6 port", (s) => s.ports.push({ host_ip: "fd7a:115c:a1e0::5", target: 80, published: 8082 })],
        ["tailnet placeholder port", (s) => s.ports.push("@TAILNET_IPV4@:9223:9222")],
        ["expose without publishing", (s) => (s.expose = ["9000"])],
        ["project directory bind", (s) => s.volumes.push("/srv/project:/workspace/project")],
        ["agent home subdirectory", (s) => s.volumes.push("/home/agent/cache:/cache")],
        ["deploy limits instead of top-level", (s) => { delete s.pids_limit; delete s.mem_limit; s.deploy = { resources: { limits: { pids: 128, memory: "1g" } } }; }],
        ["tmpfs on /run", (s) => s.volumes.push({ type: "tmpfs", target: "/run" })],
        // Whatever CONFIG holds, CONFIG/web is never /run or a parent of an engine socket.
        ["a folder under a variable", (s) => s.volumes.push("${CONFIG}/web:/config:Z", "${DATA:-./data}/db:/db")],
    ])("legitimate: %s", (_, change) => {
        const service = hardenedService();
        change(service);
        expect(compose(composeText({ shell: service }))).toEqual([]);
    });

    // A local named volume with a bind mounts its device: judged as that host path (seen passing `check` before).
    it.each<[string, Record<string, any>, string[]]>([
        ["/etc through a named bind volume", { driver_opts: { type: "none", o: "bind", device: "/etc" } }, ["containers-no-host-secret-mounts"]],
        ["the rootless socket's directory, rbind,ro", { driver: "local", driver_opts: { type: "none", o: "rbind,ro", device: "/run/user/1500" } }, ["containers-no-docker-socket"]],
        ["~/.ssh's parent", { driver_opts: { o: "bind", device: "/home" } }, ["containers-no-host-secret-mounts", "containers-no-host-system-mounts"]],
    ])("a named volume that binds %s fails", (_, definition, rules) => {
        const service = { ...hardenedService(), volumes: ["data:/data"] };
        expect(ruleIds(compose(composeText({ shell: service }, { volumes: { data: definition } })))).toEqual(rules);
        expect(ruleIds(compose(composeText({ shell: { ...service, volumes: [{ type: "volume", source: "data", target: "/data" }] } }, { volumes: { data: definition } })))).toEqual(rules);
    });

    it("legitimate: a named volume bound to a data directory, and a plain named volume", () => {
        const service = { ...hardenedService(), volumes: ["state:/data", "cache:/cache"] };
        const volumes = { state: { driver_opts: { type: "none", o: "bind", device: "/var/lib/airlock/agent-state/agent-state" } }, cache: {} };
        expect(compose(composeText({ shell: service }, { volumes }))).toEqual([]);
    });

    it("resolves anchors and merge keys before judging", () => {
        const text = [
            "x-hardened: &hardened",
            `  image: registry.example/a@${DIGEST}`,
            "  cap_drop: [ALL]",
            "  security_opt: [no-new-privileges:true]",
            "  pids_limit: 256",
            "  mem_limit: 1g",
            "services:",
            "  good:",
            "    <<: *hardened",
            "  bad:",
            "    <<: *hardened",
            "    privileged: true",
        ].join("\n");
        const findings = compose(text);
        expect(findings.map((f) => `${f.where}:${f.rule}`)).toEqual(["bad:containers-not-privileged"]);
    });

    it("resolves extends in the same file and in another file", () => {
        const dir = tempDir("extends");
        fs.writeFileSync(path.join(dir, "base.yml"), composeText({ base: { ...hardenedService(), volumes: ["/var/run:/r"] } }));
        const text = composeText({
            local: { extends: "template" },
            template: hardenedService(),
            remote: { extends: { file: "base.yml", service: "base" } },
        });
        const file = path.join(dir, "compose.yml");
        fs.writeFileSync(file, text);
        const findings = compose(text, file);
        expect(findings.map((f) => `${f.where}:${f.rule}`)).toEqual(["remote:containers-no-docker-socket"]);
    });

    it("points at the line that causes a finding through `<<` merges, aliases and extends", () => {
        const dir = tempDir("extends-lines");
        const base = ["services:", "  base:", "    privileged: true", ""].join("\n");
        fs.writeFileSync(path.join(dir, "base.yml"), base);
        const text = [
            "x-risky: &risky", //                                     1
            "  cap_add: [NET_ADMIN]", //                              2
            "x-sock: &sock /var/run/docker.sock:/var/run/docker.sock", // 3
            "services:", //                                           4
            "  merged:", //                                           5
            "    <<: *risky", //                                      6
            "    image: nginx@sha256:" + "ab".repeat(32), //          7
            "    volumes: [./data:/data, *sock]", //                  8
            "  child:", //                                            9
            "    extends: merged", //                                 10
            "    volumes:", //                                        11
            "      - /proc:/host/proc:ro", //                         12
            "  remote:", //                                           13
            "    extends: { file: base.yml, service: base }", //      14
            "",
        ].join("\n");
        const file = path.join(dir, "compose.yml");
        fs.writeFileSync(file, text);
        const at = (where: string, rule: string) => compose(text, file).filter((f) => f.where === where && f.rule === rule).map((f) => f.line);
        expect(at("merged", "containers-add-only-allowed-capabilities")).toEqual([6]); // the << line that brings it in, never the anchor
        expect(at("merged", "containers-no-docker-socket")).toEqual([8]); // the alias's use in the list
        expect(at("merged", "containers-drop-all-capabilities")).toEqual([5]); // missing: the service
        expect(at("child", "containers-no-docker-socket")).toEqual([8]); // inherited from merged
        expect(at("child", "containers-no-host-system-mounts")).toEqual([12]); // its own entry, after the inherited ones
        expect(at("remote", "containers-not-privileged")).toEqual([14]); // another file's key: the extends line
    });

    it("an extends it cannot follow is unverifiable, not a pass", () => {
        const findings = compose(composeText({ remote: { extends: { file: "missing.yml", service: "x" } } }));
        expect(findings.some((f) => f.rule === "compose-parses" && f.unverifiable)).toBe(true);
    });

    it.each(["${SOCKET_DIR}/docker.sock:/d.sock", "${ROOT}/var/run/docker.sock:/d.sock", "${ROOT}/var/run:/r", "${ROOT}/run:/r", "${ROOT}/run/user/1000:/u", "${ANYWHERE}:/x"])("a bind source behind an unknown variable that could be a socket is unverifiable: %s", (volume) => {
        const service = hardenedService();
        service.volumes.push(volume);
        const findings = compose(composeText({ shell: service }));
        expect(findings.map((f) => [f.rule, f.unverifiable])).toEqual([["containers-no-docker-socket", true]]);
    });
});

describe("container rules on docker:index/container:Container", () => {
    const type = "docker:index/container:Container";
    const hardened = () => ({
        name: "shell",
        image: `registry.example/a@${DIGEST}`,
        capabilities: { drops: ["ALL"], adds: ["CHOWN"] },
        securityOpts: ["no-new-privileges:true"],
        memory: 3072,
        ports: [{ internal: 8080, external: 8080, ip: "127.0.0.1" }],
    });

    it("has no pids limit, so even a hardened Container fails containers-resource-limits", () => {
        expect(ruleIds(resources([resource(type, "shell", hardened())]))).toEqual(["containers-resource-limits"]);
    });

    it("a port without ip binds 0.0.0.0 and a mounted socket is caught", () => {
        const inputs: Record<string, any> = { ...hardened(), ports: [{ internal: 80, external: 80 }], mounts: [{ type: "bind", source: "/run/docker.sock", target: "/s" }] };
        expect(ruleIds(resources([resource(type, "shell", inputs)]))).toEqual([
            "containers-no-docker-socket",
            "containers-ports-private-only",
            "containers-resource-limits",
        ]);
    });

    it.each<[string, Record<string, unknown>, string]>([
        ["privileged", { privileged: "04da6b54-80e4-46f7-96ec-b56ff0331ba9" }, "containers-not-privileged"],
        ["networkMode", { networkMode: "04da6b54-80e4-46f7-96ec-b56ff0331ba9" }, "containers-no-host-namespaces"],
        ["mounts", { mounts: ["04da6b54-80e4-46f7-96ec-b56ff0331ba9"] }, "containers-no-docker-socket"],
        ["ports", { ports: "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2" }, "containers-ports-private-only"],
        ["capabilities", { capabilities: { drops: "6a19a0b0-7e62-4c92-b797-7f8e31da9cc2" } }, "containers-drop-all-capabilities"],
    ])("%s unknown at preview fails closed", (_, change, rule) => {
        const findings = resources([resource(type, "shell", { ...hardened(), ...change })]);
        expect(findings.find((f) => f.rule === rule)?.unverifiable).toBe(true);
    });

    it("an image unknown at preview is unverifiable", () => {
        const findings = resources([resource(type, "shell", { ...hardened(), image: "04da6b54-80e4-46f7-96ec-b56ff0331ba9" })]);
        expect(findings.find((f) => f.rule === "containers-images-pinned-by-digest")?.unverifiable).toBe(true);
    });
});
