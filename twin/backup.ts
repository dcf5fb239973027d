import * as path from "node:path";
import { HOST_ADDRESS } from "./contract";
import { TWIN_DIR } from "./files";
import { daemonRunning, runDirOf, startDaemon, stopDaemon } from "./network";

/**
 * The stand-in for the backups' B2 buckets: restic's REST protocol in append-only
 * mode (twin/backup/rest-server.py), one repository per machine, on the twin's
 * "internet" at BACKUP_URL. The operator's step (README "Backups": deliver
 * /etc/airlock/backup/{gateway,sandbox}.env, run airlock-backup-init) points
 * RESTIC_REPOSITORY at it.
 */
export const BACKUP_PORT = 8000;
export const BACKUP_URL = `http://${HOST_ADDRESS}:${BACKUP_PORT}`;
export const backupStorage = (stack: string) => path.join(runDirOf(stack), "backups");

export function startBackupStandIn(stack: string): void {
    if (daemonRunning(stack, "backups")) return;
    startDaemon(stack, "backups", ["/usr/bin/python3", "-IS", path.join(TWIN_DIR, "backup", "rest-server.py"), "--root", backupStorage(stack), "--address", HOST_ADDRESS, "--port", String(BACKUP_PORT)]);
}

export function stopBackupStandIn(stack: string): void {
    stopDaemon(stack, "backups");
}
