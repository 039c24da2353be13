"""The nodes of a cluster (the cluster file: tierbench.placement.clusterfile): the checks run on
every node before anything changes anywhere, and the primitives the runner uses on a node (a
command over SSH, ``docker --context`` argv, shipping images, a node's provenance).

Command line (:func:`main`, as ``tierbench nodes``, which hands it the kinds' roles):
``tierbench nodes check FILE`` runs the checks and prints what it saw; ``tierbench nodes
provenance FILE`` prints every node's provenance as JSON.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import stat
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tierbench import nodeapp
from tierbench.config.errors import TierbenchError
from tierbench.placement.clusterfile import (CLUSTER_ENV, DEFAULT_CLOCK_BOUND_MS, Cluster,
                                             ClusterError, Node, Roles, cluster_path,
                                             load_cluster)
from tierbench.transport import (LOCAL, PIPE, CompletedProcess, Transport, TransportError, run_argv,
                                 start_argv)


class NodeError(TierbenchError):
    """A command on a node failed or timed out; the message names the node and the command."""


# ---------------------------------------------------------------------------------------------
# Primitives: commands on a node


def _command_text(command: str | Sequence[str]) -> str:
    return command if isinstance(command, str) else shlex.join(command)


# ssh's control socket for a node is FOLDER/NAME (NAME: 12 hex digits, control_name) plus a
# 17-character suffix while it is made, and a socket's path holds at most 107 bytes.
CONTROL_NAME_LENGTH = 12
CONTROL_DIR_MAX = 107 - 1 - CONTROL_NAME_LENGTH - 17


def control_name(node: Node) -> str:
    """The name of the node's ssh control socket: a digest of how ssh reaches it (shorter than
    ssh's own %C, so that the run state's folder may be a longer path)."""
    how = f"{node.user}@{node.address}:{node.port} {node.ssh_config or ''}"
    return hashlib.sha256(how.encode()).hexdigest()[:CONTROL_NAME_LENGTH]


def control_dir() -> Path:
    """Where ssh keeps its shared connections to the nodes (one socket per node): a folder only
    this user may use (0700), in a place only this user can create it: $TIERBENCH_SSH_DIR when
    set, else root's /run/tierbench/ssh, another user's $XDG_RUNTIME_DIR/tierbench-ssh (the
    user's own runtime folder) or ~/.cache/tierbench/ssh. NodeError, in one sentence, for a
    folder that exists with another owner or wider permissions, or is too long a path for a
    socket."""
    if os.environ.get("TIERBENCH_SSH_DIR"):
        path = Path(os.environ["TIERBENCH_SSH_DIR"])
    elif os.geteuid() == 0:
        path = Path("/run/tierbench/ssh")
    elif os.environ.get("XDG_RUNTIME_DIR"):
        path = Path(os.environ["XDG_RUNTIME_DIR"]) / "tierbench-ssh"
    else:
        path = Path.home() / ".cache" / "tierbench" / "ssh"
    if len(str(path)) > CONTROL_DIR_MAX:
        raise NodeError(f"the SSH control-socket folder {path} is too long a path for a socket "
                        f"(at most {CONTROL_DIR_MAX} characters): set TIERBENCH_SSH_DIR to a "
                        "shorter folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise NodeError(f"the SSH control-socket folder {path} cannot be made "
                        f"({exc.strerror or exc}): set TIERBENCH_SSH_DIR to a folder of "
                        "yours") from None
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        what = "a folder" if stat.S_ISDIR(info.st_mode) else "not a folder"
        raise NodeError(f"the SSH control-socket folder {path} must be a folder only user "
                        f"{os.geteuid()} may use (mode 0700), but it is {what}, has mode "
                        f"{stat.S_IMODE(info.st_mode):04o} and is owned by user {info.st_uid}: "
                        "remove it (tierbench makes it again) or set TIERBENCH_SSH_DIR "
                        "elsewhere")
    return path


def ssh_prefix(node: Node, *, connect_timeout: float = 10) -> list[str]:
    """ssh and its options up to the node's address: append one shell command to run it there.
    BatchMode (never a password prompt); one shared connection per node (ControlMaster, kept
    60 s after its last use), so that the many short commands of a run cost milliseconds."""
    argv = ["ssh"]
    if node.ssh_config:
        argv += ["-F", node.ssh_config]
    argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={max(1, round(connect_timeout))}",
             "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
             "-o", "ControlMaster=auto",
             "-o", f"ControlPath={control_dir()}/{control_name(node)}",
             "-o", "ControlPersist=60",
             "-p", str(node.port), "-l", node.user, "-T", "--", node.address]
    return argv


def transport(node: Node, *, connect_timeout: float = 10) -> Transport:
    """How commands reach the node: ssh (ssh_prefix) for commands on it, its Docker context for
    its engine and its containers."""
    return Transport(node.name, tuple(ssh_prefix(node, connect_timeout=connect_timeout)),
                     node.docker_context)


def tail(text: str | bytes | None, lines: int = 3, limit: int = 400) -> str:
    """The last ``lines`` non-empty lines of a command's output, on one line (at most
    ``limit`` characters), for a message."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    kept = [line.strip() for line in (text or "").splitlines() if line.strip()][-lines:]
    out = " / ".join(kept)
    return out if len(out) <= limit else "..." + out[-limit:]


