#!/bin/bash
# Healthy when /healthz answers 200 (bash only: no curl in the image).
exec 3<>/dev/tcp/127.0.0.1/80 || exit 1
printf 'GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n' >&3
IFS= read -r status <&3
[[ "$status" == *" 200 "* ]]
