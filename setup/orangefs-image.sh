#!/usr/bin/env bash
# Build tierbench-orangefs:TAG (images/orangefs) from an OrangeFS source tarball:
#   ORANGEFS_TARBALL=/path/orangefs.tar.gz  a local tarball (air-gapped clusters), else
#   the upstream archive of the pinned tag (ORANGEFS_VERSION, default 2.10.0), downloaded once.
# ORANGEFS_SHA256 pins the tarball: a different one is refused. The sha256 of the tarball used is
# recorded in the image (label org.tierbench.orangefs.source-sha256 and /opt/orangefs/SOURCE).
#   --offline   never download: use ORANGEFS_TARBALL or the tarball cached in images/orangefs/source
#   --optional  when no source can be had, say so and exit 0 (make images)
# Exit codes: 0 built (or skipped with --optional), 1 build failed, 3 no source.
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

tag=${TIERBENCH_TAG:-0.1.0}
image=tierbench-orangefs:$tag
version=${ORANGEFS_VERSION:-2.10.0}
url=${ORANGEFS_URL:-https://github.com/waltligon/orangefs/archive/refs/tags/v.$version.tar.gz}
ctx=images/orangefs
src=$ctx/source/orangefs.tar.gz
mkdir -p "$ctx/source"
# What the image is built from besides the tarball (Dockerfile, scripts): recorded as a label, so
# an image built before images/orangefs/ changed is known to be stale.
context=$(cd "$ctx" && find . -path ./source -prune -o -type f -print | LC_ALL=C sort |
  xargs sha256sum | sha256sum | cut -c1-16)
# (docker prints an empty line for an image that is not there before it fails)
built=$(docker image inspect -f '{{index .Config.Labels "org.tierbench.orangefs.context"}}' \
  "$image" 2>/dev/null) || built=absent

if [ -n "${ORANGEFS_TARBALL:-}" ]; then
  [ -f "$ORANGEFS_TARBALL" ] || no_source "ORANGEFS_TARBALL=$ORANGEFS_TARBALL: no such file"
  cp "$ORANGEFS_TARBALL" "$src.part" && mv "$src.part" "$src"
  origin="local tarball $(basename "$ORANGEFS_TARBALL")"
elif [ "$built" = "$context" ] && [ ! -f "$src" ]; then
  say "$image is built; set ORANGEFS_TARBALL to rebuild it from another tarball"
  origin=
elif [ "$built" != absent ] && [ ! -f "$src" ] && { [ "$offline" = 1 ] || [ "$optional" = 1 ]; }; then
  no_source "$image was built from an older images/orangefs/ (its Dockerfile or scripts changed since) and no OrangeFS source is here to rebuild it: set ORANGEFS_TARBALL=/path/to/orangefs-$version.tar.gz and run make orangefs-image"
elif [ -f "$src" ]; then
  origin=$(cat "$src.origin" 2>/dev/null || echo "cached tarball")
elif [ "$offline" = 1 ]; then
  no_source "no OrangeFS source here (ORANGEFS_TARBALL is unset, nothing is cached in $ctx/source) and downloads are off: set ORANGEFS_TARBALL=/path/to/orangefs-$version.tar.gz, or run make orangefs-image"
else
  say "downloading OrangeFS $version source ($url)"
  if ! curl -fsSL --connect-timeout 10 --max-time 600 -o "$src.part" "$url" 2>/dev/null; then
    rm -f "$src.part"
    no_source "the OrangeFS $version source is not reachable ($url); download it where you can and set ORANGEFS_TARBALL=/path/to/it"
  fi
  mv "$src.part" "$src"
  origin="upstream archive $url"
fi

if [ -n "$origin" ]; then
  echo "$origin" > "$src.origin"
  sha=$(sha256sum "$src" | cut -d' ' -f1)
  if [ -n "${ORANGEFS_SHA256:-}" ] && [ "$sha" != "$ORANGEFS_SHA256" ]; then
    rm -f "$src" "$src.origin"
    say "the OrangeFS tarball's sha256 is $sha, not the pinned ORANGEFS_SHA256=$ORANGEFS_SHA256: refusing it"
    exit 1
  fi
  BASE_IMAGE=$(setup/base-image.sh)
  say "building $image from $origin (sha256 $sha; about 2 min the first time)"
  docker build -q --force-rm -t "$image" \
    --build-arg BASE_IMAGE="$BASE_IMAGE" --build-arg ORANGEFS_VERSION="$version" \
    --build-arg ORANGEFS_SHA256="$sha" --build-arg ORANGEFS_ORIGIN="$origin" \
    --label org.tierbench.orangefs.context="$context" "$ctx" >/dev/null
fi
# The web tier with its docroot on OrangeFS (compose/docroot-pvfs.yml), once the web image exists.
if docker image inspect "tierbench-web:$tag" >/dev/null 2>&1; then
  docker build -q --force-rm -t "tierbench-web-pvfs:$tag" --build-arg WEB_IMAGE="tierbench-web:$tag" \
    --build-arg ORANGEFS_IMAGE="$image" images/web-pvfs >/dev/null
fi
