import { AIRLOCK_ONLY } from "../engine/profile";
import { artifactsOf, STASH_TYPE } from "../contract";
import { namedBundle } from "../engine/bundle";
import { parseUserData } from "../engine/cloudInit";
import { isHidden } from "../engine/finding";
import { TYPES } from "../engine/resource";
import type { Rule } from "../engine/rule";

/** The bundle a user_data document names ("" for none; undefined when it cannot be read). */
function bundleOf(text: string): string | undefined {
    try {
        const named = namedBundle(parseUserData(text).files);
        return named === undefined ? "" : named.sha256;
    } catch {
        return undefined;
    }
}

export const hcloudServersUserDataBundleJudged: Rule = {
    kind: "stack",
    id: "hcloud-servers-user-data-bundle-judged",
    profiles: AIRLOCK_ONLY,
    description:
        "A server whose user_data is known installs the host code bundle the cloud-init.yaml stashed beside it names, whose files were judged " +
        "(cloud-init-named-bundle-judged); a server that names another one installs files nobody judged.",
    remediation: "Render the server's user_data and its stashed cloud-init.yaml from the same document (see components/host.ts).",
    check(resources) {
        return resources
            .filter((r) => r.type === TYPES.server && typeof r.inputs.userData === "string" && !isHidden(r.inputs.userData))
            .flatMap((server) => {
                const named = bundleOf(String(server.inputs.userData));
                if (named === "") return [];
                const beside = resources
                    .filter((r) => r.type === STASH_TYPE && r.parent !== undefined && r.parent === server.parent)
                    .map((r) => artifactsOf(r.inputs)?.["cloud-init.yaml"])
                    .filter((text): text is string => text !== undefined)
                    .map(bundleOf);
                if (named !== undefined && beside.includes(named)) return [];
                return [{ message: `unverifiable: ${server.name}'s user_data installs a host code bundle (${named ?? "unreadable"}) that the cloud-init.yaml stashed beside it does not name`, where: server.urn, unverifiable: true }];
            });
    },
};
