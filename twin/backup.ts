import * as path from "node:path";
import { HOST_ADDRESS } from "./contract";
import { buildGoTool } from "./gotools";
import { daemonRunning, runDirOf, startDaemon, stopDaemon } from "./network";

/**
 * The stand-in for the backups' B2 buckets: restic's own rest-server (twin/go/rest-server
 * pins it), in append-only mode like the hosts' B2 keys (no deleteFiles: nothing is ever
 * replaced or deleted, except restic's locks), one repository per machine, on the twin's
 * "internet" at BACKUP_URL. The operator's step (README "Backups": deliver
 * /etc/airlock/backup/{gateway,sandbox}.env, run airlock-backup-init) points
 * RESTIC_REPOSITORY at it.
 */
export const BACKUP_PORT = 8000;
export const BACKUP_URL = `http://${HOST_ADDRESS}:${BACKUP_PORT}`;
export const backupStorage = (stack: string) => path.join(runDirOf(stack), "backups");

export async function startBackupStandIn(stack: string, log: (line: string) => void): Promise<void> {
    if (daemonRunning(stack, "backups")) return;
    const restServer = await buildGoTool("rest-server", log);
    // Every request logged (to backups.out), as the stand-in before it did.
    startDaemon(stack, "backups", [restServer, "--path", backupStorage(stack), "--listen", `${HOST_ADDRESS}:${BACKUP_PORT}`, "--append-only", "--no-auth", "--log", "-"]);
}

export function stopBackupStandIn(stack: string): void {
    stopDaemon(stack, "backups");
}
