#!/usr/bin/env bash
# Print the base image every tierbench image builds FROM, making one when none can be had.
# Order: $BASE_IMAGE if set (must exist or be pullable; name it by digest, NAME@sha256:..., to
# pin it); debian:bookworm-slim if present or pullable, printed by its digest (debian@sha256:...)
# so that every build names exactly the image that was pulled, not a tag that moves; otherwise a
# Debian bookworm minbase bootstrapped locally and imported as tierbench-base:bookworm (about
# 30 s), with the mirror taken from this machine's apt sources.
# DEBIAN_SNAPSHOT=YYYYMMDDTHHMMSSZ with DEBIAN_SNAPSHOT_URL (the address of a Debian snapshot
# service, under which /archive/debian/SNAPSHOT/ is served): the base is bootstrapped from that
# snapshot of the archive instead, keeps it as its apt sources and is named
# tierbench-base:bookworm-SNAPSHOT, so every image installs exactly what the archive held then.
set -euo pipefail

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }

have() { docker image inspect "$1" >/dev/null 2>&1; }
pull() { timeout 60 docker pull -q "$1" >/dev/null 2>&1; }
# NAME@sha256:... of an image pulled from a registry; the name itself for one made here.
by_digest() {
  local digest
  digest=$(docker image inspect -f '{{if .RepoDigests}}{{index .RepoDigests 0}}{{end}}' "$1" 2>/dev/null || true)
  echo "${digest:-$1}"
}

snapshot=${DEBIAN_SNAPSHOT:-}
if [ -n "$snapshot" ]; then
  [[ "$snapshot" =~ ^[0-9]{8}T[0-9]{6}Z$ ]] \
    || die "DEBIAN_SNAPSHOT=$snapshot is not a snapshot time like 20261127T000000Z"
  [ -z "${BASE_IMAGE:-}" ] \
    || die "DEBIAN_SNAPSHOT needs a base bootstrapped from that snapshot, not BASE_IMAGE=$BASE_IMAGE: unset one of them"
  [ -n "${DEBIAN_SNAPSHOT_URL:-}" ] \
    || die "DEBIAN_SNAPSHOT is set but DEBIAN_SNAPSHOT_URL is not: set it to the address of the Debian snapshot service you use (the one that serves /archive/debian/$snapshot/)"
fi

if [ -n "${BASE_IMAGE:-}" ]; then
  have "$BASE_IMAGE" || pull "$BASE_IMAGE" || die "BASE_IMAGE=$BASE_IMAGE is neither local nor pullable: load it (docker load) or unset BASE_IMAGE"
  echo "$BASE_IMAGE"; exit 0
fi

official=debian:bookworm-slim
local_base=tierbench-base:bookworm
if [ -n "$snapshot" ]; then
  local_base=tierbench-base:bookworm-$snapshot
  if have "$local_base"; then echo "$local_base"; exit 0; fi
  mirror="${DEBIAN_SNAPSHOT_URL%/}/archive/debian/$snapshot"
  security="${DEBIAN_SNAPSHOT_URL%/}/archive/debian-security/$snapshot"
  options="[check-valid-until=no] "  # a snapshot's Release files are past their Valid-Until
else
  if have "$official"; then by_digest "$official"; exit 0; fi
  if have "$local_base"; then echo "$local_base"; exit 0; fi
  if pull "$official"; then by_digest "$official"; exit 0; fi
  mirror=$("$(dirname "$0")/apt-mirror.sh") || die "no Debian mirror in /etc/apt/sources*: set BASE_IMAGE to a Debian bookworm image you have"
  security=$("$(dirname "$0")/apt-mirror.sh" security || true)
  options=
fi

[ "$(id -u)" = 0 ] || die "bootstrapping a local base needs root: run as root, or set BASE_IMAGE to a Debian bookworm image you have"
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null \
    || die "could not install debootstrap: install it, or set BASE_IMAGE"
fi
root=$(mktemp -d /var/tmp/tierbench-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
say "bootstrapping a bookworm minbase from $mirror (about 30 s)"
debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null \
  || die "debootstrap from $mirror failed; set BASE_IMAGE to a Debian bookworm image you have"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
# Same suites as the official image: the release, its updates and the security archive.
{ echo "deb $options$mirror bookworm main"; echo "deb $options$mirror bookworm-updates main"
  if [ -n "$security" ]; then echo "deb $options$security bookworm-security main"; fi
} >"$root/etc/apt/sources.list"
tar -C "$root" -c . | docker import -c 'CMD ["bash"]' - "$local_base" >/dev/null
say "imported $local_base"
echo "$local_base"
