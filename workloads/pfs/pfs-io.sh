#!/bin/sh
# One client stream of a parallel file system test, run inside a pvfs-client container.
#   pfs-io.sh OP ACCESS FILE OFFSET BYTES BUF START DURATION LOCAL
# OP read|write; ACCESS native (pvfs2-cp, the OrangeFS client library) or posix (dd on a path:
# the FUSE mount /mnt/orangefs, the /scratch tmpfs or the /disk volume). Waits until the wall
# clock reaches START (all streams begin together), then repeats the transfer of BYTES bytes at
# OFFSET of FILE, BUF bytes per call, until DURATION seconds have passed (at least once).
# A read lands in LOCAL (checksummed afterwards); a write comes from LOCAL. pvfs2-cp never
# overwrites, so native writes go to FILE.1, FILE.2, ...; `last=` names the one written last.
# Prints one line: start= end= iterations= bytes= last= status= error=.
set -u
op=$1 access=$2 file=$3 offset=$4 bytes=$5 buf=$6 start=$7 duration=$8 local=$9
now() { date +%s.%N; }
wait_s=$(awk -v s="$start" -v n="$(now)" 'BEGIN { d = s - n; print (d > 0 ? d : 0) }')
sleep "$wait_s"
t0=$(now)
deadline=$(awk -v t="$t0" -v d="$duration" 'BEGIN { printf "%.6f", t + d }')
n=0 last=$file err=
while :; do
  n=$((n + 1))
  case $op/$access in
    read/native) out=$(pvfs2-cp -b "$buf" "$file" "$local" 2>&1) ;;
    write/native) last=$file.$n; out=$(pvfs2-cp -b "$buf" "$local" "$last" 2>&1) ;;
    read/posix) out=$(dd if="$file" of="$local" bs="$buf" iflag=skip_bytes,count_bytes \
                      skip="$offset" count="$bytes" status=none 2>&1) ;;
    write/posix) out=$(dd if="$local" of="$file" bs="$buf" oflag=seek_bytes seek="$offset" \
                       count="$bytes" iflag=count_bytes conv=notrunc,fdatasync status=none 2>&1) ;;
    *) echo "status=error error=unknown op/access $op/$access"; exit 2 ;;
  esac
  rc=$?
  if [ $rc -ne 0 ]; then
    # The last two lines of the client's messages say what failed (the first are retries).
    n=$((n - 1)); err=$(printf '%s\n' "$out" | tail -n 2 | tr '\n' ' ' | cut -c1-300); break
  fi
  [ "$(awk -v a="$(now)" -v b="$deadline" 'BEGIN { print (a >= b) }')" = 1 ] && break
done
t1=$(now)
status=ok
[ -n "$err" ] && status=error
echo "start=$t0 end=$t1 iterations=$n bytes=$((n * bytes)) last=$last status=$status error=$err"
