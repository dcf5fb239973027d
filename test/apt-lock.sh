#!/bin/bash
# Sourced by test/run.sh: wait until no other process holds the package manager's
# locks (an unattended upgrade, another developer's apt-get) instead of failing at
# once. dpkg and apt take POSIX locks on these files; /proc/locks lists them by inode.
readonly APT_LOCK_FILES=(/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock)

# Prints the pid holding one of the locks, or nothing.
apt_lock_holder() {
	local file inode
	for file in "${APT_LOCK_FILES[@]}"; do
		[[ -e $file ]] || continue
		inode=$(stat -c %i "$file")
		# "1: POSIX  ADVISORY  WRITE <pid> <major>:<minor>:<inode> <start> <end>"
		awk -v inode="$inode" '$2 != "->" && $2 != "FLOCK" { split($6, id, ":"); if (id[3] == inode) { print $5; exit } }' /proc/locks
	done | head -n 1
}

# wait_for_apt_locks [SECONDS]: returns 0 when the locks are free, 1 after SECONDS (default 600).
wait_for_apt_locks() {
	local limit=${1:-600} waited=0 holder
	while holder=$(apt_lock_holder) && [[ -n $holder ]]; do
		if ((waited == 0)); then echo "test/run.sh: waiting for the package manager (locked by pid $holder)..." >&2; fi
		if ((waited >= limit)); then
			echo "test/run.sh: the package manager is still locked by pid $holder after ${limit}s" >&2
			return 1
		fi
		sleep 1
		waited=$((waited + 1))
	done
}
