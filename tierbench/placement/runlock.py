"""One run per node: the lock a run holds on this host and on every node of its cluster, from
before it changes anything until it ends, whatever ends it.

A lock is an exclusive ``flock`` on ``/run/tierbench/locks/run.lock`` (this host:
``$TIERBENCH_LOCK_DIR``): the kernel holds it for the process that took it and lets it go when
that process ends, however it ends (an exception, a signal, SIGKILL). On a node the holder is a
shell in the run's own SSH session (``flock -n`` then ``cat`` reading the session's input): when
the controller ends or dies, or the session drops, the shell ends and the lock is free. The lock
file holds its owner (user, host, pid, checkout, project, command, since), written once the lock
is taken, so that a second run is refused in one sentence naming who holds it.

Stale locks: a lock whose holder has ended is free by construction, its owner record is only
overwritten. A node's lock can outlive its controller only while the node's sshd keeps a dead
session open; when the record names this host as the owner and that pid is gone here, the lock
is stale: its node-side holder (the pid the record keeps) is ended and the lock taken again.
The refusal gives the lock's age, so that a lock held for days stands out.
"""

from __future__ import annotations

import fcntl
import getpass
import json
import os
import shlex
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tierbench.config.errors import TierbenchError
from tierbench.config.files import ROOT, STATE_ROOT, project_name
from tierbench.transport import DidNotFinish, PIPE, Process, Transport, TransportError

LOCK_DIR_ENV = "TIERBENCH_LOCK_DIR"
NODE_LOCK_DIR = str(STATE_ROOT / "locks")
LOCK_FILE = "run.lock"
UNRECORDED_TRIES = 6  # a node's lock held with no owner record: asked again, this often
UNRECORDED_WAIT_S = 0.5


class LockHeld(TierbenchError):
    """Another run holds this host's or a node's lock; the message names it."""


@dataclass(frozen=True)
class Owner:
    """Who holds a lock."""

    user: str
    host: str
    pid: int
    checkout: str
    project: str
    command: str
    since: str  # ISO 8601, UTC
    node_pid: int | None = None  # on a node: the shell holding it there

    def sentence(self, now: float | None = None) -> str:
        """'user alice on host ctl (pid 42, checkout /home/alice/tb, `tierbench run quick`,
        since 2026-12-06T21:00:00Z, 1 h 5 min ago)'."""
        return (f"user {self.user} on host {self.host} (pid {self.pid}, checkout "
                f"{self.checkout}, `{self.command}`, since {self.since}, {age(self.since, now)})")


def age(since: str, now: float | None = None) -> str:
    """How long ago an ISO time was, in words ('3 min ago')."""
    try:
        then = datetime.fromisoformat(since.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return "for an unknown time"
    seconds = max(0, int((now if now is not None else time.time()) - then))
    if seconds < 60:
        return f"{seconds} s ago"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes} min ago"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min ago" if hours < 48 else f"{hours // 24} days ago"


def me(command: str) -> Owner:
    """This process as a lock's owner."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    return Owner(user, socket.gethostname(), os.getpid(), str(ROOT), project_name(), command,
                 datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))


def parse_owner(text: str) -> Owner | None:
    """The owner record of a lock file, or None (empty, or not one of ours)."""
    try:
        data = json.loads(text.strip().splitlines()[-1]) if text.strip() else None
        return Owner(**data) if isinstance(data, dict) else None
    except (ValueError, TypeError):
        return None


def _who(owner: Owner | None) -> str:
    return owner.sentence() if owner else "a run whose owner it does not record"


def alive_here(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --------------------------------------------------------------------------- this host


def lock_dir() -> Path:
    """This host's lock folder ($TIERBENCH_LOCK_DIR, default /run/tierbench/locks)."""
    return Path(os.environ.get(LOCK_DIR_ENV) or NODE_LOCK_DIR)


class HostLock:
    """This host's run lock (``acquire`` / ``release``)."""

    def __init__(self, folder: Path | None = None, where: str = "this host"):
        self.folder = folder or lock_dir()
        self.where = where
        self.fd: int | None = None
        self.stale: Owner | None = None  # the record of a holder that had ended, replaced

    @property
    def path(self) -> Path:
        return self.folder / LOCK_FILE

    def acquire(self, owner: Owner) -> None:
        """Take the lock, or LockHeld naming who holds it."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True, mode=0o755)
            if self.folder.is_symlink():
                raise LockHeld(f"{self.folder} is a symbolic link: tierbench keeps its run lock "
                               "only in a real folder; remove the link")
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise LockHeld(f"cannot take {self.where}'s run lock {self.path} "
                           f"({exc.strerror or exc}): run as root, or set {LOCK_DIR_ENV}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            held = parse_owner(os.pread(fd, 65536, 0).decode(errors="replace"))
            os.close(fd)
            raise LockHeld(f"{self.where} is in use by another tierbench run, held by "
                           f"{_who(held)}: wait for it to end, or ask its owner (lock "
                           f"{self.path})") from None
        self.stale = parse_owner(os.pread(fd, 65536, 0).decode(errors="replace"))
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(asdict(owner)) + "\n").encode(), 0)
        self.fd = fd

    def release(self) -> None:
        """Let the lock go (its record emptied)."""
        if self.fd is None:
            return
        try:
            os.ftruncate(self.fd, 0)
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


# --------------------------------------------------------------------------- a node

# $1: the lock folder, $2: the owner record (JSON, without the node's pid). Prints LOCKED and
# holds the lock until its input ends, or BUSY and the record of who holds it.
NODE_SCRIPT = r"""
d=$1; mkdir -p "$d" && [ ! -L "$d" ] || { echo "FAILED cannot make $d"; exit 3; }
exec 9>>"$d/run.lock" || { echo "FAILED cannot open $d/run.lock"; exit 3; }
if flock -n 9; then
  printf '%s\n' "$2" | sed "s/\"node_pid\": null}\$/\"node_pid\": $$}/" > "$d/run.lock"
  echo LOCKED; cat >/dev/null 9>&-; : > "$d/run.lock"
