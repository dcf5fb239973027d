import * as fs from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";
import { DESTRUCTIVE_RULES_PATH } from "../components/render/checkpoints";
import { renderTemplate } from "../components/render/templates";
import { REPO, tempDir } from "./helpers/stacks";
import { run, toolsAvailable } from "./helpers/tools";

/**
 * The list of destructive command shapes (templates/checkpoints/destructive-commands)
 * and its matcher (destructive_rules in templates/scripts/checkpoint-client.bash), run for real on the
 * variants an agent actually produces: quoting, sudo, xargs, bash -c, pipelines.
 */

const RULES = path.join(REPO, "templates/checkpoints/destructive-commands");

/** The wrapper's client as rendered, reading `rules` instead of /etc/airlock/destructive-commands. */
function client(rules: string): string {
    const file = path.join(tempDir("client"), "checkpoint-client.bash");
    const text = renderTemplate("scripts/checkpoint-client.bash", { autoCheckpoint: "true", sessions: "shared", tryTimeout: "600", tryMaxTimeout: "3600", tryOutputKb: "64", tryMaxOutputKb: "1024" });
    if (!text.includes(`DESTRUCTIVE_RULES=${DESTRUCTIVE_RULES_PATH}\n`)) throw new Error("client: rules path not found");
    fs.writeFileSync(file, text.replace(`DESTRUCTIVE_RULES=${DESTRUCTIVE_RULES_PATH}\n`, `DESTRUCTIVE_RULES=${rules}\n`));
    return file;
}
const shippedClient = client(RULES);

/** destructive_rules of the rendered client, as the wrapper calls it. */
function matchWith(clientFile: string, command: string) {
    return run("bash", ["-c", '. "$1"; destructive_rules "$2"', "match", clientFile, command]);
}

function match(command: string): string[] {
    const result = matchWith(shippedClient, command);
    if (result.status !== 0 && result.status !== 1) throw new Error(`matcher failed (${result.status}): ${result.stderr}`);
    expect(result.stderr).toBe("");
    const names = result.stdout.trim() ? result.stdout.trim().split("\n") : [];
    expect(result.status === 0, `exit status agrees with the output for ${command}`).toBe(names.length > 0);
    return names;
}

