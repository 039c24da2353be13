#!/bin/sh
# Start PHP-FPM in the foreground on APP_LISTEN's address, port APP_PORT (9000 unset: app2 and
# app3 sharing a node with app on a cluster take 9001 and 9002), admitting only the
# addresses of APP_CLIENTS (comma-separated). Refuses to start without them, or without the
# database password: an empty listen.allowed_clients would admit anyone.
set -eu
fail() { echo "app: $*" >&2; exit 2; }
[ -n "${APP_LISTEN:-}" ] || fail "APP_LISTEN is empty: set it to the address to listen on"
[ -n "${APP_CLIENTS:-}" ] || fail "APP_CLIENTS is empty: set it to the web tier's addresses (tierbench does)"
[ -n "${DB_PASSWORD:-}" ] || fail "DB_PASSWORD is empty: tierbench makes one per bring-up; by hand, set it"
case $APP_CLIENTS in
  *[!0-9A-Fa-f.:,]*) fail "APP_CLIENTS=$APP_CLIENTS: only addresses, comma-separated" ;;
esac
APP_PORT=${APP_PORT:-9000}
case $APP_PORT in
  ''|*[!0-9]*) fail "APP_PORT=$APP_PORT: a port number" ;;
esac
case $APP_LISTEN in
  *:*) APP_LISTEN="[$APP_LISTEN]:$APP_PORT" ;;  # IPv6
  *) APP_LISTEN="$APP_LISTEN:$APP_PORT" ;;
esac
export APP_LISTEN
exec php-fpm8.2 --nodaemonize --force-stderr --fpm-config /etc/php/8.2/fpm/php-fpm.conf
