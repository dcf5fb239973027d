import * as fs from "node:fs";
import { B2Client, KeyAllowance } from "../components/b2/client";
import { OPERATOR_KEY_CAPABILITIES, operatorCapabilitiesFor } from "../components/b2/operatorKey";
import { readStackFile } from "../components/config/load";
import type { StackConfig } from "../components/config/schema";
import { renderTailnetPolicy } from "../components/render/tailnetPolicy";
import { DoctorCheck, plainStackValue } from "./doctor";
import { Caller, policyReadiness } from "./tailnetReadiness";
import { TailscaleApi, TailscaleCredentials } from "./tailscaleApi";

/**
 * The checks that ask the live services, read-only, each only when its credentials
 * are in the environment; without them a check says it was not run and what to
 * export, and never fails the machine.
 */

type Env = NodeJS.ProcessEnv;

export async function runLiveChecks(env: Env, stackFile: string | undefined, stack: string): Promise<DoctorCheck[]> {
    const cfg = stackFile && fs.existsSync(stackFile) ? readStackFile(stackFile) : undefined;
    return Promise.all([b2OperatorKeyCheck(env, cfg), tailnetPolicyCheck(env, cfg, stackFile, stack)]);
}

const B2_CHECK = "B2 operator key capabilities";

export async function b2OperatorKeyCheck(env: Env, cfg?: StackConfig): Promise<DoctorCheck> {
    const { B2_APPLICATION_KEY_ID: applicationKeyId, B2_APPLICATION_KEY: applicationKey } = env;
    const needed = operatorCapabilitiesFor(cfg);
    const create = `b2 key create airlock-operator ${needed.join(",")}`;
    if (!applicationKeyId || !applicationKey) {
        return {
            name: B2_CHECK,
            ok: false,
            required: false,
            skipped: true,
            detail: "not run: B2_APPLICATION_KEY_ID and B2_APPLICATION_KEY are not both in the environment",
            fix: `export B2_APPLICATION_KEY_ID and B2_APPLICATION_KEY (the operator key; to make one with what this stack needs, authorized with the master key: ${create}), then run airlock doctor again`,
        };
    }
    const fix = `use an operator key with ${needed.join(", ")}, restricted to no bucket and no name prefix: ${create}`;
    let allowed: KeyAllowance;
    try {
        allowed = await new B2Client({ applicationKeyId, applicationKey, authUrl: env.B2_AUTH_URL }).allowed();
    } catch (err) {
        return { name: B2_CHECK, ok: false, required: true, detail: `B2 did not authorize the key: ${reason(err)}`, fix: "check B2_APPLICATION_KEY_ID and B2_APPLICATION_KEY (and B2_AUTH_URL, when set)" };
    }
    const findings = operatorKeyFindings(allowed, needed);
    if (findings.length === 0) return { name: B2_CHECK, ok: true, required: true, detail: `the key has ${needed.join(", ")}, on every bucket` };
    return { name: B2_CHECK, ok: false, required: true, detail: "the key cannot do everything the stack's up, refresh and destroy do", findings, fix };
}

/** What an operator key lacks for the stack: capabilities by name (and the calls needing them), or a restriction. */
export function operatorKeyFindings(allowed: KeyAllowance, needed: string[]): string[] {
    const findings: string[] = [];
    // B2's b2_create_key: a key with a bucketId may hold none of writeBuckets, deleteBuckets or the *Keys capabilities.
    if (allowed.bucketId !== null) findings.push(`restricted to the bucket ${allowed.bucketName ?? allowed.bucketId}: it cannot create the stack's buckets (or keys); an operator key must be restricted to no bucket`);
    if (allowed.namePrefix !== null) findings.push(`restricted to file names starting with "${allowed.namePrefix}": it cannot create the stack's buckets; an operator key must be restricted to no name prefix`);
    const callsOf = (capability: string) => OPERATOR_KEY_CAPABILITIES.find((c) => c.capability === capability)!.calls.join(", ");
    for (const capability of needed.filter((c) => !allowed.capabilities.includes(c))) findings.push(`lacks ${capability} (${callsOf(capability)})`);
    return findings;
}

