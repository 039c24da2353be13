"""Whether a real block device named in ``disk_systems`` is in use, asked on the host that would
build on it, before anything is written to it (issue 39: "not mounted" is not "not in use").

A device is in use, and refused, when it or one of its partitions is mounted, is active swap
(/proc/swaps), carries the signature of an LVM physical volume, an md RAID member, a ZFS pool
member or a LUKS volume (``blkid -p``, read from the device itself, so a volume group or array
that is not assembled right now still counts), is held by another device (device-mapper, md,
bcache: ``/sys/class/block/NAME/holders``), or has a partition table with partitions on it
(``lsblk``): tierbench formats whole devices, and a partitioned one holds someone's data.

:func:`why_in_use` reads captured outputs only (tests hand it lsblk's JSON, blkid's export
lines, /proc/swaps and the holders); :func:`probe` runs the commands on the host.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from tierbench.transport import CompletedProcess

# blkid TYPE values of a device that belongs to something else, and what they mean
SIGNATURES = {
    "swap": "holds a swap area",
    "LVM2_member": "is an LVM physical volume",
    "linux_raid_member": "is a member of an md RAID set",
    "zfs_member": "is a member of a ZFS pool",
    "crypto_LUKS": "is a LUKS encrypted volume",
    "bcache": "is a bcache device",
}

Proc = Callable[..., CompletedProcess]


def _tree(lsblk: str) -> list[dict[str, Any]]:
    """Every device of lsblk's JSON (-J -p -o NAME,TYPE,FSTYPE,MOUNTPOINT), depth first."""
    try:
        roots = json.loads(lsblk or "{}").get("blockdevices") or []
    except (ValueError, AttributeError):
        return []
    out: list[dict[str, Any]] = []
    todo = list(roots)
    while todo:
        dev = todo.pop(0)
        out.append(dev)
        todo[0:0] = dev.get("children") or []
    return out


def _mountpoints(dev: Mapping[str, Any]) -> list[str]:
    points = [dev.get("mountpoint"), *(dev.get("mountpoints") or [])]
    return [p for p in points if p]


def _swaps(text: str) -> set[str]:
    return {line.split()[0] for line in text.splitlines()[1:] if line.split()}


def _export(text: str) -> dict[str, str]:
    """blkid -o export lines (KEY=value) as a mapping."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def parse_holders(text: str) -> dict[str, list[str]]:
    """'NAME: holder holder' lines (what :func:`probe` prints) as a mapping."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name.strip():
            out[name.strip()] = rest.split()
    return out


def why_in_use(dev: str, lsblk: str, blkid: str, swaps: str,
               holders: Mapping[str, list[str]]) -> str | None:
    """Why the device ``dev`` (its resolved path) is in use, as a clause ("it is an LVM
    physical volume"), or None when nothing uses it."""
    tree = _tree(lsblk)
    active = _swaps(swaps)
    for item in tree:
        name = str(item.get("name") or "")
        whose = "it" if name == dev else name
        points = _mountpoints(item)
        if any(p == "[SWAP]" for p in points) or name in active:
            return f"{whose} is active swap (/proc/swaps)"
        if points:
            return f"{whose} is mounted at {points[0]}"
        held = holders.get(name.rsplit("/", 1)[-1]) or []
        if held:
            return f"{whose} is held by {', '.join(held)} (/sys/class/block/" \
                   f"{name.rsplit('/', 1)[-1]}/holders)"
        if item.get("fstype") in SIGNATURES:
            return f"{whose} {SIGNATURES[str(item['fstype'])]}"
    if dev in active:
        return "it is active swap (/proc/swaps)"
    signature = _export(blkid)
    if signature.get("TYPE") in SIGNATURES:
        return f"it {SIGNATURES[signature['TYPE']]}"
    parts = [str(i.get("name")) for i in tree if i.get("type") == "part"]
    if parts:
        table = signature.get("PTTYPE") or "a"
        return (f"it has {'an' if table[0] in 'aeiou' else 'a'} {table} partition table with "
                f"{len(parts)} partition(s) ({', '.join(parts)})")
    return None


HOLDERS = ('for n in "$@"; do printf "%s:" "$n"; '
           'ls "/sys/class/block/$n/holders" 2>/dev/null | tr "\\n" " "; echo; done')


def probe(proc: Proc, dev: str) -> str | None:
    """:func:`why_in_use` for ``dev`` (resolved path) on the host ``proc`` runs commands on
    (``disks.Host.proc``: argv, timeout)."""
    lsblk = proc(["lsblk", "-J", "-p", "-o", "NAME,TYPE,FSTYPE,MOUNTPOINT", dev], 60)
    blkid = proc(["blkid", "-p", "-o", "export", dev], 60)
    swaps = proc(["cat", "/proc/swaps"], 60)
    names = [str(i.get("name")).rsplit("/", 1)[-1] for i in _tree(lsblk.stdout)] or \
        [dev.rsplit("/", 1)[-1]]
    held = proc(["sh", "-c", HOLDERS, "sh", *names], 60)
    return why_in_use(dev, lsblk.stdout if lsblk.returncode == 0 else "",
                      blkid.stdout if blkid.returncode == 0 else "",
                      swaps.stdout if swaps.returncode == 0 else "",
                      parse_holders(held.stdout))