def _checked(node: Node, done: CompletedProcess[str], shown: str, *, check: bool,
             over_ssh: bool) -> CompletedProcess[str]:
    if check and done.returncode != 0:
        if over_ssh and done.returncode == 255:
            raise NodeError(f"{node.name}: cannot reach {node.ssh_target} over SSH (port "
                            f"{node.port}): {tail(done.stderr) or 'ssh exited with 255'}")
        raise NodeError(f"{node.name}: `{shown}` failed with exit code {done.returncode}: "
                        f"{tail(done.stderr) or tail(done.stdout) or 'no output'}")
    return done


def _could_not_run(node: Node, exc: TransportError, shown: str) -> NodeError:
    if exc.missing:
        return NodeError(f"{node.name}: `{exc.missing}` is not installed on the controller")
    if exc.timeout:
        return NodeError(f"{node.name}: `{shown}` did not finish within {exc.timeout:g} s")
    return NodeError(f"{node.name}: `{shown}`: {exc}")


def run_on_node(node: Node, command: str | Sequence[str], *, timeout: float = 60,
                input: str | None = None, check: bool = True) -> CompletedProcess[str]:
    """Run ``command`` on ``node`` over SSH and return the finished process (text output).
    With ``check`` (the default) a non-zero exit raises NodeError naming the node, the command
    and the tail of its stderr; a timeout always does."""
    shown = _command_text(command)
    try:
        done = transport(node, connect_timeout=min(10, timeout)).run(command, timeout=timeout,
                                                                    input=input)
    except TransportError as exc:
        raise _could_not_run(node, exc, shown) from None
    return _checked(node, done, shown, check=check, over_ssh=True)


def run_at(node: Node | None, command: str | Sequence[str], *, timeout: float = 60,
           input: str | None = None, check: bool = True) -> CompletedProcess[str]:
    """run_on_node on ``node``, or the same on this host (None), so that a caller that works
    here or on a node makes one call: with ``check`` a non-zero exit raises NodeError, and a
    command that cannot run or does not finish always does, naming where."""
    if node is not None:
        return run_on_node(node, command, timeout=timeout, input=input, check=check)
    shown = _command_text(command)
    try:
        done = LOCAL.run(command, timeout=timeout, input=input)
    except TransportError as exc:
        raise NodeError(f"this host: `{shown}`: {exc}") from None
    if check and done.returncode != 0:
        raise NodeError(f"this host: `{shown}` failed with exit code {done.returncode}: "
                        f"{tail(done.stderr) or tail(done.stdout) or 'no output'}")
    return done


# The interface that holds the address this SSH session arrived at (sshd's $SSH_CONNECTION:
# client address and port, server address and port): the one carrying the controller's SSH.
MANAGEMENT_SCRIPT = ('set -- $SSH_CONNECTION; [ -n "$3" ] || exit 0; '
                     'ip -o addr show to "$3" | awk \'{print $2; exit}\'')
_management: dict[tuple[str, str, int, str], str | None] = {}


