#!/bin/sh
# A client machine of the fs tier: the server's volume mounted with the GlusterFS FUSE client
# (needs /dev/fuse and CAP_SYS_ADMIN) at $FS_MOUNT; idles until tierbench runs dbench or fio in
# it with docker exec. The server is $FS_SERVER (default fs-server; on a cluster the server
# node's data-plane address).
#   fs-client.sh                mount and idle; unmount on SIGTERM
#   fs-client.sh --healthcheck  exit 0 once the volume answers through the mount
set -eu
if [ "${1:-}" = --healthcheck ]; then
  mountpoint -q "$FS_MOUNT" && stat -f "$FS_MOUNT" >/dev/null
  exit
fi
mkdir -p "$FS_MOUNT"
glusterfs --no-daemon --log-file=- --log-level=WARNING --volfile-server="${FS_SERVER:-fs-server}" \
  --volfile-id="${FS_VOLUME:-share}" "$FS_MOUNT" &
fuse=$!
trap 'umount "$FS_MOUNT" 2>/dev/null; kill "$fuse" 2>/dev/null; exit 0' TERM INT
wait "$fuse"
echo "fs-client: the GlusterFS client exited" >&2
exit 1
