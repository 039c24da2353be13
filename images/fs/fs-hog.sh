#!/bin/sh
# 002's heavily loaded server: an MPEG decoder decoding a stream over and over for as long as
# the container runs (on the server's CPUs: compose/fs.yml gives it the server's cpuset).
#   fs-hog.sh                decode forever
#   fs-hog.sh --healthcheck  exit 0 while a decoder runs
set -eu
if [ "${1:-}" = --healthcheck ]; then
  pgrep -x mpeg2dec >/dev/null
  exit
fi
stream=/usr/local/share/tierbench/hog.m2v
while :; do
  mpeg2dec -o null "$stream" >/dev/null 2>&1 || { echo "fs-hog: mpeg2dec failed on $stream" >&2; exit 1; }
done
