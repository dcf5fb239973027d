import type { Rule } from "../engine/rule";
import { entryLine, whenKnown } from "../engine/container";

/** What a build-and-test shell may need after dropping ALL; nothing that reaches the kernel or the network stack. */
export const ALLOWED_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"];

export const containersAddOnlyAllowedCapabilities: Rule = {
    kind: "container",
    id: "containers-add-only-allowed-capabilities",
    description: `Added capabilities come only from ${ALLOWED_CAPABILITIES.join(", ")}.`,
    remediation: `Remove the other entries from cap_add; keep at most ${ALLOWED_CAPABILITIES.join(", ")}.`,
    check: (c) =>
        whenKnown(c, ["capAdd"], () =>
            c.capAdd.flatMap((cap, i) => ALLOWED_CAPABILITIES.includes(cap) ? [] : [{ message: `${c.name} adds capability ${cap}`, line: entryLine(c, "capAdd", i), where: c.name, fix: `Remove ${cap} from cap_add; keep at most ${ALLOWED_CAPABILITIES.join(", ")}.` }]),
        ),
};
