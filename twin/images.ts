import * as crypto from "node:crypto";
import * as fs from "node:fs";
import * as path from "node:path";
import { postgresMajor, type StackConfig } from "../components/config/schema";
import { TEMPLATES_DIR } from "../components/render/templates";
import { BUILT_SANDBOX_SHELL_PLACEHOLDER } from "../components/workloads/compose";
import { configuredImages } from "../components/workloads/images";
import { TWIN_CACHE_DIR } from "./contract";
import { buildGoTool, GO_TOOLS, goToolKey, type GoToolName } from "./gotools";
import { runLogged } from "./logged";

/**
 * The images the stack's compose files run, built for the twin from Debian's
 * packages (no Docker engine, no Docker Hub): the stand-in for debian:bookworm-slim
 * with mmdebstrap, everything else with buildah from a Dockerfile on top of it -
 * the sandbox shell from the product's own templates/images/sandbox-shell, the
 * stand-ins from twin/images/<recipe>/. Each is kept as an OCI layout under
 * TWIN_CACHE_DIR/images/, keyed by a hash of everything it is built from.
 */

export type Log = (line: string) => void;

/** Which recipe under twin/images/ (or the product's sandbox-shell) builds an image. */
export type Recipe = "debian" | "trixie" | "shell" | "browser" | "resolver" | "postgres" | "redis" | "agent";

/** The recipes made by mmdebstrap (each a Debian suite's slim image), and the image each other recipe is built FROM. */
const DEBIAN_SUITES = { debian: "bookworm", trixie: "trixie" } as const;
type BaseRecipe = keyof typeof DEBIAN_SUITES;
const isBase = (recipe: Recipe): recipe is BaseRecipe => recipe in DEBIAN_SUITES;
/** The agent runtime's stand-in is Hermes on Debian 13, as the published image is; the rest are on bookworm. */
const baseOf = (recipe: Exclude<Recipe, BaseRecipe>): BaseRecipe => (recipe === "agent" ? "trixie" : "debian");

const RECIPES_DIR = path.join(__dirname, "images");
const RECIPE_CONTEXT: Record<Recipe, string> = {
    debian: path.join(RECIPES_DIR, "debian"),
    trixie: path.join(RECIPES_DIR, "trixie"),
    shell: path.join(TEMPLATES_DIR, "images", "sandbox-shell"),
    browser: path.join(RECIPES_DIR, "browser"),
    resolver: path.join(RECIPES_DIR, "resolver"),
    postgres: path.join(RECIPES_DIR, "postgres"),
    redis: path.join(RECIPES_DIR, "redis"),
    agent: path.join(RECIPES_DIR, "agent"),
};

/** The registry host Docker talks to for docker.io names. */
export const DOCKER_HUB_REGISTRY = "registry-1.docker.io";

/** One image a compose file of the stack runs, as the twin serves it. */
export interface TwinImage {
    /** The reference exactly as the stack (or the built-image placeholder) writes it. */
    reference: string;
    /** The registry host a guest's Docker connects to for it (the twin's DNS answers it with the registry). */
    registry: string;
    /** Its path in that registry, e.g. library/debian. */
    repository: string;
    tag: string;
    recipe: Recipe;
    /** The OCI layout (image ref "image") that holds it. */
    layout: string;
    /** sha256:... of its manifest, the digest the registry serves it under. */
    digest: string;
    /** What the compose pins: what a real deploy renders for this reference, with the twin's digest. */
    pinned: string;
}

interface ParsedReference {
    registry: string;
    repository: string;
    tag: string;
    /** The reference without its digest, as a real deploy prefixes `@sha256:...` to it. */
    name: string;
}

