import { AIRLOCK_ONLY } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { entryLine, lineAt, normalizeSecurityOpt, whenKnown } from "../engine/container";

export const containersNoNewPrivileges: Rule = {
    kind: "container",
    id: "containers-no-new-privileges",
    profiles: AIRLOCK_ONLY,
    description: "Every container sets no-new-privileges, so setuid binaries inside cannot raise privileges.",
    remediation: "Add `security_opt: [\"no-new-privileges:true\"]` (securityOpts on a docker Container).",
    check: (c) =>
        whenKnown(c, ["securityOpt"], () => {
            const opts = c.securityOpt.map(normalizeSecurityOpt);
            const set = opts.some((o) => o === "no-new-privileges" || o === "no-new-privileges:true" || o === "no-new-privileges=true");
            const unset = opts.findIndex((o) => o === "no-new-privileges:false" || o === "no-new-privileges=false");
            if (set && unset < 0) return [];
            return [{ message: `${c.name} does not set no-new-privileges`, line: unset >= 0 ? entryLine(c, "securityOpt", unset) : lineAt(c, "security_opt"), where: c.name }];
        }),
};
