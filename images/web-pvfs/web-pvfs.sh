#!/bin/sh
# Mount OrangeFS at /srv/docroot with FUSE (direct_io, allow_other: Apache's workers run as
# www-data), then run Apache in the foreground as the plain web image does.
set -eu
spec="tcp://pvfs-meta:3334/${PVFS_FSNAME:-tierbench}"
pvfs2fuse /srv/docroot -o "fs_spec=$spec"
mountpoint -q /srv/docroot || { echo "web-pvfs: OrangeFS ($spec) did not mount" >&2; exit 1; }
exec /usr/local/bin/start-apache "$@"
