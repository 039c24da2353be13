"""Disk systems under a docroot or a benchmark (004 §5): real block devices where the host has
them, else emulated, and labelled so.

An emulated device is a loop device over an image file (`DISK_IMAGE_DIR`, default
/var/lib/tierbench/disk-images/PROJECT: each checkout's own; its size checked against the free space there before anything is
written), opened with direct I/O so that its reads reach the host's disk rather than the image
file's page cache. Each device is throttled at the paper's bandwidths (004 Table 3) by the
block-I/O controller of the containers that use it (Compose `blkio_config`, in an overlay written
here); tierbench reads the limits back from the containers' cgroups. Under cgroup v1 buffered
writes are not charged to a container, so throttled writes must use direct I/O: the web tier only
reads, and the disk benchmark writes with O_DIRECT. RAID-0 over several devices is mdadm's where
the kernel has md (md_mod and raid0 loaded first where they are modules), else device-mapper
striping at the same 4 KiB chunk, else btrfs's raid0 profile (this project's development kernel
has neither md nor device-mapper).

A web server's disks are mounted on its host under `<state>/disks/<server>`: one device (ext3,
as in 004) or a RAID-0 at that folder, or, for 004 Table 4's distributions, one device per folder
d1, d2, ... with a map of which file lives where (workloads/spread.py). What was built is
recorded in `<state>/disks.json` before each step, so `tierbench clean` removes it after any
crash: mounts, RAID sets and loop devices of tierbench's own images, and the images themselves
(real devices are unmounted, never erased by clean). This module says what a system is, how it
is laid out, where its commands run and what must hold before it is built; building, use and
teardown are tierbench.tiers.diskbuild's.

Where: every host-side step is a command run through a :class:`Host`, this machine or a cluster
node over SSH (the node that runs the containers using the disks: a bind mount's source and a
throttled device are paths there), with the same code. Each server records its host (node name,
SSH argv, workdir) in the state file, so teardown reaches the node after a crash; on a node the
mounts go under `WORKDIR/disks`, the images under `WORKDIR/disk-images`, named
`tierbench-disk@NODE-...` (loop devices are the kernel's: the lab's nodes share one, and another
host's are never matched). md or btrfs is decided on the host that builds. The Compose overlay
stays on the controller, where Compose reads it.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, WithJsonSchema, model_validator

from tierbench import space, transport
from tierbench.config.errors import TierbenchError
from tierbench.config.files import project_name, state_dir
from tierbench.config.paths import refusal
from tierbench.config.models import Model, flag, number, problem, text
from tierbench.placement import owned
from tierbench.placement.placer import Placer
from tierbench.tiers import diskuse
from tierbench.transport import LOCAL as LOCAL_TRANSPORT
from tierbench.transport import CompletedProcess, Transport, TransportError

MB = 1_000_000
MIB = 1 << 20
IMAGE_PREFIX = "tierbench-disk-"
DEFAULT_IMAGE_DIR = "/var/lib/tierbench/disk-images"  # below it, one folder per checkout
# room a file system needs beside its files: journal, inode tables, btrfs metadata
OVERHEAD, SPARE = 0.15, 256 * MIB


class DiskError(TierbenchError):
    """A disk system cannot be built, checked or removed; the message says what to do."""


# --------------------------------------------------------------------------- definitions


@dataclass(frozen=True)
class System:
    """A disk system: `devices` per web server (RAID-0 members when raid0), each throttled to
    read_bps / write_bps (None: the device's own speed) and to read_iops / write_iops requests a
    second (None: no limit; what makes a seek cost); real when `paths` names devices."""

    name: str
    devices: int
    read_bps: int | None
    write_bps: int | None
    raid0: bool
    paths: tuple[str, ...] = ()
    note: str = ""
    read_iops: int | None = None
    write_iops: int | None = None

    @property
    def emulated(self) -> bool:
        """No real device: loop devices over image files."""
        return not self.paths

    def describe(self) -> str:
        """One line for the plan, the manifest and the report."""
        rates = (f"{self.read_bps / MB:g}/{self.write_bps / MB:g} MB/s read/write per device"
                 if self.read_bps and self.write_bps else "unthrottled")
        if self.read_iops or self.write_iops:
            rates += (f", {self.read_iops or 'unlimited'}/{self.write_iops or 'unlimited'} "
                      "IOPS read/write")
        what = (f"emulated: {self.devices} loop device{'s' if self.devices > 1 else ''}"
                if self.emulated else f"real: {', '.join(self.paths)}")
        raid = ", RAID-0" if self.raid0 else ""
        return f"{self.name} ({what}, {rates}{raid}{'; ' + self.note if self.note else ''})"


# 004 §5.1 Table 3: IDE 35/39, SCSI 58/55 MB/s read/write; RAID-0 of three SCSI disks (the
# paper measured 120/147 MB/s for it: here three SCSI-rate devices striped, whatever that gives).
# Requests a second, so that a seek costs (004 §5.2 explains class 3's and Fig. 12b's gains by
# seek time): 004 §3.2 names the disks but not their seek times; one random request takes an
# average seek plus half a rotation. The IDE disk (Seagate ST340016A) turns at 7,200 rpm (4.2 ms
# half a rotation), with about 9 ms average seek for that class of ATA disk: about 75 a second;
# the SCSI disk (Fujitsu MAM3184MC, "1500rpm" in 004: the model is a 15,000 rpm disk) 2.0 ms
# half a rotation with about 3.5 ms average seek: about 180 a second. Both estimates, not
# figures of 004's. The throttle counts requests as submitted, before a disk's queue merges
# them: a read under about 470 KB (IDE) or 320 KB (SCSI) is bound by the count, not the
# bandwidth. Reads only (the web tier only reads): ext3's direct writes reach the loop device in
# requests of about 64 KB (seen: fio's 1 MiB sequential writes at 4.6 MB/s under 75 a second),
# which a disk's write cache would take without a seek each. RAID-0 members get none: each stripe
# unit (4 or 64 KiB) is its own request there, which a real disk merges with its neighbours
# without a seek, so a count would charge striping seeks it does not have.
IDE_IOPS, SCSI_IOPS = 75, 180
BUILTIN = {
    "ide": System("ide", 1, 35 * MB, 39 * MB, False, note="004 Table 3 IDE: 35/39 MB/s",
                  read_iops=IDE_IOPS),
    "scsi": System("scsi", 1, 58 * MB, 55 * MB, False, note="004 Table 3 SCSI: 58/55 MB/s",
                   read_iops=SCSI_IOPS),
    "raid0": System("raid0", 3, 58 * MB, 55 * MB, True,
                    note="004 Table 3 RAID-0 of 3 SCSI disks: 120/147 MB/s in the paper"),
}


def _devices(value: Any) -> Any:
    """A count of emulated devices (1-16) or a non-empty list of real block devices."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 16:
        return value
    if isinstance(value, list) and value:
        for v in value:
            if not isinstance(v, str) or not re.fullmatch(r"/dev/[\w./-]+", v):
                raise problem("must name block devices like /dev/sdb, got {got}", got=repr(v))
        return value
    raise problem("must be a number of emulated devices (1-16) or a list of block devices "
                  "like [/dev/sdb], got {got}", got=repr(value))


Devices = Annotated[Any, BeforeValidator(_devices), WithJsonSchema({"anyOf": [
    {"type": "integer", "minimum": 1, "maximum": 16},
    {"type": "array", "items": {"type": "string", "pattern": "^/dev/"}, "minItems": 1}]})]


class DiskSystemSpec(Model):
    """An experiment's own disk system (`disk_systems: {name: ...}`): real devices, or emulated
    ones at other bandwidths. A name of a built-in system (ide, scsi, raid0) replaces it."""

    devices: Devices = 1
    read_mb_s: Annotated[float, number(0.1)] | None = None
    write_mb_s: Annotated[float, number(0.1)] | None = None
    raid0: Annotated[bool, flag()] | None = None
    read_iops: Annotated[int, number(1)] | None = None
    write_iops: Annotated[int, number(1)] | None = None
    wipe: Annotated[bool, flag()] = False
    note: Annotated[str, text()] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> DiskSystemSpec:
        real = isinstance(self.devices, list)
        if real and len(set(self.devices)) != len(self.devices):
            raise problem("devices: names a device twice")
        if real and not self.wipe:
            raise problem("wipe: tierbench makes a new file system on {devices}, erasing "
                          "everything on them: set wipe: true to allow it",
                          devices=", ".join(self.devices))
        if not real and (self.read_mb_s is None or self.write_mb_s is None):
            raise problem("read_mb_s: an emulated disk system needs read_mb_s and write_mb_s "
                          "(its devices' bandwidths); or name real devices in devices")
        if (self.read_mb_s is None) != (self.write_mb_s is None):
            raise problem("write_mb_s: give both read_mb_s and write_mb_s, or neither")
        count = len(self.devices) if real else self.devices
        if self.raid0 is False and count > 1:
            raise problem("raid0: several devices per server are striped (raid0: true); 004's "
                          "distributions over separate disks are stack.placement strategies")
        return self


def resolve(custom: Mapping[str, DiskSystemSpec] | None = None) -> dict[str, System]:
    """The built-in systems with the experiment's own added or replacing them."""
    out = dict(BUILTIN)
    for name, spec in (custom or {}).items():
        real = isinstance(spec.devices, list)
        count = len(spec.devices) if real else int(spec.devices)
        out[name] = System(
            name, count,
            round(spec.read_mb_s * MB) if spec.read_mb_s is not None else None,
            round(spec.write_mb_s * MB) if spec.write_mb_s is not None else None,
            bool(spec.raid0) if spec.raid0 is not None else count > 1,
            tuple(spec.devices) if real else (), spec.note or "",
            spec.read_iops, spec.write_iops)
    return out


@dataclass(frozen=True)
class Layout:
    """How a system is laid out: `servers` servers with `disks` devices each, striped
    (raid0) or holding whole files by `spread` (workloads.spread strategy) or one device."""

    servers: int
    disks: int
    raid0: bool
    spread: str | None = None


def layout(system: System, servers: int = 1) -> Layout:
    """The layout of a system alone, under ``servers`` servers (a kind's own layouts, such as
    the web kind's 004 Table 4 strategies, are Layouts of its own)."""
    return Layout(servers, system.devices, system.raid0)


def devices_needed(system: System, lay: Layout) -> int:
    """Devices the layout takes in all."""
    return lay.servers * lay.disks


@dataclass(frozen=True)
class Plan:
    """One disk system to build: the system, its layout, the servers' names (their folders)
    and each device's size."""

    system: System
    layout: Layout
    servers: tuple[str, ...]
    device_bytes: int

    def key(self) -> dict[str, Any]:
        """What identifies it (JSON): an equal key may reuse what is built."""
        return {"system": asdict(self.system), "layout": asdict(self.layout),
                "servers": list(self.servers), "device_bytes": self.device_bytes}

    def image_bytes(self) -> int:
        """Bytes of image files it writes on the host (none for real devices)."""
        if not self.system.emulated:
            return 0
        return self.layout.servers * self.layout.disks * self.device_bytes


def plan(system: System, lay: Layout, servers: list[str], per_disk: list[int]) -> Plan:
    """A plan whose every device holds the largest of `per_disk` (a server's bytes on each of
    its disks; a RAID's share of its members) plus the file system's own room."""
    if len(servers) != lay.servers:
        raise DiskError(f"layout of {lay.servers} servers, given {len(servers)} names")
    need = max(per_disk or [0])
    size = math.ceil((need * (1 + OVERHEAD) + SPARE) / MIB) * MIB
    return Plan(system, lay, tuple(servers), size)


def per_disk_bytes(lay: Layout, total: int, spread: list[int] | None = None) -> list[int]:
    """Bytes on each device of one server: all of it on one disk, a RAID's even share, or what
    a distribution put on each disk (`spread`)."""
    if lay.raid0:
        return [math.ceil(total / lay.disks)] * lay.disks
    if lay.disks > 1:
        if spread is None:
            raise DiskError("a layout of separate disks needs the bytes on each")
        return spread
    return [total]


# --------------------------------------------------------------------------- where: this host or a node


@dataclass(frozen=True)
class Host:
    """Where a disk system's commands run: this machine (``via`` LOCAL) or a cluster node over
    SSH (``via``: the node's transport, tierbench.transport; recorded in the state file so that
    `tierbench clean` reaches the node after a crash). Every host-side
    step of this module is a command run through :meth:`run`, here or there alike. On a node
    the mounts go under ``WORKDIR/disks`` and the images under ``WORKDIR/disk-images`` (the
    cluster file's workdir), named ``tierbench-disk@NODE-...`` so that no other host's loop
    devices (the kernel's are shared by the lab's node containers) ever match."""

    via: Transport = LOCAL_TRANSPORT
    workdir: str = ""

    @property
    def node(self) -> str | None:
        """The node's name (None: this machine)."""
        return self.via.name

    @property
    def where(self) -> str:
        """' on NODE' ('' here)."""
        return f" on {self.node}" if self.node else ""

    def root(self) -> Path:
        """The folder the servers' disks are mounted under, on this host."""
        return Path(self.workdir) / "disks" if self.node else state_dir() / "disks"

    def image_dir(self, env: Mapping[str, str]) -> Path:
        """Where emulated devices' image files go on this host."""
        return Path(self.workdir) / "disk-images" if self.node else image_dir(env)

    def claim(self) -> None:
        """On a node, before a disk system writes there: this checkout's folder and the
        cluster's workdir above it made tierbench's (a fresh node has neither until the
        workloads are sent); DiskError naming the folder otherwise. Here: nothing (the state
        folder and DISK_IMAGE_DIR are checked where they are made)."""
        if not self.node:
            return
        try:
            owned.claim_checkout(self.workdir, self.via)
        except owned.OwnershipError as exc:
            raise DiskError(str(exc)) from None

    def prefix(self) -> str:
        """The image files' name prefix on this host."""
        return f"tierbench-disk@{self.node}-" if self.node else IMAGE_PREFIX

    def record(self) -> dict[str, Any]:
        """For the state file."""
        return {"node": self.node, "ssh": list(self.via.ssh), "workdir": self.workdir}

    def proc(self, argv: list[str], timeout: float = 300,
             input: str | None = None) -> CompletedProcess:
        """Run argv here or on the node; the finished process (never raises on its exit code;
        DiskError when it cannot start or does not finish)."""
        try:
            return self.via.run(argv, timeout=timeout, input=input)
        except TransportError as exc:
            if exc.missing:
                raise DiskError(f"{exc.missing} is missing{self.where}: "
                                f"{TOOLS.get(exc.missing, 'install it')} (or run `make setup`)"
                                ) from None
            raise DiskError(f"`{' '.join(argv[:3])} ...`{self.where} did not finish within "
                            f"{timeout:.0f} s") from None

    def run(self, argv: list[str], what: str, timeout: float = 300,
            input: str | None = None) -> str:
        """Run argv here or on the node; its output, or DiskError naming what failed."""
        done = self.proc(argv, timeout, input)
        if done.returncode == 0:
            return done.stdout
        if self.via.unreachable(done):
            raise DiskError(f"{what}: cannot reach node {self.node} over SSH: "
                            f"{(done.stderr.strip().splitlines() or ['ssh failed'])[-1]}")
        if done.returncode == 127:
            raise DiskError(f"{argv[0]} is missing{self.where}: "
                            f"{TOOLS.get(argv[0], 'install it')} (or run `make setup`)")
        tail = ((done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"])
        raise DiskError(f"{what}{self.where}: `{' '.join(argv[:3])} ...` failed: {tail[-1]}")

    def sh(self, script: str, what: str, timeout: float = 300, input: str | None = None) -> str:
        """A shell snippet, as run()."""
        return self.run(["sh", "-c", script], what, timeout, input)

    def read(self, path: str) -> str | None:
        """A file's text, or None when it cannot be read."""
        done = self.proc(["cat", path], timeout=60)
        return done.stdout if done.returncode == 0 else None

    def has(self, tool: str) -> bool:
        """The command exists here or on the node."""
        return self.proc(["sh", "-c", f"command -v {shlex.quote(tool)}"], 60).returncode == 0

    def mounts(self) -> list[tuple[str, str]]:
        """(source, mount point) of every mount (its /proc/self/mounts)."""
        out = []
        for line in (self.read("/proc/self/mounts") or "").splitlines():
            parts = line.split()
            if len(parts) > 1:
                out.append((parts[0], parts[1].replace("\\040", " ")))
        return out


LOCAL = Host()


def at(via: Transport, folder: str) -> Host:
    """The host reached through ``via`` as a host of disk systems: LOCAL for this machine, a
    node under this checkout's ``folder`` there (the cluster file's workdir's)."""
    return Host(via, folder) if via.remote else LOCAL


def of_role(where: Placer, role: str, index: int = 0) -> Host:
    """Where the disk systems of the ``index``-th service of ``role`` are built (loop devices,
    mounts, throttled devices): this host (LOCAL), or over SSH the node that service runs on
    (Placer.host: a role's services go round its nodes in order, web, web2, web3)."""
    return at(where.host(role, index), where.folder(role))


def host_of(record: Mapping[str, Any] | None) -> Host:
    """The host a state record names (this host when None)."""
    if not record or not record.get("node"):
        return LOCAL
    return Host(transport.of(record), record.get("workdir") or "")


# --------------------------------------------------------------------------- host settings


def image_dir(env: Mapping[str, str]) -> Path:
    """Where emulated devices' image files go on this host (DISK_IMAGE_DIR)."""
    given = env.get("DISK_IMAGE_DIR")
    if given and refusal(given, "DISK_IMAGE_DIR"):
        raise DiskError(str(refusal(given, "DISK_IMAGE_DIR")))
    return Path(given) if given else Path(DEFAULT_IMAGE_DIR) / project_name()


def disks_root() -> Path:
    """The folder the servers' disks are mounted under on this host."""
    return LOCAL.root()


def state_path() -> Path:
    """What is built now (crash-safe record, on the controller whatever host it is on)."""
    return state_dir() / "disks.json"


def overlay_path() -> Path:
    """The Compose overlay written for what is built (binds and throttles), on the controller:
    Compose reads it here, and its bind sources are paths on the host the service runs on."""
    return state_dir() / "disks" / "compose.yml"


def has_md(host: Host = LOCAL) -> bool:
    """The host's kernel has md (software RAID) and mdadm is installed (asked there)."""
    return host.proc(["sh", "-c", "test -e /proc/mdstat && command -v mdadm"],
                     timeout=60).returncode == 0


def has_dm_striped(host: Host = LOCAL) -> bool:
    """The host's kernel has device-mapper with its striped target and dmsetup is installed."""
    return host.proc(["sh", "-c", "command -v dmsetup >/dev/null && test -e /dev/mapper/control "
                      "&& dmsetup targets 2>/dev/null | grep -q '^striped'"],
                     timeout=60).returncode == 0


def load_raid_modules(host: Host = LOCAL) -> None:
    """Load md (md_mod, raid0) and device-mapper (dm_mod) where the kernel has them as modules,
    before a RAID-0 is built (a kernel without them, or without module loading, stays as it
    is: what exists is asked next)."""
    host.proc(["sh", "-c", "for m in md_mod raid0 dm_mod; do modprobe -q $m 2>/dev/null; done; "
               "true"], timeout=60)


def raid_kind(host: Host = LOCAL) -> str:
    """How RAID-0 is made on the host: 'md', else device-mapper striping ('dm'), else
    'btrfs'."""
    if has_md(host):
        return "md"
    return "dm" if has_dm_striped(host) else "btrfs"


# 004 §3.2 striped its RAID-0 in 4 KB units: md is told that chunk (which decides which files
# span several disks, the very thing 004 Fig. 13 compares); btrfs' raid0 stripe is fixed at
# 64 KiB and cannot be set, so where the kernel has no md the stripe is 16 times 004's.
MD_CHUNK_KIB = 4
BTRFS_STRIPE_KIB = 64
STRIPE_WORDS = {
    "md": f"md with a {MD_CHUNK_KIB} KiB chunk (004 §3.2's stripe)",
    "dm": f"device-mapper striping with a {MD_CHUNK_KIB} KiB chunk (004 §3.2's stripe; this "
          "kernel has no md)",
    "btrfs": f"btrfs with its fixed {BTRFS_STRIPE_KIB} KiB stripe (this kernel has neither md "
             f"nor device-mapper, which would stripe at 004 §3.2's {MD_CHUNK_KIB} KB)",
}
DM_CHUNK_SECTORS = MD_CHUNK_KIB * 1024 // 512


def stripe_check(filesystem: str) -> str | None:
    """A point's ``raid_stripe`` check from what was built (Built.filesystem): 'ok' for a
    RAID-0 at 004 §3.2's chunk, a sentence for btrfs' wider stripe (the report warns on the
    point), None where nothing is striped."""
    if f"RAID-0, {MD_CHUNK_KIB} KiB chunk" in filesystem:
        return "ok"
    if "btrfs raid0" in filesystem:
        return (f"striped at btrfs' {BTRFS_STRIPE_KIB} KiB, not 004 §3.2's {MD_CHUNK_KIB} KiB "
                "(the host has neither md nor device-mapper striping), so fewer files span "
                "several disks than in the paper")
    return None


def with_stripe_check(spec: dict[str, Any]) -> dict[str, Any]:
    """A report spec with the ``raid_stripe`` check (warned on every point striped wider than
    004's; empty on points with nothing striped)."""
    spec["checks"] = list(dict.fromkeys([*spec.get("checks", []), "raid_stripe"]))
    spec["optional"] = list(dict.fromkeys([*spec.get("optional", []), "raid_stripe"]))
    return spec


def dm_table(devices: list[str], device_bytes: int) -> str:
    """The device-mapper table of a RAID-0 over ``devices`` of ``device_bytes`` each, striped
    at 004 §3.2's 4 KiB (each device's sectors rounded down to whole chunks)."""
    per = device_bytes // 512 // DM_CHUNK_SECTORS * DM_CHUNK_SECTORS
    members = " ".join(f"{d} 0" for d in devices)
    return f"0 {per * len(devices)} striped {len(devices)} {DM_CHUNK_SECTORS} {members}"


def raid_words(host: Host = LOCAL) -> str:
    """How RAID-0 will be made and with which stripe, for the plan and the manifest: this
    host's tool, or the node's without asking it (decided on the node when it is built)."""
    if host.node:
        return (f"md with a {MD_CHUNK_KIB} KiB chunk (004 §3.2's stripe), or device-mapper "
                f"striping at that chunk, or btrfs with its fixed {BTRFS_STRIPE_KIB} KiB stripe "
                f"if {host.node}'s kernel has neither")
    return STRIPE_WORDS[raid_kind(host)]


TOOLS = {"losetup": "install util-linux", "mount": "install util-linux",
         "umount": "install util-linux", "mkfs.ext3": "install e2fsprogs",
         "mkfs.btrfs": "install btrfs-progs", "mdadm": "install mdadm",
         "dmsetup": "install dmsetup",
         "blockdev": "install util-linux", "fallocate": "install util-linux",
         "lsblk": "install util-linux", "blkid": "install util-linux",
         "python3": "install python3", "ssh": "install openssh-client"}


def tools_for(plans: list[Plan], host: Host = LOCAL) -> list[str]:
    """Host commands building these plans takes there."""
    need = ["mount", "umount", "mkfs.ext3", "python3"]
    if any(p.system.emulated for p in plans):
        need += ["losetup", "fallocate"]
    if any(p.layout.raid0 for p in plans):
        need.append({"md": "mdadm", "dm": "dmsetup", "btrfs": "mkfs.btrfs"}[raid_kind(host)])
    if any(not p.system.emulated for p in plans):
        need += ["blockdev", "lsblk", "blkid"]
    return need


def mounted_sources(host: Host = LOCAL) -> dict[str, str]:
    """Mounted block devices (resolved paths) -> where, on the host."""
    sources = [(s, m) for s, m in host.mounts() if s.startswith("/dev/")]
    if not sources:
        return {}
    real = host.run(["realpath", "-m", *(s for s, _ in sources)], "resolving devices",
                    60).split("\n")
    return {r: m for r, (_, m) in zip(real, sources)}


def preflight_on(plans: list[Plan], hosts_of: Callable[[Plan], Mapping[str, Host]]) -> None:
    """:func:`preflight` on every host the plans' servers are built on (``hosts_of``: a plan's
    servers -> their hosts). Real devices are one host's: a system of them whose servers go on
    several hosts is refused."""
    by_host: dict[Host, list[Plan]] = {}
    for p in plans:
        used = list(dict.fromkeys(hosts_of(p).values()))
        if not p.system.emulated and len(used) > 1:
            raise DiskError(f"disk system {p.system.name} names real devices, which are one "
                            f"host's, but its {len(p.servers)} servers go on {len(used)} nodes "
                            f"({', '.join(h.node or 'this host' for h in used)}): give their "
                            "role one node, or use an emulated system")
        for host in used:
            by_host.setdefault(host, []).append(p)
    for host, mine in by_host.items():
        preflight(mine, host)


def preflight(plans: list[Plan], host: Host = LOCAL) -> None:
    """Refuse, before anything is written, what cannot be built on the host: not root, a
    missing tool, a named device that does not exist, is not a block device, is in use (mounted,
    swap, an LVM, md or ZFS member, held, partitioned: tierbench.tiers.diskuse) or too
    small."""
    if not plans:
        return
    if host.run(["id", "-u"], "checking the user", 60).strip() != "0":
        raise DiskError(f"disk systems need root{host.where} (loop devices, mkfs, mount): run "
                        "as root" + (" (the cluster file's user for the node)" if host.node
                                     else ""))
    for tool in tools_for(plans, host):
        if not host.has(tool):
            raise DiskError(f"{tool} is missing{host.where}: {TOOLS[tool]} (or run "
                            "`make setup`)")
    mounted = mounted_sources(host)
    for p in plans:
        if p.system.emulated:
            continue
        want = devices_needed(p.system, p.layout)
        if len(p.system.paths) != want:
            raise DiskError(f"disk system {p.system.name} names {len(p.system.paths)} device(s) "
                            f"but its layout takes {want} ({p.layout.servers} server(s) x "
                            f"{p.layout.disks}): list {want} in disk_systems.{p.system.name}"
                            ".devices")
        for dev in p.system.paths:
            kind = host.proc(["stat", "-L", "-c", "%F", dev], 60)
            if kind.returncode != 0:
                raise DiskError(f"disk system {p.system.name}: {dev} does not exist{host.where}:"
                                " name a block device of that host in disk_systems."
                                f"{p.system.name}.devices (lsblk lists them)")
            if kind.stdout.strip() != "block special file":
                raise DiskError(f"disk system {p.system.name}: {dev} is not a block device"
                                f"{host.where}")
            real = host.run(["realpath", dev], f"resolving {dev}", 60).strip()
            busy = [src for src in mounted if src == real or src.startswith(real)]
            if busy:
                raise DiskError(f"disk system {p.system.name}: {dev} is in use{host.where} "
                                f"({busy[0]} is mounted at {mounted[busy[0]]}): name a device "
                                "nothing uses")
            why = diskuse.probe(host.proc, real)
            if why:
                raise DiskError(f"disk system {p.system.name}: {dev} is in use{host.where} "
                                f"({why}): name a device nothing uses")
            size = int(host.run(["blockdev", "--getsize64", dev], f"size of {dev}").strip() or 0)
            if size < p.device_bytes:
                raise DiskError(f"disk system {p.system.name}: {dev} holds {size} bytes but "
                                f"needs {p.device_bytes} for the file sets: shrink the file "
                                "sets or name a larger device")


def free_bytes(host: Host, folder: Path) -> int:
    """Bytes free for files in folder (or its nearest existing parent) on the host."""
    script = ('d="$1"; while [ ! -d "$d" ]; do d=$(dirname "$d"); done; '
              'df -PB1 "$d" | awk \'NR == 2 {print $4}\'')
    out = host.run(["sh", "-c", script, "sh", str(folder)], f"free space in {folder}", 60)
    return int(out.strip() or 0)


def disk_images(plans: list[Plan], env: Mapping[str, str],
                hosts_of: Callable[[Plan], Mapping[str, Host]],
                role: str) -> list[space.Need]:
    """The largest emulated disk system's image files (one is built at a time) in the image
    folder of the host that holds most of them (``hosts_of``: a plan's servers -> the hosts
    their devices are built on; DISK_IMAGE_DIR here; on a node, its workdir's disk-images,
    checked against the disks of ``role``'s nodes)."""
    emulated = [p for p in plans if p.system.emulated]
    if not emulated:
        return []
    # the host with the most image bytes of one system (one is built at a time)
    worst: tuple[int, Host, int, Plan, int] | None = None
    for p in emulated:
        per_host: dict[Host, int] = {}
        for server, host in hosts_of(p).items():
            per_host[host] = per_host.get(host, 0) + p.layout.disks
        for host, count in per_host.items():
            if worst is None or count * p.device_bytes > worst[0]:
                worst = (count * p.device_bytes, host, count, p, len(per_host))
    assert worst is not None
    nbytes, host, count, biggest, nhosts = worst
    where = f" on each of {nhosts} nodes, at most" if nhosts > 1 else ""
    return [space.on_disk(f"the loop-device images of disk system {biggest.system.name}{where} "
                          f"({count} device{'s' if count > 1 else ''})", nbytes,
                          host.image_dir(env), "the disk images' folder",
                          "shrink the files it holds or set DISK_IMAGE_DIR (.env) to a folder "
                          "with room", role=role if host.node else None)]
