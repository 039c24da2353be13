"""The CPUs a container may run on and its CPU-time limit, read and written in its cgroup.

A mode's `cpu:` (a cpuset and a limit in CPUs, as `docker update --cpuset-cpus --cpus` would
set them) stands for the studies' platforms: 004 §7 compares CPU count with CPU speed (a 4-way
700 MHz host against 2-way 2.4 GHz ones); here a cpuset gives the CPU count and a CFS quota the
share of each CPU's time. Written straight into the container's cgroup (v1 cpuset and cpu
controllers, or v2 cpuset.cpus and cpu.max) so that it changes between points without a
restart, and read back to verify and to restore. For a container on a cluster node (``node``),
this module's own code runs there with python3 over SSH (the node's transport,
tierbench.transport), on the node's PID of the container.

A platform is the parent cgroup of the server tiers' containers: they start under one common
parent (Compose `cgroup_parent`), so a cpuset and a limit written there are shared by every tier
it holds (one CPU of time for proxy and web together), while the load generator, outside it,
keeps its own CPUs. It is named by its folders (``dirs``), so that it can be restored after the
containers in it are gone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tierbench import cgroups
from tierbench.cgroups import controller_path, mountpoint
from tierbench.interfaces import netif
from tierbench.interfaces.netif import NetifError
from tierbench.transport import Transport

PERIOD_US = 100_000
NODE_CODE = "# " + "-" * 40 + " the code a node runs"  # starts after this line


def node_argv(call: str, *, exit_on_error: bool = False) -> list[str]:
    """``python3 -c PROGRAM``: this module's node code evaluating ``call`` (an expression of its
    functions) and printing its JSON value, or {"error": ...} (then exiting 1 when
    ``exit_on_error``: the rollback guard's commands, which no one reads)."""
    own = Path(__file__).read_text()
    program = "\n".join([
        "from __future__ import annotations", "import json", "from pathlib import Path",
        "class NetifError(Exception):\n    pass", f"PERIOD_US = {PERIOD_US}",
        cgroups.source(), own.split(NODE_CODE + "\n", 1)[1],
        f"try:\n    print(json.dumps({{'value': {call}}}))\n"
        "except (NetifError, OSError, ValueError) as exc:\n"
        "    print(json.dumps({'error': str(exc)}))"
        + ("\n    raise SystemExit(1)" if exit_on_error else "")])
    return ["python3", "-c", program]


def on_node(node: Transport, call: str) -> Any:
    """Run ``call`` (an expression of this module's functions) on ``node``; its JSON value."""
    out = netif.run_ns(None, node_argv(call), str(node.name), node)
    try:
        answer = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise NetifError(f"{node.name}: reading CPU settings there gave "
                         f"{out.strip()[:200]!r}") from None
    if "error" in answer:
        raise NetifError(f"{node.name}: {answer['error']}")
    return answer["value"]


def read(pid: int, node: Transport | None = None) -> dict[str, object]:
    """{"cpuset": "0-1" ('' = the parent's), "limit": CPUs of time per period or None}, of a
    process here or on a cluster node."""
    return on_node(node, f"read_cgroup({int(pid)})") if node else read_cgroup(pid)


def write(pid: int, cpuset: str | None, limit: float | None, *, set_limit: bool,
          node: Transport | None = None) -> None:
    """Set the cpuset (when given) and the limit (when set_limit: None means unlimited)."""
    if node:
        on_node(node, f"write_cgroup({int(pid)}, {cpuset!r}, {limit!r}, set_limit={set_limit!r})")
    else:
        write_cgroup(pid, cpuset, limit, set_limit=set_limit)


def platform_of(pid: int, node: Transport | None = None) -> dict[str, Any]:
    """The parent cgroup of a process: {"dirs": its folders, "own": the process's cgroup in it,
    "members": the parent's child cgroups that hold processes}."""
    return on_node(node, f"platform_info({int(pid)})") if node else platform_info(pid)


def read_platform(dirs: dict[str, str], node: Transport | None = None) -> dict[str, object]:
    """The cpuset and limit of a platform (as :func:`read`)."""
    return on_node(node, f"read_dirs({dirs!r})") if node else read_dirs(dirs)


def write_platform(dirs: dict[str, str], cpuset: str | None, limit: float | None, *,
                   set_limit: bool, node: Transport | None = None) -> None:
    """Set a platform's cpuset (when given) and limit (when set_limit; None: unlimited)."""
    if node:
        on_node(node, f"write_dirs({dirs!r}, {cpuset!r}, {limit!r}, set_limit={set_limit!r})")
    else:
        write_dirs(dirs, cpuset, limit, set_limit=set_limit)


def platform_exists(dirs: dict[str, str], node: Transport | None = None) -> bool:
    """Whether the platform's folders are still there."""
    return on_node(node, f"dirs_exist({dirs!r})") if node else dirs_exist(dirs)


def allowed(pid: int, node: Transport | None = None, *, platform: bool = False) -> set[int]:
    """CPUs the process's cgroup (``platform``: its parent) may be given."""
    if node:
        return set(on_node(node, f"sorted(allowed_cpus({int(pid)}, {platform!r}))"))
    return allowed_cpus(pid, platform)


# ---------------------------------------- the code a node runs


def cgroup_dirs(pid: int) -> dict[str, Path]:
    """The cgroup folders of a process that hold its cpuset and its CPU quota."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        raise NetifError(f"process {pid} is gone: its CPU settings cannot be read") from None
    in_cpuset, in_cpu = controller_path(lines, "cpuset"), controller_path(lines, "cpu")
    if in_cpuset and in_cpu and in_cpuset[0] == in_cpu[0] == 1:
        cpuset, cpu = mountpoint("cgroup", "cpuset"), mountpoint("cgroup", "cpu")
        if cpuset is None or cpu is None:
            raise NetifError("cgroup v1 cpuset or cpu is in use but not mounted")
        return {"cpuset": cpuset / in_cpuset[1].lstrip("/"), "cpu": cpu / in_cpu[1].lstrip("/"),
                "version": Path("1")}
    root = mountpoint("cgroup2")
    path = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), None)
    if root is None or path is None:
        raise NetifError(f"no cgroup with a cpuset and a CPU quota for process {pid}")
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
        raise NetifError(f"the cgroups beside process {pid}'s cannot be listed: {exc}") from None
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
        raise NetifError(f"the CPU settings of {who} cannot be read: {exc}") from None
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
        raise NetifError(f"the CPU settings of {who} cannot be written "
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
        raise NetifError(f"the parent cpuset of process {pid} cannot be read: {exc}") from None


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
