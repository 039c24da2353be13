"""The programs tierbench runs on a cluster node (and on this host the same way), shipped as one
zip application built at run time from this package's own files: the rollback guard's agent
(``deadman``: :mod:`tierbench.modes.deadman`), the sampling agent (``sample``:
:mod:`tierbench.measure.nodesampler`, with the sampler, cgroup and kernel-counter readers it
uses) and the CPU settings of a cgroup (``cpu``: :mod:`tierbench.interfaces.cgroupcpu`) and the processes of the
tiers' cgroups (``pids``: :mod:`tierbench.measure.nodepids`). The bundle holds those modules and :mod:`tierbench.transport` (through which they start
processes, like every module of tierbench), empty ``__init__`` files for their packages, and a
``__main__.py`` naming the programs: ``python3 -I BUNDLE PROGRAM ARGS`` on the node, arguments as
argv, never source spliced into ``python3 -c``. The node needs python3 (3.10 or newer: the
bundle says so in one sentence on an older one) and nothing of tierbench installed; ``-I`` keeps
a ``tierbench`` the node may have elsewhere (PYTHONPATH, site-packages) out of it.

Where the bundle goes: :func:`put_argv` makes a private folder (``mktemp -d``: mode 0700, a fresh
name) under a given parent on the node, writes the bundle there from standard input and prints
the folder. It is never written into a folder of someone else's, so the ownership marker of
:mod:`tierbench.placement.owned` has nothing to say about it; the folder goes with the program
(the guard's agent keeps its state in it and the controller removes it on disarm; the sampling
agent's is removed when the agent ends: :func:`run_argv`; a one-off call such as the CPU
settings' puts, runs and removes it in one command: :func:`oneshot_argv`).

This module imports nothing of tierbench (floor 0): its callers run these commands through their
node's transport.
"""

from __future__ import annotations

import functools
import io
import re
import zipfile
from pathlib import Path
from typing import Any, Protocol

NAME = "tierbench-node.pyz"
PACKAGE = Path(__file__).resolve().parent
# the bundle's modules, as paths under tierbench/ (each imports only the others and the
# standard library: tests/test_nodeapp.py)
FILES = ("transport.py", "cgroups.py", "interfaces/cgroupcpu.py", "measure/kernel.py",
         "measure/sampler.py", "measure/nodesampler.py", "measure/nodepids.py",
         "modes/deadman.py")
PROGRAMS = {"deadman": "tierbench.modes.deadman", "sample": "tierbench.measure.nodesampler",
            "cpu": "tierbench.interfaces.cgroupcpu", "pids": "tierbench.measure.nodepids"}
MIN_PYTHON = (3, 10)

MAIN = '''"""tierbench's node programs: python3 -I THIS_FILE PROGRAM ARGS (tierbench/nodeapp.py)."""
import sys

PROGRAMS = %(programs)r
if sys.version_info < %(min)r:
    sys.exit("tierbench's node programs need python3 %(min_text)s or newer; this node has "
             + sys.version.split()[0])
if len(sys.argv) < 2 or sys.argv[1] not in PROGRAMS:
    sys.exit("usage: python3 -I %%s {%%s} ARGS" %% (sys.argv[0], ",".join(PROGRAMS)))
module = __import__(PROGRAMS[sys.argv[1]], fromlist=["main"])
sys.exit(module.main(sys.argv[2:]))
''' % {"programs": PROGRAMS, "min": MIN_PYTHON, "min_text": ".".join(map(str, MIN_PYTHON))}

# $1 the folder's parent, $2 its name's prefix: a private folder made there, the bundle (this
# command's standard input) written into it as NAME; prints the folder
PUT = ('umask 077 && d=$(mktemp -d "$1/${2}XXXXXXXXXX") && [ -n "$d" ] && '
       f'cat > "$d/{NAME}" && echo "$d"')
# $1 python, $2 the folder of the bundle, $3.. the program and its arguments: run, then the
# folder removed (the program ended, or could not start)
RUN_REMOVE = (f'py=$1 d=$2; shift 2; "$py" -I "$d/{NAME}" "$@"; rc=$?; rm -rf -- "$d"; '
              'exit $rc')