/** registry/name[:tag][@sha256:...] as Docker reads it (docker.io by default, library/ for one-part names). */
export function parseReference(reference: string): ParsedReference {
    const name = reference.replace(/@sha256:[0-9a-f]{64}$/, "");
    const slash = name.indexOf("/");
    const first = slash < 0 ? "" : name.slice(0, slash);
    const hasRegistry = first.includes(".") || first.includes(":") || first === "localhost";
    let registry = hasRegistry ? first : "docker.io";
    let remainder = hasRegistry ? name.slice(slash + 1) : name;
    const colon = remainder.lastIndexOf(":");
    const tag = colon > remainder.lastIndexOf("/") ? remainder.slice(colon + 1) : "latest";
    if (colon > remainder.lastIndexOf("/")) remainder = remainder.slice(0, colon);
    if (registry === "docker.io" || registry === "index.docker.io") {
        registry = DOCKER_HUB_REGISTRY;
        if (!remainder.includes("/")) remainder = `library/${remainder}`;
    }
    return { registry, repository: remainder, tag, name };
}

export interface Wanted {
    reference: string;
    recipe: Recipe;
    /** Where the image is served from, when it is not the reference's own name (the built shell). */
    servedAs?: ParsedReference;
    /** How to render the pinned reference (a built image is pinned as name@digest, like docker's repoDigest). */
    pin: (digest: string) => string;
}

/**
 * The images the stack's compose files run, each with its stand-in recipe. The role
 * decides the recipe (the agent runtime, the resolver and the browser cannot be
 * fetched here, whatever their name); only images the stack runs are listed.
 */
export function twinImageList(cfg: StackConfig): Wanted[] {
    const configured = configuredImages(cfg);
    const w = cfg.workloads;
    const wanted: Wanted[] = [];
    const add = (reference: string, recipe: Recipe) => {
        if (wanted.some((x) => x.reference === reference)) return;
        wanted.push({ reference, recipe, pin: (digest) => `${parseReference(reference).name}@${digest}` });
    };
    if (configured.sandboxShell === BUILT_SANDBOX_SHELL_PLACEHOLDER) {
        // What components/workloads/workloads.ts builds and pushes: registry/airlock-sandbox-shell:<prefix>.
        const built = parseReference(`${w.registry}/airlock-sandbox-shell:${cfg.prefix}`);
        wanted.push({ reference: BUILT_SANDBOX_SHELL_PLACEHOLDER, recipe: "shell", servedAs: built, pin: (digest) => `${built.registry}/${built.repository}@${digest}` });
    } else {
        const shell = parseReference(configured.sandboxShell);
        if (shell.registry !== DOCKER_HUB_REGISTRY || shell.repository !== "library/debian" || shell.tag !== "bookworm-slim") {
            throw new Error(`airlock:workloads.sandboxShell.image: the twin has a stand-in for debian:bookworm-slim only, not ${configured.sandboxShell} (or set airlock:workloads.registry to build the shell)`);
        }
        add(configured.sandboxShell, "debian");
    }
    if (w.browser.enabled) add(configured.browser, "browser");
    const postgres = (reference: string, key: string) => {
        // The stand-in is Debian 12's PostgreSQL 15; standing it in for another major would hide what pg_dump does with it.
        if (postgresMajor(reference) !== 15) throw new Error(`${key}: the twin's PostgreSQL is 15 (Debian 12's), not ${reference}`);
        add(reference, "postgres");
    };
    if (w.postgres.enabled) postgres(configured.postgres, "airlock:workloads.postgres.image");
    if (w.redis.enabled) add(configured.redis, "redis");
    if (w.api.enabled) throw new Error(`airlock:workloads.api.image: the twin has no stand-in for ${configured.api}`);
    for (const [name, reference] of Object.entries(configured.services)) {
        throw new Error(`airlock:workloads.services (${name}): the twin has no stand-in for ${reference}`);
    }
    add(configured.adguard, "resolver");
    if (cfg.gateway.agent) {
        add(configured.agent, "agent");
        if (cfg.gateway.agent.memoryDb.enabled) postgres(configured.agentMemoryDb, "airlock:gateway.agent.memoryDb.image");
    }
    return wanted;
}

