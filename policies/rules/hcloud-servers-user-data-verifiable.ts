import { AIRLOCK_ONLY } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { isHidden } from "../engine/finding";
import { artifactsOf } from "../contract";
import { TYPES } from "../engine/resource";

export const hcloudServersUserDataVerifiable: Rule = {
    kind: "stack",
    id: "hcloud-servers-user-data-verifiable",
    profiles: AIRLOCK_ONLY,
    description:
        "A server's user_data is judged where it is visible: directly, or - when it is unknown (the join key at a first preview) or " +
        "redacted as [secret] in a preview's JSON - " +
        "through the cloud-init.yaml artifact its component stashes next to it. A server with neither fails closed.",
    remediation: "Render user_data from known values, and carry the rendered document in a pulumi.Stash beside the server (see components/host.ts).",
    check(resources) {
        return resources
            .filter((r) => r.type === TYPES.server && isHidden(r.inputs.userData))
            .filter(
                (server) =>
                    !resources.some(
                        (r) => r.type === TYPES.stash && r.parent !== undefined && r.parent === server.parent && artifactsOf(r.inputs)?.["cloud-init.yaml"] !== undefined,
                    ),
            )
            .map((server) => ({
                message: `unverifiable: user_data of ${server.name} is unknown or redacted, and no rendered cloud-init.yaml is stashed beside it`,
                where: server.urn,
                unverifiable: true,
            }));
    },
};
