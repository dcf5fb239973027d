import * as fs from "node:fs";
import * as path from "node:path";
import { buildRecipe, LAYOUT_REF } from "../../twin/images";
import type { TestDocker } from "./dockerd";
import { REPO } from "./stacks";
import { run } from "./tools";

/**
 * Hermes Agent as the gateway runs it: the twin's image of the release the stacks pin
 * (twin/images/agent: the release from PyPI, unmodified, every package by hash, laid
 * out as the published image), built once into the twin's cache.
 */

/** The pinned release, from the requirements its image installs. */
export const HERMES_VERSION = /^hermes-agent==(\S+)/m.exec(fs.readFileSync(path.join(REPO, "twin/images/agent/requirements.txt"), "utf8"))![1];

/** Loads the image into a test daemon under `reference` (as the compose names it, without the digest). */
export async function loadHermesImage(docker: TestDocker, reference: string, dir: string, log: (line: string) => void = () => {}): Promise<void> {
    const built = await buildRecipe("agent", log);
    const archive = path.join(dir, "hermes-agent.tar");
    const copied = run("skopeo", ["copy", "--quiet", `oci:${built.layout}:${LAYOUT_REF}`, `docker-archive:${archive}:${reference}`], { timeout: 300_000 });
    if (copied.status !== 0) throw new Error(`skopeo copy: ${copied.stderr}`);
    const loaded = docker.docker(["load", "--input", archive]);
    if (loaded.status !== 0) throw new Error(`docker load: ${loaded.stderr}`);
    fs.rmSync(archive);
}

/** The agent's compose service as a host runs it, with its host files moved under `root` (targets unchanged). */
export function movedHostPaths(service: Record<string, any>, root: string): Record<string, any> {
    const moved = (p: string) => path.join(root, p);
    return {
        ...service,
        volumes: (service.volumes ?? []).map((volume: string) => {
            const [source, ...rest] = volume.split(":");
            return source.startsWith("/") ? [moved(source), ...rest].join(":") : volume;
        }),
        env_file: (service.env_file ?? []).map(moved),
    };
}
