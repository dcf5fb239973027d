# shellcheck shell=bash disable=SC2034 # WORKSPACE/CONTAINER/VERB are the wrapper's to read
# airlock: the agent's undo button, on the wrapper's side (sourced by sandbox-shell,
# which runs as the agent user, after broker-client.bash). It recognises exactly
# three verbs when they are the whole command,
#   airlock checkpoint [--label TEXT]   airlock checkpoints [--json]
#   airlock restore ID|--label TEXT|last
# and `airlock try ... -- COMMAND` (COMMAND in a throwaway clone of the workspace),
# takes an automatic checkpoint before a command that matches the destructive-command
# list, and, in per-session mode, picks the session's container. The root broker
# does the work and checks every request as hostile.

readonly CHECKPOINT_AUTO={{autoCheckpoint}}
readonly SESSIONS={{sessions}}
readonly DESTRUCTIVE_RULES=/etc/airlock/destructive-commands
readonly SESSION_NAME='^[a-z0-9][a-z0-9-]{0,30}$'
# airlock try: its defaults and bounds (seconds; KiB of output kept at each end).
readonly TRY_DEFAULT_TIMEOUT={{tryTimeout}} TRY_MAX_TIMEOUT={{tryMaxTimeout}}
readonly TRY_DEFAULT_OUTPUT_KB={{tryOutputKb}} TRY_MAX_OUTPUT_KB={{tryMaxOutputKb}}

# checkpoint_workspace: sets WORKSPACE and CONTAINER for this command. Shared mode:
# the one shell. Per-session mode: AIRLOCK_SESSION names a session; without it, the
# connection gets its own, thrown away when the connection ends. The broker creates
# (or resumes) the session's workspace and container on its first command.
checkpoint_workspace() {
	WORKSPACE=shared
	CONTAINER=agent-sandbox-shell
	[[ "$SESSIONS" == per-session ]] || return 0
	if [[ -n "${AIRLOCK_SESSION:-}" ]]; then
		if [[ ! "$AIRLOCK_SESSION" =~ $SESSION_NAME ]]; then
			echo "airlock: AIRLOCK_SESSION must be 1-31 of a-z, 0-9 and -, starting with a letter or digit" >&2
			return 2
		fi
		WORKSPACE="s-${AIRLOCK_SESSION}"
	else
		local digest
		digest=$(printf '%s' "${SSH_CONNECTION:-}" | sha256sum)
		WORKSPACE="c-${digest:0:12}"
	fi
	if ! broker_call session "workspace=${WORKSPACE}" "connection=$(base64_of "${SSH_CONNECTION:-}")"; then
		echo "airlock: no session: ${BROKER_ERROR}" >&2
		return 1
	fi
	CONTAINER="${BROKER_DATA[0]}"
}

