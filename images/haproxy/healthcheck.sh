#!/bin/bash
# Healthy when /healthz answers 200 (bash only: no curl in the image).
bind=${HAPROXY_BIND:-:80} host=${bind%:*} port=${bind##*:}
case $host in ''|0.0.0.0|'*') host=127.0.0.1 ;; esac
exec 3<>"/dev/tcp/$host/$port" || exit 1
printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
IFS= read -r status <&3
[[ "$status" == *" 200 "* ]]
