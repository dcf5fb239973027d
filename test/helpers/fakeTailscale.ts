import { randomBytes } from "node:crypto";
import * as http from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A local stand-in for the Tailscale API, on loopback only, for exactly the calls
 * `airlock doctor` makes: the OAuth token exchange, GET the policy file, GET an
 * OAuth client's own key. Each rule names its public source. Credentials are made
 * at run time from pieces, never written out.
 */

interface OAuthClient {
    secret: string;
    scopes: string[];
    tags: string[];
}

/** What a bearer token stands for: a user's API key (every scope), or a token an OAuth client was given. */
type Grant = { kind: "apiKey" } | { kind: "oauth"; clientId: string };

export interface FakeTailscale {
    url: string;
    /** The tailnet's organization name. */
    tailnet: string;
    /** The live policy file; tests change it. */
    policy: unknown;
    /** A valid user API key (tskey-api-...). */
    apiKey: string;
    addOAuthClient(scopes: string[], tags: string[]): { clientId: string; clientSecret: string };
    /** "METHOD path" of every request, in order. */
    calls: string[];
    close(): Promise<void>;
}

const hex = (bytes: number) => randomBytes(bytes).toString("hex");
/** Tailscale key IDs end in CNTRL (https://tailscale.com/kb/1277/key-prefixes shows one). */
const keyId = () => `k${hex(5)}CNTRL`;
const secret = (prefix: "api" | "client", id: string) => ["tskey", prefix, id, hex(16)].join("-");

/** A read of the policy file needs policy_file:read, or policy_file, or all (https://tailscale.com/kb/1215/oauth-clients: a token reaches only its scopes' endpoints). */
const POLICY_READ_SCOPES = ["policy_file:read", "policy_file", "all:read", "all"];

export async function startFakeTailscale(tailnet = "example.com"): Promise<FakeTailscale> {
    const apiKey = secret("api", keyId());
    const clients = new Map<string, OAuthClient>();
    const tokens = new Map<string, Grant>([[apiKey, { kind: "apiKey" }]]);
    const calls: string[] = [];
    const state = { policy: {} as unknown };

    const server = http.createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on("data", (c) => chunks.push(c));
        req.on("end", () => {
            const url = new URL(req.url ?? "/", "http://fake");
            calls.push(`${req.method} ${url.pathname}`);
            const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
                res.writeHead(status, { "Content-Type": "application/json", ...headers });
                res.end(JSON.stringify(body));
            };
            // The API's errors are a JSON object with a message (https://github.com/tailscale/tailscale/blob/main/publicapi/tailnet.md, "Response: failed test error").
            const refuse = (status: number, message: string) => send(status, { message });

            if (url.pathname === "/api/v2/oauth/token") {
                // RFC 6749 4.4.2 (the client credentials grant https://tailscale.com/kb/1215/oauth-clients names): a POST,
                // application/x-www-form-urlencoded, grant_type=client_credentials REQUIRED; the client authenticates with
                // client_id and client_secret in the body or HTTP Basic (2.3.1). Errors per 5.2: invalid_client is 401.
                const oauthError = (status: number, error: string) => send(status, { error });
                if (req.method !== "POST") return oauthError(405, "invalid_request");
                if (!/^application\/x-www-form-urlencoded\b/.test(req.headers["content-type"] ?? "")) return oauthError(400, "invalid_request");
                const form = new URLSearchParams(Buffer.concat(chunks).toString());
                if (form.get("grant_type") !== "client_credentials") return oauthError(400, "unsupported_grant_type");
                const basic = /^Basic (.+)$/.exec(req.headers.authorization ?? "")?.[1];
                const [id, given] = basic ? Buffer.from(basic, "base64").toString().split(":") : [form.get("client_id"), form.get("client_secret")];
                const client = id ? clients.get(id) : undefined;
                if (!client || client.secret !== given) return oauthError(401, "invalid_client");
                const token = secret("api", keyId());
                tokens.set(token, { kind: "oauth", clientId: id! });
                // RFC 6749 5.1; Tailscale's access tokens expire after one hour (https://tailscale.com/kb/1215/oauth-clients).
                return send(200, { access_token: token, token_type: "Bearer", expires_in: 3600, scope: client.scopes.join(" ") });
            }

            // Every other call carries the token as a bearer (https://tailscale.com/api, "Authentication"); none or a wrong one is 401.
            const grant = tokens.get(/^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1] ?? "");
            if (!grant) return refuse(401, "API token invalid");
            const scopes = grant.kind === "oauth" ? clients.get(grant.clientId)!.scopes : ["all"];

            // "-" is the token's own tailnet, otherwise its organization name (publicapi/tailnet.md, "Tailnet"). Tailscale
            // does not document the status for another tailnet; any refusal will do, the stand-in says 404.
            const route = /^\/api\/v2\/tailnet\/([^/]+)\/(acl|keys\/([^/]+))$/.exec(url.pathname);
            if (!route || req.method !== "GET") return refuse(404, "not found");
            if (decodeURIComponent(route[1]) !== "-" && decodeURIComponent(route[1]) !== tailnet) return refuse(404, "tailnet not found");

            if (route[2] === "acl") {
                if (!scopes.some((s) => POLICY_READ_SCOPES.includes(s))) return refuse(403, "calling actor does not have enough permissions to perform this function");
                // publicapi/tailnet.md, "Get Policy File": JSON when application/json is asked for, HuJSON otherwise; an ETag beside it.
                const etag = `"${hex(8)}"`;
                if (/\bapplication\/json\b/.test(req.headers.accept ?? "")) return send(200, state.policy, { ETag: etag });
                res.writeHead(200, { "Content-Type": "application/hujson", ETag: etag });
                return res.end(`// The tailnet policy file.\n${JSON.stringify(state.policy, null, 2)}\n`);
            }

            // publicapi/tailnet.md, "Get key"; a scoped token may read only its own key (https://tailscale.com/kb/1215/oauth-clients:
            // "GET /api/v2/tailnet/:tailnet/keys/:keyID (for itself only)"). An OAuth client's key: keyType client, its scopes and tags.
            const id = decodeURIComponent(route[3]!);
            if (grant.kind === "oauth" && grant.clientId !== id) return refuse(403, "calling actor does not have enough permissions to perform this function");
            const client = clients.get(id);
            if (!client) return refuse(404, "key not found");
            return send(200, { id, keyType: "client", created: new Date().toISOString(), scopes: client.scopes, tags: client.tags, description: "airlock" });
        });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return {
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        tailnet,
        get policy() {
            return state.policy;
        },
        set policy(value: unknown) {
            state.policy = value;
        },
        apiKey,
        addOAuthClient(scopes, tags) {
            const clientId = keyId();
            const clientSecret = secret("client", clientId);
            clients.set(clientId, { secret: clientSecret, scopes, tags });
            return { clientId, clientSecret };
        },
        calls,
        close: () => new Promise((resolve) => server.close(() => resolve())),
    };
}
