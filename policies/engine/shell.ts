/**
 * Reading shell command lines the way people write download-and-run: enough to see
 * which program a pipeline stage runs, through sudo, env, assignments and paths.
 */

/** Programs that run the code they are given on stdin or as an argument. */
const INTERPRETER = /^(sh|bash|dash|zsh|ksh|mksh|ash|fish|python([23](\.\d+)?)?|perl|ruby|node|nodejs|php|pwsh|tclsh|lua)$/;
const DOWNLOADER = /(^|[\s|;&(`'"=])(curl|wget|fetch|aria2c|http|https|lwp-request|GET)(\s|$)/;
/** Wrappers that run the next word as the command; with the options that take a value. */
const WRAPPERS: Record<string, Set<string>> = {
    sudo: new Set(["-u", "-g", "-C", "-D", "-h", "-p", "-U", "-r", "-t", "-T", "--user", "--group"]),
    doas: new Set(["-u", "-C"]),
    env: new Set(["-u", "-C", "-S", "--unset", "--chdir"]),
    exec: new Set(["-a"]),
    nohup: new Set(),
    time: new Set(),
    command: new Set(),
    busybox: new Set(),
    xargs: new Set(["-I", "-L", "-n", "-P", "-s", "-d", "-E", "-a"]),
    stdbuf: new Set(["-i", "-o", "-e"]),
    nice: new Set(["-n"]),
    ionice: new Set(["-c", "-n"]),
};

const basename = (word: string) => word.replace(/^.*\//, "");

/** The program a command (one pipeline stage) runs: wrappers, assignments and paths skipped. */
export function programOf(command: string): string | undefined {
    const words = command.trim().replace(/^[({!\s]+/, "").split(/\s+/).filter(Boolean);
    for (let i = 0; i < words.length; i++) {
        const word = words[i];
        if (/^[A-Za-z_][A-Za-z0-9_]*=/.test(word)) continue; // VAR=value sh
        const name = basename(word.replace(/^["']|["']$/g, ""));
        const wrapper = WRAPPERS[name];
        if (!wrapper) return name;
        // Skip the wrapper's options (and their values) and its own assignments.
        while (i + 1 < words.length && (words[i + 1].startsWith("-") || /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[i + 1]))) {
            i++;
            if (wrapper.has(words[i])) i++;
        }
    }
    return undefined;
}

/** Logical lines: continuations (`\` at the end of a line) joined, comments dropped. */
export function logicalLines(text: string): string[] {
    return text
        .replace(/\\\r?\n/g, " ")
        .split("\n")
        .filter((line) => !/^\s*#/.test(line));
}

/**
 * True when the line downloads something and runs it unseen: a downloader piped
 * (through any stages) into an interpreter, or a download handed to one as
 * `<(curl ...)`, `"$(curl ...)"` or backticks (also through eval, source and `.`).
 */
export function downloadsAndRuns(line: string): boolean {
    const plain = dequoted(line);
    return readsAsDownloadAndRun(line) || (plain !== line && readsAsDownloadAndRun(plain));
}

/** Text with quotes and backslashes removed, as the shell removes them before it finds a program: `c"ur"l ... | s'h'` is curl | sh. */
export const dequoted = (text: string) => text.replace(/["'\\]/g, "");

function readsAsDownloadAndRun(line: string): boolean {
    if (!DOWNLOADER.test(line)) return false;
    for (const segment of line.split(/;|&&|\|\||(?<![|>&])&(?![&>])/)) {
        const stages = segment.split(/(?<!\|)\|(?!\|)/);
        const from = stages.findIndex((stage) => DOWNLOADER.test(stage));
        if (from >= 0 && stages.slice(from + 1).some((stage) => isRunner(programOf(stage)) || sourcesStdin(stage))) return true;
        // bash <(curl ...), sh -c "$(curl ...)", eval "$(wget -O- ...)", . <(curl ...)
        for (const stage of stages) {
            const program = programOf(stage);
            if ((isRunner(program) || program === "eval" || program === "source" || program === ".") && /(<\(|\$\(|`)\s*(\S+\/)?(curl|wget|fetch)\b/.test(stage)) return true;
        }
    }
    return false;
}

/** An interpreter by name, or the user's shell by its variable ($SHELL, ${SHELL}, $BASH). */
const isRunner = (program: string | undefined) => program !== undefined && (INTERPRETER.test(program) || /^\$(\{(SHELL|BASH)\}|SHELL|BASH)$/.test(program));

/** `source /dev/stdin` and `. /dev/stdin` (or fd 0 by another path): the current shell runs what the pipe brings. */
const sourcesStdin = (stage: string) => {
    const program = programOf(stage);
    return (program === "source" || program === ".") && /\s["']?\/(dev\/stdin|dev\/fd\/0|proc\/self\/fd\/0)["']?(\s|$)/.test(stage);
};
