import { execFileSync } from "node:child_process";
import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { ADGUARD_HOME_VERSION } from "../components/config/schema";
import { TWIN_CACHE_DIR } from "./contract";
import { TWIN_DIR } from "./files";
import { runLogged } from "./logged";

/**
 * Programs of maintained projects that the twin and the tests run in place of
 * stand-ins, built from their Go modules: each pinned by a module of ours under
 * twin/go/<name>/ (go.mod and go.sum: the only record of every module's hash, as the
 * checksum database is not reachable here), built once into TWIN_CACHE_DIR/bin/ and
 * again only when that module, the toolchain or the build changes.
 */
/** restic's rest-server, as twin/go/rest-server/go.mod pins it. */
export const REST_SERVER_VERSION = "v0.14.0";

export interface GoTool {
    /** The main package, built from the pinning module. */
    pkg: string;
    /** The Go module that holds it, when the package is not the module's root. */
    module?: string;
    /** The file the build writes. */
    binary: string;
    /** Its version, as the pinning module requires it (checked against go.mod). */
    version: string;
    ldflags: string[];
}

export const GO_TOOLS = {
    adguardhome: {
        pkg: "github.com/AdguardTeam/AdGuardHome",
        binary: "AdGuardHome",
        version: ADGUARD_HOME_VERSION,
        ldflags: ["-X", `github.com/AdguardTeam/AdGuardHome/internal/version.version=${ADGUARD_HOME_VERSION}`, "-X", "github.com/AdguardTeam/AdGuardHome/internal/version.channel=release"],
    },
    // restic's own REST server: the twin's stand-in for the backups' B2 buckets, in append-only mode.
    "rest-server": {
        pkg: "github.com/restic/rest-server/cmd/rest-server",
        module: "github.com/restic/rest-server",
        binary: "rest-server",
        version: REST_SERVER_VERSION,
        ldflags: [],
    },
} satisfies Record<string, GoTool>;
export type GoToolName = keyof typeof GO_TOOLS;

const GO_DIR = path.join(TWIN_DIR, "go");
/** The module proxy alone (a refused module must not fall back to git), no checksum database, go.sum as it is. */
const GO_ENV = { GOPROXY: "https://proxy.golang.org", GOSUMDB: "off", GOFLAGS: "-mod=readonly", CGO_ENABLED: "0", GOTOOLCHAIN: "local" };

let goVersion: string | undefined;

/** The cache key of a tool: its pinning module, the toolchain and how it is built. */
export function goToolKey(name: GoToolName): string {
    const tool: GoTool = GO_TOOLS[name];
    const dir = path.join(GO_DIR, name);
    const goMod = fs.readFileSync(path.join(dir, "go.mod"), "utf8");
    const module = tool.module ?? tool.pkg;
    if (!new RegExp(`^\\s*(require\\s+)?${module.replaceAll(".", "\\.")} ${tool.version.replaceAll(".", "\\.")}\\b`, "m").test(goMod)) {
        throw new Error(`twin/go/${name}/go.mod does not require ${module} ${tool.version}`);
    }
    goVersion ??= execFileSync("go", ["env", "GOVERSION"], { encoding: "utf8", env: { ...process.env, ...GO_ENV } }).trim();
    const hash = crypto.createHash("sha256");
    for (const file of ["go.mod", "go.sum", "tools.go"]) hash.update(`${file}\n`).update(fs.readFileSync(path.join(dir, file)));
    hash.update(JSON.stringify([goVersion, GO_ENV, tool]));
    return hash.digest("hex").slice(0, 16);
}

const building = new Map<string, Promise<string>>();

/** The tool's binary from the cache, built first when the cache has none for its key. */
export function buildGoTool(name: GoToolName, log: (line: string) => void, cacheDir = TWIN_CACHE_DIR): Promise<string> {
    const key = `${cacheDir}\0${name}`;
    let promise = building.get(key);
    if (!promise) {
        promise = buildUncached(name, log, cacheDir);
        building.set(key, promise);
        promise.catch(() => building.delete(key));
    }
    return promise;
}

async function buildUncached(name: GoToolName, log: (line: string) => void, cacheDir: string): Promise<string> {
    const tool = GO_TOOLS[name];
    const final = path.join(cacheDir, "bin", `${name}-${goToolKey(name)}`);
    const binary = path.join(final, tool.binary);
    if (fs.existsSync(binary)) return binary;
    fs.mkdirSync(path.dirname(final), { recursive: true });
    const staging = fs.mkdtempSync(`${final}.build-`);
    const buildLog = path.join(staging, "build.log");
    const started = Date.now();
    log(`go: building ${name} ${tool.version} (log: ${buildLog})`);
    try {
        await runLogged(
            "go",
            ["build", "-trimpath", "-ldflags", ["-s", "-w", ...tool.ldflags].join(" "), "-o", path.join(staging, tool.binary), tool.pkg],
            buildLog,
            { ...process.env, ...GO_ENV },
            path.join(GO_DIR, name),
        );
        try {
            fs.renameSync(staging, final);
        } catch (err) {
            // Another build of the same key finished first: theirs is as good.
            if (!fs.existsSync(binary)) throw err;
            fs.rmSync(staging, { recursive: true, force: true });
        }
    } catch (err) {
        const tail = fs.existsSync(buildLog) ? fs.readFileSync(buildLog, "utf8").split("\n").slice(-20).join("\n") : "";
        throw new Error(`go build of ${name}: ${(err as Error).message}\n${tail}\n(build left in ${staging})`);
    }
    log(`go: ${name} built in ${Math.round((Date.now() - started) / 1000)} s`);
    return binary;
}
