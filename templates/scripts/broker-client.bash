# shellcheck shell=bash disable=SC2034 # BROKER_DATA/BROKER_ERROR are the wrapper's to read
# airlock: the ForceCommand wrapper's only way to the root broker
# (/usr/local/libexec/airlock/broker, started per connection by
# airlock-broker.socket). Sourced by sandbox-shell, which runs as the agent user:
# whatever it sends is checked by the broker as hostile input.
#
# One connection per command, kept open while the command runs, so the broker
# completes the record itself if this process is killed.

readonly BROKER_SOCKET=/run/airlock/broker.sock
# Seconds to wait for one reply: a record append is one fsync; the other verbs
# (checkpoint, restore, session) run the checkpoint engine, which the broker gives
# 600 s (a restore restarts the workspace's containers; under emulation, over 30 s).
readonly BROKER_RECORD_SECONDS=30
readonly BROKER_ENGINE_SECONDS=610

broker_connect() {
	coproc BROKER { exec socat -t 5 - "UNIX-CONNECT:${BROKER_SOCKET}" 2>/dev/null; }
}

# broker_call VERB [KEY=VALUE...]: one request on the open connection. The reply's
# data lines land in BROKER_DATA; a refusal, in BROKER_ERROR (and status 1).
broker_call() {
	BROKER_DATA=()
	BROKER_ERROR="no reply from the broker at ${BROKER_SOCKET}"
	# bash drops BROKER once the connection's process has exited (nothing listening).
	local to="${BROKER[1]:-}" from="${BROKER[0]:-}" line status=0 wait=$BROKER_ENGINE_SECONDS
	[[ "$1" == record-* ]] && wait=$BROKER_RECORD_SECONDS
	[[ -n "$to" && -n "$from" ]] || return 1
	# A broker that is gone must fail this call, not kill the wrapper with SIGPIPE.
	trap '' PIPE
	{ printf '%s\n' "$*" >&"$to"; } 2>/dev/null || status=1
	trap - PIPE
	((status == 0)) || return 1
	while IFS= read -r -t "$wait" -u "$from" line 2>/dev/null; do
		case "$line" in
		ok) return 0 ;;
		"error "*) BROKER_ERROR="${line#error }" && return 1 ;;
		"data "*) BROKER_DATA+=("${line#data }") ;;
		*) break ;;
		esac
	done
	return 1
}

# broker_stream VERB [KEY=VALUE...]: one request on its own connection, the reply
# copied to stdout as it comes (the gateway reads it: `data` lines, then ok/error).
broker_stream() {
	printf '%s\n' "$*" | socat -t 300 - "UNIX-CONNECT:${BROKER_SOCKET}"
}

# record_begin COMMAND NAMES IMAGE: the command goes on the record before it runs.
# NAMES are the variables that cross into the container (names only, never values);
# IMAGE is `docker inspect --format '{{.Image}} {{.Config.Image}}'` of its container.
record_begin() {
	local names="${2// /,}"
	broker_call record-begin "command=$(base64_of "$1")" "env=${names:--}" \
		"image=$(base64_of "$3")" "connection=$(base64_of "${SSH_CONNECTION:-}")"
}

# record_end STATUS: completes the record with the command's exit status.
record_end() {
	broker_call record-end "exit=$1"
}

base64_of() {
	printf '%s' "$1" | base64 --wrap=0
}
