#!/usr/bin/env bash
# `docker build ARGS...` with BuildKit where this machine's Docker can use it, else the legacy
# builder. BuildKit needs the buildx plugin with a Docker client from 23 on; older clients (such
# as Debian 12's docker.io 20.10, /usr/bin/docker) have it built in and take DOCKER_BUILDKIT=1. The
# engine runs it either way (Engine 18.09 and later). DOCKER_BUILD_FLAGS adds flags to every
# build, e.g. --no-cache to build every layer again (Debian's newest updates, or a measurement of
# a first build).
set -euo pipefail
# shellcheck disable=SC2206
extra=(${DOCKER_BUILD_FLAGS:-})
# the client's major version (it answers even when the engine does not); 999 when unknown
major() {
  local v
  v=$("$1" version --format '{{.Client.Version}}' 2>/dev/null || true)
  [[ "$v" =~ ^[0-9]+\. ]] && echo "${v%%.*}" || echo 999
}
if docker buildx version >/dev/null 2>&1; then
  DOCKER_BUILDKIT=1 exec docker build "${extra[@]}" "$@"
fi
while read -r cli; do
  if [ "$(major "$cli")" -lt 23 ]; then DOCKER_BUILDKIT=1 exec "$cli" build "${extra[@]}" "$@"; fi
done < <(type -ap docker | awk '!seen[$0]++')
DOCKER_BUILDKIT=0 exec docker build "${extra[@]}" "$@"
