import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import * as YAML from "yaml";
import { readStackFile } from "../components/config/load";
import { renderedFile, renderHosts, stackFile, tempDir } from "./helpers/stacks";
import { isRoot, run, toolsAvailable } from "./helpers/tools";
import { HOST_DEBS_CACHE } from "./helpers/hostTools";
import { HOST_SUITE } from "../twin/contract";
import { privateApt } from "../twin/private-apt";

/**
 * The sandbox's seccomp profile: Docker's default with ioctl narrowed. Judged here
 * as the kernel reads it (a 32-bit request, its upper bits ignored), from the
 * rendered file; on a real dockerd and btrfs in test/e2e-checkpoints.test.ts.
 */

const TEMPLATES = path.join(__dirname, "..", "templates", "docker");
/** The Debian package the base profile was taken from: built from the same source as the hosts' docker.io. */
const DOCKER_DEFAULT_FROM = { package: "golang-github-docker-docker-dev", version: "26.1.5+dfsg1-9+deb13u1" };
const DOCKER_DEFAULT_PATH = "./usr/share/gocode/src/github.com/docker/docker/profiles/seccomp/default.json";

type Rule = { names: string[]; action: string; args?: { index: number; value: number; valueTwo: number; op: string }[] | null };

const sandbox = renderHosts(readStackFile(stackFile("dev"))).sandbox;
const daemonJson = JSON.parse(renderedFile(sandbox, "/etc/airlock/docker-daemon.json.in"));
const rendered = JSON.parse(renderedFile(sandbox, daemonJson["seccomp-profile"])) as { syscalls: Rule[] };
const base = JSON.parse(fs.readFileSync(path.join(TEMPLATES, "seccomp-default.json"), "utf8")) as { syscalls: Rule[] };
const listed: { ioctls: { name: string; request: number }[]; syscalls: { name: string; errno: number }[] } = YAML.parse(fs.readFileSync(path.join(TEMPLATES, "seccomp-denied.yaml"), "utf8"));
const denied = listed.ioctls;
const refused = new Set(listed.syscalls.map((s) => s.name));

/**
 * What the profile does with ioctl(fd, request), read from its JSON: a rule of one masked
 * comparison of the request allows what it matches, on all 64 bits. Any other shape of
 * ioctl rule is not modelled, and fails the test rather than being read as allowing nothing.
 */
function allows(request: bigint): boolean {
    return rendered.syscalls
        .filter((rule) => rule.names.includes("ioctl"))
        .some((rule) => {
            const [arg, ...more] = rule.args ?? [];
            if (rule.action !== "SCMP_ACT_ALLOW" || !arg || more.length > 0 || arg.index !== 1 || arg.op !== "SCMP_CMP_MASKED_EQ") throw new Error(`an ioctl rule of a shape not modelled: ${JSON.stringify(rule)}`);
            return (request & BigInt(arg.value)) === BigInt(arg.valueTwo);
        });
}

