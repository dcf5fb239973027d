/** Recognisers for secrets that must never sit in user_data or a rendered file. */

export interface SecretMatch {
    kind: string;
    /** The first characters only: findings never echo a secret. */
    preview: string;
}

const PATTERNS: [string, RegExp][] = [
    ["private key", /-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY-----/],
    ["GitHub token", /\b(ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}/],
    ["GitHub token", /\bgithub_pat_[A-Za-z0-9_]{20,}/],
    ["Tailscale key", /\btskey-[a-z]+-[A-Za-z0-9-]{10,}/],
    ["AWS access key", /\b(AKIA|ASIA)[0-9A-Z]{16}\b/],
    ["B2 application key", /\bK0[0-9A-Za-z+/]{29}\b/],
];

/** NAME=value / name: value where NAME says it is a secret and the value looks random. */
const ASSIGNMENT = /\b([A-Za-z0-9_]*(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|APPLICATION_?KEY|PRIVATE_?KEY|_KEY\b|CREDENTIALS?)[A-Za-z0-9_]*)\s*[:=]\s*["']?([^\s"'$]{16,})/gi;

function entropy(text: string): number {
    const counts = new Map<string, number>();
    for (const ch of text) counts.set(ch, (counts.get(ch) ?? 0) + 1);
    let bits = 0;
    for (const n of counts.values()) bits -= (n / text.length) * Math.log2(n / text.length);
    return bits;
}

export function findSecrets(text: string): SecretMatch[] {
    const found: SecretMatch[] = [];
    for (const [kind, re] of PATTERNS) {
        const m = re.exec(text);
        if (m) found.push({ kind, preview: `${m[0].slice(0, 8)}...` });
    }
    for (const m of text.matchAll(ASSIGNMENT)) {
        const value = m[2];
        if (/^@[A-Z_]+@$/.test(value) || /^\{\{/.test(value)) continue; // placeholders
        if (/^(\/|\.\/|~\/)/.test(value)) continue; // a file path names where a secret lives, it is not one
        if (entropy(value) >= 3.5) found.push({ kind: `high-entropy value for ${m[1]}`, preview: `${value.slice(0, 4)}...` });
    }
    return found;
}
