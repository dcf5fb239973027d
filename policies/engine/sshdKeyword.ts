import type { Problem } from "./finding";
import { SshdConfig, valuesInEveryContext } from "./sshd";

/** Problems for a keyword that must be `no` in every context; `defaultIsNo` says whether absence is fine. */
export function mustBeNoEverywhere(config: SshdConfig, keyword: string, display: string, defaultIsNo: boolean): Problem[] {
    const problems: Problem[] = [];
    for (const { setting, context } of valuesInEveryContext(config, keyword)) {
        if (!setting) {
            if (!defaultIsNo && !config.fragment) problems.push({ message: `${display} is not set, and its default is not no`, where: display });
        } else if (setting.value[0]?.toLowerCase() !== "no") {
            problems.push({ message: `${display} ${setting.value.join(" ")} (${context})`, line: setting.line, where: display });
        }
    }
    return problems;
}