def management_interface(node: Node) -> str | None:
    """The node's interface that carries the controller's SSH (None: none found, e.g. sshd
    gives no $SSH_CONNECTION); asked once per node and address."""
    key = (node.name, node.address, node.port, node.user)
    if key not in _management:
        done = run_on_node(node, MANAGEMENT_SCRIPT, timeout=30)
        name = done.stdout.strip().split("@", 1)[0]
        _management[key] = name or None
    return _management[key]


def run_docker(node: Node, *args: str, timeout: float = 120, input: str | None = None,
               check: bool = True) -> CompletedProcess[str]:
    """``docker --context`` on the node's engine, with the same errors as run_on_node."""
    shown = "docker " + shlex.join(args)
    try:
        done = run_argv(transport(node).docker(*args), timeout=timeout, input=input)
    except TransportError as exc:
        raise _could_not_run(node, exc, shown) from None
    return _checked(node, done, shown, check=check, over_ssh=False)


def image_ids(node: Node | None, images: Sequence[str], *, timeout: float = 60) -> dict[str, str]:
    """ID of each image that exists, on the node (None: on the controller's engine)."""
    argv = ["docker", "image", "ls", "--no-trunc", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}"]
    if node is not None:
        done = run_docker(node, *argv[1:], timeout=timeout)
    else:
        try:
            done = run_argv(argv, timeout=timeout)
        except TransportError as exc:
            raise NodeError(f"controller: `docker image ls`: {exc}") from None
        if done.returncode != 0:
            raise NodeError(f"controller: `docker image ls` failed: {tail(done.stderr)}")
    have = dict(line.split(" ", 1) for line in done.stdout.splitlines() if " " in line)
    return {img: have[img] for img in images if img in have}


def ship_images(node: Node, images: Sequence[str], *,
                progress: Callable[[str], None] | None = None,
                timeout: float = 1800) -> dict[str, str]:
    """Make ``images`` (name:tag) present on ``node`` with the controller's IDs: the ones whose
    ID differs or that are missing go in one ``docker save | docker --context NODE load``
    stream (shared layers travel once). Returns every image's ID on the node."""
    say = progress or (lambda _msg: None)
    local = image_ids(None, images)
    absent = [img for img in images if img not in local]
    if absent:
        raise NodeError(f"controller: no image {absent[0]} to ship to {node.name}: build it first "
                        "(make images)")
    remote = image_ids(node, images)
    todo = [img for img in images if remote.get(img) != local[img]]
    if not todo:
        say(f"{node.name}: {len(images)} image(s) already there")
        return {img: remote[img] for img in images}
    say(f"{node.name}: shipping {len(todo)} image(s): {', '.join(todo)}")
    start = time.monotonic()
    save = start_argv(["docker", "save", *todo], stdout=PIPE, stderr=PIPE)
    load = start_argv(transport(node).docker("load", "-q"), stdin=PIPE, stdout=PIPE,
                      stderr=PIPE)
    def kill_both() -> None:
        save.kill()
        load.kill()

    timer = threading.Timer(timeout, kill_both)
    timer.start()
    sent, last = 0, start
    try:
        assert save.stdout is not None and load.stdin is not None
        while chunk := save.stdout.read(1 << 20):
            try:
                load.stdin.write(chunk)
            except BrokenPipeError:
                break
            sent += len(chunk)
            if time.monotonic() - last >= 5:
                last = time.monotonic()
                say(f"{node.name}: {sent / 1e6:.0f} MB sent")
        load.stdin.close()
        save_err = save.stderr.read() if save.stderr else b""
        # (communicate() would flush the stdin closed above; the outputs are a few lines)
        load_err = load.stderr.read() if load.stderr else b""
        if load.stdout:
            load.stdout.read()
        load.wait()
        save.wait()
    finally:
        timer.cancel()
    elapsed = time.monotonic() - start
    if elapsed >= timeout:
        raise NodeError(f"{node.name}: shipping {', '.join(todo)} did not finish within "
                        f"{timeout:g} s")
    if save.returncode != 0:
        raise NodeError(f"controller: `docker save {' '.join(todo)}` failed: {tail(save_err)}")
    if load.returncode != 0:
        raise NodeError(f"{node.name}: `docker load` failed: {tail(load_err)}")
    remote = image_ids(node, images)
    wrong = [img for img in images if remote.get(img) != local[img]]
    if wrong:
        raise NodeError(f"{node.name}: {wrong[0]} does not have the controller's ID after "
                        "loading it")
    say(f"{node.name}: shipped {sent / 1e6:.0f} MB in {elapsed:.1f} s")
    return {img: remote[img] for img in images}


