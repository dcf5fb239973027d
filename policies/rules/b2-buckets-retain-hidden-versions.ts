import { AIRLOCK_ONLY } from "../engine/profile";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { containsUnknown, unverifiable } from "../engine/finding";
import { TYPES_B2, b2KindOf } from "../engine/b2";

function objectLockDays(lock: any): number {
    const period = lock?.period ?? lock?.defaultRetention?.period;
    if (!period) return 0;
    const unit = String(period.unit ?? "days").toLowerCase();
    return Number(period.duration ?? 0) * (unit.startsWith("year") ? 365 : 1);
}

export const b2BucketsRetainHiddenVersions: Rule = {
    kind: "resource",
    types: TYPES_B2,
    id: "b2-buckets-retain-hidden-versions",
    profiles: AIRLOCK_ONLY,
    compares: ["retentionDays"],
    description:
        "A host can only hide files, so its bucket must keep hidden versions for at least the configured retention: no lifecycle " +
        "rule may purge hidden files sooner (or Object Lock holds them at least that long).",
    remediation: "Raise airlock:backup.retentionDays (or the bucket's daysFromHidingToDeleting) to at least the policy's retentionDays (policies/config.json), or enable Object Lock for at least that long.",
    check(resource, ctx) {
        if (b2KindOf(resource) !== "bucket") return [];
        const { lifecycleRules, defaultRetention } = resource.inputs;
        if (containsUnknown(lifecycleRules) || containsUnknown(defaultRetention)) return [unverifiable("the bucket's retention", resource.name)];
        if (objectLockDays(defaultRetention) >= ctx.retentionDays) return [];
        const problems: Problem[] = [];
        (Array.isArray(lifecycleRules) ? lifecycleRules : []).forEach((rule: any, i: number) => {
            const days = rule?.daysFromHidingToDeleting;
            if (days !== undefined && days !== null && Number(days) < ctx.retentionDays) {
                problems.push({ message: `lifecycleRules[${i}] deletes hidden versions after ${days} days (< ${ctx.retentionDays})`, where: `lifecycleRules[${i}]` });
            }
        });
        return problems;
    },
};
