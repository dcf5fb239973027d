import { GENERIC } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { lineOfLeaf, stringLeaves } from "../engine/cloudInit";
import { dequoted, downloadsAndRuns, logicalLines } from "../engine/shell";

export const cloudInitNoPipeToShell: Rule = {
    kind: "cloud-init",
    id: "cloud-init-no-pipe-to-shell",
    profiles: GENERIC,
    description:
        "Nothing downloads a script and runs it unseen: `curl ... | sh` in all its shapes (through sudo, env, tee, a path, a continued " +
        "line, python3 -), `sh -c \"$(curl ...)\"`, `bash <(curl ...)`.",
    remediation: "Install from a signed package repository, or download to a file, verify its checksum or signature, then run it.",
    check: (doc) =>
        stringLeaves(doc)
            .filter((leaf) => /curl|wget|fetch|aria2c|http|GET/.test(dequoted(leaf.value)) && logicalLines(leaf.value).some(downloadsAndRuns))
            .map((leaf) => ({ message: `download piped into a shell in ${leaf.path}`, where: leaf.path, line: lineOfLeaf(doc, leaf.path) })),
};