const destructive: [string, string][] = [
    // rm, in every spelling
    ["rm -rf app", "rm-recursive"],
    ["rm -fr app", "rm-recursive"],
    ["rm -r -f app", "rm-recursive"],
    ["rm -R app", "rm-recursive"],
    ["rm --recursive --force app", "rm-recursive"],
    ["rm app -rf", "rm-recursive"],
    ["rm -v --preserve-root -r /workspace/app", "rm-recursive"],
    ["/bin/rm -rf app", "rm-recursive"],
    ["\\rm -rf app", "rm-recursive"],
    ["'rm' -rf app", "rm-recursive"],
    ['"rm" "-rf" app', "rm-recursive"],
    ["r'm' -r\"f\" app", "rm-recursive"],
    ["sudo rm -rf /workspace/app", "rm-recursive"],
    ["sudo -u root -E rm -rf app", "rm-recursive"],
    ["env FOO=1 nice -n 10 rm -rf app", "rm-recursive"],
    ["command rm -rf app", "rm-recursive"],
    ["time nohup rm -rf app &", "rm-recursive"],
    ["bash -c 'rm -rf app'", "rm-recursive"],
    ['sh -c "cd /workspace && rm -rf app"', "rm-recursive"],
    ["bash -lc \"sudo bash -c 'rm -rf app'\"", "rm-recursive"],
    ["echo $(rm -rf app)", "rm-recursive"],
    ["echo `rm -rf app`", "rm-recursive"],
    ["make build; rm -rf dist", "rm-recursive"],
    ["npm test && rm -rf node_modules", "rm-recursive"],
    ["false || rm -rf app", "rm-recursive"],
    ["cd /tmp\nrm -rf /workspace/app", "rm-recursive"],
    ["(cd app && rm -rf build)", "rm-recursive"],
    ["{ rm -rf app; }", "rm-recursive"],
    ["rm -rf /workspace/app /usr/bin/git", "rm-recursive"],
    // many files at once
    ["ls | xargs rm -rf", "rm-recursive"],
    ["ls | xargs rm", "xargs-rm"],
    ["find . -name '*.log' | xargs rm", "xargs-rm"],
    ["find . -print0 | xargs -0 -I{} rm -f {}", "xargs-rm"],
    ["git ls-files -z | xargs -0 /bin/rm", "xargs-rm"],
    ["find . -type f -delete", "find-delete"],
    ["find -delete", "find-delete"],
    ["find /workspace -name '*.tmp' -exec rm {} +", "find-delete"],
    ["find . -execdir /bin/rm -f {} \\;", "find-delete"],
    ["sudo find . -mtime +1 -delete", "find-delete"],
    ["rsync -a --delete src/ dst/", "rsync-delete"],
    ["rsync --delete src/ dst/", "rsync-delete"],
    // devices and files overwritten in place
    ["dd if=/dev/zero of=/workspace/db.sqlite bs=1M count=1", "dd-output"],
    ["sudo dd of=/dev/sda if=image.iso", "dd-output"],
    ["mkfs.ext4 /dev/vdb", "mkfs"],
    ["mkfs -t xfs /dev/vdb", "mkfs"],
    ["wipefs -a /dev/vdb", "mkfs"],
    ["shred -u secrets.txt", "shred"],
    ["truncate -s 0 app.log", "truncate"],
    ["sudo truncate --size 0 data.db", "truncate"],
    ["chmod -R 000 /workspace", "chmod-recursive"],
    ["chown --recursive nobody app", "chmod-recursive"],
    // git
    ["git reset --hard", "git-reset-hard"],
    ["git reset --hard origin/main", "git-reset-hard"],
    ["git -C /workspace/app reset --hard HEAD~3", "git-reset-hard"],
    ["bash -c 'git reset --hard'", "git-reset-hard"],
    ["git clean -f", "git-clean-force"],
    ["git clean -fdx", "git-clean-force"],
    ["git clean -d --force", "git-clean-force"],
    ["git checkout -- .", "git-discard"],
    ["git checkout .", "git-discard"],
    ["git restore src/", "git-discard"],
    ["git stash drop", "git-discard"],
    ["git stash clear", "git-discard"],
    ["git branch -D feature", "git-discard"],
    ["git checkout -f main", "git-discard"],
    ["git checkout --force main", "git-discard"],
    ["git switch --discard-changes main", "git-discard"],
    ["git switch -f main", "git-discard"],
    ["git reflog expire --expire=now --all", "git-history"],
    ["git filter-branch --force --tree-filter 'rm -f secrets' HEAD", "git-history"],
    ["git filter-repo --path secrets --invert-paths", "git-history"],
    ["git gc --prune=now", "git-history"],
    ["tar --remove-files -czf app.tgz app", "archive-remove-sources"],
    ["tar -czf app.tgz --remove-files app", "archive-remove-sources"],
    ["zip -rm app.zip app", "archive-remove-sources"],
    // SQL through the common clients
    ['psql -c "DROP TABLE users"', "sql-drop"],
    ["psql -d app -c 'drop table if exists users'", "sql-drop"],
    ["mysql -e 'DROP DATABASE app'", "sql-drop"],
    ["mariadb app -e \"drop schema app\"", "sql-drop"],
    ["sqlite3 app.db 'DROP TABLE t;'", "sql-drop"],
    ["echo 'DROP TABLE users;' | psql app", "sql-drop"],
    ["psql app <<< 'drop schema public cascade'", "sql-drop"],
    ["docker exec db psql -U postgres -c 'DROP DATABASE app'", "sql-drop"],
    ['psql -c "TRUNCATE users"', "truncate"],
    ["psql -c 'truncate table users, orders'", "truncate"],
    ["mysql -e 'TRUNCATE TABLE sessions' app", "truncate"],
    ['psql -c "DELETE FROM users" -d app', "sql-delete-all"],
    ["sqlite3 app.db 'delete from users;'", "sql-delete-all"],
    ["dropdb app", "db-drop-tools"],
    ["mysqladmin -f drop app", "db-drop-tools"],
    ["redis-cli FLUSHALL", "nosql-flush"],
    ["mongosh app --eval 'db.dropDatabase()'", "nosql-flush"],
    // the same through a language one-liner
    ["python3 -c 'import shutil; shutil.rmtree(\"app\")'", "library-delete"],
    ["npx rimraf dist", "library-delete"],
    ["node -e \"require('fs').rmSync('app', {recursive: true})\"", "library-delete"],
];

