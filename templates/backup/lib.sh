# shellcheck shell=bash
# /usr/local/lib/airlock/backup.sh: what the backup scripts share. Sourced, never run.
#
# Credentials: /etc/airlock/backup/REPO.env (root, 0600), KEY=VALUE lines without
# quotes. They are parsed (never sourced) into shell variables that are never
# exported: only restic receives them, as assignments prefixed to its command
# (so they are in no argv, and in the environment of no other process). Anything
# else a script starts gets a clean environment (`env -i`).
#
# The repository id: /etc/airlock/backup/REPO.id, written once by the operator's
# `airlock-backup-init`. Every scheduled run verifies it first and never
# initialises: a hidden, deleted or replaced repository fails the run (and alerts).

readonly ENV_DIR="${AIRLOCK_BACKUP_ENV_DIR:-/etc/airlock/backup}"
readonly CLEAN_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# systemd gives services no $HOME: restic's cache is named explicitly.
readonly RESTIC_CACHE="${RESTIC_CACHE_DIR:-/var/cache/airlock-restic}"
# How a command reaches the sandbox's shell container: the agent's pinned ssh, with the
# rendered client settings only and a connection of its own (nothing the agent user
# wrote in its ~/.ssh is read or reused).
# shellcheck disable=SC2034 # used by the scripts that source this file
readonly SANDBOX_EXEC="${AIRLOCK_SANDBOX_EXEC:-{{sandboxSsh}}}"
# The unprivileged user that restores and reads everything that came from the sandbox.
readonly DRILL_USER=airlock-drill
# A hostile dump can make a restore spin; the confinement is killed after this.
readonly CONFINED_TIMEOUT=3h
# A database restore holds the dump twice (fetched, then copied in for the confinement)
# and the restored tables (a compressed custom-format dump expands: room for 4 times
# its size), beside a scratch cluster of its own.
# shellcheck disable=SC2034 # used by the drills that source this
readonly DUMP_ROOM_FACTOR=6 CLUSTER_ROOM=$((64 * 1024 * 1024))
PROGRAM="${0##*/}"
readonly PROGRAM

fail() {
	echo "${PROGRAM}: FAILED: $*" >&2
	exit 1
}

bad_input() {
	echo "${PROGRAM}: $*" >&2
	exit 2
}

repository_name=""
repository_url=""
restic_password=""
b2_account_id=""
b2_account_key=""

# load_credentials gateway|sandbox
load_credentials() {
	repository_name="$1"
	local file="${ENV_DIR}/$1.env" line key n=0
	[[ -r "$file" ]] || fail "${file} is missing: deliver the credentials (docs/backups.md)"
	while IFS= read -r line || [[ -n "$line" ]]; do
		n=$((n + 1))
		[[ -z "$line" || "$line" == \#* ]] && continue
		[[ "$line" == *=* ]] || bad_input "${file}: line ${n}: expected KEY=VALUE"
		key="${line%%=*}"
		case "$key" in
		RESTIC_REPOSITORY) repository_url="${line#*=}" ;;
		RESTIC_PASSWORD) restic_password="${line#*=}" ;;
		B2_ACCOUNT_ID) b2_account_id="${line#*=}" ;;
		B2_ACCOUNT_KEY) b2_account_key="${line#*=}" ;;
		*) bad_input "${file}: line ${n}: unknown key ${key}" ;;
		esac
	done <"$file"
	[[ -n "$repository_url" ]] || bad_input "${file}: RESTIC_REPOSITORY is missing"
	[[ -n "$restic_password" ]] || bad_input "${file}: RESTIC_PASSWORD is missing"
}

# restic ARGS...: the only process that ever holds the credentials.
restic_() {
	RESTIC_REPOSITORY="$repository_url" RESTIC_PASSWORD="$restic_password" \
		B2_ACCOUNT_ID="$b2_account_id" B2_ACCOUNT_KEY="$b2_account_key" \
		RESTIC_CACHE_DIR="$RESTIC_CACHE" command restic "$@"
}

