#!/bin/sh
# Entry point of a lab node: host keys (made once per container), the controller's public key
# from AUTHORIZED_KEYS, sshd, then dockerd in the foreground.
#   node-start --healthcheck   exit 0 when sshd and dockerd both answer
set -eu
if [ "${1:-}" = --healthcheck ]; then
  [ -s /run/sshd.pid ] && kill -0 "$(cat /run/sshd.pid)" && docker info >/dev/null 2>&1
  exit
fi
mkdir -p /run/sshd /root/.ssh
chmod 700 /root/.ssh
[ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -A >/dev/null
if [ -n "${AUTHORIZED_KEYS:-}" ]; then
  printf '%s\n' "$AUTHORIZED_KEYS" >/root/.ssh/authorized_keys
  chmod 600 /root/.ssh/authorized_keys
fi
/usr/sbin/sshd
# cgroupfs: no systemd inside the node (the host here has cgroup v1 with cgroupfs).
exec dockerd --storage-driver overlay2 --exec-opt native.cgroupdriver=cgroupfs \
  --host unix:///var/run/docker.sock ${DOCKERD_OPTS:-}
