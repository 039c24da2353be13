"""The CPUs a container may run on and its CPU-time limit, read and written in its cgroup.

A mode's `cpu:` (a cpuset and a limit in CPUs, as `docker update --cpuset-cpus --cpus` would
set them) stands for the studies' platforms: 004 §7 compares CPU count with CPU speed (a 4-way
700 MHz host against 2-way 2.4 GHz ones); here a cpuset gives the CPU count and a CFS quota the
share of each CPU's time. Written straight into the container's cgroup (v1 cpuset and cpu
controllers, or v2 cpuset.cpus and cpu.max) so that it changes between points without a
restart, and read back to verify and to restore. The cgroup code is
:mod:`tierbench.interfaces.cgroupcpu`: here it runs in this process; for a container on a
cluster node (``node``) it runs there from tierbench's node bundle (:mod:`tierbench.nodeapp`,
put in a private folder under /tmp and removed in the same command) with python3 over SSH (the
node's transport), on the node's PID of the container.

A platform is the parent cgroup of the server tiers' containers: they start under one common
parent (Compose `cgroup_parent`), so a cpuset and a limit written there are shared by every tier
it holds (one CPU of time for proxy and web together), while the load generator, outside it,
keeps its own CPUs. It is named by its folders (``dirs``), so that it can be restored after the
containers in it are gone.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

from tierbench import nodeapp
from tierbench.interfaces import cgroupcpu
from tierbench.interfaces.cgroupcpu import PERIOD_US, CgroupError, parse
from tierbench.interfaces.netif import NetifError
from tierbench.transport import Transport, TransportError

__all__ = ["PERIOD_US", "allowed", "allowed_cpus", "cgroup_dirs", "dirs_exist", "node_argv",
           "on_node", "parse", "platform_exists", "platform_info", "platform_of", "read",
           "read_cgroup", "read_dirs", "read_platform", "write", "write_cgroup", "write_dirs",
           "write_platform"]

BUNDLE_PARENT = "/tmp"  # where the node bundle's private folder is made on a node
BUNDLE_PREFIX = "tierbench-cpu."
P = ParamSpec("P")
R = TypeVar("R")


def here(fn: Callable[P, R]) -> Callable[P, R]:
    """A function of cgroupcpu run in this process, its errors as NetifError."""
    @functools.wraps(fn)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except CgroupError as exc:
            raise NetifError(str(exc)) from None
    return call


cgroup_dirs = here(cgroupcpu.cgroup_dirs)
platform_info = here(cgroupcpu.platform_info)
dirs_exist = here(cgroupcpu.dirs_exist)
read_cgroup = here(cgroupcpu.read_cgroup)
read_dirs = here(cgroupcpu.read_dirs)
write_cgroup = here(cgroupcpu.write_cgroup)
write_dirs = here(cgroupcpu.write_dirs)
allowed_cpus = here(cgroupcpu.allowed_cpus)


def node_argv(python: str, bundle: str, call: str, *, strict: bool = False,
              **kwargs: Any) -> list[str]:
    """``python -I BUNDLE cpu CALL ARGS``: a call of cgroupcpu.CALLS with these keyword
    arguments (``strict``: exit 1 on an error, for the rollback guard's commands)."""
    if call not in cgroupcpu.CALLS:
        raise ValueError(f"no cgroup call {call!r}")
    return [python, "-I", bundle, "cpu", call, json.dumps(kwargs), *(["strict"] if strict else [])]


def on_node(node: Transport, call: str, **kwargs: Any) -> Any:
    """A call of cgroupcpu.CALLS with these keyword arguments on ``node`` (the node bundle put in
    a private folder there, run and removed in one command); its JSON value."""
    argv = nodeapp.oneshot_argv("python3", BUNDLE_PARENT, BUNDLE_PREFIX, "cpu", call,
                                json.dumps(kwargs))
    try:
        done = node.run(argv, timeout=30, input=nodeapp.bundle(), text=False)
    except TransportError as exc:
        raise NetifError(f"{node.name}: the CPU settings there cannot be reached ({exc})") from None
    out = done.stdout.decode(errors="replace").strip()
    try:
        answer = json.loads(out.splitlines()[-1])
    except (ValueError, IndexError):
        err = " ".join(done.stderr.decode(errors="replace").split())[-300:]
        if node.unreachable(done):
            raise NetifError(f"{node.name}: cannot reach it over SSH to read its CPU settings: "
                             f"{err}") from None
        raise NetifError(f"{node.name}: reading CPU settings there gave "
                         f"{(out or err or 'no output')[:200]!r}") from None
    if "error" in answer:
        raise NetifError(f"{node.name}: {answer['error']}")
    return answer["value"]


def read(pid: int, node: Transport | None = None) -> dict[str, object]:
    """{"cpuset": "0-1" ('' = the parent's), "limit": CPUs of time per period or None}, of a
    process here or on a cluster node."""
    return on_node(node, "read_cgroup", pid=int(pid)) if node else read_cgroup(pid)


def write(pid: int, cpuset: str | None, limit: float | None, *, set_limit: bool,
          node: Transport | None = None) -> None:
    """Set the cpuset (when given) and the limit (when set_limit: None means unlimited)."""
    if node:
        on_node(node, "write_cgroup", pid=int(pid), cpuset=cpuset, limit=limit,
                set_limit=set_limit)
    else:
        write_cgroup(pid, cpuset, limit, set_limit=set_limit)


def platform_of(pid: int, node: Transport | None = None) -> dict[str, Any]:
    """The parent cgroup of a process: {"dirs": its folders, "own": the process's cgroup in it,
    "members": the parent's child cgroups that hold processes}."""
    return on_node(node, "platform_info", pid=int(pid)) if node else platform_info(pid)


def read_platform(dirs: dict[str, str], node: Transport | None = None) -> dict[str, object]:
    """The cpuset and limit of a platform (as :func:`read`)."""
    return on_node(node, "read_dirs", dirs=dirs) if node else read_dirs(dirs)


def write_platform(dirs: dict[str, str], cpuset: str | None, limit: float | None, *,
                   set_limit: bool, node: Transport | None = None) -> None:
    """Set a platform's cpuset (when given) and limit (when set_limit; None: unlimited)."""
    if node:
        on_node(node, "write_dirs", dirs=dirs, cpuset=cpuset, limit=limit, set_limit=set_limit)
    else:
        write_dirs(dirs, cpuset, limit, set_limit=set_limit)


def platform_exists(dirs: dict[str, str], node: Transport | None = None) -> bool:
    """Whether the platform's folders are still there."""
    return on_node(node, "dirs_exist", dirs=dirs) if node else dirs_exist(dirs)


def allowed(pid: int, node: Transport | None = None, *, platform: bool = False) -> set[int]:
    """CPUs the process's cgroup (``platform``: its parent) may be given."""
    if node:
        return set(on_node(node, "allowed_cpus", pid=int(pid), platform=platform))
    return allowed_cpus(pid, platform)
