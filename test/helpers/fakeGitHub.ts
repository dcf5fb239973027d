import { KeyObject, randomBytes, verify } from "node:crypto";
import * as http from "node:http";
import type { AddressInfo } from "node:net";

/**
 * A loopback stand-in for the two GitHub REST endpoints the token minter uses,
 * enforcing what GitHub enforces: the App's JWT must be RS256, signed by the App's
 * key, issued by the App (`iss`), not issued in the future (`iat`), not expired and
 * at most ten minutes long (`exp`), all by ITS clock (which a test may skew). It
 * records every request and the scope each token was asked for.
 */

export interface MintRequest {
    installationId: string;
    claims: Record<string, unknown>;
    body: { repositories?: string[]; permissions?: Record<string, string> };
}

export interface FakeGitHub {
    url: string;
    /** Every request, in order (method and path). */
    requests: { method: string; path: string }[];
    /** Token requests that passed the JWT checks. */
    mints: MintRequest[];
    /** Tokens handed out -> whether they still work. */
    tokens: Map<string, { active: boolean }>;
    /** Seconds this server's clock is ahead of the machine's. */
    clockOffset: number;
    /** When set, a token carries this permission beyond what was asked (a misbehaving server). */
    grantExtra?: [string, string];
    close(): Promise<void>;
}

function fail(res: http.ServerResponse, status: number, message: string, now: Date): void {
    res.writeHead(status, { "Content-Type": "application/json", Date: now.toUTCString() });
    res.end(JSON.stringify({ message, documentation_url: "https://docs.github.com/rest" }));
}

const b64json = (part: string) => JSON.parse(Buffer.from(part, "base64url").toString("utf8"));

/** GitHub's answers for a JWT it will not take, or undefined when the JWT is good. */
function checkJwt(jwt: string, appId: number, key: KeyObject, nowSeconds: number): { claims?: Record<string, unknown>; error?: string } {
    const parts = jwt.split(".");
    if (parts.length !== 3) return { error: "A JSON web token could not be decoded" };
    let header: Record<string, unknown>;
    let claims: Record<string, unknown>;
    try {
        header = b64json(parts[0]);
        claims = b64json(parts[1]);
    } catch {
        return { error: "A JSON web token could not be decoded" };
    }
    if (header.alg !== "RS256") return { error: "A JSON web token could not be decoded" };
    const signed = verify("RSA-SHA256", Buffer.from(`${parts[0]}.${parts[1]}`), key, Buffer.from(parts[2], "base64url"));
    if (!signed) return { error: "A JSON web token could not be decoded" };
    if (String(claims.iss) !== String(appId)) return { error: `Integration not found` };
    const iat = claims.iat;
    const exp = claims.exp;
    if (typeof iat !== "number" || iat > nowSeconds) return { error: "'Issued at' claim ('iat') must be an Integer representing the time that the assertion was issued." };
    if (typeof exp !== "number" || exp <= nowSeconds) return { error: "'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires." };
    if (exp - nowSeconds > 600) return { error: "'Expiration time' claim ('exp') is too far in the future." };
    return { claims };
}

export async function startFakeGitHub(app: { appId: number; installationId: number; publicKey: KeyObject; owner?: string }): Promise<FakeGitHub> {
    /** The account the App is installed on: GitHub answers with its repositories whatever owner was meant. */
    const owner = app.owner ?? "acme";
    const fake: Omit<FakeGitHub, "url" | "close"> = { requests: [], mints: [], tokens: new Map(), clockOffset: 0 };
    const server = http.createServer((req, res) => {
        let raw = "";
        req.on("data", (chunk: Buffer) => (raw += chunk.toString("utf8")));
        req.on("end", () => {
            const now = new Date(Date.now() + fake.clockOffset * 1000);
            const path = req.url ?? "";
            fake.requests.push({ method: req.method ?? "", path });
            const bearer = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1];
            if (req.method === "DELETE" && path === "/installation/token") {
                const token = bearer ? fake.tokens.get(bearer) : undefined;
                if (!token?.active) return fail(res, 401, "Bad credentials", now);
                token.active = false;
                res.writeHead(204, { Date: now.toUTCString() });
                return res.end();
            }
            const mint = /^\/app\/installations\/(\d+)\/access_tokens$/.exec(path);
            if (req.method !== "POST" || !mint) return fail(res, 404, "Not Found", now);
            if (!bearer) return fail(res, 401, "A JSON web token could not be decoded", now);
            const jwt = checkJwt(bearer, app.appId, app.publicKey, Math.floor(now.getTime() / 1000));
            if (jwt.error) return fail(res, 401, jwt.error, now);
            if (Number(mint[1]) !== app.installationId) return fail(res, 404, "Not Found", now);
            let body: MintRequest["body"];
            try {
                body = JSON.parse(raw);
            } catch {
                return fail(res, 400, "Problems parsing JSON", now);
            }
            fake.mints.push({ installationId: mint[1], claims: jwt.claims!, body });
            const token = `ghs_${randomBytes(18).toString("base64url").replace(/[-_]/g, "x")}`;
            fake.tokens.set(token, { active: true });
            const permissions = { ...body.permissions, metadata: "read", ...(fake.grantExtra ? { [fake.grantExtra[0]]: fake.grantExtra[1] } : {}) };
            res.writeHead(201, { "Content-Type": "application/json", Date: now.toUTCString() });
            res.end(
                JSON.stringify({
                    token,
                    expires_at: new Date(now.getTime() + 3600_000).toISOString().replace(/\.\d+Z$/, "Z"),
                    permissions,
                    repository_selection: "selected",
                    repositories: (body.repositories ?? []).map((name, id) => ({ id, name, full_name: `${owner}/${name}` })),
                }),
            );
        });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    return Object.assign(fake, {
        url: `http://127.0.0.1:${port}`,
        close: () => new Promise<void>((resolve) => server.close(() => resolve())),
    });
}
