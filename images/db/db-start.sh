#!/bin/bash
# Start PostgreSQL in the foreground. On an empty data folder (a new db-data volume) the cluster
# is created first, with the role and the database `tierbench` (password DB_PASSWORD, checked
# with scram-sha-256 from the server's own networks: `samenet`). Settings come from the
# environment (DB_SHARED_BUFFERS, DB_MAX_CONNECTIONS, DB_SYNCHRONOUS_COMMIT, DB_MAX_WAL_SIZE,
# DB_AUTOVACUUM); the runner records them, as the server reports them, in each run's manifest.
# compose/app-db.yml turns autovacuum off (README, "The application and database tiers").
set -euo pipefail
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  echo "db: creating the cluster in $PGDATA" >&2
  initdb -D "$PGDATA" --username=postgres --encoding=UTF8 --no-locale \
    --auth-local=peer --auth-host=scram-sha-256 >/dev/null
  echo "host tierbench tierbench samenet scram-sha-256" >> "$PGDATA/pg_hba.conf"
  password=${DB_PASSWORD//\'/\'\'}
  postgres --single -D "$PGDATA" postgres >/dev/null <<SQL
CREATE ROLE tierbench LOGIN PASSWORD '$password';
CREATE DATABASE tierbench OWNER tierbench;
SQL
fi
exec postgres -D "$PGDATA" \
  -c listen_addresses='*' \
  -c unix_socket_directories=/run/postgresql \
  -c shared_buffers="$DB_SHARED_BUFFERS" \
  -c max_connections="$DB_MAX_CONNECTIONS" \
  -c synchronous_commit="$DB_SYNCHRONOUS_COMMIT" \
  -c max_wal_size="$DB_MAX_WAL_SIZE" \
  -c autovacuum="$DB_AUTOVACUUM" \
  -c password_encryption=scram-sha-256 \
  -c log_min_messages=warning \
  -c logging_collector=off
