#!/bin/sh
# airlock twin: as the official redis image's entrypoint - drop from root to redis,
# and run a bare redis-server without protected mode (the official image builds
# redis with it off; Debian's keeps it on when no config file is given).
set -eu
if [ "${1:-}" = redis-server ] && [ "$(id -u)" = 0 ]; then
	exec setpriv --reuid=redis --regid=redis --init-groups "$0" "$@"
fi
if [ "${1:-}" = redis-server ] && { [ $# -eq 1 ] || [ "${2#-}" != "$2" ]; }; then
	shift
	set -- redis-server --protected-mode no "$@"
fi
exec "$@"
