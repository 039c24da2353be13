#!/usr/bin/env bash
# Make sure a Docker engine and Compose v2 answer; install them on Debian/Ubuntu as root.
# Usage: setup/docker.sh            (idempotent; prints one line per action)
set -euo pipefail

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }

is_debian_like() { [ -r /etc/os-release ] && grep -qiE '^(ID|ID_LIKE)=.*(debian|ubuntu)' /etc/os-release; }

engine_up() { docker info >/dev/null 2>&1; }
compose_v2() { docker compose version >/dev/null 2>&1; }

install_engine() {
  say "installing the Docker engine (docker.io) with apt"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends docker.io >/dev/null
}

start_engine() {
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    say "starting dockerd with systemctl"
    systemctl start docker
  else
    say "starting dockerd in the background (log: /var/log/tierbench-dockerd.log)"
    setsid dockerd >/var/log/tierbench-dockerd.log 2>&1 < /dev/null &
  fi
  for _ in $(seq 1 60); do engine_up && return 0; sleep 1; done
  die "dockerd did not answer within 60 s; see /var/log/tierbench-dockerd.log"
}

# Compose v2: Debian 12 ships only v1, so take the plugin binary from Debian 13's package,
# downloaded with a private apt configuration that leaves the system's sources untouched.
install_compose() {
  local mirror tmp plugin_dir=/usr/local/lib/docker/cli-plugins
  mirror=$("$(dirname "$0")/apt-mirror.sh") || die "no Debian mirror found in /etc/apt/sources*; install the Docker Compose v2 plugin by hand"
  tmp=$(mktemp -d); chmod 755 "$tmp"
  trap 'rm -rf "$tmp"' RETURN
  say "fetching Compose v2 from Debian trixie's docker-compose package"
  mkdir -p "$tmp/lists/partial" "$tmp/archives/partial"
  printf 'deb %s trixie main\n' "$mirror" >"$tmp/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache::Archives=$tmp/archives"
              -o APT::Get::List-Cleanup=0)
  apt-get "${opts[@]}" update -q >/dev/null
  (cd "$tmp" && apt-get "${opts[@]}" download -q docker-compose >/dev/null)
  dpkg-deb -x "$tmp"/docker-compose_*.deb "$tmp/root"
  mkdir -p "$plugin_dir"
  install -m 0755 "$(find "$tmp/root" -type f -name docker-compose -path '*cli-plugins*' | head -n 1)" \
    "$plugin_dir/docker-compose"
}

if engine_up && compose_v2; then exit 0; fi

if [ "$(id -u)" != 0 ] || ! is_debian_like || ! command -v apt-get >/dev/null; then
  engine_up || die "no Docker engine answers: install Docker Engine (https://docs.docker.com/engine/install/) and start it, then run this again"
  die "Docker Compose v2 is missing: install the docker-compose-plugin package (docker compose version must answer), then run this again"
fi

if ! command -v dockerd >/dev/null; then
  say "apt-get update"
  apt-get update -q >/dev/null
  install_engine
fi
engine_up || start_engine
compose_v2 || install_compose
compose_v2 || die "docker compose version still fails after installing the plugin"
say "$(docker compose version)"
