#!/bin/sh
# Entry point of a lab node: host keys (made once per container), the controller's public key
# from AUTHORIZED_KEYS, sshd, then dockerd; the node stays up when dockerd stops, as a real node
# whose Docker daemon stops keeps its SSH server (tierbench's tests stop it on purpose).
#   node-start --healthcheck   exit 0 when sshd and dockerd both answer
#   node-start --dockerd       start dockerd again (after it was stopped)
set -eu
pidfile=/run/node-dockerd.pid
start_dockerd() {
  # cgroupfs: no systemd inside the node (the host here has cgroup v1 with cgroupfs).
  dockerd --storage-driver overlay2 --exec-opt native.cgroupdriver=cgroupfs \
    --host unix:///var/run/docker.sock ${DOCKERD_OPTS:-} &
  echo $! >"$pidfile"
}
case "${1:-}" in
  --healthcheck)
    [ -s /run/sshd.pid ] && kill -0 "$(cat /run/sshd.pid)" && docker info >/dev/null 2>&1
    exit ;;
  --dockerd)
    [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null || start_dockerd
    exit 0 ;;
esac
mkdir -p /run/sshd /root/.ssh
chmod 700 /root/.ssh
[ -f /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -A >/dev/null
if [ -n "${AUTHORIZED_KEYS:-}" ]; then
  printf '%s\n' "$AUTHORIZED_KEYS" >/root/.ssh/authorized_keys
  chmod 600 /root/.ssh/authorized_keys
fi
/usr/sbin/sshd
start_dockerd
# docker stop: dockerd stops its containers, then the node ends (tini forwards SIGTERM here).
trap 'kill -TERM "$(cat "$pidfile")" 2>/dev/null; while kill -0 "$(cat "$pidfile")" 2>/dev/null; do sleep 0.2; done; exit 0' TERM INT
while :; do sleep 3600 & wait $! || true; done
