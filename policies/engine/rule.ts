import type { CloudInitDoc } from "./cloudInit";
import type { ContainerSpec } from "./container";
import type { JudgeContext } from "./context";
import type { Problem, RuleInfo } from "./finding";
import type { PlannedResourceLike } from "./resource";
import type { SshdConfig } from "./sshd";
import type { StackFileDoc } from "./stackFile";

/** One rule per file under policies/rules/; each judges one kind of artifact. */
export type Rule =
    | (RuleInfo & { kind: "container"; check(container: ContainerSpec, ctx: JudgeContext): Problem[] })
    | (RuleInfo & { kind: "sshd"; check(config: SshdConfig, ctx: JudgeContext): Problem[] })
    | (RuleInfo & { kind: "cloud-init"; check(doc: CloudInitDoc, ctx: JudgeContext): Problem[] })
    | (RuleInfo & { kind: "resource"; types: string[]; check(resource: PlannedResourceLike, ctx: JudgeContext): Problem[] })
    | (RuleInfo & { kind: "stack"; check(resources: PlannedResourceLike[], ctx: JudgeContext): Problem[] })
    | (RuleInfo & { kind: "stack-file"; check(doc: StackFileDoc, ctx: JudgeContext): Problem[] });

export type RuleKind = Rule["kind"];
