"""The CPU settings of a cgroup (its cpuset and CFS quota, cgroup v1 or v2) read and written
where the cgroup is: the code :mod:`tierbench.interfaces.cpu` runs on this host, and on a
cluster node from tierbench's node bundle (:mod:`tierbench.nodeapp`): ``python3 -I BUNDLE cpu
CALL ARGS`` prints ``{"value": ...}`` or ``{"error": ...}`` as JSON, CALL one of :data:`CALLS`
and ARGS its keyword arguments as JSON (``strict`` after them: exit 1 on an error, for the
rollback guard's commands, which no one reads). Standard library and tierbench.cgroups only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tierbench.cgroups import controller_path, mountpoint

PERIOD_US = 100_000


class CgroupError(Exception):
    """A cgroup's CPU settings cannot be read or written (one sentence)."""


def cgroup_dirs(pid: int) -> dict[str, Path]:
    """The cgroup folders of a process that hold its cpuset and its CPU quota."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        raise CgroupError(f"process {pid} is gone: its CPU settings cannot be read") from None
    in_cpuset, in_cpu = controller_path(lines, "cpuset"), controller_path(lines, "cpu")
    if in_cpuset and in_cpu and in_cpuset[0] == in_cpu[0] == 1:
        cpuset, cpu = mountpoint("cgroup", "cpuset"), mountpoint("cgroup", "cpu")
        if cpuset is None or cpu is None:
            raise CgroupError("cgroup v1 cpuset or cpu is in use but not mounted")
        return {"cpuset": cpuset / in_cpuset[1].lstrip("/"), "cpu": cpu / in_cpu[1].lstrip("/"),
                "version": Path("1")}
    root = mountpoint("cgroup2")
    path = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), None)
    if root is None or path is None:
        raise CgroupError(f"no cgroup with a cpuset and a CPU quota for process {pid}")
    d = root / path.lstrip("/")
    return {"cpuset": d, "cpu": d, "version": Path("2")}


def platform_info(pid: int) -> dict[str, object]:
    """{"dirs": the parent cgroup's folders, "own": the process's cgroup folder in it,
    "members": the parent's child cgroups that hold processes}."""
    d = cgroup_dirs(pid)
    parent = d["cpu"].parent
    try:
        members = sorted(c.name for c in parent.iterdir()
                         if c.is_dir() and (c / "cgroup.procs").read_text().strip())
    except OSError as exc:
        raise CgroupError(f"the cgroups beside process {pid}'s cannot be listed: {exc}") from None
    return {"dirs": {"cpuset": str(d["cpuset"].parent), "cpu": str(parent),
                     "version": str(d["version"])}, "own": d["cpu"].name, "members": members}


def dirs_exist(dirs: dict[str, str]) -> bool:
    """Whether a cgroup's folders are there."""
    return Path(dirs["cpuset"]).is_dir() and Path(dirs["cpu"]).is_dir()


def read_cgroup(pid: int) -> dict[str, object]:
    """{"cpuset": "0-1" ('' = the parent's), "limit": CPUs of time per period or None}."""
    return read_dirs(cgroup_dirs(pid), f"process {pid}")


def read_dirs(dirs: dict, who: str | None = None) -> dict[str, object]:
    """The cpuset and limit of the cgroup in these folders."""
    d = {k: Path(v) for k, v in dirs.items()}
    who = who or f"the cgroup {d['cpu']}"
    try:
        cpuset = (d["cpuset"] / "cpuset.cpus").read_text().strip()
        if str(d["version"]) == "1":
            quota = int((d["cpu"] / "cpu.cfs_quota_us").read_text())
            period = int((d["cpu"] / "cpu.cfs_period_us").read_text())
        else:
            q, p = (d["cpu"] / "cpu.max").read_text().split()
            quota, period = (-1 if q == "max" else int(q)), int(p)
    except OSError as exc:
        raise CgroupError(f"the CPU settings of {who} cannot be read: {exc}") from None
    return {"cpuset": cpuset, "limit": None if quota < 0 else round(quota / period, 4)}


def write_cgroup(pid: int, cpuset: str | None, limit: float | None, *, set_limit: bool) -> None:
    """Set the cpuset (when given) and the limit (when set_limit: None means unlimited)."""
    write_dirs(cgroup_dirs(pid), cpuset, limit, set_limit=set_limit, who=f"process {pid}")


def write_dirs(dirs: dict, cpuset: str | None, limit: float | None, *, set_limit: bool,
               who: str | None = None) -> None:
    """Set the cpuset and limit of the cgroup in these folders (as :func:`write_cgroup`)."""
    d = {k: Path(v) for k, v in dirs.items()}
    who = who or f"the cgroup {d['cpu']}"
    try:
        if cpuset is not None:
            (d["cpuset"] / "cpuset.cpus").write_text(cpuset)
        if set_limit:
            quota = -1 if limit is None else max(1000, int(limit * PERIOD_US))
            if str(d["version"]) == "1":
                (d["cpu"] / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (d["cpu"] / "cpu.cfs_quota_us").write_text(str(quota))
            else:
                (d["cpu"] / "cpu.max").write_text(
                    f"{'max' if quota < 0 else quota} {PERIOD_US}")
    except OSError as exc:
        raise CgroupError(f"the CPU settings of {who} cannot be written "
                         f"(cpuset {cpuset}, limit {limit}): {exc.strerror or exc}") from None


def allowed_cpus(pid: int, platform: bool = False) -> set[int]:
    """CPUs the process's cgroup (``platform``: its parent) may be given: the cpuset of the
    cgroup above."""
    d = cgroup_dirs(pid)
    above = d["cpuset"].parent.parent if platform else d["cpuset"].parent
    try:
        return parse((above / "cpuset.cpus").read_text().strip()
                     or Path("/sys/devices/system/cpu/online").read_text().strip())
    except OSError as exc:
        raise CgroupError(f"the parent cpuset of process {pid} cannot be read: {exc}") from None


def parse(text: str) -> set[int]:
    """CPU numbers of a cpuset list such as '0-2,4'."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def widen_dirs(dirs: dict, cpuset: str) -> None:
    """A platform's cpuset widened to hold ``cpuset`` too (its limit left as it is): the first
    step of putting a platform and its containers back."""
    both = ",".join(str(c) for c in sorted(parse(str(read_dirs(dirs)["cpuset"]))
                                           | parse(cpuset)))
    write_dirs(dirs, both or None, None, set_limit=False)


CALLS: dict[str, Callable[..., Any]] = {
    "read_cgroup": read_cgroup, "write_cgroup": write_cgroup, "platform_info": platform_info,
    "read_dirs": read_dirs, "write_dirs": write_dirs, "dirs_exist": dirs_exist,
    "widen_dirs": widen_dirs,
    "allowed_cpus": lambda pid, platform=False: sorted(allowed_cpus(pid, platform))}


def main(args: list[str]) -> int:
    """``cpu CALL ARGS_JSON [strict]`` (see the module's doc)."""
    if len(args) not in (2, 3) or args[0] not in CALLS or args[2:] not in ([], ["strict"]):
        print(f"usage: python3 -I BUNDLE cpu {{{','.join(CALLS)}}} ARGS_JSON [strict]",
              file=sys.stderr)
        return 2
    try:
        print(json.dumps({"value": CALLS[args[0]](**json.loads(args[1]))}))
    except (CgroupError, OSError, ValueError, TypeError) as exc:
        print(json.dumps({"error": str(exc)}))
        return 1 if args[2:] else 0
    return 0