# airlock_verb COMMAND: true when COMMAND is one of the three verbs, exactly; then
# VERB holds its broker request. Anything else (even `airlock ...`) is an ordinary
# command for the container.
airlock_verb() {
	local command=$1 space='[[:space:]]'
	local label="${space}+--label(=|${space}+)(.*[^[:space:]])${space}*$"
	VERB=()
	if [[ "$command" =~ ^${space}*airlock${space}+checkpoint${space}*$ ]]; then
		VERB=(checkpoint "workspace=${WORKSPACE}")
	elif [[ "$command" =~ ^${space}*airlock${space}+checkpoint${label} ]]; then
		VERB=(checkpoint "workspace=${WORKSPACE}" "label=$(base64_of "$(unquoted "${BASH_REMATCH[2]}")")")
	elif [[ "$command" =~ ^${space}*airlock${space}+checkpoints(${space}+--json)?${space}*$ ]]; then
		VERB=(checkpoints "workspace=${WORKSPACE}" ${BASH_REMATCH[1]:+json=yes})
	elif [[ "$command" =~ ^${space}*airlock${space}+restore${space}+([1-9][0-9]{0,8})${space}*$ ]]; then
		VERB=(restore "workspace=${WORKSPACE}" "id=${BASH_REMATCH[1]}")
	elif [[ "$command" =~ ^${space}*airlock${space}+restore${space}+last${space}*$ ]]; then
		VERB=(restore "workspace=${WORKSPACE}" last=yes)
	elif [[ "$command" =~ ^${space}*airlock${space}+restore${label} ]]; then
		VERB=(restore "workspace=${WORKSPACE}" "label=$(base64_of "$(unquoted "${BASH_REMATCH[2]}")")")
	fi
	((${#VERB[@]} > 0))
}

# airlock_try COMMAND: true when COMMAND is `airlock try ...`. Well formed
# (`airlock try [--timeout SECONDS] [--network none|egress] [--output-kb N] [--keep] -- LINE`),
# it sets TRY_TIMEOUT, TRY_NETWORK, TRY_OUTPUT_KB, TRY_KEEP and TRY_COMMAND (LINE, run as
# the shell runs a command; `-- 'LINE'` is LINE); otherwise TRY_USAGE says what is wrong.
airlock_try() {
	local rest=$1 space='[[:space:]]' usage="usage: airlock try [--timeout SECONDS] [--network none|egress] [--output-kb N] [--keep] -- COMMAND"
	[[ "$rest" =~ ^${space}*airlock${space}+try(${space}.*)?$ ]] || return 1
	rest=${BASH_REMATCH[1]}
	TRY_TIMEOUT=$TRY_DEFAULT_TIMEOUT TRY_NETWORK=none TRY_OUTPUT_KB=$TRY_DEFAULT_OUTPUT_KB TRY_KEEP="" TRY_COMMAND="" TRY_USAGE=""
	while true; do
		if [[ "$rest" =~ ^${space}+--timeout(=|${space}+)([0-9]{1,7})(${space}.*)$ ]]; then
			TRY_TIMEOUT=$((10#${BASH_REMATCH[2]})) rest=${BASH_REMATCH[3]}
		elif [[ "$rest" =~ ^${space}+--network(=|${space}+)(none|egress)(${space}.*)$ ]]; then
			TRY_NETWORK=${BASH_REMATCH[2]} rest=${BASH_REMATCH[3]}
		elif [[ "$rest" =~ ^${space}+--output-kb(=|${space}+)([0-9]{1,7})(${space}.*)$ ]]; then
			TRY_OUTPUT_KB=$((10#${BASH_REMATCH[2]})) rest=${BASH_REMATCH[3]}
		elif [[ "$rest" =~ ^${space}+--keep(${space}.*)$ ]]; then
			TRY_KEEP=yes rest=${BASH_REMATCH[1]}
		elif [[ "$rest" =~ ^${space}+--${space}+(.*[^[:space:]])${space}*$ ]]; then
			# One pair of quotes around the whole line comes off, as a shell would take them.
			TRY_COMMAND=$(unquoted "${BASH_REMATCH[1]}")
			[[ "$TRY_COMMAND" =~ [^[:space:]] ]] || TRY_USAGE=$usage
			break
		else
			TRY_USAGE=$usage
			return 0
		fi
	done
	if ((TRY_TIMEOUT < 1 || TRY_TIMEOUT > TRY_MAX_TIMEOUT)); then
		TRY_USAGE="--timeout is 1 to ${TRY_MAX_TIMEOUT} seconds"
	elif ((TRY_OUTPUT_KB < 1 || TRY_OUTPUT_KB > TRY_MAX_OUTPUT_KB)); then
		TRY_USAGE="--output-kb is 1 to ${TRY_MAX_OUTPUT_KB}"
	fi
	return 0
}

# checkpoint_call VERB [KEY=VALUE...]: the broker's answer on stdout, or its refusal on stderr (status 1).
checkpoint_call() {
	if ! broker_call "$@"; then
		echo "airlock: ${BROKER_ERROR}" >&2
		return 1
	fi
	((${#BROKER_DATA[@]} == 0)) || printf '%s\n' "${BROKER_DATA[@]}"
}

# unquoted TEXT: TEXT without one pair of surrounding quotes, read as data (never evaluated).
unquoted() {
	if [[ "$1" =~ ^\'([^\']*)\'$ ]] || [[ "$1" =~ ^\"([^\"\\\$\`]*)\"$ ]]; then
		printf '%s' "${BASH_REMATCH[1]}"
	else
		printf '%s' "$1"
	fi
}

# checkpoint_auto TEXT [LABEL]: a checkpoint before a destructive command, on the open
# broker connection (so the command's record names it), labelled with LABEL (by
# default TEXT). TEXT is all that will run, so nothing in it escapes the list. Never
# blocks the command.
checkpoint_auto() {
	[[ "$CHECKPOINT_AUTO" == true ]] || return 0
	local rules status=0 label=${2:-$1}
	rules=$(destructive_rules "$1") || status=$?
	((status == 1)) && return 0
	if ((status != 0)); then
		echo "airlock: no automatic checkpoint: ${DESTRUCTIVE_RULES} cannot be read" >&2
	elif broker_call checkpoint "workspace=${WORKSPACE}" auto=yes "label=$(base64_of "${label:0:200}")"; then
		local id="${BROKER_DATA[0]#checkpoint }"
		echo "airlock: checkpoint ${id%% *} taken before this command (${rules//$'\n'/, }); undo with: airlock restore ${id%% *}" >&2
	else
		echo "airlock: no automatic checkpoint: ${BROKER_ERROR}; running the command anyway" >&2
	fi
}

# destructive_rules COMMAND: prints the names of the rules COMMAND matches; status 0
# when one does, 1 when none does, 2 when the list cannot be read. The text is only
# ever matched (grep -E), never evaluated; see the list for how it is read.
destructive_rules() {
	local text="${1:0:65536}" separators=$'\n\r;&|()`'
	local unquoted_text="${text//[\'\"\\]/}" split_text="${text//[\'\"]/;}"
	unquoted_text="${unquoted_text//[$separators]/ ; }"
	split_text="${split_text//\\/}"
	split_text="${split_text//[$separators]/ ; }"
	local readings name pattern status=0
	readings=$(printf '%s\n%s' "$unquoted_text" "$split_text")
	local names=() patterns=()
	while read -r name pattern; do
		[[ -z "$name" || "$name" == \#* ]] && continue
		names+=("$name")
		patterns+=(-e "$pattern")
	done <"$DESTRUCTIVE_RULES" || return 2
	((${#names[@]} > 0)) || return 2
	# One grep decides (most commands match nothing); only a match is named rule by rule.
	grep --extended-regexp --ignore-case --quiet "${patterns[@]}" <<<"$readings" || status=$?
	((status == 0)) || return $((status == 1 ? 1 : 2))
	local i
	for i in "${!names[@]}"; do
		if grep --extended-regexp --ignore-case --quiet "${patterns[@]:$((2 * i)):2}" <<<"$readings"; then
			echo "${names[$i]}"
		fi
	done
}