const harmless = [
    "ls -la",
    "ls -R",
    "rm file.txt",
    "rm -f build.log",
    "rm -i -- notes.md",
    "rmdir empty",
    "cp -r src dst",
    "grep -r TODO .",
    "mkdir -p app/src",
    "dd if=/dev/urandom bs=1 count=16 status=none | od -x",
    "git status",
    "git reset --soft HEAD~1",
    "git clean -n",
    "git checkout main",
    "git checkout -b feature",
    "git stash",
    "git branch feature",
    "git checkout -b fix-f",
    "git switch main",
    "git reflog",
    "git gc",
    "tar -czf app.tgz app",
    "zip -r app.zip app",
    "git log --oneline | head",
    "psql -c 'select * from drop_list'",
    "psql -c 'DELETE FROM users WHERE id = 1'",
    "echo hello",
    "npm run format",
    "cat truncated.txt",
    "python3 -m pytest -q",
    "find . -name '*.py' -print",
    "rsync -a src/ dst/",
    "chmod +x run.sh",
    "confirm -r",
];

describe.runIf(toolsAvailable("destructive-command matcher", ["bash", "grep"]))("automatic checkpoints: the destructive-command list", () => {
    it.each(destructive)("%s -> %s", (command, rule) => {
        expect(match(command)).toContain(rule);
    });

    it.each(harmless)("%s is not destructive", (command) => {
        expect(match(command)).toEqual([]);
    });

    it("names every rule that matches a compound command", () => {
        expect(match("git clean -fdx && rm -rf dist && psql -c 'DROP TABLE t'")).toEqual(["rm-recursive", "git-clean-force", "sql-drop"]);
    });

    it("every rule in the list is exercised by a destructive variant above", () => {
        const names = fs
            .readFileSync(RULES, "utf8")
            .split("\n")
            .filter((line) => line.trim() && !line.startsWith("#"))
            .map((line) => line.split(/\s+/)[0]);
        expect(new Set(names).size).toBe(names.length);
        expect(names.filter((n) => !destructive.some(([, rule]) => rule === n))).toEqual([]);
    });

    it("every rule is a valid extended regular expression", () => {
        for (const line of fs.readFileSync(RULES, "utf8").split("\n").filter((l) => l.trim() && !l.startsWith("#"))) {
            const pattern = line.replace(/^\S+\s+/, "");
            const result = run("grep", ["-E", "-q", "-e", pattern], { input: "" });
            expect(result.stderr, line).toBe("");
            expect(result.status, line).toBe(1);
        }
    });

    it("reads the text as data: nothing in it runs", () => {
        const dir = tempDir("destructive");
        const marker = path.join(dir, "ran");
        for (const command of [`$(touch ${marker}) rm -rf x`, `\`touch ${marker}\``, `'; touch ${marker}; '`, `rm -rf x; touch ${marker}`]) {
            match(command);
        }
        expect(fs.existsSync(marker)).toBe(false);
    });

    it("a command longer than 64 KiB is judged by its first 64 KiB", () => {
        const long = `${"echo rm ".repeat(10_000)} rm -rf app`;
        expect(match(long)).toEqual([]);
        expect(match(`rm -rf app; ${long}`)).toContain("rm-recursive");
    });

    it("a rules file with a broken pattern fails loudly instead of matching nothing", () => {
        const rules = path.join(tempDir("rules"), "rules");
        fs.writeFileSync(rules, "broken  rm[\n");
        expect(matchWith(client(rules), "rm -rf app").status).toBe(2);
        expect(matchWith(client(path.join(tempDir("rules"), "missing")), "rm -rf app").status).toBe(2);
        fs.writeFileSync(rules, "# only comments\n");
        expect(matchWith(client(rules), "rm -rf app").status).toBe(2);
    });
});

/**
 * Abbreviated long options: GNU getopt_long (coreutils, tar) and git's parse-options
 * take any unambiguous prefix of a long option (`rm --rec`, `git reset --har`), and
 * rsync has short aliases of its own (`--del`). Which spellings a tool takes is
 * decided here by the tool itself: each prefix is run for real in a scratch
 * directory, and every prefix that did the destructive thing must be matched.
 */
