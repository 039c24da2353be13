"""Space a run will write, checked against where it goes before anything is written.

A file set larger than the disk fills the disk, after which nothing on the machine can write; a
tmpfs larger than free memory pushes the host into swap or the OOM killer. Every kind says what
it will write where (`Kind.needs`: a list of :class:`Need`), and the runner refuses, at plan and
at run, with one sentence naming the sizes and the setting to change.

On the floor just above the ground (it reads .env and Docker's data folder, through the
transport), so that the placement, the shared tiers, the kinds and the runner all use it; a
disk system's image files are tierbench.tiers.disks's (``disk_images``).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any
from pathlib import Path

from tierbench.config.errors import ConfigError
from tierbench.config.files import dotenv
from tierbench.transport import TransportError, run_argv

GIB = 1 << 30
MEMORY = "memory (a tmpfs lives in memory)"  # where every need in memory adds up
UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclass(frozen=True)
class Need:
    """``bytes`` of ``what`` written to ``where``, which has ``free`` bytes for it; ``setting``
    says what to change when it does not fit. On a cluster, ``medium`` (disk: Docker's data
    folder; memory) is checked on the nodes of ``role`` (every node without one)."""

    what: str
    bytes: int
    where: str
    free: int | None
    setting: str
    medium: str = ""
    role: str | None = None
    # the file system a disk folder is on (st_dev): folders on one file system add up
    device: int | None = None

    def line(self) -> str:
        """One line of the plan."""
        room = "unknown" if self.free is None else human(max(self.free, 0))
        return f"  space: {self.what}: {human(self.bytes)} in {self.where} ({room} for it)"


def human(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"


def parse_size(text: str, what: str) -> int:
    """A size such as 8g, 512m or 1073741824 in bytes (tmpfs and Compose spell them so)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([bkmgt]?)(?:i?b)?\s*", str(text).lower())
    if not m:
        raise ConfigError(f"{what}={text!r} is not a size like 8g or 512m")
    return int(float(m.group(1)) * UNITS[m.group(2)])


def settings() -> dict[str, str]:
    """.env, then the environment (as docker compose reads them)."""
    return {**dotenv(), **os.environ}


def setting_size(name: str, default: str) -> int:
    """A size setting from .env or the environment."""
    return parse_size(settings().get(name) or default, name)


def docker_root() -> Path:
    """Docker's data folder (volumes and images live there)."""
    try:
        out = run_argv(["docker", "info", "--format", "{{json .DockerRootDir}}"], timeout=30)
        if out.returncode == 0 and out.stdout.strip():
            return Path(json.loads(out.stdout))
    except (TransportError, ValueError):
        pass
    return Path("/var/lib/docker")


def disk_room(path: Path) -> int:
    """Bytes that may still be written under path: the free space of its file system less a
    reserve (5 % of the file system, at least 1 GiB) so that the machine never fills up."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    st = os.statvfs(p)
    free, size = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    return free - max(GIB, size // 20)


def memory_room() -> int:
    """Bytes of memory a tmpfs may fill: MemAvailable less a reserve (10 % of memory, at least
    1 GiB)."""
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        info[key] = int(rest.split()[0]) * 1024
    return info["MemAvailable"] - max(GIB, info["MemTotal"] // 10)


def file_system(path: Path) -> int:
    """The device number of the file system a folder is (or would be) on."""
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return os.stat(p).st_dev


def on_disk(what: str, nbytes: int, path: Path, label: str, setting: str,
            role: str | None = None) -> Need:
    """A need on a disk folder (Docker's data folder, the results folder); on a cluster, on the
    nodes of ``role``."""
    return Need(what, nbytes, f"{label} ({path})", disk_room(path), setting, "disk", role,
                file_system(path))


def on_tmpfs(what: str, nbytes: int, size_setting: str, default: str, setting: str,
             copies: int = 1, role: str | None = None) -> list[Need]:
    """A need on a tmpfs of a configured size (``copies`` such tmpfs, one per container that
    has one): each must fit its tmpfs, and all of them free memory (on a cluster, of the nodes
    of ``role``)."""
    size = setting_size(size_setting, default)
    return [Need(what, nbytes, f"a tmpfs of {size_setting}={human(size)}", size,
                 f"raise {size_setting} in .env or {setting}"),
            in_memory(what if copies == 1 else f"{what} ({copies} of them)", nbytes * copies,
                      setting, role)]


def in_memory(what: str, nbytes: int, setting: str, role: str | None = None) -> Need:
    """A need in the host's memory (a tmpfs, a server's shared buffers); on a cluster, in the
    memory of the nodes of ``role``."""
    return Need(what, nbytes, MEMORY, memory_room(), setting, "memory", role)


def problems(needs: list[Need]) -> list[str]:
    """Every place that would not hold what goes there, one sentence each (needs that share a
    place add up: the file sets and the results on one disk, folders on one file system, several
    tmpfs in one memory)."""
    places: dict[Any, list[Need]] = {}
    for n in needs:
        places.setdefault(n.device if n.device is not None else n.where, []).append(n)
    out = []
    for group in places.values():
        where = " and ".join(dict.fromkeys(n.where for n in group))
        known = [n.free for n in group if n.free is not None]
        total = sum(n.bytes for n in group)
        if not known or total <= min(known):
            continue
        parts = " and ".join(f"{n.what} ({human(n.bytes)})" for n in group)
        fixes = "; ".join(dict.fromkeys(n.setting for n in group))
        out.append(f"{parts} need {human(total)} in {where}, which has "
                   f"{human(max(min(known), 0))} for it: {fixes}")
    return out