/** The registry hosts the stack's images come from: the twin's DNS answers each with its registry, and its certificate names each. */
export function twinRegistryNames(cfg: StackConfig): string[] {
    return [...new Set(twinImageList(cfg).map((w) => (w.servedAs ?? parseReference(w.reference)).registry))].sort();
}

/**
 * Builds (or takes from the cache) every image the stack runs. Returns, for each
 * reference as the stack writes it, the digest-pinned reference the twin's compose
 * files use: `name[:tag]@sha256:...` as a real deploy renders it (the built shell as
 * `registry/airlock-sandbox-shell@sha256:...`, like its repoDigest).
 */
export async function buildTwinImages(cfg: StackConfig, log: Log, cacheDir = TWIN_CACHE_DIR): Promise<Record<string, string>> {
    const images = await twinImages(cfg, log, cacheDir);
    return Object.fromEntries(images.map((image) => [image.reference, image.pinned]));
}

/** As buildTwinImages, with where each image is and the name it is served under (what fillRegistry pushes). */
export async function twinImages(cfg: StackConfig, log: Log, cacheDir = TWIN_CACHE_DIR): Promise<TwinImage[]> {
    const wanted = twinImageList(cfg);
    // Two builds at a time: one's downloads overlap the other's unpacking (the base is built once, first).
    const queue = [...new Set(wanted.map((w) => w.recipe))];
    const worker = async () => {
        for (let recipe = queue.shift(); recipe; recipe = queue.shift()) await buildRecipe(recipe, log, cacheDir);
    };
    await Promise.all([worker(), worker()]);
    const images: TwinImage[] = [];
    for (const want of wanted) {
        const built = await buildRecipe(want.recipe, log, cacheDir);
        const served = want.servedAs ?? parseReference(want.reference);
        images.push({ reference: want.reference, registry: served.registry, repository: served.repository, tag: served.tag, recipe: want.recipe, ...built, pinned: want.pin(built.digest) });
    }
    return images;
}

/**
 * How a twin deploy fills the pinned references in, where a real deploy asks a
 * registry: the plan's registry digest lookups (resolveDigests) answered with the
 * twin's digests (PlanOptions.calls), and the built shell's repoDigest
 * (PlanOptions.deployed for docker:index/image:Image). `pinned` is buildTwinImages'.
 */
export function twinImageAnswers(pinned: Record<string, string>) {
    return {
        calls(token: string, inputs: Record<string, unknown>): Record<string, unknown> | undefined {
            if (token !== "docker:index/getRegistryImage:getRegistryImage") return undefined;
            const name = String(inputs.name);
            const digest = pinned[name]?.match(/@(sha256:[0-9a-f]{64})$/)?.[1];
            if (!digest) throw new Error(`the twin built no image for ${name}`);
            return { ...inputs, id: name, sha256Digest: digest };
        },
        builtShell: { repoDigest: pinned[BUILT_SANDBOX_SHELL_PLACEHOLDER] },
    };
}

interface BuiltRecipe {
    layout: string;
    digest: string;
}

/** The reference each layout holds its image under. */
export const LAYOUT_REF = "image";

/** mmdebstrap's arguments for a base recipe's slim image (its sources come from its sources.list; the slim settings from debian/). */
function debianArgs(recipe: BaseRecipe): string[] {
    const settings = RECIPE_CONTEXT.debian;
    return [
        "--variant=minbase",
        "--quiet",
        // merged /usr without the usrmerge package (and the perl it pulls in), as Debian's image has it.
        "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
        // One option per line: mmdebstrap honours path-exclude while it extracts the essential set only when given so.
        ...settingLines(path.join(settings, "dpkg-slim")).map((line) => `--dpkgopt=${line.replace(/^(\S+)\s+/, "$1=")}`),
        `--aptopt=${path.join(settings, "apt-docker-clean")}`,
        DEBIAN_SUITES[recipe],
    ];
}

