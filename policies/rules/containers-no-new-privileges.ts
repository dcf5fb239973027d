import type { Rule } from "../engine/rule";
import { normalizeSecurityOpt, whenKnown } from "../engine/container";

export const containersNoNewPrivileges: Rule = {
    kind: "container",
    id: "containers-no-new-privileges",
    description: "Every container sets no-new-privileges, so setuid binaries inside cannot raise privileges.",
    remediation: "Add `security_opt: [\"no-new-privileges:true\"]` (securityOpts on a docker Container).",
    check: (c) =>
        whenKnown(c, ["securityOpt"], () => {
            const opts = c.securityOpt.map(normalizeSecurityOpt);
            const set = opts.some((o) => o === "no-new-privileges" || o === "no-new-privileges:true" || o === "no-new-privileges=true");
            const unset = opts.some((o) => o === "no-new-privileges:false" || o === "no-new-privileges=false");
            return set && !unset ? [] : [{ message: `${c.name} does not set no-new-privileges`, line: c.line, where: c.name }];
        }),
};
