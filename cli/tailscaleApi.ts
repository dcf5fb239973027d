/**
 * The few Tailscale API calls `airlock doctor` makes, read-only, with the
 * credentials the Tailscale Pulumi provider reads. Errors become one line naming
 * the call and Tailscale's status; no credential is ever part of one.
 */

export type TailscaleCredentials = { apiKey: string } | { oauthClientId: string; oauthClientSecret: string };

export class TailscaleApiError extends Error {
    constructor(readonly call: string, readonly status: number, message: string) {
        super(`Tailscale ${call}: ${status}${message ? ` ${message}` : ""}`);
        this.name = "TailscaleApiError";
    }
}

/** An OAuth client as the keys endpoint describes it: what its tokens may do, which tags its auth keys may carry. */
export interface OAuthClientKey {
    scopes: string[];
    tags: string[];
}

const TIMEOUT_MS = 20_000;

export class TailscaleApi {
    private token?: string;

    /** tailnet "-" is the credential's own tailnet (Tailscale API: "Tailnet"). */
    constructor(private readonly baseUrl: string, private readonly tailnet: string, private readonly credentials: TailscaleCredentials) {}

    /** The live policy file as JSON (the API answers HuJSON unless asked for application/json). */
    async policy(): Promise<unknown> {
        return this.get("/acl", { Accept: "application/json" });
    }

    /** The OAuth client itself: any of its tokens may read its own key (Tailscale, OAuth clients: "for itself only"). */
    async oauthClient(clientId: string): Promise<OAuthClientKey> {
        const key = (await this.get(`/keys/${encodeURIComponent(clientId)}`, { Accept: "application/json" })) as Partial<OAuthClientKey>;
        return { scopes: key.scopes ?? [], tags: key.tags ?? [] };
    }

    private async get(path: string, headers: Record<string, string>): Promise<unknown> {
        const call = `GET /api/v2/tailnet/${this.tailnet}${path}`;
        const response = await fetch(`${this.baseUrl}/api/v2/tailnet/${encodeURIComponent(this.tailnet)}${path}`, {
            headers: { ...headers, Authorization: `Bearer ${await this.bearer()}` },
            signal: AbortSignal.timeout(TIMEOUT_MS),
        });
        return answer(call, response);
    }

    /** An API key is its own bearer token; an OAuth client's is exchanged for one first (client credentials grant). */
    private async bearer(): Promise<string> {
        if ("apiKey" in this.credentials) return this.credentials.apiKey;
        if (this.token) return this.token;
        const call = "POST /api/v2/oauth/token";
        const response = await fetch(`${this.baseUrl}/api/v2/oauth/token`, {
            method: "POST",
            headers: { "Content-Type": "application/x-www-form-urlencoded" },
            body: new URLSearchParams({ grant_type: "client_credentials", client_id: this.credentials.oauthClientId, client_secret: this.credentials.oauthClientSecret }),
            signal: AbortSignal.timeout(TIMEOUT_MS),
        });
        const { access_token } = (await answer(call, response)) as { access_token?: string };
        if (typeof access_token !== "string") throw new TailscaleApiError(call, response.status, "the answer has no access_token");
        this.token = access_token;
        return access_token;
    }
}

/** A 2xx answer's JSON, or the error Tailscale (message) or its token endpoint (error, RFC 6749 5.2) named. */
async function answer(call: string, response: Response): Promise<unknown> {
    const text = await response.text();
    let body: { message?: string; error?: string; error_description?: string } | undefined;
    try {
        body = text ? JSON.parse(text) : {};
    } catch {
        if (response.ok) throw new TailscaleApiError(call, response.status, "the answer is not JSON");
    }
    if (!response.ok) throw new TailscaleApiError(call, response.status, body?.message ?? body?.error_description ?? body?.error ?? "");
    return body;
}
