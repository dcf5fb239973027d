import { createHash } from "node:crypto";
import { artifactsOf, BUNDLE_NAME, BUNDLE_SOURCE_PATH, STASH_TYPE } from "../contract";
import { parseCloudInit } from "../engine/cloudInit";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";

/** The bundle sha256 a stashed cloud-init document names, if it names one. */
function namedBundle(cloudInit: string): string | undefined {
    try {
        const source = parseCloudInit(cloudInit).files.find((f) => f.path === BUNDLE_SOURCE_PATH);
        return source ? String(JSON.parse(source.content).sha256) : undefined;
    } catch {
        return undefined; // an unreadable document is cloud-init-parses' finding
    }
}

export const cloudInitNamedBundleJudged: Rule = {
    kind: "stack",
    id: "cloud-init-named-bundle-judged",
    description:
        "A host whose user_data installs a host code bundle (its sha256 in /etc/airlock/bundle.json) names one the stack itself stashes, " +
        "whose bytes have that sha256: only then were the files it installs judged.",
    remediation: "Deploy the bundle the plan renders (components/hostBundle.ts stashes it beside the upload); never point a host at a digest of another airlock version or a hand-edited bundle.",
    check(resources) {
        const stashes = resources.filter((r) => r.type === STASH_TYPE).map((r) => ({ r, artifacts: artifactsOf(r.inputs) ?? {} }));
        const judged = new Set(
            stashes.flatMap(({ artifacts }) =>
                Object.entries(artifacts)
                    .filter(([name, text]) => BUNDLE_NAME.exec(name)?.[1] === createHash("sha256").update(text, "utf8").digest("hex"))
                    .map(([name]) => BUNDLE_NAME.exec(name)![1]),
            ),
        );
        const problems: Problem[] = [];
        for (const { r, artifacts } of stashes) {
            const cloudInit = artifacts["cloud-init.yaml"];
            const sha256 = cloudInit === undefined ? undefined : namedBundle(cloudInit);
            if (sha256 !== undefined && !judged.has(sha256)) {
                problems.push({ message: `unverifiable: ${r.name}'s user_data installs bundle ${sha256}, which this stack does not stash: its files were not judged`, where: r.urn, unverifiable: true });
            }
        }
        return problems;
    },
};