_PROVENANCE = r"""
echo "kernel $(uname -r)"
echo "cpus $(nproc)"
echo "cpu_model $(grep -m1 -E '^(model name|Model|cpu model)' /proc/cpuinfo | cut -d: -f2-)"
. /etc/os-release 2>/dev/null && echo "os $PRETTY_NAME"
for itf in %s; do
  echo "== $itf"
  ethtool -i "$itf" 2>&1 || true
done
"""


def node_provenance(node: Node, *, timeout: float = 30) -> dict[str, Any]:
    """The node's kernel, OS, CPU model and count, and ``ethtool -i`` (driver, version,
    firmware, bus) of each data-plane interface."""
    names = " ".join(shlex.quote(i.name) for i in node.interfaces)
    done = run_on_node(node, _PROVENANCE % names, timeout=timeout)
    out: dict[str, Any] = {"node": node.name, "address": node.address, "interfaces": {}}
    current: dict[str, str] | None = None
    for line in done.stdout.splitlines():
        if line.startswith("== "):
            current = out["interfaces"].setdefault(line[3:].strip(), {})
        elif current is not None:
            if ":" in line:
                key, value = line.split(":", 1)
                current[key.strip().replace("-", "_")] = value.strip()
            elif line.strip():
                current["error"] = line.strip()
        elif " " in line:
            key, value = line.split(" ", 1)
            out[key] = int(value) if key == "cpus" and value.strip().isdigit() else value.strip()
    return out


# ---------------------------------------------------------------------------------------------
# Checks, before anything changes anywhere


@dataclass
class ClockReading:
    """A node's clock against the controller's: ``offset_s`` > 0 means the node is ahead.
    The uncertainty is about half the round trip."""

    node: str
    offset_s: float
    rtt_s: float
    samples: int


@dataclass
class CheckReport:
    """What the checks saw on every node, and every problem (one sentence each)."""

    problems: list[str] = field(default_factory=list)
    clocks: dict[str, ClockReading] = field(default_factory=dict)
    facts: dict[str, dict[str, Any]] = field(default_factory=dict)
    clock_bound_s: float = DEFAULT_CLOCK_BOUND_MS / 1000

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"problems": self.problems, "clock_bound_s": self.clock_bound_s,
                "clocks": {k: asdict(v) for k, v in self.clocks.items()}, "facts": self.facts}


# One line in, the node's time out. bash >= 5 reads its clock without a fork ($EPOCHREALTIME),
# which keeps the two halves of the round trip alike; else `date +%s.%N` (a fork, ~0.5 ms late).
_CLOCK_LOOP = ("if command -v bash >/dev/null && [ -n \"$(bash -c 'echo ${EPOCHREALTIME:-}')\" ]; "
               "then exec bash -c 'while read -r _; do echo $EPOCHREALTIME; done'; fi; "
               "while read -r _; do date +%s.%N; done")


def measure_clock(node: Node, *, samples: int = 7, timeout: float = 20) -> ClockReading:
    """Measure the node's clock offset over one SSH session: the controller sends a line, the
    node answers its time (bash's $EPOCHREALTIME, else ``date +%s.%N``), and the controller
    takes the midpoint of send and receive as the matching instant; the exchange with the
    shortest round trip wins (the first one, which includes the SSH handshake, is discarded)."""
    proc = transport(node, connect_timeout=min(10, timeout)).popen(
        _CLOCK_LOOP, stdin=PIPE, stdout=PIPE, stderr=PIPE,
        text=True, bufsize=1)
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    best: tuple[float, float] | None = None
    got = 0
    try:
        assert proc.stdin is not None and proc.stdout is not None
        for i in range(samples + 1):
            t0 = time.time()
            proc.stdin.write("t\n")
            proc.stdin.flush()
            line = proc.stdout.readline()
            t1 = time.time()
            if not line:
                break
            try:
                remote = float(line.strip().replace(",", "."))
            except ValueError:
                raise NodeError(f"{node.name}: `date +%s.%N` answered {line.strip()!r}, not a "
                                "time in seconds (GNU date is needed)") from None
            if i == 0:
                continue
            got += 1
            rtt = t1 - t0
            if best is None or rtt < best[1]:
                best = (remote - (t0 + t1) / 2, rtt)
    except (BrokenPipeError, OSError):
        pass
    finally:
        try:
            if proc.stdin is not None:
                proc.stdin.close()  # the remote loop ends; ssh exits
        except OSError:
            pass
        err = proc.stderr.read() if proc.stderr else ""  # the timer still bounds this wait
        proc.wait()
        timer.cancel()
    if best is None:
        if proc.returncode == 255:
            raise NodeError(f"{node.name}: cannot reach {node.ssh_target} over SSH to read its "
                            f"clock: {tail(err) or 'ssh exited with 255'}")
        raise NodeError(f"{node.name}: no clock reading within {timeout:g} s: "
                        f"{tail(err) or 'no answer'}")
    return ClockReading(node.name, best[0], best[1], got)