# jq: a snapshot time (RFC 3339, any offset, restic's nanoseconds) as seconds since the epoch,
# so snapshots are ordered as instants, not as strings.
# shellcheck disable=SC2016,SC2034 # jq's variables; used by the drills that source this
readonly SNAPSHOT_EPOCH_JQ='def epoch: capture("^(?<s>[0-9-]+T[0-9:]+)(?<f>\\.[0-9]+)?(?<z>Z|[+-][0-9]{2}:[0-9]{2})$") as $t
	| ($t.s + "Z" | fromdateiso8601)
	- (if $t.z == "Z" then 0 else ($t.z[0:1] + "1" | tonumber) * (($t.z[1:3] | tonumber) * 3600 + ($t.z[4:6] | tonumber) * 60) end)
	+ ("0" + ($t.f // ".0") | tonumber);'

# when EPOCH: a time for messages.
when() { date -u -d "@$1" +%FT%TZ; }

# fresh WHAT TIME MAX_HOURS: the newest snapshot of a kind must be recent; an older one
# means the scheduled runs stopped (stalled, failing, a host gone), however well it restores.
fresh() {
	local age_hours=$((($(date +%s) - $2) / 3600))
	((age_hours <= $3)) || fail "the newest ${1} is ${age_hours} hours old (from $(when "$2")): ${4:-backups have stopped}"
}

# fits DIR SNAPSHOT FILE WHAT FACTOR [EXTRA]: fails unless FILE of SNAPSHOT (its size as
# restic recorded it), FACTOR times over plus EXTRA bytes, fits in DIR's free space: a huge
# file from the sandbox (or the runtime) fails here, it does not fill the gateway's disk.
fits() {
	local size free need
	size="$(restic_ ls --json "$2" | jq -r --arg name "$3" 'select(.name == $name) | .size' | head -n 1)"
	[[ "$size" =~ ^[0-9]+$ ]] || fail "the ${4} is not in its snapshot"
	free="$(($(stat -f -c '%a * %S' "$1")))"
	need=$((size * $5 + ${6:-0}))
	((need < free)) || fail "the ${4} (${size} bytes) does not fit in the drill's scratch space (${free} bytes free, ${need} needed)"
}

pinned_id_file() {
	echo "${ENV_DIR}/${repository_name}.id"
}

# The repository's id (from its config), or restic's status when it cannot be read
# (restic 0.17+: 10 no repository there, 12 a wrong password), else 1.
repository_id() {
	local config
	config="$(restic_ cat config)" || return
	jq -er '.id | select(type == "string" and test("^[0-9a-f]{64}$"))' <<<"$config" || return 1
}

# Fails unless the repository exists and is the one the operator initialised.
verify_repository() {
	local file pinned actual status=0
	file="$(pinned_id_file)"
	[[ -s "$file" ]] || fail "no repository id is pinned in ${file}: the operator initialises the repository once with: sudo airlock-backup-init ${repository_name}"
	pinned="$(<"$file")"
	[[ "$pinned" =~ ^[0-9a-f]{64}$ ]] || bad_input "${file}: expected one 64-character hex repository id"
	actual="$(repository_id)" || status=$?
	case $status in
	0) ;;
	10) fail "there is no ${repository_name} repository at ${repository_url} (pinned id ${pinned:0:8}): its files may have been hidden; it is never re-initialised (docs/backups.md)" ;;
	12) fail "the ${repository_name} repository at ${repository_url} does not open with the RESTIC_PASSWORD of its credentials file (pinned id ${pinned:0:8})" ;;
	*) fail "the ${repository_name} repository at ${repository_url} cannot be read (restic exit ${status}, pinned id ${pinned:0:8}); it is never re-initialised (docs/backups.md)" ;;
	esac
	[[ "$actual" == "$pinned" ]] ||
		fail "the ${repository_name} repository id ${actual:0:8} is not the pinned ${pinned:0:8}: the repository was replaced or re-initialised"
}

