import { AIRLOCK_ONLY } from "../engine/profile";
import type { Rule } from "../engine/rule";
import { whenKnown } from "../engine/container";

const BROWSER = /(headless-shell|chrom(e|ium)|browserless|playwright|puppeteer|selenium)/i;

export const containersBrowserNoWorkspace: Rule = {
    kind: "container",
    id: "containers-browser-no-workspace",
    profiles: AIRLOCK_ONLY,
    description:
        "The headless browser (reachable over CDP from the gateway) mounts nothing at /workspace: a page it loads must not " +
        "reach the agent's files.",
    remediation: "Remove the /workspace mount from the browser service; exchange files through the agent's shell instead.",
    check: (c) =>
        whenKnown(c, ["mounts"], () => {
            const workspace = c.mounts.filter((m) => /^\/workspace(\/|$)/.test(m.target));
            if (workspace.length === 0) return [];
            // Only a container that mounts /workspace needs to be told apart from a browser.
            return whenKnown(c, ["image"], () => {
                const isBrowser = BROWSER.test(c.name) || /browser/i.test(c.name) || (typeof c.image === "string" && BROWSER.test(c.image));
                return isBrowser ? workspace.map((m) => ({ message: `browser service ${c.name} mounts ${m.target}`, line: m.line ?? c.line, where: c.name })) : [];
            });
        }),
};
