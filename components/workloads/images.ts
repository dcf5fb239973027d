import type { StackConfig } from "../config/schema";
import { BUILT_SANDBOX_SHELL_PLACEHOLDER, ResolvedImages } from "./compose";

/**
 * The image references exactly as configured; the sandbox shell becomes the
 * build placeholder when the stack builds it. With `resolveDigests`, the Workloads
 * component replaces tag-only references by their registry digests.
 */
export function configuredImages(cfg: StackConfig): ResolvedImages {
    const w = cfg.workloads;
    return {
        sandboxShell: w.registry ? BUILT_SANDBOX_SHELL_PLACEHOLDER : (w.sandboxShell.image ?? ""),
        browser: w.browser.image,
        postgres: w.postgres.image,
        redis: w.redis.image,
        api: w.api.image ?? "",
        adguard: w.adguard.image,
        agent: cfg.gateway.agent?.image ?? "",
        agentMemoryDb: cfg.gateway.agent?.memoryDb.image ?? "",
        services: Object.fromEntries(w.services.map((s) => [s.name, s.image])),
    };
}
