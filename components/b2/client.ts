/**
 * A small client for the B2 native API (v3) - the calls airlock's dynamic provider
 * makes. Retries 429/503 with backoff (honouring Retry-After); 401/403 and other
 * errors become one clear line naming the call and B2's code.
 */

export interface B2Credentials {
    applicationKeyId: string;
    applicationKey: string;
    /** Defaults to B2's production API; tests point it at a local fake. */
    authUrl?: string;
}

export class B2Error extends Error {
    constructor(readonly call: string, readonly status: number, readonly code: string, message: string) {
        super(`B2 ${call}: ${status} ${code}: ${message}`);
        this.name = "B2Error";
    }
}

export interface LifecycleRule {
    fileNamePrefix: string;
    daysFromHidingToDeleting: number | null;
    daysFromUploadingToHiding: number | null;
}

/** allPublic: anyone may download its files (never list them); allPrivate: only with an authorization. */
export type BucketType = "allPrivate" | "allPublic";

export interface Bucket {
    bucketId: string;
    bucketName: string;
    bucketType: string;
    lifecycleRules: LifecycleRule[];
    fileLockConfiguration?: { value?: { isFileLockEnabled?: boolean; defaultRetention?: { mode: string | null; period: { duration: number; unit: string } | null } } };
}

export interface ApplicationKey {
    applicationKeyId: string;
    applicationKey?: string;
    keyName: string;
    capabilities: string[];
    bucketId: string | null;
    namePrefix: string | null;
}

/**
 * What a key may do and where, as b2_authorize_account (v3) answers it in
 * apiInfo.storageApi (https://www.backblaze.com/apidocs/b2-authorize-account):
 * bucketId/bucketName/namePrefix are null for a key that is not restricted.
 */
export interface KeyAllowance {
    capabilities: string[];
    bucketId: string | null;
    bucketName: string | null;
    namePrefix: string | null;
}

interface Session {
    accountId: string;
    token: string;
    apiUrl: string;
    downloadUrl: string;
    allowed: KeyAllowance;
}

const DEFAULT_AUTH_URL = "https://api.backblazeb2.com";

/** Listing passes emptyBucket makes before it gives up, and the deletes it has in flight at once. */
const EMPTY_PASSES = 5;
const DELETE_CONCURRENCY = 8;

export class B2Client {
    private session?: Session;

    constructor(private readonly credentials: B2Credentials, private readonly retry = { attempts: 5, baseMs: 500 }) {}

    private async authorize(): Promise<Session> {
        if (this.session) return this.session;
        const basic = Buffer.from(`${this.credentials.applicationKeyId}:${this.credentials.applicationKey}`).toString("base64");
        const body = await this.request("b2_authorize_account", `${this.credentials.authUrl ?? DEFAULT_AUTH_URL}/b2api/v3/b2_authorize_account`, { method: "GET", headers: { Authorization: `Basic ${basic}` } });
        const storage = body.apiInfo.storageApi;
        this.session = {
            accountId: body.accountId,
            token: body.authorizationToken,
            apiUrl: storage.apiUrl,
            downloadUrl: storage.downloadUrl,
            allowed: { capabilities: storage.capabilities ?? [], bucketId: storage.bucketId ?? null, bucketName: storage.bucketName ?? null, namePrefix: storage.namePrefix ?? null },
        };
        return this.session;
    }

    /** One API call; retried on 429/503 and once more on an expired token. */
    async call(name: string, payload: Record<string, unknown>): Promise<any> {
        const session = await this.authorize();
        try {
            return await this.post(name, session, payload);
        } catch (err) {
            if (err instanceof B2Error && err.status === 401 && err.code === "expired_auth_token") {
                this.session = undefined;
                return this.post(name, await this.authorize(), payload);
            }
            throw err;
        }
    }

    private post(name: string, session: Session, payload: Record<string, unknown>) {
        return this.request(name, `${session.apiUrl}/b2api/v3/${name}`, {
            method: "POST",
            headers: { Authorization: session.token, "Content-Type": "application/json" },
            body: JSON.stringify(payload),
        });
    }

    private async request(name: string, url: string, init: RequestInit): Promise<any> {
        for (let attempt = 1; ; attempt++) {
            const response = await fetch(url, init);
            const text = await response.text();
            if (response.ok) return text ? JSON.parse(text) : {};
            let error: { code?: string; message?: string } = {};
            try {
                error = JSON.parse(text);
            } catch {
                error = { code: "unknown", message: text.slice(0, 200) };
            }
            const retryable = response.status === 429 || response.status === 503;
            if (!retryable || attempt >= this.retry.attempts) {
                throw new B2Error(name, response.status, error.code ?? "unknown", error.message ?? "");
            }
            const retryAfter = Number(response.headers.get("retry-after"));
            const wait = Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter * 1000 : this.retry.baseMs * 2 ** (attempt - 1);
            await new Promise((resolve) => setTimeout(resolve, wait));
        }
    }

    /** The key's own capabilities and restrictions (b2_authorize_account; no other call). */
    async allowed(): Promise<KeyAllowance> {
        return (await this.authorize()).allowed;
    }

    async accountId(): Promise<string> {
        return (await this.authorize()).accountId;
    }

