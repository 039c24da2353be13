#!/bin/sh
# Run a command when the wall clock reaches START (epoch seconds), so that clients in several
# containers begin together: at.sh START COMMAND [ARGS...]. A START already past runs at once.
set -eu
start=$1
shift
sleep "$(awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN { d = s - n; printf "%.3f", (d > 0 ? d : 0) }')"
exec "$@"
