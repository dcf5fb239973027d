/**
 * sshd_config as sshd reads it: keywords are case-insensitive, the FIRST value of a
 * keyword wins (except for the cumulative ones), and a satisfied `Match` block
 * overrides the global value, again first value wins across matching blocks.
 */

export interface SshdLine {
    keyword: string; // lower case; ChallengeResponseAuthentication folded into KbdInteractiveAuthentication
    args: string[];
    line: number;
    /** Index into `matches`, or -1 for the global section. */
    block: number;
}

export interface MatchBlock {
    line: number;
    criteria: [string, string][];
}

export interface SshdConfig {
    lines: SshdLine[];
    matches: MatchBlock[];
    /** A drop-in fragment, not a whole config: "must be present" rules do not apply. */
    fragment: boolean;
    /** keyword -> its lines, in file order (every lookup is linear in the config, not quadratic). */
    byKeyword: Map<string, SshdLine[]>;
    /** keyword -> block (-1 global) -> the first line setting it there, blocks in file order. */
    firstIn: Map<string, Map<number, SshdLine>>;
}

/** Keywords whose every occurrence counts. */
const CUMULATIVE = new Set([
    "listenaddress", "port", "hostkey", "hostcertificate", "acceptenv", "allowusers", "denyusers",
    "allowgroups", "denygroups", "subsystem", "setenv", "include", "authorizedkeysfile",
]);

const ALIASES: Record<string, string> = {
    challengeresponseauthentication: "kbdinteractiveauthentication",
};

function tokenize(text: string): string[] {
    const tokens: string[] = [];
    const re = /"([^"]*)"|(\S+)/g;
    let m: RegExpExecArray | null;
    while ((m = re.exec(text)) !== null) tokens.push(m[1] ?? m[2]);
    return tokens;
}

export function parseSshd(text: string, fragment = false): SshdConfig {
    const lines: SshdLine[] = [];
    const matches: MatchBlock[] = [];
    text.replace(/^\uFEFF/, "").split("\n").forEach((raw, index) => {
        const content = raw.replace(/^\s+/, "");
        if (content === "" || content.startsWith("#")) return;
        // "Keyword value", "Keyword=value" and "Keyword = value" are all valid.
        const m = /^([A-Za-z0-9]+)\s*(?:=\s*|\s+)(.*)$/.exec(content.trimEnd()) ?? /^([A-Za-z0-9]+)()$/.exec(content.trimEnd());
        if (!m) return;
        const keyword = m[1].toLowerCase();
        const args = tokenize(m[2]);
        if (keyword === "match") {
            const criteria: [string, string][] = [];
            for (let i = 0; i < args.length; i++) {
                const key = args[i].toLowerCase();
                if (key === "all") criteria.push(["all", ""]);
                else criteria.push([key, args[++i] ?? ""]);
            }
            matches.push({ line: index + 1, criteria });
            return;
        }
        lines.push({ keyword: ALIASES[keyword] ?? keyword, args, line: index + 1, block: matches.length - 1 });
    });
    const byKeyword = new Map<string, SshdLine[]>();
    const firstIn = new Map<string, Map<number, SshdLine>>();
    for (const line of lines) {
        const same = byKeyword.get(line.keyword);
        if (same) same.push(line);
        else byKeyword.set(line.keyword, [line]);
        const blocks = firstIn.get(line.keyword) ?? new Map<number, SshdLine>();
        if (!blocks.has(line.block)) blocks.set(line.block, line);
        firstIn.set(line.keyword, blocks);
    }
    return { lines, matches, fragment, byKeyword, firstIn };
}

/** The first line setting `keyword` in `block` (-1: global), if any. */
export const firstIn = (config: SshdConfig, keyword: string, block: number): SshdLine | undefined => config.firstIn.get(keyword)?.get(block);

const patterns = new Map<string, RegExp>();

/** sshd's pattern lists: comma-separated, `*` and `?` wildcards, `!` negation. */
export function matchesPatternList(value: string, list: string): boolean {
    let matched = false;
    for (const raw of list.split(",")) {
        const negated = raw.startsWith("!");
        const pattern = negated ? raw.slice(1) : raw;
        let re = patterns.get(pattern);
        if (!re) {
            re = new RegExp(`^${pattern.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".")}$`);
            patterns.set(pattern, re);
        }
        if (re.test(value)) {
            if (negated) return false;
            matched = true;
        }
    }
    return matched;
}

/**
 * Whether a Match block applies to a login by `user`: "yes" only when every
 * criterion is known to hold, "maybe" when some criterion depends on the
 * connection (address, group membership...), "no" when a User criterion excludes it.
 */
export function blockApplies(block: MatchBlock, user: string): "yes" | "maybe" | "no" {
    let result: "yes" | "maybe" = "yes";
    for (const [key, value] of block.criteria) {
        if (key === "all") continue;
        if (key === "user") {
            if (!matchesPatternList(user, value)) return "no";
        } else {
            result = "maybe";
        }
    }
    return result;
}

export interface Setting {
    value: string[];
    line: number;
    /** -1 global, otherwise the Match block it came from. */
    block: number;
}

/** The value sshd applies for `keyword` to a login by `user` (blocks that only MAY apply are ignored). */
export function effective(config: SshdConfig, keyword: string, user: string): Setting | undefined {
    const fromBlocks = (config.byKeyword.get(keyword) ?? []).find((l) => l.block >= 0 && blockApplies(config.matches[l.block], user) === "yes");
    const global = firstIn(config, keyword, -1);
    const hit = fromBlocks ?? global;
    return hit ? { value: hit.args, line: hit.line, block: hit.block } : undefined;
}

/** Every occurrence of a cumulative keyword that may apply to `user`. */
export function allValues(config: SshdConfig, keyword: string, user?: string): Setting[] {
    return (config.byKeyword.get(keyword) ?? [])
        .filter((l) => user === undefined || l.block === -1 || blockApplies(config.matches[l.block], user) !== "no")
        .map((l) => ({ value: l.args, line: l.line, block: l.block }));
}

/**
 * The value of a single-valued keyword in every context a login can end up in: the
 * global value, and the first value in each Match block (which overrides it there).
 */
export function valuesInEveryContext(config: SshdConfig, keyword: string): { setting: Setting | undefined; context: string }[] {
    if (CUMULATIVE.has(keyword)) throw new Error(`${keyword} is cumulative`);
    const global = firstIn(config, keyword, -1);
    const contexts = [{ setting: global ? { value: global.args, line: global.line, block: -1 } : undefined, context: "global" }];
    for (const [block, own] of config.firstIn.get(keyword) ?? []) {
        if (block >= 0) contexts.push({ setting: { value: own.args, line: own.line, block }, context: `Match at line ${config.matches[block].line}` });
    }
    return contexts;
}

/** Users sshd would let in (AllowUsers / DenyUsers); undefined when not restricted. */
export function userMayLogIn(config: SshdConfig, user: string): boolean {
    const allow = allValues(config, "allowusers").filter((s) => s.block === -1);
    const deny = allValues(config, "denyusers").filter((s) => s.block === -1);
    const patterns = (settings: Setting[]) => settings.flatMap((s) => s.value).map((p) => p.split("@")[0]);
    if (patterns(deny).some((p) => matchesPatternList(user, p))) return false;
    const allowed = patterns(allow);
    return allowed.length === 0 || allowed.some((p) => matchesPatternList(user, p));
}
