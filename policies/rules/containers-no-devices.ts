import { GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { entryLine, whenKnown } from "../engine/container";

export const containersNoDevices: Rule = {
    kind: "container",
    id: "containers-no-devices",
    profiles: GENERIC,
    description: "No container gets host devices (devices, device_cgroup_rules).",
    remediation: "Remove the devices / device_cgroup_rules entries.",
    check: (c) =>
        whenKnown(c, ["devices"], () =>
            c.devices.map((d, i) => ({ message: `${c.name} maps host device ${d}`, line: entryLine(c, "devices", i), where: c.name })),
        ),
};