const REPO_SETUP = "git init -q -b main . && echo a > f && git add f && git commit -qm one";
const abbreviated: { rule: string; option: string; command: string; setup: string; happened: string }[] = [
    { rule: "rm-recursive", option: "--recursive", command: "rm OPT d", setup: "mkdir -p d/x", happened: "[ ! -e d ]" },
    { rule: "chmod-recursive", option: "--recursive", command: "chmod OPT 755 d", setup: "mkdir -p d/x && chmod 700 d/x", happened: '[ "$(stat -c %a d/x)" = 755 ]' },
    { rule: "chmod-recursive", option: "--recursive", command: "chown OPT $(id -u) d", setup: "mkdir -p d/x", happened: "[ $status = 0 ]" },
    { rule: "chmod-recursive", option: "--recursive", command: "chgrp OPT $(id -g) d", setup: "mkdir -p d/x", happened: "[ $status = 0 ]" },
    { rule: "git-reset-hard", option: "--hard", command: "git reset OPT", setup: `${REPO_SETUP} && echo b > f`, happened: '[ "$(cat f)" = a ]' },
    { rule: "git-clean-force", option: "--force", command: "git clean OPT", setup: `${REPO_SETUP} && touch u`, happened: "[ ! -e u ]" },
    { rule: "git-discard", option: "--force", command: "git checkout OPT", setup: `${REPO_SETUP} && echo b > f`, happened: '[ "$(cat f)" = a ]' },
    { rule: "git-discard", option: "--discard-changes", command: "git switch OPT main", setup: `${REPO_SETUP} && echo b > f`, happened: '[ "$(cat f)" = a ]' },
    { rule: "git-discard", option: "--force", command: "git switch OPT main", setup: `${REPO_SETUP} && echo b > f`, happened: '[ "$(cat f)" = a ]' },
    {
        rule: "git-discard",
        option: "--delete",
        command: "git branch OPT --force x",
        setup: `${REPO_SETUP} && git switch -qc x && echo x > f && git commit -qam two && git switch -q main`,
        happened: "! git rev-parse -q --verify x",
    },
    {
        rule: "git-discard",
        option: "--force",
        command: "git branch --delete OPT x",
        setup: `${REPO_SETUP} && git switch -qc x && echo x > f && git commit -qam two && git switch -q main`,
        happened: "! git rev-parse -q --verify x",
    },
    { rule: "git-history", option: "--prune", command: "git gc -q OPT=now", setup: REPO_SETUP, happened: "[ $status = 0 ]" },
    { rule: "archive-remove-sources", option: "--remove-files", command: "tar OPT -cf a.tar x", setup: "touch x", happened: "[ ! -e x ]" },
    { rule: "archive-remove-sources", option: "--move", command: "zip -q OPT z.zip x", setup: "touch x", happened: "[ ! -e x ]" },
    { rule: "rsync-delete", option: "--delete", command: "rsync -a OPT s/ t/", setup: "mkdir s t && touch t/extra", happened: "[ ! -e t/extra ]" },
    { rule: "rsync-delete", option: "--remove-source-files", command: "rsync -a OPT s/ t/", setup: "mkdir s t && touch s/x", happened: "[ ! -e s/x ]" },
];

/** The spellings of `option` from `--` and one letter up to the whole name that `command` took as that option. */
function takenSpellings(entry: (typeof abbreviated)[number]): string[] {
    const taken: string[] = [];
    for (let length = 3; length <= entry.option.length; length++) {
        const spelling = entry.option.slice(0, length);
        const dir = tempDir("abbrev");
        const script = `set -u; ${entry.setup} >/dev/null 2>&1 || exit 9; ${entry.command.replace("OPT", spelling)} >/dev/null 2>&1 </dev/null; status=$?; ${entry.happened}`;
        const env = { ...process.env, GIT_CONFIG_GLOBAL: "/dev/null", GIT_CONFIG_NOSYSTEM: "1", GIT_AUTHOR_NAME: "t", GIT_AUTHOR_EMAIL: "t@example.com", GIT_COMMITTER_NAME: "t", GIT_COMMITTER_EMAIL: "t@example.com" };
        const result = run("bash", ["-c", script], { cwd: dir, env });
        if (result.status === 9) throw new Error(`${entry.command}: the scratch setup failed: ${entry.setup}`);
        if (result.status === 0) taken.push(spelling);
    }
    return taken;
}

describe.runIf(toolsAvailable("abbreviated options", ["bash", "grep", "git", "tar", "zip", "rsync", "stat"]))("automatic checkpoints: options as the tools themselves read them", () => {
    it.each(abbreviated.map((entry) => [entry.command.replace("OPT", entry.option), entry] as const))("every spelling the tool takes as %s is matched", (_, entry) => {
        const taken = takenSpellings(entry);
        // The tool took its own full option (the scratch setup works) ...
        expect(taken).toContain(entry.option);
        // ... and every spelling it took is seen.
        const missed = taken.filter((spelling) => !match(entry.command.replace("OPT", spelling)).includes(entry.rule));
        expect(missed, `${entry.command}: spellings the tool takes that the matcher misses`).toEqual([]);
    });

    it("the attacks of red team 3 are matched", () => {
        expect(match("git reset --har")).toContain("git-reset-hard");
        expect(match("rm --recur build")).toContain("rm-recursive");
        expect(match("git clean --forc")).toContain("git-clean-force");
    });
});