# snapshot_of TAG NAME PROGRAM ARGS...: a snapshot of PROGRAM's output as the file NAME,
# kept only when PROGRAM succeeds: restic (0.17+, --stdin-from-command) runs it and stores
# nothing when it fails, where a pipe into --stdin would keep whatever arrived before the
# failure (or nothing at all) as the newest snapshot. PROGRAM starts with none of restic's
# environment (env -i): the credentials stay in restic.
snapshot_of() {
	local tag="$1" name="$2"
	shift 2
	restic_ backup --tag "$tag" --stdin-from-command --stdin-filename "$name" -- env -i PATH="$CLEAN_PATH" "$@"
}

# new_scratch: prints a fresh root-owned folder for confined work: input/ (files the
# drill user may only read), work/ (the drill user's own), etc/ (its passwd and group).
new_scratch() {
	local scratch uid gid
	uid="$(id -u "$DRILL_USER" 2>/dev/null)" || fail "the unprivileged user ${DRILL_USER} is missing (the gateway's cloud-init creates it)"
	gid="$(id -g "$DRILL_USER")"
	# Under /var/tmp (on disk, not in memory); the drills check what they restore fits first (fits).
	scratch="$(mktemp -d "${AIRLOCK_SCRATCH_DIR:-/var/tmp}/airlock-drill.XXXXXX")"
	install -d -m 0750 -o root -g "$gid" "$scratch/input" "$scratch/etc"
	install -d -m 0700 -o "$uid" -g "$gid" "$scratch/work"
	printf '%s:x:%s:%s::/work:/usr/sbin/nologin\n' "$DRILL_USER" "$uid" "$gid" >"$scratch/etc/passwd"
	printf '%s:x:%s:\n' "$DRILL_USER" "$gid" >"$scratch/etc/group"
	chmod 0644 "$scratch/etc/passwd" "$scratch/etc/group"
	chgrp "$gid" "$scratch"
	chmod 0750 "$scratch"
	echo "$scratch"
}

# as_input SCRATCH NAME: makes SCRATCH/input/NAME (written by root) readable to the drill user.
as_input() {
	chgrp "$DRILL_USER" "$1/input/$2"
	chmod 0640 "$1/input/$2"
}

# confined SCRATCH COMMAND...: COMMAND, on data from the sandbox, where that data can do
# no harm. A dedicated unprivileged user (so no credential file, no root-owned state and
# no other user's process is within its reach) runs COMMAND under bubblewrap with every
# namespace unshared (no network at all, its own PIDs, IPC and hostname), no capabilities,
# no new privileges, no nested user namespaces and an empty environment. Its filesystem is
# /usr read-only (distribution files only: programs, libraries, PostgreSQL's share files,
# time zones; no host state or secrets live there) with /etc/alternatives (the symlinks
# that name awk and friends), a passwd entry for itself, fresh
# /proc, /dev and /tmp, SCRATCH/input read-only at /input and SCRATCH/work at /work. Only
# its stdout and stderr come back; no file it wrote is ever read by root.
confined() {
	local scratch="$1"
	shift
	timeout --kill-after=1m "$CONFINED_TIMEOUT" \
		setpriv --reuid="$DRILL_USER" --regid="$DRILL_USER" --clear-groups --no-new-privs \
		env -i /usr/bin/bwrap \
		--unshare-all --unshare-user --disable-userns --die-with-parent --new-session --cap-drop ALL --clearenv \
		--ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/sbin /sbin --symlink usr/lib /lib --symlink usr/lib64 /lib64 \
		--ro-bind /etc/alternatives /etc/alternatives \
		--ro-bind "$scratch/etc/passwd" /etc/passwd --ro-bind "$scratch/etc/group" /etc/group \
		--proc /proc --dev /dev --tmpfs /tmp \
		--ro-bind "$scratch/input" /input --bind "$scratch/work" /work --chdir /work \
		--setenv PATH /usr/bin --setenv HOME /work --setenv LC_ALL C.UTF-8 \
		"$@" </dev/null
}

# sanitized: at most LINES lines of stdin, printable ASCII only (text from the sandbox
# reaches the journal, never terminal escapes or forged log lines).
sanitized() {
	LC_ALL=C tr -c '[:print:]\n' '?' | sed -n "1,${1}p" | cut -c 1-300
}
