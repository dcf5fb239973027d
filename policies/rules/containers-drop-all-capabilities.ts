import { AIRLOCK_ONLY } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { lineAt, whenKnown } from "../engine/container";

export const containersDropAllCapabilities: Rule = {
    kind: "container",
    id: "containers-drop-all-capabilities",
    profiles: AIRLOCK_ONLY,
    description: "Every container drops all Linux capabilities (cap_drop: [ALL]) and adds back only what it needs.",
    remediation: "Add `cap_drop: [ALL]` to the service (capabilities.drops: [\"ALL\"] on a docker Container).",
    check: (c) =>
        whenKnown(c, ["capDrop"], () =>
            (c.capDrop.includes("ALL") ? [] : [{ message: `${c.name} does not drop ALL capabilities`, line: lineAt(c, "cap_drop"), where: c.name }]),
        ),
};