const TAILNET_CHECK = "tailnet policy readiness";
const DEFAULT_TAILSCALE_URL = "https://api.tailscale.com";

export async function tailnetPolicyCheck(env: Env, cfg: StackConfig | undefined, stackFile: string | undefined, stack: string): Promise<DoctorCheck> {
    // ok: whether skipping leaves anything to do (a stack that does not need the check leaves nothing).
    const skipped = (ok: boolean, detail: string, fix?: string): DoctorCheck => ({ name: TAILNET_CHECK, ok, required: false, skipped: true, detail, ...(fix ? { fix } : {}) });
    if (!cfg) return skipped(false, "not run: it needs the stack's file", "airlock doctor --stack <name>, naming one of the stacks");
    if (cfg.tailnet.manageAcl) return skipped(true, "not needed: airlock:tailnet.manageAcl is true, so airlock manages the tailnet policy itself");
    const credentials = tailscaleCredentials(env);
    if (!credentials) {
        return skipped(
            false,
            "not run: no Tailscale credentials in the environment (doctor never decrypts the stack's secrets)",
            "export TAILSCALE_API_KEY, or TAILSCALE_OAUTH_CLIENT_ID and TAILSCALE_OAUTH_CLIENT_SECRET (an OAuth client with the auth_keys and policy_file:read scopes), and TAILSCALE_TAILNET, then run airlock doctor again",
        );
    }
    const { gatewayTag, sandboxTag, tagOwners, operators } = cfg.tailnet;
    const rendered = renderTailnetPolicy({ gatewayTag, sandboxTag, tagOwners, operators });
    const tailnet = env.TAILSCALE_TAILNET || plainStackValue(stackFile, "tailscale:tailnet") || "-";
    const api = new TailscaleApi((env.TAILSCALE_BASE_URL || DEFAULT_TAILSCALE_URL).replace(/\/$/, ""), tailnet, credentials);
    let live: unknown;
    let caller: Caller;
    try {
        live = await api.policy();
        caller = "apiKey" in credentials ? { kind: "apiKey" } : { kind: "oauth", ...(await api.oauthClient(credentials.oauthClientId)) };
    } catch (err) {
        return {
            name: TAILNET_CHECK,
            ok: false,
            required: true,
            detail: `cannot read the live tailnet policy: ${reason(err)}`,
            fix: "check the Tailscale credentials and TAILSCALE_TAILNET; an OAuth client needs the policy_file:read scope",
        };
    }
    const findings = policyReadiness(live, rendered, [gatewayTag, sandboxTag], caller);
    if (findings.length === 0) return { name: TAILNET_CHECK, ok: true, required: true, detail: `the live policy of ${tailnet} has the stack's tags, grants and tests` };
    return {
        name: TAILNET_CHECK,
        ok: false,
        required: true,
        detail: `the live policy of ${tailnet} is not ready for this stack (airlock:tailnet.manageAcl is false)`,
        findings,
        fix: `merge out/${stack}/tailnet/policy.hujson (airlock plan --stack ${stack} writes it) into the tailnet policy file: its tagOwners, grants and tests`,
    };
}

/** What the Tailscale provider would authenticate with, from the environment. */
function tailscaleCredentials(env: Env): TailscaleCredentials | undefined {
    if (env.TAILSCALE_API_KEY) return { apiKey: env.TAILSCALE_API_KEY };
    if (env.TAILSCALE_OAUTH_CLIENT_ID && env.TAILSCALE_OAUTH_CLIENT_SECRET) return { oauthClientId: env.TAILSCALE_OAUTH_CLIENT_ID, oauthClientSecret: env.TAILSCALE_OAUTH_CLIENT_SECRET };
    return undefined;
}

/** One line for a failed call: the service's own error, or why the network call did not happen. */
function reason(err: unknown): string {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    const message = err instanceof Error ? err.message : String(err);
    return cause ? `${message} (${cause.code ?? cause.message})` : message;
}
