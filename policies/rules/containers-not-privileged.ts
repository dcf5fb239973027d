import { GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { lineAt, whenKnown } from "../engine/container";

export const containersNotPrivileged: Rule = {
    kind: "container",
    id: "containers-not-privileged",
    profiles: GENERIC,
    description: "No container runs privileged: that gives it every capability and every device of the host.",
    remediation: "Remove `privileged: true`; add the specific allowed capability instead if one is really needed.",
    check: (c) =>
        whenKnown(c, ["privileged"], () =>
            (c.privileged ? [{ message: `${c.name} is privileged`, line: lineAt(c, "privileged"), where: c.name }] : []),
        ),
};