/** A settings file's lines without comments and blank lines. */
function settingLines(file: string): string[] {
    return fs
        .readFileSync(file, "utf8")
        .split("\n")
        .filter((line) => line.trim() !== "" && !line.startsWith("#"));
}

const sources = (context: string) => settingLines(path.join(context, "sources.list"));

/** Files of a directory, sorted, with their modes: what a build reads from it. */
function hashDirectory(hash: crypto.Hash, dir: string): void {
    for (const entry of fs.readdirSync(dir, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : 1))) {
        const file = path.join(dir, entry.name);
        if (entry.isDirectory()) {
            hash.update(`dir ${entry.name}\n`);
            hashDirectory(hash, file);
        } else {
            hash.update(`file ${entry.name} ${fs.statSync(file).mode & 0o777}\n`);
            hash.update(fs.readFileSync(file));
        }
    }
}

/** The cache key of a recipe: its files, how it is built, and (for all but the bases) its base's key. */
export function recipeKey(recipe: Recipe): string {
    const hash = crypto.createHash("sha256");
    hash.update(`airlock-twin-image ${recipe}\n`);
    hashDirectory(hash, RECIPE_CONTEXT[recipe]);
    // The arguments without where this checkout is: every worktree shares the cache.
    if (isBase(recipe)) {
        const settings = RECIPE_CONTEXT.debian;
        if (recipe !== "debian") hashDirectory(hash, settings);
        hash.update(JSON.stringify([debianArgs(recipe).map((arg) => arg.replaceAll(settings, "")), sources(RECIPE_CONTEXT[recipe])]));
    } else hash.update(JSON.stringify(BUILDAH_BUILD) + recipeKey(baseOf(recipe)) + (RECIPE_GO_TOOLS[recipe] ?? []).map(goToolKey).join(" "));
    return hash.digest("hex").slice(0, 16);
}

/** buildah's build options: no daemon, the Dockerfile's RUN steps in a chroot with the host's network, one layer per build. */
const BUILDAH_BUILD = ["bud", "--quiet", "--isolation", "chroot", "--pull-never", "--layers=false", "--format", "oci"];

const building = new Map<string, Promise<BuiltRecipe>>();

/** A recipe's image from the cache, built first when the cache has none for its key. */
export function buildRecipe(recipe: Recipe, log: Log, cacheDir = TWIN_CACHE_DIR): Promise<BuiltRecipe> {
    const key = `${cacheDir}\0${recipe}`;
    let promise = building.get(key);
    if (!promise) {
        promise = buildRecipeUncached(recipe, log, cacheDir);
        building.set(key, promise);
        promise.catch(() => building.delete(key));
    }
    return promise;
}

