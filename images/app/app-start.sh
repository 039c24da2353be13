#!/bin/sh
# Start PHP-FPM in the foreground on APP_LISTEN's address, port 9000, admitting only the
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
case $APP_LISTEN in
  *:*) APP_LISTEN="[$APP_LISTEN]:9000" ;;  # IPv6
  *) APP_LISTEN="$APP_LISTEN:9000" ;;
esac
export APP_LISTEN
exec php-fpm8.2 --nodaemonize --force-stderr --fpm-config /etc/php/8.2/fpm/php-fpm.conf