_PROBE = r"""
for t in docker ethtool ip python3 tar; do command -v "$t" >/dev/null 2>&1 || echo "missing $t"; done
echo "python $(python3 --version 2>/dev/null | awk '{print $2}')"
echo "compose $(docker compose version --short 2>/dev/null)"
root=$(docker info --format '{{.DockerRootDir}}' 2>/dev/null); [ -d "$root" ] || root=/
echo "docker_root $root"
echo "disk_free $(df -PB1 "$root" | awk 'NR == 2 {print $4}')"
echo "mem_available $(awk '/^MemAvailable:/ {printf "%%.0f\n", $2 * 1024}' /proc/meminfo)"
echo "cpus $(nproc)"
for itf in %s; do echo "link $itf $(ip -j addr show dev "$itf" 2>&1 | tr -d '\n')"; done
sshd -T 2>/dev/null | grep -iE '^(maxstartups|maxsessions) ' | sed 's/^/sshd_/'
"""
# sshd's limits on connections being set up at once and on sessions per connection. Docker's ssh
# helper opens one connection per API connection, and Compose opens many at once (removing a
# stack's volumes): with sshd's defaults (MaxStartups 10:30:100) `tierbench clean` failed on
# nodes prepared by hand ("Connection reset by peer"), with these it passed.
SSHD_MIN = {"maxstartups": 64, "maxsessions": 64}


def _major(version: str) -> int | None:
    m = re.match(r"v?(\d+)\.", version.strip())
    return int(m.group(1)) if m else None


def _gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


def _docker_problem(node: Node, args: tuple[str, ...], detail: str) -> str:
    """What a failed `docker --context NODE ARGS` on the controller says of the node."""
    why = detail.split(": ", 2)[-1]
    if args[0] == "compose":
        return (f"{node.name}: `docker --context {node.docker_context} compose version` fails "
                f"on the controller: {why}")
    if "context" in detail and "not found" in detail:
        return (f"{node.name}: there is no Docker context {node.docker_context}: docker context "
                f"create {node.docker_context} --docker host=ssh://{node.ssh_target}")
    return (f"{node.name}: the Docker engine does not answer through context "
            f"{node.docker_context}: {why}")


