"""Where a process's cgroups are: the hierarchies' mount points (/proc/self/mountinfo) and a
process's path in each (/proc/PID/cgroup), for cgroup v1 (a hierarchy per controller) and v2
(one unified hierarchy). Read by the sampler (CPU, memory) and by the CPU settings of modes.

Standard library only, and no import of tierbench: it goes to cluster nodes in tierbench's node
bundle (tierbench.nodeapp) with the sampling agent, the CPU settings and the tiers' processes
that use it.
"""

from __future__ import annotations

from pathlib import Path


def mountpoint(fstype: str, option: str | None = None) -> Path | None:
    """Mount point of a cgroup hierarchy (``cgroup`` with the controller ``option``, or
    ``cgroup2``), from /proc/self/mountinfo; None when it is not mounted."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if rest and rest[0] == fstype and (option is None or option in rest[-1].split(",")):
            return Path(fields[4])
    return None


def controller_path(lines: list[str], controller: str) -> tuple[int, str] | None:
    """(1, path) of a cgroup v1 ``controller`` in a process's /proc/PID/cgroup ``lines``, else
    (2, path) in the unified hierarchy; None when it is in neither."""
    v1 = [ln.split(":", 2) for ln in lines
          if ln.count(":") >= 2 and controller in ln.split(":", 2)[1].split(",")]
    if v1:
        return 1, v1[0][2]
    path = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), None)
    return (2, path) if path is not None else None


def folder(lines: list[str], controller: str) -> tuple[int, Path] | None:
    """(cgroup version, folder) of the process's cgroup holding ``controller``; None where it
    cannot be found (no such controller, or its hierarchy not mounted)."""
    found = controller_path(lines, controller)
    if found is None:
        return None
    version, path = found
    mount = mountpoint("cgroup", controller) if version == 1 else mountpoint("cgroup2")
    return (version, mount / path.lstrip("/")) if mount is not None else None

