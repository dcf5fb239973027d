#!/bin/bash
# airlock twin: the parts of the official postgres image's entrypoint that airlock's
# compose relies on. As root: own PGDATA and the socket directory (/run is a tmpfs),
# then drop to postgres. First start: initdb, the host rule for
# POSTGRES_HOST_AUTH_METHOD, and POSTGRES_DB.
set -Eeuo pipefail

if [[ "${1:-}" == postgres && "$(id -u)" == 0 ]]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chown postgres:postgres "$PGDATA" /var/run/postgresql
	chmod 700 "$PGDATA"
	chmod 2777 /var/run/postgresql
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" "$@"
fi

if [[ "${1:-}" == postgres && ! -s "$PGDATA/PG_VERSION" ]]; then
	method="${POSTGRES_HOST_AUTH_METHOD:-}"
	if [[ -z "${POSTGRES_PASSWORD:-}" && "$method" != trust ]]; then
		echo "docker-entrypoint.sh (airlock twin): set POSTGRES_PASSWORD or POSTGRES_HOST_AUTH_METHOD=trust" >&2
		exit 1
	fi
	user="${POSTGRES_USER:-postgres}"
	if [[ -n "${POSTGRES_PASSWORD:-}" ]]; then
		initdb --username="$user" --auth-local=trust --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD")
	else
		initdb --username="$user" --auth-local=trust
	fi
	printf '\nhost all all all %s\n' "${method:-scram-sha-256}" >>"$PGDATA/pg_hba.conf"
	db="${POSTGRES_DB:-$user}"
	if [[ "$db" != postgres ]]; then
		pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
		psql -v ON_ERROR_STOP=1 --username="$user" --dbname=postgres --set db="$db" <<<'CREATE DATABASE :"db";'
		pg_ctl -D "$PGDATA" -m fast -w stop
	fi
fi

exec "$@"
