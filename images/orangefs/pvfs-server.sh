#!/bin/sh
# A metadata or I/O server: the role comes from the config file, the alias (PVFS_ALIAS) from the
# service. Creates its storage on first start, then runs in the foreground (SIGTERM stops it).
#   pvfs-server.sh               run the server
#   pvfs-server.sh --healthcheck  exit 0 once this server answers
set -eu
conf=/etc/pvfs/pvfs2.conf
alias=${PVFS_ALIAS:?PVFS_ALIAS names this server: pvfs-meta or pvfs-ioN}
# this server's port, as the config gives it (3334, or its own with PVFS_PORTS=distinct)
port=$(sed -n "s|.*tcp://$alias:\([0-9]*\).*|\1|p" "$conf" 2>/dev/null | head -n 1)
if [ "${1:-}" = --healthcheck ]; then
  exec pvfs2-check-server -h "$alias" -f "${PVFS_FSNAME:-tierbench}" -n tcp -p "${port:-3334}" >/dev/null 2>&1
fi
[ -f "$conf" ] || { echo "pvfs-server: no $conf (the pvfs-config job writes it)" >&2; exit 2; }
[ -n "$port" ] || {
  echo "pvfs-server: $alias is not in $conf: raise PVFS_IO_SERVERS or start fewer servers" >&2; exit 2; }
mkdir -p /data/log
if [ ! -e /data/.created ]; then
  pvfs2-server -f -a "$alias" "$conf"
  touch /data/.created
fi
exec pvfs2-server -d -a "$alias" "$conf"
