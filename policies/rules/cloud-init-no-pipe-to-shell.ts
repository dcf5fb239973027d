import type { Rule } from "../engine/rule";
import { stringLeaves } from "../engine/cloudInit";

const PIPE_TO_SHELL = [
    /\b(curl|wget)\b[^\n|;]*\|\s*(sudo\s+(-\S+\s+)*)?(env\s+\S+\s+)?(ba|z|da|k)?sh\b/,
    /\b(ba|z|da|k)?sh\s+(-c\s+)?["']?\$\(\s*(curl|wget)\b/,
    /\b(ba|z|da|k)?sh\s+<\(\s*(curl|wget)\b/,
];

export const cloudInitNoPipeToShell: Rule = {
    kind: "cloud-init",
    id: "cloud-init-no-pipe-to-shell",
    description: "Nothing downloads a script and runs it unseen (`curl ... | sh`, `sh -c \"$(curl ...)\"`, `bash <(curl ...)`).",
    remediation: "Install from a signed package repository, or download to a file, verify its checksum or signature, then run it.",
    check: (doc) =>
        stringLeaves(doc)
            .filter((leaf) => leaf.value.split("\n").some((line) => !/^\s*#/.test(line) && PIPE_TO_SHELL.some((re) => re.test(line))))
            .map((leaf) => ({ message: `download piped into a shell in ${leaf.path}`, where: leaf.path })),
};
