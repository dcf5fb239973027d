# shellcheck shell=bash disable=SC2034 # HERMES_COMMAND is the wrapper's to read
# airlock: what the sandbox's wrapper knows of the agent runtime's own commands
# (sourced by sandbox-shell). Hermes Agent's ssh terminal (tools/environments/ssh.py)
# wraps each command the agent runs in a frame of its own, and copies its .hermes
# directory back from the sandbox when a session ends. Everything here only matches
# text; nothing of it is evaluated.

# hermes_command TEXT: true when TEXT is one command exactly as Hermes Agent's ssh
# terminal sends it (tools/environments/base.py, _wrap_command: the command inside
# its own frame, which sources Hermes's shell snapshot, enters its cwd and prints its
# cwd marker; quoted by tools/environments/ssh.py, _run_bash, as bash [-l] -c '...'),
# with that command in HERMES_COMMAND. Only matched, never evaluated: anything else is
# an ordinary command.
hermes_command() {
	local text=$1 frame nl=$'\n' q="'"
	HERMES_COMMAND=""
	[[ "$text" =~ ^bash\ (-l\ )?-c\ \'(.*)\'$ ]] || return 1
	frame=${BASH_REMATCH[2]}
	# shlex.quote writes a quote as '"'"' and leaves no other.
	local escaped="${q}\"${q}\"${q}"
	local bare=${frame//"$escaped"/}
	[[ "$bare" != *"$q"* ]] || return 1
	frame=${frame//"$escaped"/$q}
	local snapshot="source /tmp/hermes-snap-[0-9a-f]{12}\\.sh >/dev/null 2>&1 \\|\\| true${nl}"
	local enter="builtin cd -- [^${nl}]* \\|\\| exit 126${nl}"
	local run="eval ${q}(([^${q}]|${q}\\\\${q}${q})*)${q}${nl}__hermes_ec=\\\$\\?${nl}umask 077${nl}"
	local save="\\{ export -p > [^${nl}]* \\|\\| true${nl}"
	local marker="printf ${q}\\\\n__HERMES_CWD_[0-9a-f]{12}__%s__HERMES_CWD_[0-9a-f]{12}__\\\\n${q} \"\\\$\\(pwd -P\\)\"${nl}exit \\\$__hermes_ec"
	[[ "$frame" =~ ^(${snapshot})?${enter}${run}(${save})?${marker}$ ]] || return 1
	local inner=${BASH_REMATCH[2]}
	HERMES_COMMAND=${inner//"${q}\\${q}${q}"/$q}
}

# hermes_sync_back TEXT: true when TEXT is Hermes's download of its .hermes directory
# (ssh.py, _ssh_bulk_download: tar cf - -C / <home>/.hermes, the home quoted by shlex),
# which it unpacks into the runtime's own skills and caches on the gateway (file_sync.py,
# sync_back). The sandbox is hostile: the wrapper answers with an empty archive, so
# nothing it wrote there reaches the gateway, and Hermes finds nothing changed. The home
# is whatever the sandbox answered to Hermes's `echo $HOME` (a planted mktemp or bash
# can answer anything): any quoting of any path ending in .hermes is the download.
hermes_sync_back() {
	[[ "$1" =~ ^tar\ cf\ -\ -C\ /\ .*\.hermes\'?$ ]]
}
