#!/bin/bash
# One-shot job: the schema and a data set generated from a seed, in the database at DB_HOST.
#   items(id, grp, payload)  DB_ROWS rows, payloads of DB_ROW_BYTES bytes stored uncompressed,
#                            drawn with PostgreSQL's random() after setseed(DB_SEED)
#   writes(id, item, size, digest, at)  one row per write request (the runner empties it
#                            before every point and counts it after)
#   seed_info                what the data set was made from
# A data set made from the same rows, row size and seed is kept (a bring-up takes seconds);
# any other is replaced. Runs as postgres with the tierbench role's password.
set -euo pipefail
: "${DB_HOST:=db}" "${DB_PORT:=5432}" "${DB_ROWS:?}" "${DB_ROW_BYTES:?}" "${DB_SEED:?}"
export PGPASSWORD="$DB_PASSWORD" PGCONNECT_TIMEOUT=5
psql=(psql -X -q -v ON_ERROR_STOP=1 -h "$DB_HOST" -p "$DB_PORT" -U tierbench -d tierbench)
have=$("${psql[@]}" -At -c "SELECT to_regclass('seed_info') IS NOT NULL
  AND to_regclass('items') IS NOT NULL AND to_regclass('writes') IS NOT NULL")
if [ "$have" = t ]; then
  have=$("${psql[@]}" -At -c "SELECT EXISTS (SELECT 1 FROM seed_info WHERE rows = $DB_ROWS
    AND row_bytes = $DB_ROW_BYTES AND seed = $DB_SEED AND complete)")
fi
if [ "$have" = t ]; then
  echo "db-seed: the data set of $DB_ROWS rows x $DB_ROW_BYTES bytes (seed $DB_SEED) is in place" >&2
  exit 0
fi
echo "db-seed: writing $DB_ROWS rows x $DB_ROW_BYTES bytes (seed $DB_SEED)" >&2
start=$(date +%s)
"${psql[@]}" <<SQL
DROP TABLE IF EXISTS items, writes, seed_info;
CREATE TABLE seed_info (rows bigint NOT NULL, row_bytes int NOT NULL, seed bigint NOT NULL,
                        complete boolean NOT NULL DEFAULT false, made timestamptz DEFAULT now());
INSERT INTO seed_info (rows, row_bytes, seed) VALUES ($DB_ROWS, $DB_ROW_BYTES, $DB_SEED);
CREATE TABLE items (id bigint PRIMARY KEY, grp int NOT NULL, payload text NOT NULL);
ALTER TABLE items ALTER COLUMN payload SET STORAGE EXTERNAL;
CREATE TABLE writes (id bigserial PRIMARY KEY, item bigint NOT NULL, size int NOT NULL,
                     digest text NOT NULL, at timestamptz NOT NULL DEFAULT now());
-- One backend draws every value in order: the same seed gives the same rows.
SELECT setseed(($DB_SEED % 1000003)::float8 / 1000003);
INSERT INTO items
  SELECT g, (random() * 1000)::int,
         substr(repeat(md5(random()::text), ($DB_ROW_BYTES + 31) / 32), 1, $DB_ROW_BYTES)
  FROM generate_series(1, $DB_ROWS) AS g;
VACUUM ANALYZE items;
UPDATE seed_info SET complete = true;
SQL
echo "db-seed: done in $(( $(date +%s) - start )) s" >&2
