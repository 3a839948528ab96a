#!/bin/sh
# The official postgres image's contract, on Debian's package: on an empty data directory, initdb with
# POSTGRES_USER (default postgres) and POSTGRES_PASSWORD (required), and create POSTGRES_DB (default the
# user's name); then run the server as the postgres user, listening on every interface with passwords.
set -eu
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"
if [ "${1:-postgres}" != postgres ]; then exec "$@"; fi
[ -n "${POSTGRES_PASSWORD:-}" ] || { echo "POSTGRES_PASSWORD is not set: the server would accept no login" >&2; exit 1; }
as_postgres() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  password=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$password"
  chown postgres "$password"
  as_postgres initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$password" --auth-local=trust \
    --auth-host=scram-sha-256 >/dev/null
  rm -f "$password"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  as_postgres pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  if [ "$POSTGRES_DB" != postgres ]; then as_postgres createdb -U "$POSTGRES_USER" "$POSTGRES_DB"; fi
  as_postgres pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  echo "initialised $PGDATA: user $POSTGRES_USER, database $POSTGRES_DB"
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups postgres -D "$PGDATA" -c listen_addresses='*'
