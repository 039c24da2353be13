#!/bin/sh
# One-shot config job: write the file system's config for one metadata server and
# PVFS_IO_SERVERS I/O servers (aliases pvfs-meta, pvfs-io1..N, equal to the Compose hostnames)
# into /etc/pvfs (PVFS_CONF_DIR), plus the clients' pvfs2tab. Rerun on every bring-up, so N and the strip size
# always match the running cluster.
set -eu
n=${PVFS_IO_SERVERS:-2}
case $n in ''|*[!0-9]*|0) echo "pvfs-genconfig: PVFS_IO_SERVERS=$n is not a count >= 1" >&2; exit 2;; esac
[ "$n" -le 8 ] || { echo "pvfs-genconfig: PVFS_IO_SERVERS=$n: the overlay defines 8 I/O servers" >&2; exit 2; }
io=$(seq -s, -f 'pvfs-io%g' 1 "$n")
dir=${PVFS_CONF_DIR:-/etc/pvfs}
conf=$dir/pvfs2.conf
# Written to a file, not to '-': on stdout genconfig adds a stray line to the config.
pvfs2-genconfig --quiet --protocol tcp --tcpport 3334 \
  --metaservers pvfs-meta --ioservers "$io" \
  --storage /data/storage --metadata /data/meta --logfile /data/log/pvfs2.log \
  --fsname "${PVFS_FSNAME:-tierbench}" --fsid 7123 \
  --dist-name simple_stripe --dist-params "strip_size:${PVFS_STRIP_SIZE:-65536}" \
  --client-job-timeout "${PVFS_JOB_TIMEOUT:-15}" --server-job-timeout "${PVFS_JOB_TIMEOUT:-15}" \
  "$conf.new"
# PVFS_PORTS=distinct (a cluster, host networking): each server its own port, 3334 for the
# metadata server and 3334 + N for pvfs-ioN, so that several servers can share one node.
if [ "${PVFS_PORTS:-shared}" = distinct ]; then
  for i in $(seq 1 "$n"); do
    sed -i "s|tcp://pvfs-io$i:3334\b|tcp://pvfs-io$i:$((3334 + i))|g" "$conf.new"
  done
fi
# Each server listens only on its alias's address (its container's on one host, its node's
# data-plane address on a cluster), not on every address of the host: TCPBindSpecific. OrangeFS
# has no way to admit only some peers in this build (its TrustedNetwork option exists only
# with the experimental --enable-trusted-connections; docs/security.md).
sed -i 's|^<Defaults>$|<Defaults>\n\tTCPBindSpecific yes|' "$conf.new"
grep -q '^[[:space:]]*TCPBindSpecific yes$' "$conf.new" || { echo "pvfs-genconfig: no <Defaults> in $conf.new" >&2; exit 2; }
mv "$conf.new" "$conf"
echo "tcp://pvfs-meta:3334/${PVFS_FSNAME:-tierbench} /mnt/orangefs pvfs2 defaults 0 0" > "$dir/pvfs2tab"
echo "pvfs-genconfig: 1 metadata + $n I/O servers ($io), strip ${PVFS_STRIP_SIZE:-65536} B, job timeout ${PVFS_JOB_TIMEOUT:-15} s"
