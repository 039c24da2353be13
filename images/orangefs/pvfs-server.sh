#!/bin/sh
# A metadata or I/O server: the role comes from the config file, the alias (PVFS_ALIAS) from the
# service. Creates its storage on first start, then runs in the foreground (SIGTERM stops it).
#   pvfs-server.sh               run the server
#   pvfs-server.sh --healthcheck  exit 0 once this server answers
set -eu
conf=/etc/pvfs/pvfs2.conf
alias=${PVFS_ALIAS:?PVFS_ALIAS names this server: pvfs-meta or pvfs-ioN}
if [ "${1:-}" = --healthcheck ]; then
  exec pvfs2-check-server -h "$alias" -f "${PVFS_FSNAME:-tierbench}" -n tcp -p 3334 >/dev/null 2>&1
fi
[ -f "$conf" ] || { echo "pvfs-server: no $conf (the pvfs-config job writes it)" >&2; exit 2; }
grep -q "tcp://$alias:3334" "$conf" || {
  echo "pvfs-server: $alias is not in $conf: raise PVFS_IO_SERVERS or start fewer servers" >&2; exit 2; }
mkdir -p /data/log
if [ ! -e /data/.created ]; then
  pvfs2-server -f -a "$alias" "$conf"
  touch /data/.created
fi
exec pvfs2-server -d -a "$alias" "$conf"
