#!/usr/bin/env bash
# Build tierbench-orangefs:TAG (images/orangefs) from an OrangeFS source tarball:
#   ORANGEFS_TARBALL=/path/orangefs.tar.gz  a local tarball (air-gapped clusters), else
#   the upstream archive of the pinned tag (ORANGEFS_VERSION, default 2.10.0), downloaded once.
# The tarball is verified before anything is built from it: its sha256 must be ORANGEFS_SHA256,
# which defaults to the published digest of the upstream archive of the version (UPSTREAM_SHA256
# below); a tarball with another digest is refused unless ORANGEFS_SHA256 names it. The digest
# is recorded in the image (label org.tierbench.orangefs.source-sha256 and /opt/orangefs/SOURCE)
# and the verified tarball is cached in images/orangefs/source/ with it.
#   --offline   never download: use ORANGEFS_TARBALL or the tarball cached in images/orangefs/source
#   --optional  when no source can be had, say so and exit 0 (make images)
# Exit codes: 0 built (or skipped with --optional), 1 build failed or tarball refused, 3 no source.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
optional=0 offline=0
for arg in "$@"; do
  case $arg in
    --optional) optional=1 ;;
    --offline) offline=1 ;;
    *) echo "usage: $0 [--offline] [--optional]" >&2; exit 2 ;;
  esac
done

say() { printf 'setup: %s\n' "$*" >&2; }
no_source() {
  if [ "$optional" = 1 ]; then say "OrangeFS image not built: $*"; exit 0; fi
  say "$*"; exit 3
}
refuse() { say "$*"; exit 1; }

tag=${TIERBENCH_TAG:-0.1.0}
image=tierbench-orangefs:$tag
version=${ORANGEFS_VERSION:-2.10.0}
default_url=https://github.com/waltligon/orangefs/archive/refs/tags/v.$version.tar.gz
url=${ORANGEFS_URL:-$default_url}
# The sha256 of the upstream archive (default_url) of each version, as published by a source
# other than the archive itself. None is known for 2.10.0: no packaging recipe or release note
# found lists a digest of this archive (Spack has no OrangeFS package; nixpkgs packages 2.9.8,
# Fedora and vcpkg 2.10.1). Until one is added here, every tarball needs ORANGEFS_SHA256.
declare -A UPSTREAM_SHA256=()
published=${UPSTREAM_SHA256[$version]:-}
[ "$url" = "$default_url" ] || published=
want=${ORANGEFS_SHA256:-$published}
if [ -n "$want" ] && ! [[ "$want" =~ ^[0-9a-f]{64}$ ]]; then
  refuse "ORANGEFS_SHA256=$want is not a sha256 digest (64 hexadecimal digits)"
fi
how="compare the tarball's tree with a clone of tag v.$version, or its digest with one you trust"

ctx=images/orangefs
src=$ctx/source/orangefs.tar.gz
mkdir -p "$ctx/source"
origin= part=$src.part sha=
rm -f "$part"
# Refuse the tarball (removing it) unless its sha256 is $want; sets sha.
verify() {
  sha=$(sha256sum "$part" | cut -d' ' -f1)
  if [ -z "$want" ]; then
    rm -f "$part"
    refuse "the OrangeFS tarball ($origin) has sha256 $sha and no published digest of the OrangeFS $version archive is known to check it against: $how, then run again with ORANGEFS_SHA256=$sha"
  elif [ "$sha" != "$want" ]; then
    rm -f "$part"
    if [ -n "${ORANGEFS_SHA256:-}" ]; then expected="ORANGEFS_SHA256=$want"
    else expected="the published digest of the upstream archive, $want"; fi
    refuse "the OrangeFS tarball ($origin) has sha256 $sha, not $expected: refusing it (to build from it anyway, $how, then set ORANGEFS_SHA256=$sha)"
  fi
}
# A tarball the user names is checked first, before anything else is looked at or built.
if [ -n "${ORANGEFS_TARBALL:-}" ]; then
  [ -f "$ORANGEFS_TARBALL" ] || no_source "ORANGEFS_TARBALL=$ORANGEFS_TARBALL: no such file"
  cp "$ORANGEFS_TARBALL" "$part"
  origin="local tarball $(basename "$ORANGEFS_TARBALL")"
  verify
fi

