#!/bin/sh
# A client: the pvfs2-* tools work through PVFS2TAB_FILE without a mount; with PVFS_FUSE=1 the
# file system is also mounted with FUSE at /mnt/orangefs (needs /dev/fuse and CAP_SYS_ADMIN).
# Idles until tierbench runs commands in it with docker exec.
#   pvfs-client.sh               mount (if asked) and idle
#   pvfs-client.sh --healthcheck  exit 0 once every server answers (and the mount works)
set -eu
mnt=/mnt/orangefs
spec="tcp://pvfs-meta:3334/${PVFS_FSNAME:-tierbench}"
if [ "${1:-}" = --healthcheck ]; then
  pvfs2-ping -m "$mnt" >/dev/null 2>&1 || exit 1
  [ "${PVFS_FUSE:-0}" != 1 ] || mountpoint -q "$mnt"
  exit
fi
mkdir -p "$mnt"
if [ "${PVFS_FUSE:-0}" = 1 ]; then
  # pvfs2fuse turns on direct_io (no client page cache, as in PVFS) and, as root, allow_other.
  pvfs2fuse "$mnt" -o "fs_spec=$spec"
  trap 'fusermount -u "$mnt" 2>/dev/null; exit 0' TERM INT
  # Block in a way SIGTERM interrupts (sleep runs in the background, wait returns on a signal).
  while :; do sleep 3600 & wait $!; done
fi
exec sleep infinity
