#!/usr/bin/env bash
# Create .venv with the pinned requirements.txt (what tierbench needs to run) and tierbench itself,
# and with `dev` also requirements-dev.txt (the tests and the linter), when missing or out of date.
#   setup/venv.sh [dev]      PYTHON: the interpreter to build it with (default python3)
# The pinned numpy, pandas, scipy, matplotlib and pyarrow have no build for Python before 3.11,
# so that is checked first, before pip runs.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
python=${PYTHON:-python3}
case ${1:-} in
  dev|"") mode=${1:-runtime} ;;
  *) echo "usage: $0 [dev]" >&2; exit 2 ;;
esac
digest() { cat "$@" pyproject.toml | sha256sum | cut -c1-16; }
runtime="runtime $(digest requirements.txt)"
dev="dev $(digest requirements.txt requirements-dev.txt images/loadgen/requirements.txt)"
stamp=.venv/.requirements
have=$(cat "$stamp" 2>/dev/null || true)
[ -x .venv/bin/tierbench ] || have=
# A dev environment holds everything the runtime needs: it serves both.
if [ "$have" = "$dev" ] || { [ "$mode" = runtime ] && [ "$have" = "$runtime" ]; }; then exit 0; fi

if [ "$have" != "$runtime" ]; then
  if [ -x .venv/bin/python ] && .venv/bin/python -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
    # updated in place, never removed: a run or a test using .venv meanwhile keeps working
    echo "setup: updating .venv to the pinned requirements.txt" >&2
  else
    command -v "$python" >/dev/null \
      || { echo "setup: there is no $python here: install Python 3.11 or newer with its venv module (Debian 12: apt-get install python3 python3-venv), or set PYTHON=/path/to/python3.11" >&2; exit 1; }
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
      || { echo "setup: tierbench needs Python 3.11 or newer and $python is $("$python" -V 2>&1 | cut -d' ' -f2): install python3.11 and python3.11-venv (on Ubuntu 22.04 from its universe archive) or newer, then run again with PYTHON=python3.11" >&2; exit 1; }
    if ! "$python" -m venv --help >/dev/null 2>&1 || ! "$python" -c 'import ensurepip' 2>/dev/null; then
      if [ "$python" = python3 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "setup: installing python3-venv" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-venv >/dev/null
      else
        echo "setup: Python's venv module is missing for $python: install its venv package (python3-venv, or python3.X-venv for python3.X)" >&2; exit 1
      fi
    fi
    echo "setup: creating .venv with the pinned requirements.txt" >&2
    rm -rf .venv
    "$python" -m venv .venv
  fi
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt
  .venv/bin/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e .
  echo "$runtime" >"$stamp"
fi
if [ "$mode" = dev ]; then
  echo "setup: adding the pinned requirements-dev.txt to .venv (tests, linter)" >&2
  .venv/bin/pip install -q --disable-pip-version-check -r requirements-dev.txt
  echo "$dev" >"$stamp"
fi
