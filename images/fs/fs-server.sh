#!/bin/bash
# The fs tier's file server: glusterd (management, port 24007) and the brick server of one
# GlusterFS volume, $FS_VOLUME, stored in $FS_BRICK (/srv/share/brick: a volume on the host's
# disk). The volume is created on first start and started on every start. Its brick is named by
# $FS_BRICK_HOST (default: the container's hostname; with host networking on a cluster node, the
# node's data-plane address, so that clients on other nodes reach the brick there). glusterd
# and the brick server listen only on $FS_BIND (glusterd's transport.socket.bind-address, which
# it hands on to the brick), and the volume admits only the addresses of $FS_CLIENTS
# (auth.allow, comma-separated, set at every start); it refuses to start without either.
#   fs-server.sh                run until glusterd exits
#   fs-server.sh --healthcheck  exit 0 once the volume's brick is online
set -euo pipefail
volume=${FS_VOLUME:-share}
if [ "${1:-}" = --healthcheck ]; then
  gluster --mode=script volume status "$volume" detail 2>/dev/null | grep -q '^Online.*: Y'
  exit
fi
fail() { echo "fs-server: $*" >&2; exit 2; }
[ -n "${FS_BIND:-}" ] || fail "FS_BIND is empty: set it to the address to serve on"
[ -n "${FS_CLIENTS:-}" ] || fail "FS_CLIENTS is empty: set it to the clients' addresses (tierbench does)"
case $FS_BIND in *[!0-9A-Fa-f.:]*) fail "FS_BIND=$FS_BIND is not an IP address" ;; esac
case $FS_CLIENTS in *[!0-9A-Fa-f.:,]*) fail "FS_CLIENTS=$FS_CLIENTS: only addresses, comma-separated" ;; esac
brick_host=${FS_BRICK_HOST:-$(hostname)}
mkdir -p "$FS_BRICK" /var/log/glusterfs
vol=${GLUSTERD_VOL:-/etc/glusterfs/glusterd.vol}  # (another file: the unit tests)
sed -i '/transport.socket.bind-address/d' "$vol"
sed -i "s|^\(\s*option transport.socket.listen-port .*\)$|\1\n    option transport.socket.bind-address $FS_BIND|" "$vol"
grep -q "bind-address $FS_BIND\$" "$vol" || fail "could not set glusterd's bind address in $vol"
glusterd --no-daemon --log-file=- --log-level=WARNING &
daemon=$!
trap 'kill "$daemon" 2>/dev/null; pkill -x glusterfsd 2>/dev/null; exit 0' TERM INT
for _ in $(seq 60); do gluster --mode=script volume list >/dev/null 2>&1 && break; sleep 0.5; done
if ! gluster --mode=script volume info "$volume" >/dev/null 2>&1; then
  # one brick on this server ("force": the brick may sit on the root file system's disk)
  gluster --mode=script volume create "$volume" "$brick_host:$FS_BRICK" force
fi
gluster --mode=script volume set "$volume" auth.allow "$FS_CLIENTS" >/dev/null
# a client's O_DIRECT stops at the client (as over NFS): the brick reads and writes through the
# server's page cache, so what the server caches (and its memory cap) decides what the disk serves
gluster --mode=script volume set "$volume" network.remote-dio enable >/dev/null
gluster --mode=script volume start "$volume" force >/dev/null
echo "fs-server: volume $volume started, brick $brick_host:$FS_BRICK, on $FS_BIND for $FS_CLIENTS" >&2
wait "$daemon"
echo "fs-server: glusterd exited" >&2
exit 1