def _check_node(node: Node, need_disk: int, need_mem: int, bound_s: float, timeout: float,
                ) -> tuple[list[str], dict[str, Any], ClockReading | None]:
    problems: list[str] = []
    facts: dict[str, Any] = {"ssh": node.ssh_target, "context": node.docker_context}
    try:
        run_on_node(node, "true", timeout=timeout)
    except NodeError as exc:
        return [str(exc)], facts, None
    try:
        names = " ".join(shlex.quote(i.name) for i in node.interfaces)
        probe = run_on_node(node, _PROBE % names, timeout=timeout).stdout
    except NodeError as exc:
        return [str(exc)], facts, None
    links: dict[str, str] = {}
    for line in probe.splitlines():
        key, _, value = line.partition(" ")
        if key == "missing":
            problems.append(f"{node.name}: {value} is not installed (needed on every node)")
        elif key == "python" and re.match(r"\d+\.\d+", value):
            facts["python"] = value.strip()
            if tuple(map(int, value.split(".")[:2])) < nodeapp.MIN_PYTHON:
                need = ".".join(map(str, nodeapp.MIN_PYTHON))
                problems.append(f"{node.name}: its python3 is {value.strip()}, older than the "
                                f"{need} the programs tierbench runs there need (the rollback "
                                "guard's and the sampling agent's)")
        elif key == "link":
            itf, _, text = value.partition(" ")
            links[itf] = text
        elif key in ("disk_free", "mem_available", "cpus"):
            facts[key] = int(value) if value.strip().isdigit() else None
        elif key in ("compose", "docker_root"):
            facts[key] = value.strip()
        elif key.startswith("sshd_"):
            facts.setdefault("sshd", {})[key.removeprefix("sshd_").lower()] = value.strip()
    low = {k: v for k, v in facts.get("sshd", {}).items()
           if k in SSHD_MIN and v.split(":")[0].isdigit() and int(v.split(":")[0]) < SSHD_MIN[k]}
    if low:
        problems.append(f"{node.name}: its sshd admits too few connections at once for Docker's "
                        f"ssh helper ({', '.join(f'{k} {v}' for k, v in low.items())}): set "
                        "`MaxStartups 64:30:128` and `MaxSessions 64` in its sshd configuration "
                        "and reload sshd")
    if "docker" not in " ".join(problems):
        compose = facts.get("compose") or ""
        if (_major(compose) or 0) < 2:
            problems.append(f"{node.name}: Docker Compose v2 does not answer on the node (`docker "
                            f"compose version` gave {compose or 'nothing'}): install the "
                            "docker-compose-plugin package")
    for nic in node.interfaces:
        text = links.get(nic.name, "")
        try:
            info = json.loads(text)[0]
        except (ValueError, IndexError, KeyError, TypeError):
            problems.append(f"{node.name}: data-plane interface {nic.name} does not exist "
                            f"({tail(text) or 'no answer from ip'})")
            continue
        addrs = [f"{a.get('local')}" for a in info.get("addr_info", [])]
        facts.setdefault("interfaces", {})[nic.name] = {
            "state": info.get("operstate"), "mtu": info.get("mtu"), "addresses": addrs}
        if nic.ip not in addrs:
            problems.append(f"{node.name}: {nic.name} does not carry {nic.ip} (it has "
                            f"{', '.join(addrs) or 'no address'})")
    for fact, args in (("docker", ("version", "--format", "{{.Server.Version}}")),
                       ("compose_controller", ("compose", "version", "--short"))):
        try:
            facts[fact] = run_docker(node, *args, timeout=timeout).stdout.strip()
        except NodeError as exc:
            problems.append(_docker_problem(node, args, str(exc)))
    clock = None
    try:
        clock = measure_clock(node, timeout=timeout)
        if abs(clock.offset_s) > bound_s:
            side = "ahead of" if clock.offset_s > 0 else "behind"
            problems.append(f"{node.name}: its clock is {abs(clock.offset_s) * 1000:.1f} ms {side} "
                            f"the controller's (+/- {clock.rtt_s * 500:.1f} ms), beyond the bound "
                            f"of {bound_s * 1000:g} ms: synchronise it (chrony, NTP or PTP)")
    except NodeError as exc:
        problems.append(str(exc))
    disk, mem = facts.get("disk_free"), facts.get("mem_available")
    if need_disk and disk is not None and disk < need_disk:
        problems.append(f"{node.name}: {_gb(disk)} free in {facts.get('docker_root')}, less than "
                        f"the {_gb(need_disk)} this needs there")
    if need_mem and mem is not None and mem < need_mem:
        problems.append(f"{node.name}: {_gb(mem)} of memory available, less than the "
                        f"{_gb(need_mem)} this needs")
    return problems, facts, clock


