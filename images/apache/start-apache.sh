#!/bin/bash
# Start Apache in the foreground with the settings given as environment variables, or,
# with --healthcheck, answer whether /healthz returns 200 (bash only: no curl in the image).
set -euo pipefail
listen=${APACHE_LISTEN:-80}  # Listen: a port, or address:port (a cluster node's data plane)
if [ "${1:-}" = --healthcheck ]; then
  host=127.0.0.1 port=$listen
  if [[ "$listen" == *:* ]]; then host=${listen%:*} port=${listen##*:}; fi
  [ "$host" = 0.0.0.0 ] && host=127.0.0.1
  exec 3<>"/dev/tcp/$host/$port"
  printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
  IFS= read -r status <&3
  [[ "$status" == *" 200 "* ]]
  exit
fi
set +u  # envvars reads unset variables
# shellcheck disable=SC1091
source /etc/apache2/envvars
set -u
mkdir -p "$APACHE_RUN_DIR" "$APACHE_LOCK_DIR" "$APACHE_LOG_DIR"
defines=()
[ "${ACCESS_LOG,,}" = on ] && defines+=(-D ACCESS_LOG)
[ "${PROXY_CACHE:-off}" = on ] && defines+=(-D PROXY_CACHE)
[ "${WEB_HOT:-off}" = on ] && defines+=(-D HOT)
[ "${WEB_SERVERS:-1}" = 3 ] && defines+=(-D BALANCER)
[ "${WEB_DISK_MAP:-off}" = on ] && defines+=(-D DISK_MAP)
[ "${WEB_APP:-off}" = on ] && defines+=(-D APP)
rm -f "$APACHE_PID_FILE"
# the proxy image's cache guard (images/proxy/proxy-cache-guard.pl), given the PID Apache takes
# below and the file on which Apache stops storing (tierbench.conf); it ends with Apache
if [ "${PROXY_CACHE:-off}" = on ] && [ -x /usr/local/bin/proxy-cache-guard ]; then
  /usr/local/bin/proxy-cache-guard $$ "$APACHE_RUN_DIR/proxy-cache-full" &
fi
exec /usr/sbin/apache2 -D FOREGROUND "${defines[@]}" "$@"
