import type { PlannedResourceLike } from "./resource";

/**
 * B2 resources are Pulumi dynamic resources (there is no published B2 provider), so
 * they share the dynamic type; airlock's provider marks each with `b2Kind`.
 */
export const TYPES_B2 = ["pulumi-nodejs:dynamic:Resource"];

export function b2KindOf(resource: PlannedResourceLike): "bucket" | "applicationKey" | undefined {
    const kind = resource.inputs.b2Kind;
    return kind === "bucket" || kind === "applicationKey" ? kind : undefined;
}
