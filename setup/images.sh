#!/usr/bin/env bash
# Build the stack's images: all of them (make images), or the ones named and what they build on
# (tierbench builds what an experiment needs when it first needs it: setup/images.sh loadgen
# proxy web). An image is rebuilt only when its build context, its base or the build settings
# changed since it was built (label org.tierbench.context), so a second run takes seconds.
# Independent images build in parallel (IMAGE_JOBS at a time, default 3), with BuildKit where
# this machine's Docker can use it (setup/docker-build.sh), else with the legacy builder.
#   setup/images.sh [IMAGE ...]   IMAGE: a folder of images/ with a Dockerfile (apache, proxy,
#                                 web, loadgen, ...; not the ones built elsewhere: node, by
#                                 setup/lab.sh), or orangefs (the OrangeFS images, with web-pvfs:
#                                 only from a source at hand, setup/orangefs-image.sh)
# The list is the images/ folders, so a new kind's image needs no edit here. An image builds on
# the base image, or on another of them when its Dockerfile says so by an
# `ARG NAME_IMAGE=tierbench-NAME:TAG` (proxy and web on apache): that one is built first.
# Settings: TIERBENCH_TAG (0.1.0), BASE_IMAGE, DEBIAN_SNAPSHOT and DEBIAN_SNAPSHOT_URL
# (setup/base-image.sh), IMAGE_JOBS.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
tag=${TIERBENCH_TAG:-0.1.0}
jobs_max=${IMAGE_JOBS:-3}
ELSEWHERE=" node orangefs web-pvfs "  # built by setup/lab.sh and setup/orangefs-image.sh
# parent_of NAME: the image NAME's Dockerfile builds on (`ARG X_IMAGE=tierbench-P:`), if any
parent_of() { sed -n 's/^ARG [A-Z_]*_IMAGE=tierbench-\([a-z0-9-]*\):.*/\1/p' "images/$1/Dockerfile" | head -n 1; }
parent_arg() { sed -n 's/^ARG \([A-Z_]*_IMAGE\)=tierbench-.*/\1/p' "images/$1/Dockerfile" | head -n 1; }
ALL=()
for dockerfile in images/*/Dockerfile; do
  name=${dockerfile#images/}; name=${name%/Dockerfile}
  [[ "$ELSEWHERE" == *" $name "* ]] || ALL+=("$name")
done
ALL+=(orangefs)

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }

[[ "$jobs_max" =~ ^[1-9][0-9]*$ ]] || die "IMAGE_JOBS=$jobs_max is not a whole number of at least 1"
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=("${ALL[@]}")
for name in "${wanted[@]}"; do
  [[ " ${ALL[*]} " == *" $name "* ]] || die "no image named $name: choose among ${ALL[*]}"
done
want() { [[ " ${wanted[*]} " == *" $1 "* ]]; }
# an image's parent is built too (proxy and web build on apache)
for name in "${wanted[@]}"; do
  [ "$name" = orangefs ] && continue
  parent=$(parent_of "$name")
  if [ -n "$parent" ] && ! want "$parent"; then wanted+=("$parent"); fi
done

# One build at a time per tag: tierbench and make may both ask for the same images.
# The lock lives in a folder of this user's own (0700, checked: never a name another user
# could have made a link of in the shared temporary folder).
lockdir="${TMPDIR:-/tmp}/tierbench-$(id -u)"
mkdir -p -m 0700 "$lockdir" 2>/dev/null || true
[ -d "$lockdir" ] && [ ! -L "$lockdir" ] && [ "$(stat -c '%u %a' "$lockdir")" = "$(id -u) 700" ] \
  || die "$lockdir is not a private folder of this user's (owner $(id -u), mode 0700): remove it and run again"
lock="$lockdir/images-$tag.lock"
exec 9>>"$lock"
flock 9

BASE_IMAGE=$(setup/base-image.sh)
export BASE_IMAGE
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

image_id() { docker image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }
built_context() { docker image inspect -f '{{index .Config.Labels "org.tierbench.context"}}' "$1" 2>/dev/null || true; }
# What an image is built from: its context's files (not the wheels: their list is
# requirements.txt), the image it builds on and the build settings.
context_of() {  # $1: name, $2: the ID of the image it builds FROM
  { (cd "images/$1" && find . -path ./wheels -prune -o -type f -print | LC_ALL=C sort | xargs sha256sum)
    echo "from $2 snapshot ${DEBIAN_SNAPSHOT:-}"; } | sha256sum | cut -c1-16
}

build() {  # $1: name; builds tierbench-NAME:TAG unless it is up to date
  local name=$1 image="tierbench-$1:$tag" from context args=()
  local parent; parent=$(parent_of "$name")
  if [ -n "$parent" ]; then
    from=tierbench-$parent:$tag; args=(--build-arg "$(parent_arg "$name")=$from")
  else
    from=$BASE_IMAGE; args=(--build-arg BASE_IMAGE="$from")
  fi
  context=$(context_of "$name" "$(image_id "$from")")
  if [ "$(built_context "$image")" = "$context" ]; then return 0; fi
  if [ "$name" = loadgen ]; then setup/wheelhouse.sh; fi
  say "building $image"
  if ! setup/docker-build.sh -q -t "$image" "${args[@]}" \
      --label org.tierbench.context="$context" --label org.tierbench.base="$BASE_IMAGE" \
      --label org.tierbench.debian-snapshot="${DEBIAN_SNAPSHOT:-}" \
      "images/$name" >"$logs/$name.log" 2>&1; then
    tail -n 25 "$logs/$name.log" >&2
    say "building $image failed (the lines above are the end of its log)"
    return 1
  fi
}

# Build groups run in parallel, IMAGE_JOBS at a time; a group builds its images in order.
group() {  # names...; records the group's exit code in $logs/NAME.rc
  local name code=0
  for name in "$@"; do
    if want "$name"; then build "$name" || { code=1; break; }; fi
  done
  echo "$code" >"$logs/$1.rc"
}
# a group: an image on the base image and those built on it, in order
groups=()
for name in "${ALL[@]}"; do
  [ "$name" != orangefs ] && [ -z "$(parent_of "$name")" ] || continue
  g=$name
  for child in "${ALL[@]}"; do
    if [ "$child" != orangefs ] && [ "$(parent_of "$child")" = "$name" ]; then g+=" $child"; fi
  done
  groups+=("$g")
done
started=()
for g in "${groups[@]}"; do
  first=${g%% *}
  todo=0
  for name in $g; do if want "$name"; then todo=1; fi; done
  [ "$todo" = 1 ] || continue
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  # shellcheck disable=SC2086
  group $g &
  started+=("$first")
done
wait || true
failed=()
for first in "${started[@]}"; do
  [ "$(cat "$logs/$first.rc" 2>/dev/null || echo 1)" = 0 ] || failed+=("$first")
done
[ ${#failed[@]} -eq 0 ] || die "building failed: ${failed[*]} (make images shows every build)"

# The OrangeFS tier's images, when a source is at hand (never downloads here: that is
# `make orangefs-image`): named, they must be built; with every image, only when they can be.
if want orangefs; then
  if [ $# -gt 0 ]; then setup/orangefs-image.sh --offline
  else setup/orangefs-image.sh --offline --optional; fi
fi
