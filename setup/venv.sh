#!/usr/bin/env bash
# Create .venv (pinned requirements.txt + tierbench itself) when missing or out of date.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
stamp=.venv/.requirements.sha256
want=$(cat requirements.txt images/loadgen/requirements.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ -x .venv/bin/tierbench ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then exit 0; fi
python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' \
  || { echo "setup: tierbench needs Python 3.10 or newer (python3 is $(python3 -V 2>&1))" >&2; exit 1; }
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing python3-venv" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-venv >/dev/null
  else
    echo "setup: Python's venv module is missing: install python3-venv" >&2; exit 1
  fi
fi
echo "setup: creating .venv with pinned requirements" >&2
rm -rf .venv
python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
.venv/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
echo "$want" >"$stamp"
