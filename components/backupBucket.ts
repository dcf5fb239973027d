import { createHash } from "node:crypto";
import * as pulumi from "@pulumi/pulumi";
import { B2ApplicationKey, B2Bucket } from "./b2/resources";

/** What a host's backup key may do: list, read and write its one bucket. No deleteFiles. */
export const HOST_KEY_CAPABILITIES = ["listBuckets", "listFiles", "readFiles", "writeFiles"];
/** The operator's prune key: also deleteFiles (and nothing about keys or buckets). */
export const PRUNE_KEY_CAPABILITIES = ["listBuckets", "listFiles", "readFiles", "deleteFiles"];

export interface BackupBucketArgs {
    prefix: string;
    /** "gateway" or "sandbox": one bucket per machine. */
    machine: string;
    retentionDays: number;
    objectLockDays?: number;
    /** Create the operator-only prune key. */
    pruneKey: boolean;
    /** Keep the bucket (and its backups) when the stack is destroyed or the bucket replaced. */
    keepOnDelete: boolean;
    /**
     * Makes the globally unique bucket name unique to this organisation: two
     * companies both running a stack prefixed airlock-dev get different buckets.
     */
    uniqueSeed: string;
}

/** B2 bucket names are global: prefix-machine plus a suffix derived from the organisation's seed. */
export function bucketNameFor(prefix: string, machine: string, uniqueSeed: string): string {
    const suffix = createHash("sha256").update(`${uniqueSeed}\n${prefix}\n${machine}`).digest("hex").slice(0, 10);
    return `${prefix}-${machine}-${suffix}`;
}

/**
 * One machine's backup bucket: private, keeping hidden versions for the retention
 * (or Object Lock), with an append-only host key restricted to it, and - only when
 * asked - a prune key that stays with the operator.
 */
export class BackupBucket extends pulumi.ComponentResource {
    /** The name the bucket was created with (kept when its seed changes later). */
    readonly bucketName: pulumi.Output<string>;
    readonly bucketId: pulumi.Output<string>;
    readonly hostKeyId: pulumi.Output<string>;
    /** A secret: delivered to the gateway after boot, never in user_data. */
    readonly hostKey: pulumi.Output<string>;
    readonly pruneKeyId?: pulumi.Output<string>;
    readonly pruneKey?: pulumi.Output<string>;

    constructor(name: string, args: BackupBucketArgs, opts?: pulumi.ComponentResourceOptions) {
        super("airlock:index:BackupBucket", name, {}, opts);
        const bucket = new B2Bucket(
            `${name}-bucket`,
            {
                bucketName: bucketNameFor(args.prefix, args.machine, args.uniqueSeed),
                retentionDays: args.retentionDays,
                ...(args.objectLockDays ? { objectLockDays: args.objectLockDays } : {}),
                ...(args.keepOnDelete ? {} : { emptyOnDelete: true }),
            },
            // The name is chosen once: a new seed (a rotated break-glass key) never re-targets the backups.
            { parent: this, ignoreChanges: ["bucketName"], retainOnDelete: args.keepOnDelete },
        );
        this.bucketName = bucket.bucketName;
        this.bucketId = bucket.bucketId;
        const key = (role: "host" | "prune", purpose: "host" | "operator", capabilities: string[]) =>
            new B2ApplicationKey(
                `${name}-${role}-key`,
                { purpose, keyName: `${args.prefix}-${args.machine}-${role}`, capabilities, bucketId: bucket.bucketId },
                { parent: this },
            );
        const hostKey = key("host", "host", HOST_KEY_CAPABILITIES);
        this.hostKeyId = hostKey.applicationKeyId;
        this.hostKey = pulumi.secret(hostKey.applicationKey);
        if (args.pruneKey) {
            const prune = key("prune", "operator", PRUNE_KEY_CAPABILITIES);
            this.pruneKeyId = prune.applicationKeyId;
            this.pruneKey = pulumi.secret(prune.applicationKey);
        }
        this.registerOutputs({ bucketName: this.bucketName, bucketId: this.bucketId, hostKeyId: this.hostKeyId });
    }
}
