#!/bin/bash
# Start PostgreSQL in the foreground, listening only on DB_LISTEN (the tier's address on the back
# network, or its node's data-plane address) and the local socket. On an empty data folder (a new
# db-data volume) the cluster is created first, with the role and the database `tierbench`. At
# every start pg_hba.conf is written anew (db-hba.sh: one line per address of DB_CLIENTS) and the
# role's password set to DB_PASSWORD, which tierbench makes per stack bring-up and hands over in
# the environment: it is in no image, and nothing here prints it. Settings come from the
# environment (DB_SHARED_BUFFERS, DB_MAX_CONNECTIONS, DB_SYNCHRONOUS_COMMIT, DB_MAX_WAL_SIZE,
# DB_AUTOVACUUM); the runner records them, as the server reports them, in each run's manifest.
# compose/app-db.yml turns autovacuum off (README, "The application and database tiers").
# pg_stat_statements is loaded and its view made in the `postgres` database, where tierbench's
# probe reads it: the counters of every statement, exact when it ends (pg_stat_database is
# published up to a second late); they start from zero at every start (not saved at shutdown),
# so a restart shows as counters that went down.
set -euo pipefail
fail() { echo "db: $*" >&2; exit 2; }
[ -n "${DB_LISTEN:-}" ] || fail "DB_LISTEN is empty: set it to the address to listen on"
[ -n "${DB_PASSWORD:-}" ] || fail "DB_PASSWORD is empty: tierbench makes one per bring-up; by hand, set it"
case $DB_LISTEN in
  *[!0-9A-Fa-f.:]*|'') fail "DB_LISTEN=$DB_LISTEN is not an IP address" ;;
esac
hba=$(db-hba.sh)
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  echo "db: creating the cluster in $PGDATA" >&2
  initdb -D "$PGDATA" --username=postgres --encoding=UTF8 --no-locale \
    --auth-local=peer --auth-host=scram-sha-256 >/dev/null
  postgres --single -D "$PGDATA" postgres >/dev/null <<SQL
CREATE ROLE tierbench LOGIN;
CREATE DATABASE tierbench OWNER tierbench;
SQL
fi
printf '%s\n' "$hba" >"$PGDATA/pg_hba.conf"
# The password goes in on standard input, never on a command line; the statement's output and
# any error (which would quote it) are dropped.
password=${DB_PASSWORD//\'/\'\'}
if ! postgres --single -D "$PGDATA" -c password_encryption=scram-sha-256 postgres \
    >/dev/null 2>&1 <<<"ALTER ROLE tierbench PASSWORD '$password';"; then
  fail "setting the tierbench role's password failed (single-user mode)"
fi
if ! postgres --single -D "$PGDATA" postgres >/dev/null \
    <<<"CREATE EXTENSION IF NOT EXISTS pg_stat_statements;"; then
  fail "creating the pg_stat_statements extension failed (single-user mode)"
fi
exec postgres -D "$PGDATA" \
  -c listen_addresses="$DB_LISTEN" \
  -c unix_socket_directories=/run/postgresql \
  -c shared_buffers="$DB_SHARED_BUFFERS" \
  -c max_connections="$DB_MAX_CONNECTIONS" \
  -c synchronous_commit="$DB_SYNCHRONOUS_COMMIT" \
  -c max_wal_size="$DB_MAX_WAL_SIZE" \
  -c autovacuum="$DB_AUTOVACUUM" \
  -c shared_preload_libraries=pg_stat_statements \
  -c pg_stat_statements.save=off \
  -c pg_stat_statements.track_utility=on \
  -c password_encryption=scram-sha-256 \
  -c log_min_messages=warning \
  -c logging_collector=off
