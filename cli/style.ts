/**
 * Output for people and for machines: colors and progress only on a terminal,
 * plain lines in CI (CI=true) and in pipes; NO_COLOR is honoured.
 */
const interactive = () => process.stdout.isTTY === true && process.env.CI !== "true";
const colored = () => interactive() && !process.env.NO_COLOR;

const CODES = { red: 31, green: 32, yellow: 33, dim: 2, bold: 1 } as const;

export function paint(color: keyof typeof CODES, text: string): string {
    return colored() ? `\u001b[${CODES[color]}m${text}\u001b[0m` : text;
}

/** Marks a status word: pass/clean green, fail red, manual/warn yellow. */
export function status(kind: "pass" | "fail" | "manual", text: string): string {
    return paint(kind === "pass" ? "green" : kind === "fail" ? "red" : "yellow", text);
}

const live = () => process.stderr.isTTY === true && process.env.CI !== "true";
/** A progress line cut to the terminal's width, so that rewriting it never scrolls. */
const fit = (line: string) => (process.stderr.columns && line.length >= process.stderr.columns ? `${line.slice(0, process.stderr.columns - 2)}…` : line);

/**
 * Progress of long work (twin up, twin replace): on a terminal, one line on stderr
 * that each report replaces and `done` clears; nothing when piped or in CI. Every
 * line is kept, for the caller to show after a failure.
 */
export function progress() {
    const kept: string[] = [];
    return {
        kept,
        report(line: string) {
            kept.push(line);
            if (live()) process.stderr.write(`\r\u001b[2K${paint("dim", fit(line))}`);
        },
        done() {
            if (live() && kept.length > 0) process.stderr.write("\r\u001b[2K");
        },
    };
}

/** "doing X..." on stderr while a long step runs, on a terminal only. */
export async function step<T>(label: string, work: () => Promise<T>): Promise<T> {
    if (!live()) return work();
    process.stderr.write(paint("dim", fit(`${label}...`)));
    try {
        const result = await work();
        process.stderr.write(`\r\u001b[2K`);
        return result;
    } catch (err) {
        process.stderr.write("\n");
        throw err;
    }
}
