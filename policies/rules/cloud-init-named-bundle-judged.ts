import { AIRLOCK_ONLY } from "../engine/profile";
import type { Rule } from "../engine/rule";

export const cloudInitNamedBundleJudged: Rule = {
    kind: "cloud-init",
    id: "cloud-init-named-bundle-judged",
    profiles: AIRLOCK_ONLY,
    description:
        "A host whose user_data installs a host code bundle (/etc/airlock/bundle.json, /etc/airlock/bundle-files.json) carries, in the stash beside it, " +
        "the bundle whose bytes have the sha256 it names, and a list its installer takes: every file it installs is then judged as the host writes it.",
    remediation: "Deploy what the plan renders (components/host.ts stashes the bundle with the document); never hand-edit the bundle, its digest or the list of files.",
    check: (doc) => (doc.bundleProblem ? [{ message: `unverifiable: ${doc.bundleProblem}: the files it installs were not judged`, where: "/etc/airlock/bundle.json", unverifiable: true }] : []),
};
