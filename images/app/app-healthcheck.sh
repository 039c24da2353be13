#!/bin/sh
# Healthy when PHP-FPM answers its ping page over FastCGI, on the health pool's local socket.
SCRIPT_NAME=/fpm-ping SCRIPT_FILENAME=/fpm-ping REQUEST_METHOD=GET \
  cgi-fcgi -bind -connect /tmp/php-fpm-health.sock 2>/dev/null | grep -q '^pong'
