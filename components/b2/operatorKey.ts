import type { StackConfig } from "../config/schema";

/**
 * The capabilities the operator's B2 key needs for everything `pulumi up`, refresh,
 * replace and destroy do with the kit's B2 resources (resources.ts: buckets, keys,
 * the host code bundle's file), each with the B2 calls that need it. The one list
 * `airlock doctor` checks a key against and the README shows.
 */

/**
 * When a stack needs a capability: always, with Object Lock, when it uploads the host
 * code bundle itself, or when its destroy deletes the backups (deleteDataOnDestroy).
 */
export type Needed = "always" | "objectLock" | "bundleUpload" | "deleteData";

export interface OperatorCapability {
    capability: string;
    /** The B2 native API calls (v3) the kit makes that need it. */
    calls: string[];
    /** Needed when any of these holds. */
    needed: readonly Needed[];
}

export const OPERATOR_KEY_CAPABILITIES: readonly OperatorCapability[] = [
    // https://www.backblaze.com/apidocs/b2-list-buckets: "The token must have the listBuckets capability."
    // Refresh reads each bucket, destroy checks it still exists, the bundle's file looks up its bucket's name.
    { capability: "listBuckets", calls: ["b2_list_buckets"], needed: ["always"] },
    // https://www.backblaze.com/apidocs/b2-create-bucket and https://www.backblaze.com/apidocs/b2-update-bucket:
    // both need writeBuckets. Create makes each bucket; update changes retention (lifecycle rules) in place.
    { capability: "writeBuckets", calls: ["b2_create_bucket", "b2_update_bucket"], needed: ["always"] },
    // https://www.backblaze.com/apidocs/b2-delete-bucket: deleteBuckets. Destroy, and a replaced bucket.
    { capability: "deleteBuckets", calls: ["b2_delete_bucket"], needed: ["always"] },
    // https://www.backblaze.com/apidocs/b2-list-keys: listKeys. Refresh reads each key, destroy checks it exists.
    { capability: "listKeys", calls: ["b2_list_keys"], needed: ["always"] },
    // https://www.backblaze.com/apidocs/b2-create-key: writeKeys. The hosts' backup keys (and prune keys).
    { capability: "writeKeys", calls: ["b2_create_key"], needed: ["always"] },
    // https://www.backblaze.com/apidocs/b2-delete-key: deleteKeys. Destroy, and every replaced key (keys are immutable).
    { capability: "deleteKeys", calls: ["b2_delete_key"], needed: ["always"] },
    // https://www.backblaze.com/apidocs/b2-get-upload-url and https://www.backblaze.com/apidocs/b2-upload-file:
    // writeFiles. Uploading the host code bundle.
    { capability: "writeFiles", calls: ["b2_get_upload_url", "b2_upload_file"], needed: ["bundleUpload"] },
    // https://www.backblaze.com/apidocs/b2-list-file-versions: listFiles. A destroy that deletes the backups lists
    // every version of every file (B2 deletes no bucket that holds one).
    { capability: "listFiles", calls: ["b2_list_file_versions"], needed: ["deleteData"] },
    // https://www.backblaze.com/apidocs/b2-delete-file-version: deleteFiles. The old bundle after a new one, destroy,
    // and each backup version when the destroy deletes the backups.
    { capability: "deleteFiles", calls: ["b2_delete_file_version"], needed: ["bundleUpload", "deleteData"] },
    // https://www.backblaze.com/apidocs/b2-update-bucket: setting defaultRetention needs writeBucketRetentions (and
    // fileLockEnabled on b2_create_bucket, https://www.backblaze.com/apidocs/b2-create-bucket).
    { capability: "writeBucketRetentions", calls: ["b2_create_bucket", "b2_update_bucket"], needed: ["objectLock"] },
];

const NEEDS: Record<Needed, (cfg: StackConfig) => boolean> = {
    always: () => true,
    objectLock: (cfg) => cfg.backup.objectLockDays !== undefined,
    bundleUpload: (cfg) => cfg.hosts.bundleUrl === undefined,
    deleteData: (cfg) => cfg.deleteDataOnDestroy,
};

/** Whether a stack needs a capability needed when any of `needed` holds; without a stack, the most any stack needs. */
export function stackNeeds(needed: readonly Needed[], cfg?: StackConfig): boolean {
    return !cfg || needed.some((n) => NEEDS[n](cfg));
}

/** The capabilities this stack's operator key needs. */
export function operatorCapabilitiesFor(cfg?: StackConfig): string[] {
    return OPERATOR_KEY_CAPABILITIES.filter((c) => stackNeeds(c.needed, cfg)).map((c) => c.capability);
}
