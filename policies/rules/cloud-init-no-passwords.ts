import { GENERIC } from "../engine/profile";
import type { Problem } from "../engine/finding";
import type { Rule } from "../engine/rule";
import { lineOfLeaf, stringLeaves } from "../engine/cloudInit";
import { logicalLines, programOf } from "../engine/shell";

/** A crypt(3) hash ($1$, $5$, $6$, $y$, ...) rather than a password in clear. */
const HASH = /^\$[0-9a-z]+\$/;

/** Commands that set a password from their input or arguments. */
const SETS_PASSWORD = new Set(["chpasswd", "chgpasswd", "usermod"]);

function setsPasswordIn(line: string): boolean {
    if (!/passwd|usermod/.test(line)) return false;
    return line.split(/;|&&|\|\||\|/).some((stage) => {
        const program = programOf(stage);
        if (program === "passwd") return /\s--stdin\b/.test(stage);
        return program !== undefined && SETS_PASSWORD.has(program) && (program !== "usermod" || /\s(-p|--password)\s/.test(stage));
    });
}

export const cloudInitNoPasswords: Rule = {
    kind: "cloud-init",
    id: "cloud-init-no-passwords",
    profiles: GENERIC,
    description:
        "user_data sets no password: not in clear (plain_text_passwd, chpasswd, `password:`, a chpasswd command) and not as a hash " +
        "(passwd, hashed_passwd: crackable offline by any process that reads the metadata service, and it enables password login).",
    remediation: "Log in with ssh keys only (ssh_authorized_keys); lock passwords (lock_passwd: true) and drop the chpasswd module.",
    check(doc) {
        const problems: Problem[] = [];
        const data = doc.data ?? {};
        const users = Array.isArray(data.users) ? data.users : [];
        users.forEach((user: any, i: number) => {
            if (user === null || typeof user !== "object") return;
            const who = user.name ? ` (${user.name})` : "";
            if (user.plain_text_passwd !== undefined) problems.push({ message: `users[${i}]${who} has a password in clear (plain_text_passwd)`, line: lineOfLeaf(doc, `users[${i}].plain_text_passwd`), where: `users[${i}]` });
            for (const key of ["passwd", "hashed_passwd"]) {
                if (user[key] !== undefined) problems.push({ message: `users[${i}]${who} has a password hash (${key})`, line: lineOfLeaf(doc, `users[${i}].${key}`), where: `users[${i}]` });
            }
        });
        if (typeof data.password === "string" && data.password !== "") problems.push({ message: "the default user has a password in clear (password)", line: doc.lines.password, where: "password" });
        const chpasswd = data.chpasswd;
        if (chpasswd !== null && typeof chpasswd === "object") {
            const listed = typeof chpasswd.list === "string" ? chpasswd.list.split("\n") : Array.isArray(chpasswd.list) ? chpasswd.list.map(String) : [];
            const entries = [
                ...listed.filter((l: string) => l.includes(":")).map((l: string) => ({ name: l.split(":")[0].trim(), password: l.slice(l.indexOf(":") + 1).trim(), type: undefined })),
                ...(Array.isArray(chpasswd.users) ? chpasswd.users : []).map((u: any) => ({ name: String(u?.name ?? ""), password: String(u?.password ?? ""), type: u?.type })),
            ];
            for (const entry of entries) {
                const hashed = entry.type === "hash" || HASH.test(entry.password);
                problems.push({ message: `chpasswd sets a password ${hashed ? "hash" : "in clear"} for ${entry.name || "a user"}`, line: lineOfLeaf(doc, "chpasswd"), where: "chpasswd" });
            }
        }
        for (const leaf of stringLeaves(doc)) {
            if (/passwd|usermod/.test(leaf.value) && logicalLines(leaf.value).some(setsPasswordIn)) problems.push({ message: `a command sets a password in ${leaf.path}`, line: lineOfLeaf(doc, leaf.path), where: leaf.path });
        }
        return problems;
    },
};
