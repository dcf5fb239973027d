import { AIRLOCK_ONLY } from "../engine/profile";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { findSecrets } from "../engine/secrets";
import { isEncrypted } from "../engine/stackFile";

/** Config keys that hold a credential, whatever the provider: hcloud:token, tailscale:apiKey, tailscale:oauthClientSecret, ... */
const CREDENTIAL_KEY = /(token|secret|password|passwd|api_?key|access_?key|secret_?key|application_?key|private_?key|credentials?)$/i;

export const stackSecretsEncrypted: Rule = {
    kind: "stack-file",
    id: "stack-secrets-encrypted",
    profiles: AIRLOCK_ONLY,
    description:
        "A stack file holds every credential encrypted (`secure:`): a provider token in clear (hcloud:token, tailscale:apiKey, ...) " +
        "or a secret-shaped value anywhere in the config is committed with the stack. (Judged by plan and gate; CrossGuard never sees the stack file.)",
    remediation: "Remove the value from the file and set it with `pulumi config set --secret <key> <value>`; rotate it, since it was in clear.",
    check(doc) {
        const problems: Problem[] = [];
        for (const [key, value] of Object.entries(doc.config)) {
            if (isEncrypted(value)) continue;
            const name = key.split(":").pop() ?? key;
            if (CREDENTIAL_KEY.test(name) && value !== null && value !== "" && typeof value !== "object") {
                problems.push({ message: `${key} is a credential in clear`, line: doc.lines[key], where: key, fix: `pulumi config set --secret ${key} <value> (then rotate it)` });
                continue;
            }
            for (const leaf of leaves(value, key)) {
                for (const secret of findSecrets(leaf.value)) {
                    problems.push({ message: `${secret.kind} (${secret.preview}) in clear at ${leaf.path}`, line: doc.lines[key], where: leaf.path });
                }
            }
        }
        return problems;
    },
};

/** Every plain string under a config value, with its key path; encrypted values are skipped. */
function leaves(value: unknown, at: string): { path: string; value: string }[] {
    if (typeof value === "string") return [{ path: at, value }];
    if (isEncrypted(value)) return [];
    if (Array.isArray(value)) return value.flatMap((v, i) => leaves(v, `${at}[${i}]`));
    if (value !== null && typeof value === "object") return Object.entries(value).flatMap(([k, v]) => leaves(v, `${at}.${k}`));
    return [];
}
