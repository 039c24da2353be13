#!/bin/bash
# 002's heavily loaded server: an MPEG decoder decoding for as long as the container runs, on
# the server's CPUs (compose/fs.yml gives it the server's cpuset). One mpeg2dec process reads
# the stream over and over from a pipe, so it never stops to start again.
#   fs-hog.sh                decode until stopped
#   fs-hog.sh --healthcheck  exit 0 while the decoder runs
set -euo pipefail
if [ "${1:-}" = --healthcheck ]; then
  pgrep -x mpeg2dec >/dev/null
  exit
fi
stream=/usr/local/share/tierbench/hog.m2v
trap 'kill 0 2>/dev/null; exit 0' TERM INT
{ while :; do cat "$stream" || exit 0; done; } | mpeg2dec -o null >/dev/null 2>&1 &
wait $! || { echo "fs-hog: mpeg2dec stopped decoding $stream" >&2; exit 1; }
echo "fs-hog: mpeg2dec stopped" >&2
exit 1
