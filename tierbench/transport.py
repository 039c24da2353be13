"""Where a command runs, and running it there: this machine, a network namespace of it, a cluster
node over SSH, or a container through its host's Docker engine. Every floor that runs a command
somewhere else goes through a :class:`Transport` (interfaces, measure, modes, placement, and the
kinds through the placer), so that there is one way to reach a node.

A node is reached with OpenSSH: the placement gives ``ssh`` and its options up to the node's
address (one shared connection per node, ControlMaster; tierbench.placement.nodes.ssh_prefix),
and the command goes after it as one string quoted for the remote shell. A container on a node
is reached through the node's Docker context (``docker --context NODE``). A transport is plain
data (its :meth:`record` goes into state files), so that a later process reaches the same node
after a crash.

This module imports nothing of tierbench: its errors say what failed, and the caller says it in
its own words (naming the interface, the node or the disk system it was working on). It is the
only module of tierbench that imports :mod:`subprocess` (ruff's banned-api rule, TID251 in
pyproject.toml, and tests/test_one_transport.py hold every other module to that, but for the two
programs whose source runs on a node with the standard library alone: modes/deadman.py and
measure/kernel.py). A command that does not finish in time is one error, :class:`DidNotFinish`,
whether it was run to its end (:func:`run_argv`, :meth:`Transport.run`) or started
(:func:`start_argv`, :meth:`Transport.popen`) and then waited for (:class:`Process`).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Command = str | Sequence[str]  # a shell snippet, or an argv
CompletedProcess = subprocess.CompletedProcess  # a command that finished, whatever its exit code
PIPE, DEVNULL, STDOUT = subprocess.PIPE, subprocess.DEVNULL, subprocess.STDOUT


class TransportError(Exception):
    """A command could not run where it was sent: ``missing`` names the program that is not
    installed, ``timeout`` the seconds it did not finish within. Callers catch it and say what
    failed in their own words."""

    def __init__(self, message: str, *, missing: str | None = None,
                 timeout: float | None = None) -> None:
        super().__init__(message)
        self.missing, self.timeout = missing, timeout


class DidNotFinish(TransportError):
    """The command did not finish within ``timeout`` seconds (the one error for that): what it
    wrote meanwhile is ``output`` and ``stderr`` when it was captured. Started processes are not
    killed by it; a command run to its end (run_argv) is."""

    def __init__(self, message: str, *, timeout: float, output: Any = None,
                 stderr: Any = None) -> None:
        super().__init__(message, timeout=timeout)
        self.timeout: float = timeout
        self.output, self.stderr = output, stderr


class Process(subprocess.Popen):
    """A started command (subprocess.Popen), whose :meth:`wait` and :meth:`communicate` raise
    DidNotFinish when it does not finish within their ``timeout``."""

    def _late(self, exc: subprocess.TimeoutExpired) -> DidNotFinish:
        argv = self.args if isinstance(self.args, (list, tuple)) else [str(self.args)]
        return DidNotFinish(f"`{shlex.join(map(str, argv[:3]))} ...` did not finish within "
                            f"{exc.timeout:g} s", timeout=exc.timeout, output=exc.output,
                            stderr=exc.stderr)

    def wait(self, timeout: float | None = None) -> int:
        try:
            return super().wait(timeout)
        except subprocess.TimeoutExpired as exc:
            raise self._late(exc) from None

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        try:
            return super().communicate(input, timeout)
        except subprocess.TimeoutExpired as exc:
            raise self._late(exc) from None


def shown(command: Command) -> str:
    """A command as it is shown in messages."""
    return command if isinstance(command, str) else shlex.join(command)


def netns_prefix(pid: int | None) -> list[str]:
    """``nsenter -t PID -n``: the network namespace of process ``pid`` (None: none)."""
    return [] if pid is None else ["nsenter", "-t", str(pid), "-n"]


@dataclass(frozen=True)
class Transport:
    """This machine (``name`` None), or the cluster node ``name`` reached with ``ssh`` (ssh and
    its options up to the address; the command is appended as one shell-quoted string), whose
    Docker engine ``context`` names."""

    name: str | None = None
    ssh: tuple[str, ...] = ()
    context: str | None = None

    @property
    def remote(self) -> bool:
        """A node over SSH (not this machine)."""
        return self.name is not None

    @property
    def where(self) -> str:
        """' on NODE' ('' on this machine)."""
        return f" on {self.name}" if self.name else ""

    def argv(self, command: Command, netns: int | None = None) -> list[str]:
        """The argv that runs ``command`` there (in the network namespace of process ``netns``
        there, when given)."""
        cmd = ["sh", "-c", command] if isinstance(command, str) else list(command)
        cmd = netns_prefix(netns) + cmd
        if not self.remote:
            return cmd
        remote = command if isinstance(command, str) and netns is None else shlex.join(cmd)
        return [*self.ssh, remote]

    def run(self, command: Command, *, netns: int | None = None, timeout: float = 60,
            input: str | bytes | None = None, text: bool = True
            ) -> CompletedProcess:
        """Run ``command`` there and return the finished process, whatever its exit code;
        TransportError when it cannot start, DidNotFinish when it does not finish within
        ``timeout`` s."""
        return run_argv(self.argv(command, netns), timeout=timeout, input=input, text=text)

    def run_batch(self, commands: Sequence[Sequence[str]], *, netns: int | None = None,
                  timeout: float = 60) -> list[CompletedProcess]:
        """Run several argvs there in one round trip (one shell: on a node, one SSH command),
        each to its end whatever the others' exit codes, in order; return each one's finished
        process (its own exit code, stdout and stderr, as :meth:`run` would). When the shell
        itself fails (the namespace or the node cannot be reached), every command not yet
        reported gets that failure. TransportError and DidNotFinish as :meth:`run`, for the
        whole batch."""
        if len(commands) == 1:
            return [self.run(list(commands[0]), netns=netns, timeout=timeout)]
        done = self.run(batch_script(commands), netns=netns, timeout=timeout)
        return split_batch(commands, done)

    def popen(self, command: Command, *, netns: int | None = None,
              **kwargs: Any) -> Process:
        """Start ``command`` there (subprocess.Popen's keywords)."""
        return start_argv(self.argv(command, netns), **kwargs)

    def unreachable(self, done: CompletedProcess) -> bool:
        """Whether a finished command failed because ssh did not reach the node."""
        return self.remote and done.returncode == 255

    def docker(self, *args: str) -> list[str]:
        """``docker`` on this machine's engine or, through its context, the node's."""
        return ["docker", *(["--context", self.context] if self.context else []), *args]

    def exec_argv(self, container: str, argv: Sequence[str], *,
                  env: Mapping[str, str] | None = None, user: str | None = None,
                  interactive: bool = False) -> list[str]:
        """``docker exec`` of ``argv`` in the container ``container`` (its ID) on this engine."""
        opts = [a for k, v in (env or {}).items() for a in ("-e", f"{k}={v}")]
        return self.docker("exec", *(["-i"] if interactive else []), *opts,
                           *(["-u", user] if user else []), container, *argv)

    def record(self) -> dict[str, Any]:
        """What a state file keeps to reach the node again (``of`` reads it back)."""
        return {"node": self.name, "ssh": list(self.ssh)} if self.remote else {}


LOCAL = Transport()

_MARK = "@@tierbench-batch"
_OUT = re.compile(rf"\n{_MARK} (\d+) (\d+)\n")
_ERR = re.compile(rf"\n{_MARK} (\d+)\n")


def batch_script(commands: Sequence[Sequence[str]]) -> str:
    """The shell script of :meth:`Transport.run_batch`: each command (stdin /dev/null), then a
    line with its number and exit code on stdout and one with its number on stderr."""
    return "; ".join(f"{shlex.join(argv)} </dev/null; printf '\\n{_MARK} {i} %d\\n' $?; "
                     f"printf '\\n{_MARK} {i}\\n' >&2" for i, argv in enumerate(commands))


def split_batch(commands: Sequence[Sequence[str]], done: CompletedProcess
                ) -> list[CompletedProcess]:
    """Each command's finished process from the output of :func:`batch_script` (a command
    whose mark is missing gets the whole script's exit code and output)."""
    out_parts = _OUT.split(done.stdout or "")
    err_parts = _ERR.split(done.stderr or "")
    outs = {int(out_parts[k + 1]): (out_parts[k], int(out_parts[k + 2]))
            for k in range(0, len(out_parts) - 1, 3)}
    errs = {int(err_parts[k + 1]): err_parts[k] for k in range(0, len(err_parts) - 1, 2)}
    whole = done.returncode or 1
    return [CompletedProcess(list(argv), outs[i][1], outs[i][0], errs.get(i, ""))
            if i in outs else CompletedProcess(list(argv), whole, done.stdout, done.stderr)
            for i, argv in enumerate(commands)]


def node_of(record: Mapping[str, Any] | None) -> Transport | None:
    """The cluster node a state record names, as a transport (None: this machine)."""
    return of(record) if record and record.get("node") else None


def of(record: Mapping[str, Any] | None) -> Transport:
    """The transport a state record names (``node`` and ``ssh``; this machine without them)."""
    if not record or not record.get("node"):
        return LOCAL
    return Transport(record["node"], tuple(record.get("ssh") or ()), record.get("context"))


def run_argv(argv: Sequence[str], *, timeout: float | None = 60,
             input: str | bytes | None = None, text: bool = True, cwd: Any = None,
             env: Mapping[str, str] | None = None, stdin: Any = None, stdout: Any = PIPE,
             stderr: Any = PIPE) -> CompletedProcess:
    """Run ``argv`` on this machine and return the finished process, whatever its exit code
    (its output captured unless ``stdout``/``stderr`` say otherwise: None leaves them to this
    process's, DEVNULL drops them, STDOUT merges stderr into stdout); TransportError when it
    cannot start, DidNotFinish (it is killed) when it does not finish within ``timeout`` s (None:
    no limit)."""
    argv = list(argv)
    try:
        return subprocess.run(argv, input=input, stdin=stdin, stdout=stdout, stderr=stderr,
                              text=text, timeout=timeout, check=False, cwd=cwd, env=env)
    except FileNotFoundError as exc:
        missing = exc.filename or argv[0]
        raise TransportError(f"{missing} is not installed", missing=missing) from None
    except subprocess.TimeoutExpired as exc:
        raise DidNotFinish(f"`{shlex.join(argv[:3])} ...` did not finish within {timeout:g} s",
                           timeout=exc.timeout, output=exc.output, stderr=exc.stderr) from None
    except OSError as exc:
        raise TransportError(f"cannot run `{argv[0]}`: {exc}") from None


def start_argv(argv: Sequence[str], **kwargs: Any) -> Process:
    """Start ``argv`` on this machine (subprocess.Popen's keywords; TransportError when it is
    not installed)."""
    argv = list(argv)
    try:
        return Process(argv, **kwargs)
    except FileNotFoundError as exc:
        missing = exc.filename or argv[0]
        raise TransportError(f"{missing} is not installed", missing=missing) from None