else
  echo BUSY; cat "$d/run.lock"
fi
"""


def first_line(proc: Process) -> str:
    """The first line of ``proc``'s output, read a byte at a time: what follows stays in the pipe
    for ``communicate``, which reads the pipe itself (a buffered ``readline`` would keep the
    record that came in the same read as BUSY in its buffer, and the refusal would name no
    one)."""
    if proc.stdout is None:
        return ""
    fd, line = proc.stdout.fileno(), bytearray()
    while (byte := os.read(fd, 1)) and byte != b"\n":
        line += byte
    return line.decode(errors="replace").strip()


class NodeLock:
    """A cluster node's run lock, held by a shell in an SSH session to the node."""

    def __init__(self, via: Transport, folder: str = NODE_LOCK_DIR, timeout: float = 60):
        self.via = via
        self.folder = folder
        self.timeout = timeout
        self.proc: Process | None = None

    @property
    def where(self) -> str:
        return f"node {self.via.name}"

    def _start(self, owner: Owner) -> tuple[str, list[str], str]:
        argv = ["sh", "-c", NODE_SCRIPT, "sh", self.folder, json.dumps(asdict(owner))]
        try:
            proc = self.via.popen(shlex.join(argv), stdin=PIPE,
                                  stdout=PIPE, stderr=PIPE, text=True)
        except TransportError as exc:
            raise LockHeld(f"{self.where}: cannot take its run lock: {exc}") from None
        first = first_line(proc)
        if first == "LOCKED":
            self.proc = proc
            return first, [], ""
        rest, err = proc.communicate(timeout=self.timeout)
        return first, rest.splitlines(), (err.strip().splitlines() or [""])[-1]

    def acquire(self, owner: Owner) -> None:
        """Take the node's lock, or LockHeld naming who holds it; a stale one (its owner on
        this host and gone) is taken over once."""
        killed = False
        unrecorded = 0
        for _ in range(20):
            first, rest, err = self._start(owner)
            if first == "LOCKED":
                return
            if first != "BUSY":
                raise LockHeld(f"{self.where}: cannot take its run lock ({first or 'no answer'}"
                               f"{': ' + err if err else ''})")
            held = parse_owner("\n".join(rest))
            if held is None and unrecorded < UNRECORDED_TRIES:
                # a holder in the few milliseconds between taking the lock and writing its
                # record, or between emptying it and ending: asked again before refusing
                # without a name
                unrecorded += 1
                time.sleep(UNRECORDED_WAIT_S)
                continue
            if held and (held.host, held.pid) == (owner.host, owner.pid):
                return  # this very run holds it: the node is this host, or listed twice
            if held and held.node_pid and held.host == owner.host and not alive_here(held.pid):
                if not killed:  # stale: its controller process is gone from this host
                    self.via.run(["kill", str(held.node_pid)], timeout=self.timeout)
                    killed = True
                time.sleep(0.25)
                continue
            raise LockHeld(f"{self.where} is in use by another tierbench run, held by "
                           f"{_who(held)}: wait for it to end, or ask its owner (lock "
                           f"{self.folder}/{LOCK_FILE} there)")
        raise LockHeld(f"{self.where}: its run lock is stale (its controller process is gone "
                       f"from this host) but its holder there did not end: end it, or remove "
                       f"{self.folder}/{LOCK_FILE} there")

    def release(self) -> None:
        """End the holding shell's input: it empties the record and ends, freeing the lock."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=self.timeout)
        except (DidNotFinish, OSError):
            proc.kill()
            proc.wait()


# --------------------------------------------------------------------------- a run's locks


@dataclass
class Holding:
    """The locks this process holds now (hold's ``with`` block)."""

    owner: Owner
    stack: ExitStack
    locks: list[Any]
    nodes: set[str]

    def take(self, lock: Any, key: str | None = None) -> None:
        """Take one more lock for the rest of the block."""
        if key is not None and key in self.nodes:
            return
        lock.acquire(self.owner)
        self.stack.callback(lock.release)
        self.locks.append(lock)
        if key is not None:
            self.nodes.add(key)


ACTIVE: list[Holding] = []


@contextmanager
def hold(command: str, node_transports: Sequence[Transport] = (),
         skip_unreachable: bool = False) -> Iterator[list[Any]]:
    """This host's lock (and those of the nodes given), held for the ``with`` block and
    released on any exit (a refusal lets go of those already taken); yields the locks. Nodes
    a run reaches later take theirs with :func:`take_nodes` once they are checked. With
    ``skip_unreachable`` (clean) a node that cannot be reached is passed over."""
    with ExitStack() as stack:
        held = Holding(me(command), stack, [], set())
        held.take(HostLock())
        ACTIVE.append(held)
        stack.callback(ACTIVE.remove, held)
        take_nodes(node_transports, skip_unreachable)
        yield held.locks


def take_nodes(transports: Sequence[Transport], skip_unreachable: bool = False) -> list[str]:
    """Every node's lock taken for the block of :func:`hold` under way (none: nothing, e.g.
    `tierbench nodes`); LockHeld naming who holds one. Returns the nodes passed over."""
    if not ACTIVE:
        return []
    skipped = []
    for via in transports:
        try:
            ACTIVE[-1].take(NodeLock(via), via.name)
        except LockHeld as exc:
            if not (skip_unreachable and "cannot take its run lock" in str(exc)):
                raise
            skipped.append(str(via.name))
    return skipped