# What the image is built from besides the tarball (Dockerfile, scripts, the base image, the
# snapshot): recorded as a label, so an image built before one of them changed is known to be stale.
BASE_IMAGE=$(setup/base-image.sh)
context=$( { (cd "$ctx" && find . -path ./source -prune -o -type f -print | LC_ALL=C sort |
  xargs sha256sum)
  echo "from $(docker image inspect -f '{{.Id}}' "$BASE_IMAGE") snapshot ${DEBIAN_SNAPSHOT:-}"; } |
  sha256sum | cut -c1-16)
# (docker prints an empty line for an image that is not there before it fails)
built=$(docker image inspect -f '{{index .Config.Labels "org.tierbench.orangefs.context"}}' \
  "$image" 2>/dev/null) || built=absent
cached_sha=$(cat "$src.sha256" 2>/dev/null || true)
[ -f "$src" ] || cached_sha=

# Otherwise the tarball to build from goes to $part, with its origin; none when the image is built.
if [ -n "${ORANGEFS_TARBALL:-}" ]; then
  :  # verified above
elif [ -n "$cached_sha" ] && { [ -z "${ORANGEFS_SHA256:-}" ] || [ "$ORANGEFS_SHA256" = "$cached_sha" ]; }; then
  if [ "$built" = "$context" ]; then
    say "$image is built; set ORANGEFS_TARBALL to rebuild it from another tarball"
  else
    origin=$(cat "$src.origin" 2>/dev/null || echo "cached tarball")
    cp "$src" "$part"
    want=$cached_sha
    verify
  fi
elif [ -n "$cached_sha" ]; then
  refuse "the OrangeFS tarball cached in $ctx/source has sha256 $cached_sha, not ORANGEFS_SHA256=$ORANGEFS_SHA256: set ORANGEFS_TARBALL to the tarball you mean"
elif [ "$built" = "$context" ] && [ -z "${ORANGEFS_SHA256:-}" ]; then
  say "$image is built; set ORANGEFS_TARBALL to rebuild it from another tarball"
elif [ "$built" != absent ] && { [ "$offline" = 1 ] || [ "$optional" = 1 ]; }; then
  no_source "$image was built from an older images/orangefs/ or base image and no OrangeFS source is here to rebuild it: set ORANGEFS_TARBALL=/path/to/orangefs-$version.tar.gz and ORANGEFS_SHA256=<its sha256>, and run make orangefs-image"
elif [ "$offline" = 1 ]; then
  no_source "no OrangeFS source here (ORANGEFS_TARBALL is unset, nothing verified is cached in $ctx/source) and downloads are off: set ORANGEFS_TARBALL=/path/to/orangefs-$version.tar.gz and ORANGEFS_SHA256=<its sha256>, or run make orangefs-image"
else
  say "downloading OrangeFS $version source ($url)"
  if ! curl -fsSL --connect-timeout 10 --max-time 600 -o "$part" "$url" 2>/dev/null; then
    rm -f "$part"
    no_source "the OrangeFS $version source is not reachable ($url); download it where you can and set ORANGEFS_TARBALL=/path/to/it and ORANGEFS_SHA256=<its sha256>"
  fi
  origin="upstream archive $url"
  verify
fi

if [ -n "$origin" ]; then
  mv "$part" "$src"
  echo "$sha" >"$src.sha256"
  echo "$origin" >"$src.origin"
  built_sha=$(docker image inspect -f '{{index .Config.Labels "org.tierbench.orangefs.source-sha256"}}' \
    "$image" 2>/dev/null || true)
  if [ "$built" = "$context" ] && [ "$built_sha" = "$sha" ]; then
    origin=  # built from this very tarball and these files: nothing to do
  fi
fi
if [ -n "$origin" ]; then
  say "building $image from $origin (sha256 $sha, verified; about 2 min the first time)"
  setup/docker-build.sh -q -t "$image" \
    --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg ORANGEFS_VERSION="$version" \
    --build-arg ORANGEFS_SHA256="$sha" --build-arg ORANGEFS_ORIGIN="$origin" \
    --label org.tierbench.orangefs.context="$context" --label org.tierbench.base="$BASE_IMAGE" \
    --label org.tierbench.debian-snapshot="${DEBIAN_SNAPSHOT:-}" "$ctx" >/dev/null
fi
# The web tier with its docroot on OrangeFS (compose/docroot-pvfs.yml), once the web image exists.
if docker image inspect "tierbench-web:$tag" >/dev/null 2>&1; then
  setup/docker-build.sh -q -t "tierbench-web-pvfs:$tag" --build-arg WEB_IMAGE="tierbench-web:$tag" \
    --build-arg ORANGEFS_IMAGE="$image" images/web-pvfs >/dev/null
fi