    /** The account's download host (b2_authorize_account's apiInfo.storageApi.downloadUrl): public files are at <it>/file/<bucket>/<name>. */
    async downloadUrl(): Promise<string> {
        return (await this.authorize()).downloadUrl;
    }

    async createBucket(bucketName: string, lifecycleRules: LifecycleRule[], objectLockDays?: number, bucketType: BucketType = "allPrivate"): Promise<Bucket> {
        const accountId = await this.accountId();
        const bucket: Bucket = await this.call("b2_create_bucket", { accountId, bucketName, bucketType, lifecycleRules, ...(objectLockDays ? { fileLockEnabled: true } : {}) });
        if (!objectLockDays) return bucket;
        // b2_create_bucket takes no default retention: it is b2_update_bucket's, once the bucket has Object Lock.
        return this.call("b2_update_bucket", {
            accountId,
            bucketId: bucket.bucketId,
            defaultRetention: { mode: "compliance", period: { duration: objectLockDays, unit: "days" } },
        });
    }

    async updateBucket(bucketId: string, lifecycleRules: LifecycleRule[], bucketType?: BucketType): Promise<Bucket> {
        return this.call("b2_update_bucket", { accountId: await this.accountId(), bucketId, lifecycleRules, ...(bucketType ? { bucketType } : {}) });
    }

    /**
     * One file, uploaded as b2_upload_file takes it: to the URL b2_get_upload_url gives,
     * its name percent-encoded, its SHA-1 (hex) beside it (B2 refuses a body that does not match).
     */
    async uploadFile(bucketId: string, fileName: string, content: Buffer, contentType: string, sha1: string): Promise<{ fileId: string; fileName: string }> {
        const target = await this.call("b2_get_upload_url", { bucketId });
        return this.request("b2_upload_file", target.uploadUrl, {
            method: "POST",
            headers: {
                Authorization: target.authorizationToken,
                "X-Bz-File-Name": encodeURIComponent(fileName),
                "Content-Type": contentType,
                "X-Bz-Content-Sha1": sha1,
            },
            body: content,
        });
    }

    /** Deletes one version; one already gone (removed by hand, with its bucket, or a large file cancelled meanwhile) is no error. */
    async deleteFileVersion(fileName: string, fileId: string): Promise<void> {
        try {
            await this.call("b2_delete_file_version", { fileName, fileId });
        } catch (err) {
            if ((err as { code?: string }).code !== "file_not_present") throw err;
        }
    }

    /**
     * Deletes every version of every file in the bucket, hide markers included, page by
     * page as b2_list_file_versions lists them (B2 deletes no bucket that holds one), and
     * lists again until a pass finds none: a version added meanwhile is deleted too, and
     * one already gone (removed meanwhile) is no error. Gives up, naming the bucket, when
     * versions keep coming (a host still writing).
     */
    async emptyBucket(bucketId: string, passes = EMPTY_PASSES): Promise<number> {
        let deleted = 0;
        for (let pass = 0; pass < passes; pass++) {
            let found = 0;
            let next: { startFileName: string; startFileId: string } | undefined;
            do {
                const page = await this.call("b2_list_file_versions", { bucketId, maxFileCount: 1000, ...next });
                const versions = page.files as { fileName: string; fileId: string }[];
                found += versions.length;
                for (let i = 0; i < versions.length; i += DELETE_CONCURRENCY) {
                    await Promise.all(versions.slice(i, i + DELETE_CONCURRENCY).map((v) => this.deleteFileVersion(v.fileName, v.fileId)));
                }
                deleted += versions.length;
                next = page.nextFileName ? { startFileName: page.nextFileName, startFileId: page.nextFileId } : undefined;
            } while (next);
            if (found === 0) return deleted;
        }
        throw new Error(`B2 bucket ${bucketId}: still not empty after ${passes} passes (${deleted} versions deleted): is a host still writing to it? Stop its backups and destroy again`);
    }

    async findBucket(bucketId: string): Promise<Bucket | undefined> {
        const { buckets } = await this.call("b2_list_buckets", { accountId: await this.accountId(), bucketId });
        return (buckets as Bucket[]).find((b) => b.bucketId === bucketId);
    }

    async deleteBucket(bucketId: string): Promise<void> {
        await this.call("b2_delete_bucket", { accountId: await this.accountId(), bucketId });
    }

    async createKey(keyName: string, capabilities: string[], bucketId?: string, namePrefix?: string): Promise<ApplicationKey> {
        return this.call("b2_create_key", {
            accountId: await this.accountId(),
            keyName,
            capabilities,
            ...(bucketId ? { bucketId } : {}),
            ...(namePrefix ? { namePrefix } : {}),
        });
    }

    async findKey(applicationKeyId: string): Promise<ApplicationKey | undefined> {
        let start: string | undefined;
        do {
            const page = await this.call("b2_list_keys", { accountId: await this.accountId(), maxKeyCount: 1000, ...(start ? { startApplicationKeyId: start } : {}) });
            const found = (page.keys as ApplicationKey[]).find((k) => k.applicationKeyId === applicationKeyId);
            if (found) return found;
            start = page.nextApplicationKeyId ?? undefined;
        } while (start);
        return undefined;
    }

    async deleteKey(applicationKeyId: string): Promise<void> {
        await this.call("b2_delete_key", { applicationKeyId });
    }
}
