import type { TailnetPolicy } from "../components/render/tailnetPolicy";

/**
 * Does a live tailnet policy (the JSON Tailscale's API returns) hold what a stack's
 * rendered policy needs, before `pulumi up`? Each finding is one line. Matching is
 * by the selectors the rendered policy uses (a tag, an address, `*`, a CIDR): a
 * policy that merged the rendered one matches exactly; one that reaches the same
 * hosts through groups or aliases is reported, and the rendered tests, which
 * Tailscale itself runs on every save, are what prove it.
 */

/** Who calls the API: a user's API key, or an OAuth client (with its own scopes and tags). */
export type Caller = { kind: "apiKey" } | { kind: "oauth"; scopes: string[]; tags: string[] };

interface LivePolicy {
    tagOwners?: Record<string, string[]>;
    grants?: { src?: string[]; dst?: string[]; ip?: string[] }[];
    /** The legacy syntax; `users`/`ports` are its older names for src/dst. */
    acls?: { action?: string; src?: string[]; users?: string[]; dst?: string[]; ports?: string[]; proto?: string }[];
    tests?: { src?: string; proto?: string; accept?: string[]; deny?: string[] }[];
}

/** One network rule of the live policy: who, and which host:port specs. */
interface Rule {
    where: string;
    src: string[];
    targets: { host: string; spec: string }[];
}

export function policyReadiness(live: unknown, rendered: TailnetPolicy, hostTags: string[], caller: Caller): string[] {
    const policy = (live ?? {}) as LivePolicy;
    const rules = networkRules(policy);
    return [
        ...tagOwnerFindings(policy, rendered),
        ...(caller.kind === "oauth" ? oauthClientFindings(policy, hostTags, caller) : []),
        ...grantFindings(rules, rendered),
        ...openedFindings(rules, rendered),
        ...testFindings(policy, rendered),
    ];
}

/** Every tag the stack uses is defined, with at least the owners the stack names (airlock:tailnet.tagOwners). */
function tagOwnerFindings(policy: LivePolicy, rendered: TailnetPolicy): string[] {
    return Object.entries(rendered.tagOwners).flatMap(([tag, owners]) => {
        const live = policy.tagOwners?.[tag];
        if (!live) return [`tagOwners has no ${tag} (Tailscale refuses a key or a rule for an undefined tag)`];
        const missing = owners.filter((o) => !live.includes(o));
        return missing.length > 0 ? [`tagOwners["${tag}"] lacks ${missing.join(", ")}`] : [];
    });
}

/**
 * An OAuth client mints auth keys only with its own tags or tags those own
 * (Tailscale API, "Create auth key": "must exactly match the tags that are on the
 * OAuth client ... or they must be tags that are owned by the tags that are on the
 * OAuth client"), and only with the auth_keys scope.
 */
function oauthClientFindings(policy: LivePolicy, hostTags: string[], client: { scopes: string[]; tags: string[] }): string[] {
    const findings: string[] = [];
    if (!client.scopes.some((s) => s === "auth_keys" || s === "all")) findings.push("the OAuth client lacks the auth_keys scope the hosts' join keys are made with");
    for (const tag of hostTags) {
        const mintable = client.tags.includes(tag) || client.tags.some((own) => policy.tagOwners?.[tag]?.includes(own));
        if (!mintable) findings.push(`the OAuth client cannot mint join keys for ${tag}: its tags are ${client.tags.join(", ") || "none"}, and none of them is ${tag} or owns it in tagOwners`);
    }
    return findings;
}

/** Every connection a rendered grant gives, some live grant (or ACL) gives too. */
function grantFindings(rules: Rule[], rendered: TailnetPolicy): string[] {
    return rendered.grants.flatMap((grant) =>
        grant.src.flatMap((src) =>
            grant.dst.flatMap((dst) =>
                grant.ip.flatMap((ip) => {
                    const [proto, port] = ip.split(":");
                    return rules.some((r) => allows(r, src, dst, Number(port), proto)) ? [] : [`no grant gives ${src} -> ${dst} ${ip}`];
                }),
            ),
        ),
    );
}

