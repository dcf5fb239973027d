import { AIRLOCK_ONLY, GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { entryLine, whenKnown } from "../engine/container";

/** What a build-and-test shell may need after dropping ALL; nothing that reaches the kernel or the network stack. */
export const ALLOWED_CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"];

/**
 * The capabilities Docker gives every container unless told otherwise (moby's
 * oci/caps/defaults.go, listed in Docker's "Runtime privilege and Linux capabilities"):
 * adding one back is no more than Docker's default, so the generic profile accepts it.
 */
const DOCKER_DEFAULT_CAPABILITIES = [
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE", "NET_RAW", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
];

export const containersAddOnlyAllowedCapabilities: Rule = {
    kind: "container",
    id: "containers-add-only-allowed-capabilities",
    profiles: GENERIC,
    description:
        `Added capabilities come only from ${ALLOWED_CAPABILITIES.join(", ")} (the generic profile: only from Docker's default set, ` +
        "so SYS_ADMIN, NET_ADMIN, SYS_MODULE, SYS_PTRACE, ALL and the like are findings).",
    remediation: `Remove the other entries from cap_add; keep at most ${ALLOWED_CAPABILITIES.join(", ")}.`,
    check: (c) =>
        whenKnown(c, ["capAdd"], () =>
            c.capAdd.flatMap((cap, i) =>
                ALLOWED_CAPABILITIES.includes(cap)
                    ? []
                    : [
                          {
                              message: `${c.name} adds capability ${cap}`,
                              line: entryLine(c, "capAdd", i),
                              where: c.name,
                              fix: `Remove ${cap} from cap_add; keep at most ${ALLOWED_CAPABILITIES.join(", ")}.`,
                              // One of Docker's defaults is only airlock's stricter reading.
                              ...(DOCKER_DEFAULT_CAPABILITIES.includes(cap) ? { profiles: AIRLOCK_ONLY } : {}),
                          },
                      ],
            ),
        ),
};