# $1 python, $2 the folder's parent, $3 its name's prefix, $4.. the program and its arguments:
# PUT, the program run, the folder removed, in one command (the bundle on standard input)
ONESHOT = ('py=$1; d=$(umask 077 && mktemp -d "$2/${3}XXXXXXXXXX") && [ -n "$d" ] || exit 1; '
           f'shift 3; if cat > "$d/{NAME}"; then "$py" -I "$d/{NAME}" "$@"; rc=$?; else rc=1; '
           'fi; rm -rf -- "$d"; exit $rc')


@functools.cache
def bundle() -> bytes:
    """The zip application (a zip whose ``__main__.py`` Python runs: the format of
    :mod:`zipapp`) of FILES, built in memory from this checkout's files."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("__main__.py", MAIN)
        packages = {"tierbench"} | {f"tierbench/{Path(f).parent}" for f in FILES
                                    if Path(f).parent != Path(".")}
        for package in sorted(packages):
            zf.writestr(f"{package}/__init__.py", "")
        for rel in FILES:
            zf.writestr(f"tierbench/{rel}", (PACKAGE / rel).read_text())
    return out.getvalue()


def put_argv(parent: str, prefix: str) -> list[str]:
    """The command that makes a private folder ``parent/prefixXXXXXXXXXX`` (mode 0700, a fresh
    unguessable name), writes the bundle given on its standard input into it (``NAME``) and
    prints the folder."""
    return ["sh", "-c", PUT, "sh", parent, prefix]


class NotPut(Exception):
    """The bundle could not be put on a node: why, in the node's words (its error output)."""


class Runs(Protocol):
    """Where a command runs (tierbench.transport.Transport)."""

    def run(self, command: list[str], *, timeout: float, input: bytes,
            text: bool) -> Any: ...


def put(via: Runs, parent: str, prefix: str, timeout: float = 30) -> str:
    """The bundle put in a fresh private folder under ``parent`` where ``via`` runs commands;
    the folder. NotPut when it cannot be (the transport's own errors pass through)."""
    done = via.run(put_argv(parent, prefix), timeout=timeout, input=bundle(), text=False)
    out = done.stdout.decode(errors="replace").strip().splitlines()[-1:] or [""]
    if done.returncode != 0 or not folder_pattern(parent, prefix).match(out[0]):
        err = " ".join((done.stderr or done.stdout).decode(errors="replace").split())
        raise NotPut(err[-300:] or f"exit code {done.returncode}")
    return out[0]


def folder_pattern(parent: str, prefix: str) -> re.Pattern[str]:
    """What a folder :func:`put_argv` printed looks like (anything else is refused)."""
    base = parent.rstrip("/") or ""
    return re.compile("^" + re.escape(f"{base}/{prefix}") + r"[A-Za-z0-9_]+$")


def program_argv(python: str, folder: str, program: str, *args: str) -> list[str]:
    """``python -I FOLDER/NAME PROGRAM ARGS``: a program of the bundle put in ``folder``."""
    if program not in PROGRAMS:
        raise ValueError(f"no node program {program!r} (known: {', '.join(PROGRAMS)})")
    return [python, "-I", f"{folder}/{NAME}", program, *args]


def run_argv(python: str, folder: str, program: str, *args: str) -> list[str]:
    """:func:`program_argv` run by ``sh``, which removes ``folder`` once the program ended (or
    could not start): nothing is left on the node."""
    program_argv(python, folder, program)  # a known program
    return ["sh", "-c", RUN_REMOVE, "sh", python, folder, program, *args]


def oneshot_argv(python: str, parent: str, prefix: str, program: str, *args: str) -> list[str]:
    """One command that puts the bundle (its standard input) in a private folder under
    ``parent``, runs ``program`` of it with ``args`` and removes the folder: a one-off call."""
    program_argv(python, parent, program)  # a known program
    return ["sh", "-c", ONESHOT, "sh", python, parent, prefix, program, *args]
