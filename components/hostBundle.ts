import * as pulumi from "@pulumi/pulumi";
import { bucketNameFor } from "./backupBucket";
import { B2Bucket, B2File } from "./b2/resources";
import type { Bundle } from "./render/bundle";

export interface HostBundleArgs {
    prefix: string;
    bundle: Bundle;
    /** The operator's mirror (airlock:hosts.bundleUrl): nothing is uploaded. */
    mirrorUrl?: string;
    /** Days B2 keeps a replaced bundle's hidden versions (the stack's backup retention). */
    retentionDays: number;
    /** As for the backup buckets: makes the global bucket name this organisation's. */
    uniqueSeed: string;
}

/**
 * The host code both hosts install at first boot (components/render/bundle.ts),
 * published where they download it: a public-read B2 bucket of the stack's own, or the
 * operator's mirror. Public is safe: the bundle is the kit's code, the same for every
 * stack of this airlock version, with no secret and no per-stack value (a test renders
 * it for different stacks and compares); B2 lets anyone download a public bucket's
 * files by name but list them only with a key. The hosts check its sha256 before
 * using it, so whoever serves it can withhold it, never change it.
 */
export class HostBundle extends pulumi.ComponentResource {
    /** Where the hosts download it. */
    readonly url: pulumi.Output<string>;

    constructor(name: string, args: HostBundleArgs, opts?: pulumi.ComponentResourceOptions) {
        super("airlock:index:HostBundle", name, {}, opts);
        const { bundle } = args;
        if (args.mirrorUrl) {
            this.url = pulumi.output(`${args.mirrorUrl.replace(/\/$/, "")}/${bundle.name}`);
        } else {
            const bucket = new B2Bucket(
                `${name}-bucket`,
                { bucketName: bucketNameFor(args.prefix, "bundles", args.uniqueSeed), retentionDays: args.retentionDays, bucketType: "allPublic" },
                // It holds nothing but the kit's code: a destroy deletes it (after its file).
                { parent: this, ignoreChanges: ["bucketName"] },
            );
            const file = new B2File(
                `${name}-file`,
                { bucketId: bucket.bucketId, fileName: bundle.name, contentType: "application/json", content: bundle.text },
                // The new bundle is uploaded before the old one is deleted: a host booting meanwhile finds the one it names.
                { parent: this },
            );
            this.url = file.url;
        }
        this.registerOutputs({ url: this.url });
    }
}
