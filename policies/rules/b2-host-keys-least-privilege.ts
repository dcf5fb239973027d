import { AIRLOCK_ONLY } from "../engine/profile";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { containsUnknown, unverifiable } from "../engine/finding";
import { TYPES_B2, b2KindOf } from "../engine/b2";

/** What a host's backup key may never do: destroy history or widen its own reach. */
const FORBIDDEN = ["deleteFiles", "deleteBuckets", "writeBuckets", "writeKeys", "deleteKeys", "listKeys", "writeBucketRetentions", "bypassGovernance", "writeFileRetentions", "writeFileLegalHolds", "writeBucketEncryption"];

export const b2HostKeysLeastPrivilege: Rule = {
    kind: "resource",
    types: TYPES_B2,
    id: "b2-host-keys-least-privilege",
    profiles: AIRLOCK_ONLY,
    description:
        "A B2 key that reaches a host can list, read and write its own bucket and nothing else: no deleteFiles, no bucket or key " +
        "management, restricted to one bucket. Only operator keys (purpose: operator) may prune.",
    remediation: "Give host keys exactly listBuckets, listFiles, readFiles, writeFiles and a bucketId; create prune keys with purpose operator.",
    check(resource) {
        if (b2KindOf(resource) !== "applicationKey" || resource.inputs.purpose === "operator") return [];
        const { capabilities, bucketId } = resource.inputs;
        if (containsUnknown(capabilities)) return [unverifiable("the key's capabilities", resource.name)];
        const problems: Problem[] = [];
        const caps = Array.isArray(capabilities) ? capabilities.map(String) : [];
        const bad = caps.filter((c) => FORBIDDEN.includes(c));
        if (bad.length > 0) problems.push({ message: `host key ${resource.name} has ${bad.join(", ")}`, where: "capabilities" });
        if (bucketId === undefined || bucketId === null || bucketId === "") problems.push({ message: `host key ${resource.name} is not restricted to a bucket`, where: "bucketId" });
        return problems;
    },
};
