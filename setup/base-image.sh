#!/usr/bin/env bash
# Print the base image every tierbench image builds FROM, making one when none can be had.
# Order: $BASE_IMAGE if set (must exist or be pullable); debian:bookworm-slim if present or
# pullable; otherwise a Debian bookworm minbase bootstrapped locally and imported as
# tierbench-base:bookworm (about 30 s), with the mirror taken from this machine's apt sources.
set -euo pipefail

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }

have() { docker image inspect "$1" >/dev/null 2>&1; }
pull() { timeout 60 docker pull -q "$1" >/dev/null 2>&1; }

if [ -n "${BASE_IMAGE:-}" ]; then
  have "$BASE_IMAGE" || pull "$BASE_IMAGE" || die "BASE_IMAGE=$BASE_IMAGE is neither local nor pullable: load it (docker load) or unset BASE_IMAGE"
  echo "$BASE_IMAGE"; exit 0
fi

official=debian:bookworm-slim
local_base=tierbench-base:bookworm
if have "$official"; then echo "$official"; exit 0; fi
if have "$local_base"; then echo "$local_base"; exit 0; fi
if pull "$official"; then echo "$official"; exit 0; fi

[ "$(id -u)" = 0 ] || die "cannot pull $official and bootstrapping a local base needs root: run as root, or set BASE_IMAGE to a Debian bookworm image you have"
mirror=$("$(dirname "$0")/apt-mirror.sh") || die "no Debian mirror in /etc/apt/sources*: set BASE_IMAGE to a Debian bookworm image you have"
if ! command -v debootstrap >/dev/null; then
  say "installing debootstrap"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap >/dev/null \
    || die "could not install debootstrap: install it, or set BASE_IMAGE"
fi
root=$(mktemp -d /var/tmp/tierbench-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
say "no $official to pull: bootstrapping a bookworm minbase from $mirror (about 30 s)"
debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null \
  || die "debootstrap failed; set BASE_IMAGE to a Debian bookworm image you have"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
# Same suites as the official image: the release, its updates and the security archive.
{ echo "deb $mirror bookworm main"; echo "deb $mirror bookworm-updates main"
  if security=$("$(dirname "$0")/apt-mirror.sh" security); then echo "deb $security bookworm-security main"; fi
} >"$root/etc/apt/sources.list"
tar -C "$root" -c . | docker import -c 'CMD ["bash"]' - "$local_base" >/dev/null
say "imported $local_base"
echo "$local_base"
