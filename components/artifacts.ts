import * as pulumi from "@pulumi/pulumi";
import { Artifacts, stashInput } from "../policies/contract";

export { artifactsOf, type Artifacts } from "../policies/contract";

/**
 * Carries rendered files in a resource whose inputs are fully known at preview, so
 * policies judge exactly what will be deployed even when a value that depends on a
 * cloud resource (the tailnet key inside user_data) is not known yet.
 */
export function artifactStash(name: string, artifacts: pulumi.Input<Artifacts>, parent: pulumi.Resource): pulumi.Stash {
    return new pulumi.Stash(name, { input: stashInput(artifacts) }, { parent });
}
