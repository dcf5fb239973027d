import { AIRLOCK_ONLY } from "../engine/profile";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { lineOfLeaf } from "../engine/cloudInit";

/** Groups that are root in all but name: sudo rights, or the rootful Docker socket. */
const ROOT_GROUPS = ["sudo", "wheel", "admin", "docker"];

const list = (value: unknown): string[] =>
    Array.isArray(value) ? value.map(String) : typeof value === "string" ? value.split(",").map((s) => s.trim()) : [];

export const cloudInitNoPasswordlessSudoForAgent: Rule = {
    kind: "cloud-init",
    id: "cloud-init-no-passwordless-sudo-for-agent",
    profiles: AIRLOCK_ONLY,
    compares: ["agentUser"],
    description: "The agent user gets no sudo rights and no root-equivalent group (sudo, wheel, admin, docker), in users or in a sudoers file.",
    remediation: "Remove `sudo:` and those groups from the agent's users entry and any sudoers line naming it.",
    check(doc, ctx) {
        const problems: Problem[] = [];
        const users = Array.isArray(doc.data?.users) ? doc.data!.users : [];
        users.forEach((user: any, i: number) => {
            if (typeof user !== "object" || user?.name !== ctx.agentUser) return;
            if (user.sudo !== undefined && user.sudo !== false && user.sudo !== null) {
                problems.push({ message: `users[${i}] (${ctx.agentUser}) has sudo: ${JSON.stringify(user.sudo)}`, line: lineOfLeaf(doc, `users[${i}].sudo`), where: `users[${i}]` });
            }
            const groups = list(user.groups).filter((g) => ROOT_GROUPS.includes(g));
            if (groups.length > 0) problems.push({ message: `users[${i}] (${ctx.agentUser}) is in ${groups.join(", ")}`, line: lineOfLeaf(doc, `users[${i}].groups`) ?? doc.lines.users, where: `users[${i}]` });
        });
        for (const file of doc.files.filter((f) => /^\/etc\/sudoers(\.d\/.*)?$/.test(f.path))) {
            const names = new RegExp(`^\\s*(${ctx.agentUser}|ALL)\\s`);
            if (file.content.split("\n").some((line) => names.test(line))) {
                problems.push({ message: `${file.path} grants sudo to ${ctx.agentUser}`, where: `write_files[${file.index}]` });
            }
        }
        return problems;
    },
};
