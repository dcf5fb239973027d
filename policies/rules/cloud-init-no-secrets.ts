import { GENERIC } from "../engine/profile";
import { TAILNET_AUTH_KEY_PATH, TAILNET_AUTH_KEY_PLACEHOLDER } from "../contract";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { lineOfLeaf, stringLeaves } from "../engine/cloudInit";
import { findSecrets } from "../engine/secrets";

/** A Tailscale auth key, or the placeholder it replaces at deploy time. */
/** A host's own key, in the module that installs host keys - and nowhere else. */
const HOST_KEY_PATH = /^ssh_keys\.(rsa|ecdsa|ed25519)_private$/;

const TAILNET_KEY_FILE_CONTENT = new RegExp(`^(tskey-auth-[A-Za-z0-9-]+|${TAILNET_AUTH_KEY_PLACEHOLDER})\\s*$`);

export const cloudInitNoSecrets: Rule = {
    kind: "cloud-init",
    id: "cloud-init-no-secrets",
    profiles: GENERIC,
    description:
        "user_data holds no secret (GitHub tokens, private keys, cloud or B2 keys, high-entropy NAME=value) - the metadata " +
        `service serves it to any process on the host. Two exceptions: the single-use tailnet join key in ${TAILNET_AUTH_KEY_PATH}, ` +
        "and the host's own ssh host key in cloud-init's ssh_keys module (so the gateway can pin it).",
    remediation: "Deliver the secret after boot over the tailnet, or per command (SendEnv); never in user_data.",
    check(doc) {
        const problems: Problem[] = [];
        for (const file of doc.files.filter((f) => f.path === TAILNET_AUTH_KEY_PATH)) {
            if (!TAILNET_KEY_FILE_CONTENT.test(file.content)) {
                problems.push({ message: `${TAILNET_AUTH_KEY_PATH} holds something other than one tailnet auth key`, where: `write_files[${file.index}]` });
            }
        }
        for (const leaf of stringLeaves(doc)) {
            if (leaf.path.endsWith(` ${TAILNET_AUTH_KEY_PATH}`) || HOST_KEY_PATH.test(leaf.path)) continue;
            for (const secret of findSecrets(leaf.value)) {
                problems.push({ message: `${secret.kind} (${secret.preview}) in ${leaf.path}`, where: leaf.path, line: lineOfLeaf(doc, leaf.path) });
            }
        }
        return problems;
    },
};
