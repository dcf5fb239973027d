import * as path from "node:path";
import * as docker from "@pulumi/docker";
import * as pulumi from "@pulumi/pulumi";
import { PINNED_BY_DIGEST, StackConfig } from "../config/schema";
import { TEMPLATES_DIR } from "../render/templates";
import type { ResolvedImages } from "./compose";
import { configuredImages } from "./images";

export interface WorkloadsArgs {
    config: StackConfig;
}

/**
 * The images both hosts' compose files run. Pinned references pass through;
 * with `resolveDigests`, tag-only references are looked up in their registry
 * (an invoke, so the digest is known at preview); with `registry`, the hardened
 * sandbox-shell image is built and pushed, and its digest-pinned reference is
 * filled into user_data at deploy time.
 */
export class Workloads extends pulumi.ComponentResource {
    readonly images: pulumi.Output<ResolvedImages>;
    /** `registry/name@sha256:...` of the built sandbox shell, when the stack builds it. */
    readonly builtSandboxShell?: pulumi.Output<string>;

    constructor(name: string, args: WorkloadsArgs, opts?: pulumi.ComponentResourceOptions) {
        super("airlock:index:Workloads", name, {}, opts);
        const cfg = args.config;
        const configured = configuredImages(cfg);

        const resolve = (reference: string): pulumi.Input<string> =>
            !cfg.workloads.resolveDigests || PINNED_BY_DIGEST.test(reference) || reference.startsWith("@")
                ? reference
                : docker.getRegistryImageOutput({ name: reference }, { parent: this }).sha256Digest.apply((digest) => `${reference}@${digest}`);

        const w = cfg.workloads;
        // Only images that will run are looked up.
        const images: { [K in keyof ResolvedImages]: K extends "services" ? Record<string, pulumi.Input<string>> : pulumi.Input<string> } = {
            sandboxShell: resolve(configured.sandboxShell),
            browser: w.browser.enabled ? resolve(configured.browser) : configured.browser,
            postgres: w.postgres.enabled ? resolve(configured.postgres) : configured.postgres,
            redis: w.redis.enabled ? resolve(configured.redis) : configured.redis,
            api: w.api.enabled ? resolve(configured.api) : configured.api,
            adguard: resolve(configured.adguard),
            agent: cfg.gateway.agent ? resolve(configured.agent) : configured.agent,
            agentMemoryDb: cfg.gateway.agent?.memoryDb.enabled ? resolve(configured.agentMemoryDb) : configured.agentMemoryDb,
            services: Object.fromEntries(Object.entries(configured.services).map(([k, v]) => [k, resolve(v)])),
        };
        this.images = pulumi.output(images);

        if (cfg.workloads.registry) {
            const built = new docker.Image(
                `${name}-sandbox-shell`,
                {
                    imageName: `${cfg.workloads.registry}/airlock-sandbox-shell:${cfg.prefix}`,
                    build: { context: path.join(TEMPLATES_DIR, "images", "sandbox-shell"), platform: "linux/amd64" },
                },
                { parent: this },
            );
            this.builtSandboxShell = built.repoDigest;
        }
        this.registerOutputs({ images: this.images, builtSandboxShell: this.builtSandboxShell });
    }
}
