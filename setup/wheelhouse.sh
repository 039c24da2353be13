#!/usr/bin/env bash
# Download the load generator's pinned Python wheels into its build context
# (images/loadgen/wheels/), for the image's Python (CPython 3.11, Linux), whatever the host's.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
ctx="$here/images/loadgen"
stamp="$ctx/wheels/.requirements.sha256"
want=$(sha256sum "$ctx/requirements.txt" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
arch=$(uname -m)
pip=$(command -v pip3 || command -v pip || true)
[ -n "$pip" ] || pip="python3 -m pip"
echo "setup: downloading the load generator's wheels into images/loadgen/wheels/" >&2
rm -rf "$ctx/wheels" && mkdir -p "$ctx/wheels"
$pip download -q --disable-pip-version-check --only-binary=:all: --implementation cp \
  --python-version 3.11 --abi cp311 --abi abi3 --abi none \
  --platform "manylinux2014_$arch" --platform "manylinux_2_17_$arch" \
  --platform "manylinux_2_28_$arch" --platform any \
  -r "$ctx/requirements.txt" -d "$ctx/wheels" \
  || { echo "setup: could not download the wheels in images/loadgen/requirements.txt from PyPI (or your pip index)" >&2; exit 1; }
echo "$want" >"$stamp"