describe("the sandbox's seccomp profile", () => {
    it("is the agent's dockerd default: daemon.json names the rendered file", () => {
        expect(daemonJson["seccomp-profile"]).toBe("/etc/airlock/docker-seccomp.json");
        expect(sandbox.files.find((f) => f.path === daemonJson["seccomp-profile"])?.permissions).toBe("0644");
    });

    it("is Docker's default profile in every rule but ioctl's and the refused syscalls'", () => {
        const changed = (name: string) => name === "ioctl" || refused.has(name);
        const withoutChanged = (rules: Rule[]) => rules.map((r) => ({ ...r, names: r.names.filter((n) => !changed(n)) })).filter((r) => r.names.length > 0);
        expect(withoutChanged(rendered.syscalls)).toEqual(withoutChanged(base.syscalls));
        expect({ ...rendered, syscalls: [] }).toEqual({ ...base, syscalls: [] });
        // Every ioctl rule allows, on one masked comparison of the request alone.
        for (const rule of rendered.syscalls.filter((r) => r.names.includes("ioctl"))) {
            expect(rule).toEqual({ names: ["ioctl"], action: "SCMP_ACT_ALLOW", args: [{ index: 1, value: expect.any(Number), valueTwo: expect.any(Number), op: "SCMP_CMP_MASKED_EQ" }] });
            expect(rule.args![0].value).toBeLessThan(2 ** 32); // the request's upper 32 bits are never compared
        }
    });

    it("refuses each listed syscall with its errno, and no rule allows it", () => {
        for (const name of ["copy_file_range", "io_uring_setup", "io_uring_enter", "io_uring_register"]) expect(refused.has(name), name).toBe(true);
        for (const { name, errno } of listed.syscalls) {
            expect(rendered.syscalls.filter((r) => r.names.includes(name))).toEqual([{ names: [name], action: "SCMP_ACT_ERRNO", errnoRet: errno }]);
        }
    });

    it("denies each listed request, whatever its upper 32 bits (the kernel ignores them)", () => {
        expect(denied.length).toBeGreaterThan(0);
        for (const { name, request } of denied) {
            for (const upper of [0n, 1n, 0xffffffffn, 0x80000000n]) expect(allows((upper << 32n) | BigInt(request)), `${name} with upper bits ${upper}`).toBe(false);
        }
    });

    it("allows every other request: the neighbours of each denied one, its one-bit changes, and random requests", () => {
        const deniedSet = new Set(denied.map((d) => d.request));
        const others: number[] = [];
        for (const { request } of denied) {
            others.push(request - 1, request + 1);
            for (let bit = 0; bit < 32; bit++) others.push((request ^ (1 << bit)) >>> 0);
        }
        for (let i = 0; i < 20_000; i++) others.push(Math.floor(Math.random() * 2 ** 32));
        // Requests programs make all the time: terminals, FIONREAD, FS_IOC_GETFLAGS (sign-extended as some callers pass it).
        others.push(0x5401, 0x541b, 0x80086601);
        for (const request of others.filter((r) => !deniedSet.has(r))) {
            expect(allows(BigInt(request)), request.toString(16)).toBe(true);
            expect(allows(0xffffffff00000000n | BigInt(request)), `sign-extended ${request.toString(16)}`).toBe(true);
        }
    });
});

const canDownload = isRoot() && toolsAvailable("the seccomp base profile's provenance", ["apt-get", "dpkg-deb"]);

describe.runIf(canDownload)("the base profile's provenance", () => {
    it(`is byte for byte Docker's default.json of the hosts' docker.io (Debian ${HOST_SUITE}'s ${DOCKER_DEFAULT_FROM.package} ${DOCKER_DEFAULT_FROM.version})`, async () => {
        const apt = privateApt(tempDir("seccomp-apt"), HOST_DEBS_CACHE);
        await apt.run(["update"]);
        const [dockerIo, dev] = await apt.current(["docker.io", DOCKER_DEFAULT_FROM.package]);
        // The hosts install the suite's docker.io now; its source's -dev package carries the profile it builds in
        // (a binNMU, +bN, rebuilds the binary from the same source). A newer docker.io fails here: rebase the profile.
        expect(dev.version).toBe(DOCKER_DEFAULT_FROM.version);
        expect(dockerIo.version.replace(/\+b\d+$/, "")).toBe(DOCKER_DEFAULT_FROM.version);
        await apt.download([dev]);
        const extracted = run("sh", ["-c", `dpkg-deb --fsys-tarfile "$1" | tar -xO "$2"`, "sh", apt.archiveFile(dev), DOCKER_DEFAULT_PATH], { maxBuffer: 1024 ** 2 });
        expect(extracted.status, extracted.stderr).toBe(0);
        expect(extracted.stdout).toBe(fs.readFileSync(path.join(TEMPLATES, "seccomp-default.json"), "utf8"));
    }, 300_000);
});
