"""Folders tierbench owns, here or on a cluster node: made with a marker, used only when the
marker (or nothing at all) is there, emptied only of what the marker names
(tierbench.config.paths says which folders are refused outright)."""

from __future__ import annotations

import posixpath

from tierbench.config.errors import TierbenchError
from tierbench.config.files import project_name
from tierbench.config.paths import MARKER, system_problem
from tierbench.transport import LOCAL, Transport, TransportError

# Entries a folder made by tierbench before markers existed may hold (a cluster's workdir):
# such a folder is adopted, its marker written, rather than refused.
KNOWN = ("results", "workloads", "disks", "disk-images", "perf", MARKER)

# $1 the folder, $2 the marker's first line, $3.. the entries tierbench makes in it. Prints
# NOT-OURS and the first entry of a folder it may not take, else makes it, writes or extends the
# marker, and prints OK.
CLAIM = r"""
d=$1; head=$2; shift 2
if [ -L "$d" ]; then echo "NOT-OURS is a symbolic link"; exit 0; fi
if [ -d "$d" ] && [ ! -f "$d/%(marker)s" ]; then
  for e in $(ls -A "$d"); do
    case " %(known)s " in *" $e "*) ;; *) echo "NOT-OURS holds $e"; exit 0;; esac
  done
fi
if [ -e "$d" ] && [ ! -d "$d" ]; then echo "NOT-OURS is not a folder"; exit 0; fi
mkdir -p "$d" || exit 1
[ -f "$d/%(marker)s" ] || printf '%%s\n' "$head" > "$d/%(marker)s" || exit 1
for e in "$@"; do grep -qxF "$e" "$d/%(marker)s" || printf '%%s\n' "$e" >> "$d/%(marker)s"; done
echo OK
""" % {"marker": MARKER, "known": " ".join(KNOWN)}

# $1 the folder, $2 an entry: removed only when the folder's marker names it (none: nothing to do)
REMOVE = ('[ -e "$1/$2" ] || [ -L "$1/$2" ] || { echo REMOVED; exit 0; }; '
          f'[ -f "$1/{MARKER}" ] && grep -qxF "$2" "$1/{MARKER}" && '
          '{ rm -rf "$1/$2"; echo REMOVED; } || echo KEPT')


class OwnershipError(TierbenchError):
    """A folder tierbench would mount over, write or empty is not its own."""


def claim(path: str, what: str, entries: tuple[str, ...] = (),
          via: Transport = LOCAL) -> None:
    """Make ``path`` tierbench's (here, or on the node ``via`` reaches): refused in one sentence
    when it is a system folder or a folder of someone else's (not empty, no marker); the marker
    then names ``entries``, what tierbench makes in it."""
    where = via.where
    why = system_problem(path)
    if why is None:
        argv = ["sh", "-c", CLAIM, "sh", path, f"tierbench {project_name()}", *entries]
        try:
            done = via.run(argv, timeout=60)
        except TransportError as exc:
            raise OwnershipError(f"{what} {path}{where}: {exc}") from None
        out = done.stdout.strip().splitlines()
        if done.returncode == 0 and out[-1:] == ["OK"]:
            return
        if via.unreachable(done):
            raise OwnershipError(f"{what} {path}: cannot reach node {via.name} over SSH: "
                                 f"{(done.stderr.strip().splitlines() or ['ssh failed'])[-1]}")
        why = (out[-1].removeprefix("NOT-OURS ") + f" and has no {MARKER} (tierbench did not "
               "make it)" if out and out[-1].startswith("NOT-OURS") else
               f"cannot be made ({(done.stderr.strip().splitlines() or ['exit ' + str(done.returncode)])[-1]})")
    raise OwnershipError(f"{what} {path}{where} {why}: tierbench mounts, writes and removes "
                         "things there as root, so it uses only a folder it made (or an empty "
                         "one); give it another")


# what tierbench makes in its checkout's folder on a cluster node (WORKDIR/PROJECT)
CHECKOUT_ENTRIES = ("results", "workloads", "disks", "disk-images")


def claim_checkout(folder: str, via: Transport) -> None:
    """This checkout's folder on a node (WORKDIR/PROJECT) and the cluster's workdir above it made
    tierbench's before anything is written there, whichever step writes first (the workloads, a
    disk system's images); OwnershipError naming the folder otherwise."""
    workdir, project = posixpath.split(folder.rstrip("/"))
    claim(workdir, "the cluster's workdir", (project,), via)
    claim(folder, "this checkout's folder", CHECKOUT_ENTRIES, via)


def remove_entry(path: str, entry: str, via: Transport = LOCAL) -> bool:
    """``path/entry`` removed when the marker of ``path`` names it; whether it is gone (it
    may never have been there: a checkout that never ran on that node)."""
    done = via.run(["sh", "-c", REMOVE, "sh", path, entry], timeout=120)
    return done.stdout.strip().endswith("REMOVED")

