import { createHash } from "node:crypto";
import * as pulumi from "@pulumi/pulumi";
import { B2Client, BucketType, LifecycleRule } from "./client";

/**
 * B2 buckets and application keys as Pulumi dynamic resources (there is no
 * published B2 provider). Each carries `b2Kind`, which is how the policy gate
 * recognises them (policies/rules/b2-*). Credentials come from the deploying
 * operator's environment: B2_APPLICATION_KEY_ID and B2_APPLICATION_KEY
 * (B2_AUTH_URL overrides the API endpoint, for tests).
 */

function client(): B2Client {
    const applicationKeyId = process.env.B2_APPLICATION_KEY_ID;
    const applicationKey = process.env.B2_APPLICATION_KEY;
    if (!applicationKeyId || !applicationKey) {
        throw new Error("B2 credentials missing: export B2_APPLICATION_KEY_ID and B2_APPLICATION_KEY (the operator key; airlock doctor checks its capabilities)");
    }
    return new B2Client({ applicationKeyId, applicationKey, authUrl: process.env.B2_AUTH_URL });
}

/** The inputs B2 cannot change on an existing bucket or key (each provider's diff replaces it for them). */
export const B2_BUCKET_REPLACED_BY = ["bucketName", "objectLockDays"] as const;
export const B2_KEY_REPLACED_BY = ["purpose", "keyName", "capabilities", "bucketId", "namePrefix"] as const;

export interface BucketInputs {
    b2Kind: "bucket";
    bucketName: string;
    /** Days hidden (superseded or "deleted") versions are kept before B2 purges them. */
    retentionDays: number;
    /** Object Lock default retention in days; fixed at creation. */
    objectLockDays?: number;
    /** allPrivate unless said: only the host code bundle's bucket is allPublic. */
    bucketType?: BucketType;
    /** Delete every file version before the bucket (a backup bucket of a stack whose destroy deletes its data). */
    emptyOnDelete?: boolean;
}

export const lifecycleRulesFor = (retentionDays: number): LifecycleRule[] => [
    { fileNamePrefix: "", daysFromHidingToDeleting: retentionDays, daysFromUploadingToHiding: null },
];

export const bucketProvider: pulumi.dynamic.ResourceProvider = {
    async create(inputs: BucketInputs) {
        const bucket = await client().createBucket(inputs.bucketName, lifecycleRulesFor(inputs.retentionDays), inputs.objectLockDays, inputs.bucketType);
        return { id: bucket.bucketId, outs: { ...inputs, bucketId: bucket.bucketId, lifecycleRules: bucket.lifecycleRules } };
    },
    async read(id: string, props: BucketInputs & { lifecycleRules?: LifecycleRule[] }) {
        const bucket = await client().findBucket(id);
        if (!bucket) return {}; // gone: refresh drops it from state
        const hiding = bucket.lifecycleRules.find((r) => r.fileNamePrefix === "")?.daysFromHidingToDeleting;
        return { id, props: { ...props, bucketName: bucket.bucketName, bucketId: id, lifecycleRules: bucket.lifecycleRules, retentionDays: hiding ?? props.retentionDays } };
    },
    async diff(_id: string, olds: BucketInputs, news: BucketInputs) {
        const replaces = B2_BUCKET_REPLACED_BY.filter((k) => olds[k] !== news[k]);
        // emptyOnDelete changes nothing in B2, but destroy reads it from state, so `up` must record it.
        const changes =
            replaces.length > 0 ||
            olds.retentionDays !== news.retentionDays ||
            (olds.bucketType ?? "allPrivate") !== (news.bucketType ?? "allPrivate") ||
            (olds.emptyOnDelete ?? false) !== (news.emptyOnDelete ?? false);
        return { changes, replaces, deleteBeforeReplace: replaces.includes("bucketName") ? false : undefined };
    },
    async update(id: string, _olds: BucketInputs, news: BucketInputs) {
        const bucket = await client().updateBucket(id, lifecycleRulesFor(news.retentionDays), news.bucketType ?? "allPrivate");
        return { outs: { ...news, bucketId: id, lifecycleRules: bucket.lifecycleRules } };
    },
    async delete(id: string, props: BucketInputs) {
        const b2 = client();
        if (!(await b2.findBucket(id))) return;
        if (props.emptyOnDelete) await b2.emptyBucket(id);
        await b2.deleteBucket(id);
    },
};

export interface KeyInputs {
    b2Kind: "applicationKey";
    /** host: reaches a machine, must be least-privilege; operator: never leaves the operator. */
    purpose: "host" | "operator";
    keyName: string;
    capabilities: string[];
    bucketId?: string;
    namePrefix?: string;
}

