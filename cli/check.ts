import * as fs from "node:fs";
import * as path from "node:path";
import * as YAML from "yaml";
import { ConfigError } from "../policies/contract";
import type { Finding } from "../policies/engine/finding";
import { ArtifactKind, judgeCloudInit, judgeCompose, judgeResources, judgeSshd } from "../policies/engine/judge";
import type { PlannedResourceLike } from "../policies/engine/resource";
import { enforce, loadPolicy, Policy } from "../policies/policy";

/** `airlock check` and `gate --preview`: judging files, without Pulumi (fast start). */

/** Resources from `pulumi preview --json` (steps[].newState) or `pulumi stack export` (deployment.resources). */
export function resourcesOfPreview(file: string, text: string): PlannedResourceLike[] {
    let doc: any;
    try {
        doc = JSON.parse(text);
    } catch (err) {
        throw new ConfigError([`${file}: not JSON: ${(err as Error).message}`]);
    }
    const states: any[] = Array.isArray(doc?.steps)
        ? doc.steps.map((s: any) => s?.newState).filter(Boolean)
        : Array.isArray(doc?.deployment?.resources)
          ? doc.deployment.resources
          : Array.isArray(doc?.resources)
            ? doc.resources
            : (() => {
                  throw new ConfigError([`${file}: steps: expected the output of \`pulumi preview --json\` or \`pulumi stack export\``]);
              })();
    return states.map((s, i) => {
        if (typeof s?.urn !== "string" || typeof s?.type !== "string") throw new ConfigError([`${file}: steps[${i}].newState: expected urn and type`]);
        return { urn: s.urn, type: s.type, name: s.urn.split("::").pop(), parent: s.parent, inputs: s.inputs ?? {} };
    });
}

export type CheckKind = ArtifactKind | "preview";

/** What a file is, from its name and content; undefined when it cannot tell. */
export function detectKind(file: string, text: string): CheckKind | undefined {
    const base = path.basename(file).toLowerCase();
    if (/^#cloud-config\b/.test(text)) return "cloud-init";
    if (base.endsWith(".json")) return "preview";
    if (/sshd_config|\.sshd_config$/.test(base)) return "sshd";
    if (/^(docker-)?compose.*\.ya?ml$/.test(base)) return "compose";
    if (/\.ya?ml$/.test(base)) {
        try {
            const doc = YAML.parse(text);
            if (doc && typeof doc === "object" && doc.services && typeof doc.services === "object") return "compose";
        } catch {
            return undefined;
        }
    }
    if (/^\s*(ListenAddress|PermitRootLogin|PasswordAuthentication|ForceCommand|AcceptEnv|Match)\s/im.test(text)) return "sshd";
    return undefined;
}

export function checkFile(file: string, kind: CheckKind | undefined, policy: Policy = loadPolicy()): Finding[] {
    return enforce(judgeFile(file, kind, policy.context), policy);
}

function judgeFile(file: string, kind: CheckKind | undefined, ctx: Policy["context"]): Finding[] {
    let text: string;
    try {
        text = fs.readFileSync(file, "utf8");
    } catch (err) {
        throw new ConfigError([`${file}: cannot read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`]);
    }
    const resolved = kind ?? detectKind(file, text);
    switch (resolved) {
        case "compose":
            return judgeCompose(text, ctx, { file });
        case "sshd":
            return judgeSshd(text, ctx, { file });
        case "cloud-init":
            return judgeCloudInit(text, ctx, { file });
        case "preview":
            return judgeResources(resourcesOfPreview(file, text), ctx).map((f) => ({ ...f, file: f.file ? `${file} ${f.file}` : file }));
        default:
            throw new ConfigError([`${file}: cannot tell whether this is compose, sshd, cloud-init or a preview; pass --kind`]);
    }
}