/** No live rule opens what a rendered test denies (sandbox -> gateway:22, a wildcard...). */
function openedFindings(rules: Rule[], rendered: TailnetPolicy): string[] {
    return rendered.tests.flatMap((test) =>
        rules.flatMap((rule) => {
            const opened = (test.deny ?? []).filter((target) => {
                const { host, port } = hostPort(target);
                return allows(rule, test.src, host, port, test.proto);
            });
            return opened.length > 0 ? [`${rule.where} lets ${test.src} reach ${opened.join(", ")}${test.proto ? ` (${test.proto})` : ""}, which the stack's tests deny`] : [];
        }),
    );
}

/** Every rendered test is in the live policy, so Tailscale keeps refusing an edit that breaks it. */
function testFindings(policy: LivePolicy, rendered: TailnetPolicy): string[] {
    return rendered.tests.flatMap((test) => {
        const same = (policy.tests ?? []).filter((t) => t.src === test.src && (t.proto ?? "") === (test.proto ?? ""));
        const missing = (want: string[] | undefined, key: "accept" | "deny") => (want ?? []).filter((target) => !same.some((t) => (t[key] ?? []).includes(target)));
        const accept = missing(test.accept, "accept");
        const deny = missing(test.deny, "deny");
        if (accept.length + deny.length === 0) return [];
        const parts = [accept.length > 0 ? `accept ${accept.join(", ")}` : "", deny.length > 0 ? `deny ${deny.join(", ")}` : ""].filter(Boolean);
        return [`tests lack, for ${test.src}${test.proto ? ` (${test.proto})` : ""}: ${parts.join("; ")}`];
    });
}

function networkRules(policy: LivePolicy): Rule[] {
    // A grant without `ip` grants application capabilities only, no connection.
    const grants = (policy.grants ?? []).map((g, i) => ({
        where: `grants[${i}]`,
        src: g.src ?? [],
        targets: (g.dst ?? []).flatMap((host) => (g.ip ?? []).map((spec) => ({ host, spec }))),
    }));
    const acls = (policy.acls ?? []).flatMap((a, i) =>
        a.action === "accept"
            ? [
                  {
                      where: `acls[${i}]`,
                      src: a.src ?? a.users ?? [],
                      targets: (a.dst ?? a.ports ?? []).map((target) => {
                          const at = target.lastIndexOf(":");
                          const ports = target.slice(at + 1);
                          return { host: target.slice(0, at), spec: a.proto ? `${a.proto}:${ports}` : ports };
                      }),
                  },
              ]
            : [],
    );
    return [...grants, ...acls];
}

function allows(rule: Rule, src: string, host: string, port: number, proto: string | undefined): boolean {
    return rule.src.some((s) => s === "*" || s === src) && rule.targets.some((t) => hostMatches(t.host, host) && specMatches(t.spec, port, proto));
}

function hostMatches(selector: string, host: string): boolean {
    return selector === "*" || selector === host || inCidr(host, selector);
}

const PROTOCOL_NUMBERS: Record<string, string> = { tcp: "6", udp: "17" };

/** A grant's `ip` entry: `*`, `PORTS` or `PROTO:PORTS`, PORTS being `*`, a port, a range or a comma list of them. */
function specMatches(spec: string, port: number, proto: string | undefined): boolean {
    if (spec === "*") return true;
    const at = spec.indexOf(":");
    const specProto = at >= 0 ? spec.slice(0, at) : undefined;
    const ports = at >= 0 ? spec.slice(at + 1) : spec;
    if (specProto !== undefined && proto !== undefined && specProto !== proto && specProto !== PROTOCOL_NUMBERS[proto]) return false;
    return ports.split(",").some((range) => {
        if (range === "*") return true;
        const [low, high = low] = range.split("-").map(Number);
        return port >= low && port <= high;
    });
}

function hostPort(target: string): { host: string; port: number } {
    const at = target.lastIndexOf(":");
    return { host: target.slice(0, at), port: Number(target.slice(at + 1)) };
}

function inCidr(address: string, cidr: string): boolean {
    const [base, bits] = cidr.split("/");
    const a = ipv4(address);
    const b = ipv4(base);
    if (a === undefined || b === undefined || bits === undefined) return false;
    const mask = Number(bits) === 0 ? 0 : (~0 << (32 - Number(bits))) >>> 0;
    return (a & mask) >>> 0 === (b & mask) >>> 0;
}

function ipv4(text: string): number | undefined {
    const parts = text.split(".").map(Number);
    if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) return undefined;
    return parts.reduce((n, p) => n * 256 + p, 0) >>> 0;
}
