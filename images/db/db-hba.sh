#!/bin/bash
# Print the pg_hba.conf of the database tier: the postgres user on the local socket (peer: the
# image's own scripts and tierbench's psql through `docker exec`), and one line per address of
# DB_CLIENTS (comma-separated) for the tierbench role with its password (scram-sha-256): no
# `samenet`, no `trust`, no network. Prints nothing and exits 2, saying why, when DB_CLIENTS is
# empty or names anything but IPv4 or IPv6 addresses.
set -euo pipefail
clients=${DB_CLIENTS:-}
[ -n "$clients" ] || { echo "db: DB_CLIENTS is empty: set it to the addresses that may connect (tierbench does)" >&2; exit 2; }
IFS=, read -ra addresses <<<"$clients"
lines=()
for address in "${addresses[@]}"; do
  if [[ "$address" =~ ^([0-9]{1,3}\.){3}[0-9]{1,3}$ ]]; then
    lines+=("host tierbench tierbench $address/32 scram-sha-256")
  elif [[ "$address" =~ ^[0-9A-Fa-f:]+$ && "$address" == *:* ]]; then
    lines+=("host tierbench tierbench $address/128 scram-sha-256")
  else
    echo "db: DB_CLIENTS names '$address', which is not an IP address" >&2
    exit 2
  fi
done
echo "# Written by db-hba.sh at every start from DB_CLIENTS."
echo "local all postgres peer"
printf '%s\n' "${lines[@]}"