def check_nodes(cluster: Cluster, *, need_disk_bytes: int | Mapping[str, int] = 0,
                need_mem_bytes: int | Mapping[str, int] = 0,
                clock_bound_s: float | None = None, timeout: float = 20,
                parallel: int = 8) -> CheckReport:
    """Check every node, changing nothing anywhere: SSH reachable (BatchMode, timeout); docker,
    ethtool, ip, python3 (the sampling agent) and tar installed; Docker Compose v2 on the node; each data-plane interface exists
    and carries its address; the engine answers through the node's Docker context, and Compose
    runs through it; the clock within ``clock_bound_s`` (default: the cluster file's
    clock_bound_ms) of the controller's; free disk in Docker's root folder and available memory
    at least the sizes given (one number for every node, or per node name). Every problem is
    collected, one sentence each, in node order."""
    bound = clock_bound_s if clock_bound_s is not None else cluster.clock_bound_ms / 1000
    report = CheckReport(clock_bound_s=bound)
    control_dir()  # a folder ssh may not use is one sentence, not one per node

    def need(value: int | Mapping[str, int], name: str) -> int:
        return int(value.get(name, 0)) if isinstance(value, Mapping) else int(value)

    workers = max(1, min(parallel, len(cluster.nodes)))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = {node.name: pool.submit(_check_node, node, need(need_disk_bytes, node.name),
                                          need(need_mem_bytes, node.name), bound, timeout)
                   for node in cluster.nodes}
    for node in cluster.nodes:
        problems, facts, clock = futures[node.name].result()
        report.problems += problems
        report.facts[node.name] = facts
        if clock is not None:
            report.clocks[node.name] = clock
    return report


# ---------------------------------------------------------------------------------------------
# Command line


def _describe(node: Node, report: CheckReport) -> str:
    facts = report.facts.get(node.name, {})
    parts = [f"{node.name} {node.ssh_target}"]
    if facts.get("docker"):
        parts.append(f"Docker {facts['docker']}")
    if facts.get("compose"):
        parts.append(f"Compose {facts['compose']}")
    for name, itf in facts.get("interfaces", {}).items():
        parts.append(f"{name} {itf['state']} mtu {itf['mtu']}")
    clock = report.clocks.get(node.name)
    if clock:
        parts.append(f"clock {clock.offset_s * 1000:+.3f} ms (rtt {clock.rtt_s * 1000:.3f} ms)")
    if facts.get("disk_free") is not None:
        parts.append(f"disk {_gb(facts['disk_free'])} free")
    if facts.get("mem_available") is not None:
        parts.append(f"memory {_gb(facts['mem_available'])} available")
    return ", ".join(parts)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``tierbench nodes``: check or provenance, and the cluster file."""
    sub = parser.add_subparsers(dest="nodes_command", required=True)
    check = sub.add_parser("check", help="run every node check and print what it saw")
    check.add_argument("file", metavar="cluster", nargs="?",
                       help=f"cluster file (default ${CLUSTER_ENV})")
    check.add_argument("--disk-gb", type=float, default=0, help="free disk needed per node")
    check.add_argument("--mem-gb", type=float, default=0, help="memory needed per node")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    prov = sub.add_parser("provenance", help="print every node's provenance as JSON")
    prov.add_argument("file", metavar="cluster", nargs="?",
                      help=f"cluster file (default ${CLUSTER_ENV})")


def main(args: argparse.Namespace, roles: Roles) -> int:
    """``tierbench nodes`` (arguments: :func:`add_arguments`): the cluster file validated
    against the declared ``roles``, then its nodes checked or their provenance printed."""
    path = cluster_path(args.file)
    if path is None:
        print(f"nodes: give a cluster file or set {CLUSTER_ENV}", file=sys.stderr)
        return 2
    try:
        cluster = load_cluster(path, roles)
    except ClusterError as exc:
        print(exc, file=sys.stderr)
        return 2
    start = time.monotonic()
    try:
        if args.nodes_command == "provenance":
            control_dir()
            with concurrent.futures.ThreadPoolExecutor(8) as pool:
                out = list(pool.map(node_provenance, cluster.nodes))
            print(json.dumps(out, indent=2))
            return 0
        report = check_nodes(cluster, need_disk_bytes=int(args.disk_gb * 1e9),
                             need_mem_bytes=int(args.mem_gb * 1e9))
    except NodeError as exc:
        print(f"nodes: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        for node in cluster.nodes:
            print(f"nodes: {_describe(node, report)}")
        for problem in report.problems:
            print(f"nodes: {problem}", file=sys.stderr)
        if report.ok:
            print(f"nodes: all {len(cluster.nodes)} node(s) ready (clock bound "
                  f"{report.clock_bound_s * 1000:g} ms; checked in "
                  f"{time.monotonic() - start:.1f} s)")
    return 0 if report.ok else 1