async function buildRecipeUncached(recipe: Recipe, log: Log, cacheDir: string): Promise<BuiltRecipe> {
    const imagesDir = path.join(cacheDir, "images");
    const final = path.join(imagesDir, `${recipe}-${recipeKey(recipe)}`);
    const cached = readBuilt(final);
    if (cached) {
        // Marks it in use: pruneStale keeps what was used lately.
        const now = new Date();
        fs.utimesSync(path.join(final, "image.json"), now, now);
        log(`images: ${recipe} from the cache (${path.basename(final)})`);
        return cached;
    }
    const base = isBase(recipe) ? undefined : await buildRecipe(baseOf(recipe), log, cacheDir);
    fs.mkdirSync(imagesDir, { recursive: true });
    const staging = fs.mkdtempSync(path.join(imagesDir, `.build-${recipe}-`));
    const buildLog = path.join(staging, "build.log");
    const started = Date.now();
    log(`images: building ${recipe} (log: ${buildLog})`);
    const buildah = (args: string[]) => runLogged("buildah", ["--root", path.join(staging, "storage"), "--runroot", path.join(staging, "run"), "--storage-driver", "overlay", ...args], buildLog);
    try {
        let context = RECIPE_CONTEXT[recipe];
        if (isBase(recipe)) {
            // The Dockerfile adds rootfs.tar: a context of its own holds both.
            context = path.join(staging, "context");
            fs.mkdirSync(context);
            fs.copyFileSync(path.join(RECIPE_CONTEXT[recipe], "Dockerfile"), path.join(context, "Dockerfile"));
            await runLogged("mmdebstrap", [...debianArgs(recipe), path.join(context, "rootfs.tar"), ...sources(RECIPE_CONTEXT[recipe])], buildLog);
        } else {
            context = await withBuiltInputs(recipe, context, path.join(staging, "context"), cacheDir, buildLog, log);
            // FROM debian:<suite>-slim finds the stand-in in this build's own storage.
            const id = (await buildah(["pull", "--quiet", `oci:${base!.layout}:${LAYOUT_REF}`])).trim().split("\n").pop()!;
            await buildah(["tag", id, `docker.io/library/debian:${DEBIAN_SUITES[baseOf(recipe)]}-slim`]);
        }
        await buildah([...BUILDAH_BUILD, "--tag", `localhost/airlock-twin/${recipe}`, context]);
        const layout = path.join(staging, "oci");
        await buildah(["push", "--quiet", `localhost/airlock-twin/${recipe}`, `oci:${layout}:${LAYOUT_REF}`]);
        await buildah(["rmi", "--all", "--force"]);
        fs.rmSync(path.join(staging, "storage"), { recursive: true, force: true });
        fs.rmSync(path.join(staging, "run"), { recursive: true, force: true });
        fs.rmSync(path.join(staging, "context"), { recursive: true, force: true });
        const digest = layoutDigest(layout);
        const seconds = Math.round((Date.now() - started) / 1000);
        fs.writeFileSync(path.join(staging, "image.json"), `${JSON.stringify({ recipe, digest, buildSeconds: seconds }, null, 2)}\n`);
        try {
            fs.renameSync(staging, final);
        } catch (err) {
            // Another build of the same key finished first: theirs is as good.
            if (!readBuilt(final)) throw err;
            fs.rmSync(staging, { recursive: true, force: true });
        }
        log(`images: ${recipe} built in ${seconds} s (${digest})`);
        pruneStale(imagesDir, recipe, final);
        return readBuilt(final)!;
    } catch (err) {
        const tail = fs.existsSync(buildLog) ? fs.readFileSync(buildLog, "utf8").split("\n").slice(-30).join("\n") : "";
        runLogged("buildah", ["--root", path.join(staging, "storage"), "--runroot", path.join(staging, "run"), "rm", "--all"], "/dev/null").catch(() => undefined);
        throw new Error(`twin image ${recipe}: ${(err as Error).message}\n${tail}\n(build left in ${staging})`);
    }
}

/** Programs built from their Go modules (twin/gotools.ts) that a recipe's Dockerfile copies from its context. */
const RECIPE_GO_TOOLS: Partial<Record<Recipe, GoToolName[]>> = { resolver: ["adguardhome"] };

/**
 * A recipe's build context: its own files, and what is made for it on this machine
 * (the build itself reaches no network but the Debian mirror's): wheels/ for its
 * pinned Python packages, and each Go program it names. The recipe's own folder when
 * it needs neither.
 */
async function withBuiltInputs(recipe: Recipe, context: string, copy: string, cacheDir: string, buildLog: string, log: Log): Promise<string> {
    const requirements = path.join(context, PYTHON_REQUIREMENTS);
    const tools = RECIPE_GO_TOOLS[recipe] ?? [];
    if (!fs.existsSync(requirements) && tools.length === 0) return context;
    fs.cpSync(context, copy, { recursive: true });
    // The recipe's Python packages, downloaded here (the build has no certificate for a
    // proxy between it and PyPI); the build installs them by their pinned hashes.
    if (fs.existsSync(requirements)) fs.cpSync(await pythonWheels(requirements, cacheDir, buildLog), path.join(copy, "wheels"), { recursive: true });
    for (const tool of tools) fs.copyFileSync(await buildGoTool(tool, log, cacheDir), path.join(copy, GO_TOOLS[tool].binary));
    return copy;
}

