import * as pulumi from "@pulumi/pulumi";

/** Relative path -> file content, exactly as rendered. */
export type Artifacts = Record<string, string>;

/**
 * Carries rendered files in a resource whose inputs are fully known at preview, so
 * policies judge exactly what will be deployed even when a value that depends on a
 * cloud resource (the tailnet key inside user_data) is not known yet.
 */
export function artifactStash(name: string, artifacts: pulumi.Input<Artifacts>, parent: pulumi.Resource): pulumi.Stash {
    return new pulumi.Stash(name, { input: { airlockArtifacts: artifacts } }, { parent });
}

/** Reads the artifacts back from a Stash's inputs (in a preview or under mocks). */
export function artifactsOf(inputs: unknown): Artifacts | undefined {
    const carried = (inputs as { input?: { airlockArtifacts?: unknown } } | undefined)?.input?.airlockArtifacts;
    return carried !== null && typeof carried === "object" ? (carried as Artifacts) : undefined;
}