export const keyProvider: pulumi.dynamic.ResourceProvider = {
    async create(inputs: KeyInputs) {
        const key = await client().createKey(inputs.keyName, inputs.capabilities, inputs.bucketId, inputs.namePrefix);
        return { id: key.applicationKeyId, outs: { ...inputs, applicationKeyId: key.applicationKeyId, applicationKey: key.applicationKey } };
    },
    async read(id: string, props: KeyInputs & { applicationKey?: string }) {
        const key = await client().findKey(id);
        if (!key) return {};
        // B2 never shows a key's secret again; keep the one from creation.
        return { id, props: { ...props, applicationKeyId: id, capabilities: key.capabilities, bucketId: key.bucketId ?? undefined, keyName: key.keyName } };
    },
    async diff(_id: string, olds: KeyInputs, news: KeyInputs) {
        // Keys are immutable in B2: any change is a new key. Capabilities are a set: B2
        // lists them in an order of its own, which a refresh must not turn into a new key.
        const comparable = (inputs: KeyInputs, k: (typeof B2_KEY_REPLACED_BY)[number]) => JSON.stringify(k === "capabilities" ? [...(inputs.capabilities ?? [])].sort() : inputs[k]);
        const replaces = B2_KEY_REPLACED_BY.filter((k) => comparable(olds, k) !== comparable(news, k));
        return { changes: replaces.length > 0, replaces };
    },
    async delete(id: string) {
        const b2 = client();
        if (await b2.findKey(id)) await b2.deleteKey(id);
    },
};

export interface FileInputs {
    b2Kind: "file";
    bucketId: string;
    fileName: string;
    contentType: string;
    /** The file's content; a new content is a new file (and the old version deleted after). */
    content: string;
    /** Its SHA-1, hex, as b2_upload_file takes it (computed by the caller: a provider's code carries no crypto module). */
    contentSha1: string;
}

/** One file in a bucket; its `url` is where anyone downloads it when the bucket is allPublic. */
export const fileProvider: pulumi.dynamic.ResourceProvider = {
    async create(inputs: FileInputs) {
        const b2 = client();
        const uploaded = await b2.uploadFile(inputs.bucketId, inputs.fileName, Buffer.from(inputs.content, "utf8"), inputs.contentType, inputs.contentSha1);
        // The bucket's name as B2 has it (an input would follow a renamed stack's seed, which the bucket ignores).
        const bucket = await b2.findBucket(inputs.bucketId);
        if (!bucket) throw new Error(`B2 bucket ${inputs.bucketId} does not exist`);
        const url = `${await b2.downloadUrl()}/file/${bucket.bucketName}/${encodeURIComponent(inputs.fileName)}`;
        return { id: uploaded.fileId, outs: { ...inputs, fileId: uploaded.fileId, url } };
    },
    async diff(_id: string, olds: FileInputs, news: FileInputs) {
        const replaces = (["bucketId", "fileName", "contentType", "content"] as const).filter((k) => olds[k] !== news[k]);
        return { changes: replaces.length > 0, replaces };
    },
    async delete(id: string, props: FileInputs) {
        await client().deleteFileVersion(props.fileName, id);
    },
};

export class B2Bucket extends pulumi.dynamic.Resource {
    declare readonly bucketId: pulumi.Output<string>;
    declare readonly bucketName: pulumi.Output<string>;

    constructor(name: string, args: Omit<BucketInputs, "b2Kind">, opts?: pulumi.CustomResourceOptions) {
        super(bucketProvider, name, { b2Kind: "bucket", ...args, bucketId: undefined, lifecycleRules: lifecycleRulesFor(args.retentionDays) }, opts);
    }
}

export class B2ApplicationKey extends pulumi.dynamic.Resource {
    declare readonly applicationKeyId: pulumi.Output<string>;
    /** A Pulumi secret. */
    declare readonly applicationKey: pulumi.Output<string>;

    constructor(name: string, args: { purpose: KeyInputs["purpose"]; keyName: string; capabilities: string[]; bucketId?: pulumi.Input<string>; namePrefix?: string }, opts?: pulumi.CustomResourceOptions) {
        super(keyProvider, name, { b2Kind: "applicationKey", ...args, applicationKeyId: undefined, applicationKey: undefined }, { ...opts, additionalSecretOutputs: ["applicationKey"] });
    }
}

export class B2File extends pulumi.dynamic.Resource {
    declare readonly fileId: pulumi.Output<string>;
    declare readonly url: pulumi.Output<string>;

    constructor(name: string, args: { bucketId: pulumi.Input<string>; fileName: string; contentType: string; content: string }, opts?: pulumi.CustomResourceOptions) {
        const contentSha1 = createHash("sha1").update(args.content, "utf8").digest("hex");
        super(fileProvider, name, { b2Kind: "file", ...args, contentSha1, fileId: undefined, url: undefined }, opts);
    }
}