/** A recipe's pinned Python packages (pip's --require-hashes file), installed by its Dockerfile from wheels/. */
const PYTHON_REQUIREMENTS = "requirements.txt";
/** The Python the recipes' images install them for: Debian 13's python3 (what the agent's stand-in runs Hermes on). */
const WHEELS_FOR = ["--implementation", "cp", "--python-version", "3.13", "--abi", "cp313", "--abi", "abi3", "--abi", "none"];
const WHEEL_PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64", "linux_x86_64", "any"];

/**
 * Every package of a requirements file as a wheel for WHEELS_FOR, downloaded once by
 * this machine's pip (checking each against its pinned hash) and kept under the
 * cache, keyed by the file's content.
 */
async function pythonWheels(requirements: string, cacheDir: string, buildLog: string): Promise<string> {
    const key = crypto.createHash("sha256").update(fs.readFileSync(requirements)).update(JSON.stringify([WHEELS_FOR, WHEEL_PLATFORMS])).digest("hex").slice(0, 16);
    const dir = path.join(cacheDir, "wheels", key);
    if (fs.existsSync(dir)) return dir;
    fs.mkdirSync(path.dirname(dir), { recursive: true });
    const staging = fs.mkdtempSync(`${dir}.download-`);
    try {
        await runLogged(
            "python3",
            ["-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps", "--require-hashes", "--only-binary=:all:", ...WHEELS_FOR, ...WHEEL_PLATFORMS.flatMap((p) => ["--platform", p]), "--dest", staging, "--requirement", requirements],
            buildLog,
            // Only the index: a machine's own find-links would offer files from elsewhere.
            { ...process.env, PIP_FIND_LINKS: "", PIP_NO_INPUT: "1" },
        );
        fs.renameSync(staging, dir);
    } catch (err) {
        fs.rmSync(staging, { recursive: true, force: true });
        throw err;
    }
    return dir;
}

/** Other builds of the recipe (from older inputs) unused for a day: another checkout may still use a newer one. */
function pruneStale(imagesDir: string, recipe: Recipe, current: string): void {
    const dayAgo = Date.now() - 24 * 3600 * 1000;
    for (const name of fs.readdirSync(imagesDir)) {
        const dir = path.join(imagesDir, name);
        if (!name.startsWith(`${recipe}-`) || dir === current) continue;
        let used = 0;
        try {
            used = fs.statSync(path.join(dir, "image.json")).mtimeMs;
        } catch {
            // not a finished build
        }
        if (used < dayAgo) fs.rmSync(dir, { recursive: true, force: true });
    }
}

function readBuilt(dir: string): BuiltRecipe | undefined {
    try {
        const { digest } = JSON.parse(fs.readFileSync(path.join(dir, "image.json"), "utf8")) as { digest: string };
        const layout = path.join(dir, "oci");
        return layoutDigest(layout) === digest ? { layout, digest } : undefined;
    } catch {
        return undefined;
    }
}

/** The manifest digest of the layout's image. */
function layoutDigest(layout: string): string {
    const index = JSON.parse(fs.readFileSync(path.join(layout, "index.json"), "utf8")) as { manifests: { digest: string; annotations?: Record<string, string> }[] };
    const manifest = index.manifests.find((m) => m.annotations?.["org.opencontainers.image.ref.name"] === LAYOUT_REF);
    if (!manifest || !/^sha256:[0-9a-f]{64}$/.test(manifest.digest)) throw new Error(`${layout}: no image ${LAYOUT_REF}`);
    return manifest.digest;
}

