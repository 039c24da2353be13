"""Disk systems under a docroot or a benchmark (004 §5): real block devices where the host has
them, else emulated, and labelled so.

An emulated device is a loop device over an image file (`DISK_IMAGE_DIR`, default
/var/lib/tierbench/disk-images; its size checked against the free space there before anything is
written), opened with direct I/O so that its reads reach the host's disk rather than the image
file's page cache. Each device is throttled at the paper's bandwidths (004 Table 3) by the
block-I/O controller of the containers that use it (Compose `blkio_config`, in an overlay written
here); tierbench reads the limits back from the containers' cgroups. Under cgroup v1 buffered
writes are not charged to a container, so throttled writes must use direct I/O: the web tier only
reads, and the disk benchmark writes with O_DIRECT. RAID-0 over several devices is mdadm's where
the kernel has md, else btrfs's raid0 profile (this project's development kernel has no md).

A web server's disks are mounted on the host under `<state>/disks/<server>`: one device (ext3, as
in 004) or a RAID-0 at that folder, or, for 004 Table 4's distributions, one device per folder
d1, d2, ... with a map of which file lives where (workloads/placement.py). What was built is
recorded in `<state>/disks.json` before each step, so `tierbench clean` removes it after any
crash: mounts, RAID sets and loop devices of tierbench's own images, and the images themselves
(real devices are unmounted, never erased by clean).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BeforeValidator, WithJsonSchema, model_validator

from tierbench.config.errors import TierbenchError
from tierbench.config.files import state_dir
from tierbench.config.models import Model, flag, number, problem, text

MB = 1_000_000
MIB = 1 << 20
IMAGE_PREFIX = "tierbench-disk-"
DEFAULT_IMAGE_DIR = "/var/lib/tierbench/disk-images"
# room a file system needs beside its files: journal, inode tables, btrfs metadata
OVERHEAD, SPARE = 0.15, 256 * MIB


class DiskError(TierbenchError):
    """A disk system cannot be built, checked or removed; the message says what to do."""


# --------------------------------------------------------------------------- definitions


@dataclass(frozen=True)
class System:
    """A disk system: `devices` per web server (RAID-0 members when raid0), each throttled to
    read_bps / write_bps (None: the device's own speed); real when `paths` names devices."""

    name: str
    devices: int
    read_bps: int | None
    write_bps: int | None
    raid0: bool
    paths: tuple[str, ...] = ()
    note: str = ""

    @property
    def emulated(self) -> bool:
        """No real device: loop devices over image files."""
        return not self.paths

    def describe(self) -> str:
        """One line for the plan, the manifest and the report."""
        rates = (f"{self.read_bps / MB:g}/{self.write_bps / MB:g} MB/s read/write per device"
                 if self.read_bps and self.write_bps else "unthrottled")
        what = (f"emulated: {self.devices} loop device{'s' if self.devices > 1 else ''}"
                if self.emulated else f"real: {', '.join(self.paths)}")
        raid = ", RAID-0" if self.raid0 else ""
        return f"{self.name} ({what}, {rates}{raid}{'; ' + self.note if self.note else ''})"


# 004 §5.1 Table 3: IDE 35/39, SCSI 58/55 MB/s read/write; RAID-0 of three SCSI disks (the
# paper measured 120/147 MB/s for it: here three SCSI-rate devices striped, whatever that gives)
BUILTIN = {
    "ide": System("ide", 1, 35 * MB, 39 * MB, False, note="004 Table 3 IDE: 35/39 MB/s"),
    "scsi": System("scsi", 1, 58 * MB, 55 * MB, False, note="004 Table 3 SCSI: 58/55 MB/s"),
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
    read_mb_s: number(0.1) | None = None
    write_mb_s: number(0.1) | None = None
    raid0: flag() | None = None
    wipe: flag() = False
    note: text() | None = None

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
            tuple(spec.devices) if real else (), spec.note or "")
    return out


@dataclass(frozen=True)
class Layout:
    """How a system is laid out: `servers` web servers with `disks` devices each, striped
    (raid0) or holding whole files by `spread` (workloads.placement strategy) or one device."""

    servers: int
    disks: int
    raid0: bool
    spread: str | None = None


# 004 §5.2.4 Table 4: three web servers with three disks each (but RAID-Single: one server)
STRATEGIES: dict[str, Layout] = {
    "single-disk": Layout(3, 1, False),
    "random": Layout(3, 3, False, "random"),
    "popularity": Layout(3, 3, False, "popularity"),
    "size": Layout(3, 3, False, "size"),
    "raid-single": Layout(1, 3, True),
    "raid": Layout(3, 3, True),
}
STRATEGY_NOTES = {
    "single-disk": "every file on one disk of each of 3 servers",
    "random": "files spread at random over 3 disks of each of 3 servers",
    "popularity": "files sorted by popularity, dealt round-robin over 3 disks, 3 servers",
    "size": "files sorted by size, dealt round-robin over 3 disks, 3 servers",
    "raid-single": "every file striped over 3 disks (RAID-0), one server",
    "raid": "every file striped over 3 disks (RAID-0) of each of 3 servers",
}


def layout(system: System, strategy: str | None, servers: int = 1) -> Layout:
    """The layout of a system alone (`servers` web servers) or under a Table 4 strategy (the
    system's device then stands for each of the strategy's disks)."""
    if strategy is None:
        return Layout(servers, system.devices, system.raid0)
    return STRATEGIES[strategy]


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


# --------------------------------------------------------------------------- host settings


def image_dir(env: Mapping[str, str]) -> Path:
    """Where emulated devices' image files go (DISK_IMAGE_DIR)."""
    return Path(env.get("DISK_IMAGE_DIR") or DEFAULT_IMAGE_DIR)


def disks_root() -> Path:
    """The host folder the servers' disks are mounted under."""
    return state_dir() / "disks"


def state_path() -> Path:
    """What is built now (crash-safe record)."""
    return state_dir() / "disks.json"


def overlay_path() -> Path:
    """The Compose overlay written for what is built (binds and throttles)."""
    return disks_root() / "compose.yml"


def has_md() -> bool:
    """The kernel has md (software RAID) and mdadm is installed."""
    return Path("/proc/mdstat").exists() and shutil.which("mdadm") is not None


def raid_kind() -> str:
    """How RAID-0 is made on this host: 'md' or 'btrfs'."""
    return "md" if has_md() else "btrfs"


def _run(argv: list[str], what: str, timeout: float = 300) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except FileNotFoundError:
        raise DiskError(f"{argv[0]} is missing: {TOOLS.get(argv[0], 'install it')} (or run "
                        "`make setup`)") from None
    except subprocess.TimeoutExpired:
        raise DiskError(f"{what}: `{' '.join(argv[:3])} ...` did not finish within "
                        f"{timeout:.0f} s") from None
    if done.returncode != 0:
        tail = ((done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"])
        raise DiskError(f"{what}: `{' '.join(argv[:3])} ...` failed: {tail[-1]}")
    return done.stdout


TOOLS = {"losetup": "install util-linux", "mount": "install util-linux",
         "umount": "install util-linux", "mkfs.ext3": "install e2fsprogs",
         "mkfs.btrfs": "install btrfs-progs", "mdadm": "install mdadm",
         "blockdev": "install util-linux"}


def tools_for(plans: list[Plan]) -> list[str]:
    """Host commands building these plans takes."""
    need = ["mount", "umount", "mkfs.ext3"]
    if any(p.system.emulated for p in plans):
        need.append("losetup")
    if any(p.layout.raid0 for p in plans):
        need.append("mdadm" if has_md() else "mkfs.btrfs")
    if any(not p.system.emulated for p in plans):
        need.append("blockdev")
    return need


def mounted_sources() -> dict[str, str]:
    """Mounted block devices (resolved paths) -> where (from /proc/self/mounts)."""
    out = {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 1 and parts[0].startswith("/dev/"):
            out[os.path.realpath(parts[0])] = parts[1].replace("\\040", " ")
    return out


def preflight(plans: list[Plan]) -> None:
    """Refuse, before anything is written, what cannot be built here: not root, a missing
    tool, a named device that does not exist, is not a block device, is in use or too small."""
    if not plans:
        return
    if os.geteuid() != 0:
        raise DiskError("disk systems need root (loop devices, mkfs, mount): run as root")
    for tool in tools_for(plans):
        if shutil.which(tool) is None:
            raise DiskError(f"{tool} is missing: {TOOLS[tool]} (or run `make setup`)")
    mounted = mounted_sources()
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
            try:
                mode = os.stat(dev).st_mode
            except FileNotFoundError:
                raise DiskError(f"disk system {p.system.name}: {dev} does not exist: name a "
                                "block device of this host in disk_systems."
                                f"{p.system.name}.devices (lsblk lists them)") from None
            if not stat.S_ISBLK(mode):
                raise DiskError(f"disk system {p.system.name}: {dev} is not a block device")
            real = os.path.realpath(dev)
            busy = [src for src in mounted if src == real or src.startswith(real)]
            if busy:
                raise DiskError(f"disk system {p.system.name}: {dev} is in use ({busy[0]} is "
                                f"mounted at {mounted[busy[0]]}): name a device nothing uses")
            size = int(_run(["blockdev", "--getsize64", dev], f"size of {dev}").strip() or 0)
            if size < p.device_bytes:
                raise DiskError(f"disk system {p.system.name}: {dev} holds {size} bytes but "
                                f"needs {p.device_bytes} for the file sets: shrink the file "
                                "sets or name a larger device")


# --------------------------------------------------------------------------- built state


@dataclass
class Server:
    """One web server's disks as built: its root folder, the block devices to throttle and
    the mounts (deepest last)."""

    name: str
    root: str
    devices: list[str]
    mounts: list[str]
    spread: bool = False


@dataclass
class Built:
    """What is built now (the state file's content)."""

    key: dict[str, Any]
    servers: list[Server] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    loops: list[str] = field(default_factory=list)
    md: list[str] = field(default_factory=list)
    direct_io: bool = True
    filesystem: str = ""

    def server(self, name: str) -> Server:
        """The server of that name."""
        return next(s for s in self.servers if s.name == name)

    def record(self) -> dict[str, Any]:
        """For the manifest: the system, how it is laid out and made, its devices."""
        sysd = self.key.get("system", {})
        return {"system": sysd.get("name"), "emulated": not sysd.get("paths"),
                "layout": self.key.get("layout"), "filesystem": self.filesystem,
                "direct_io": self.direct_io if self.loops else None,
                "servers": {s.name: {"root": s.root, "devices": s.devices} for s in self.servers}}


def load() -> Built | None:
    """The recorded state, or None."""
    try:
        data = json.loads(state_path().read_text())
    except (OSError, ValueError):
        return None
    data["servers"] = [Server(**s) for s in data.get("servers", [])]
    return Built(**data)


def _save(built: Built) -> None:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(built), indent=1) + "\n")
    tmp.replace(path)


def current(p: Plan) -> Built | None:
    """What is built, when it is this plan and its mounts are all there."""
    built = load()
    if built is None or built.key != json.loads(json.dumps(p.key())):
        return None
    if all(os.path.ismount(m) for s in built.servers for m in s.mounts):
        return built
    return None


def ensure(p: Plan, env: Mapping[str, str], log: Any = print) -> Built:
    """Build the plan (or keep it when it is what is built): devices, file systems, mounts.
    Whatever else is built is removed first; a failure removes what was made."""
    found = current(p)
    if found is not None:
        return found
    teardown(env)
    built = Built(key=json.loads(json.dumps(p.key())))
    _save(built)
    try:
        _build(p, built, env, log)
    except BaseException:
        try:
            teardown(env)
        except DiskError as exc:
            log(f"tierbench: removing the half-built disk system: {exc}")
        raise
    return built


def _build(p: Plan, built: Built, env: Mapping[str, str], log: Any) -> None:
    sysm, lay = p.system, p.layout
    devices: list[str]
    if sysm.emulated:
        folder = image_dir(env)
        folder.mkdir(parents=True, exist_ok=True)
        total = p.image_bytes()
        log(f"tierbench: disk system {sysm.name}: {lay.servers * lay.disks} loop device(s) of "
            f"{p.device_bytes / MIB:.0f} MiB ({total / (1 << 30):.1f} GiB of images in {folder})")
        devices = []
        for s in p.servers:
            for d in range(lay.disks):
                image = folder / f"{IMAGE_PREFIX}{sysm.name}-{s}-d{d + 1}.img"
                built.images.append(str(image))
                _save(built)
                with image.open("wb") as fh:
                    os.posix_fallocate(fh.fileno(), 0, p.device_bytes)
                loop = _attach(image, built)
                devices.append(loop)
    else:
        devices = list(sysm.paths)
        log(f"tierbench: disk system {sysm.name}: real devices {', '.join(devices)}, "
            "new file systems")
    root = disks_root()
    for i, s in enumerate(p.servers):
        mine = devices[i * lay.disks:(i + 1) * lay.disks]
        folder = root / s
        folder.mkdir(parents=True, exist_ok=True)
        server = Server(s, str(folder), mine, [], spread=lay.spread is not None)
        built.servers.append(server)
        if lay.raid0:
            if has_md():
                md = f"/dev/md/tierbench-{s}"
                _run(["mdadm", "--create", md, "--run", "--level=0",
                      f"--raid-devices={len(mine)}", *mine], f"RAID-0 of {s}")
                built.md.append(md)
                _save(built)
                _run(["mkfs.ext3", "-q", "-F", md], f"ext3 on {md}")
                _mount(md, folder, built, server)
                built.filesystem = "ext3 on md RAID-0"
            else:
                _run(["mkfs.btrfs", "-q", "-f", "-d", "raid0", "-m", "raid0", *mine],
                     f"btrfs RAID-0 of {s}")
                _mount(mine[0], folder, built, server, fstype="btrfs",
                       options=",".join(f"device={d}" for d in mine))
                built.filesystem = "btrfs raid0 (no md in this kernel)"
        elif lay.disks > 1:
            for d, dev in enumerate(mine):
                sub = folder / f"d{d + 1}"
                sub.mkdir(exist_ok=True)
                _run(["mkfs.ext3", "-q", "-F", dev], f"ext3 on {dev}")
                _mount(dev, sub, built, server)
            built.filesystem = "ext3 on each disk"
        else:
            _run(["mkfs.ext3", "-q", "-F", mine[0]], f"ext3 on {mine[0]}")
            _mount(mine[0], folder, built, server)
            built.filesystem = "ext3"
    _save(built)


def _attach(image: Path, built: Built) -> str:
    """A loop device over the image, with direct I/O when the host's file system allows it."""
    try:
        loop = _run(["losetup", "--find", "--show", "--direct-io=on", str(image)],
                    f"loop device for {image}").strip()
    except DiskError:
        loop = _run(["losetup", "--find", "--show", str(image)],
                    f"loop device for {image}").strip()
        built.direct_io = False
    built.loops.append(loop)
    _save(built)
    return loop


def _mount(dev: str, where: Path, built: Built, server: Server, fstype: str = "ext3",
           options: str = "") -> None:
    _run(["mount", "-t", fstype, *(["-o", options] if options else []), dev, str(where)],
         f"mount {dev}")
    server.mounts.append(str(where))
    _save(built)


def write_map(built: Built, server: str, lines: list[str]) -> None:
    """A spread server's map of which disk holds each file (workloads.placement)."""
    from workloads import placement

    root = Path(built.server(server).root)
    (root / placement.MAP_NAME).write_text("\n".join(lines) + "\n")


# --------------------------------------------------------------------------- teardown


def _loops_of(folder: Path) -> list[tuple[str, str]]:
    """(loop device, image) of every loop device over one of tierbench's images there."""
    try:
        out = subprocess.run(["losetup", "--list", "--json", "--output", "NAME,BACK-FILE"],
                             capture_output=True, text=True, timeout=60, check=False).stdout
        rows = json.loads(out or "{}").get("loopdevices", [])
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return []
    found = []
    for r in rows:
        back = (r.get("back-file") or "").removesuffix(" (deleted)")
        if back and Path(back).parent == folder and Path(back).name.startswith(IMAGE_PREFIX):
            found.append((r["name"], back))
    return found


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or under root, deepest first."""
    prefix = str(root).rstrip("/") + "/"
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 1:
            where = parts[1].replace("\\040", " ")
            if where.startswith(prefix):
                found.append(where)
    return sorted(set(found), key=lambda m: (-m.count("/"), m))


def teardown(env: Mapping[str, str]) -> list[str]:
    """Remove every disk system tierbench built (recorded, or found: mounts under its folder,
    loop devices of its images): unmount, stop RAID sets, detach, delete the images. The
    containers using them must be gone. Returns notes; DiskError when something stays."""
    built = load()
    folder = image_dir(env)
    folders = {folder} | ({Path(i).parent for i in built.images} if built else set())
    loops = {name: back for f in folders for name, back in _loops_of(f)}
    mounts = _mounts_under(disks_root())
    if built is None and not loops and not mounts and not disks_root().exists() and not any(
            f.is_dir() and any(f.glob(f"{IMAGE_PREFIX}*.img")) for f in folders):
        return []
    problems: list[str] = []
    for m in mounts:
        try:
            _run(["umount", m], f"unmount {m}", timeout=120)
        except DiskError as exc:
            problems.append(str(exc))
    for md in (built.md if built else []):
        if Path(md).exists():
            try:
                _run(["mdadm", "--stop", md], f"stop {md}")
            except DiskError as exc:
                problems.append(str(exc))
    recorded = {lp for lp in (built.loops if built else [])}
    for lp in sorted(set(loops) | {lp for lp in recorded if lp in loops}):
        try:
            _run(["losetup", "--detach", lp], f"detach {lp}")
        except DiskError as exc:
            problems.append(str(exc))
    images = {Path(i) for i in (built.images if built else [])}
    for f in folders:
        if f.is_dir():
            images |= set(f.glob(f"{IMAGE_PREFIX}*.img"))
    still = {back for _, back in _loops_of(folder)}
    for image in images:
        if str(image) not in still:
            image.unlink(missing_ok=True)
    if problems:
        raise DiskError("some disk-system parts could not be removed (stop what uses them, "
                        "then `tierbench clean` again): " + "; ".join(problems[:3]))
    state_path().unlink(missing_ok=True)
    root = disks_root()
    if root.is_dir() and not _mounts_under(root) and not os.path.ismount(root):
        shutil.rmtree(root, ignore_errors=True)  # mount points, maps, the overlay
    return ["removed the disk systems (unmounted, RAID sets stopped, loop devices detached, "
            "images deleted)"]


# --------------------------------------------------------------------------- use


def throttles(server: Server, system: System) -> dict[str, Any]:
    """Compose `blkio_config` for a container reading (and writing) a server's devices."""
    out: dict[str, Any] = {}
    if system.read_bps:
        out["device_read_bps"] = [{"path": d, "rate": system.read_bps} for d in server.devices]
    if system.write_bps:
        out["device_write_bps"] = [{"path": d, "rate": system.write_bps}
                                   for d in server.devices]
    return out


def write_overlay(services: dict[str, dict[str, Any]]) -> Path:
    """The Compose overlay for what is built (services -> their binds, throttles, settings)."""
    path = overlay_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = ("# Written by tierbench (tierbench/placement/disks.py) for the disk systems it built:"
            "\n# their mounts bound into the containers that use them, and each device's "
            "throttle.\n" + yaml.safe_dump({"services": services}, sort_keys=False))
    path.write_text(text)
    return path


def evict(built: Built) -> int:
    """Drop the disk systems' files and devices from the host's page cache (written back
    first): the next read of each comes from the (emulated) disk. Returns how many files."""
    os.sync()
    count = 0
    for s in built.servers:
        for m in s.mounts:
            for folder, _, names in os.walk(m):
                for entry in names:
                    count += _drop(os.path.join(folder, entry))
        for dev in s.devices:
            _drop(dev)
    return count


def _drop(path: str) -> int:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return 1
    finally:
        os.close(fd)


def _blkio_dir(pid: int) -> tuple[int, Path] | None:
    """(cgroup version, folder) of the block-I/O controller of a process."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    v1 = [ln.split(":", 2) for ln in lines if "blkio" in ln.split(":", 2)[1].split(",")]
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not rest:
            continue
        if v1 and rest[0] == "cgroup" and "blkio" in rest[-1].split(","):
            return 1, Path(fields[4]) / v1[0][2].lstrip("/")
        if not v1 and rest[0] == "cgroup2":
            path = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), None)
            if path is not None:
                return 2, Path(fields[4]) / path.lstrip("/")
    return None


def read_throttles(pid: int) -> dict[str, dict[str, int]]:
    """The read/write bytes-per-second limits a process's cgroup has, by 'major:minor'."""
    found = _blkio_dir(pid)
    if found is None:
        return {}
    version, folder = found
    out: dict[str, dict[str, int]] = {}
    if version == 1:
        for key, name in (("read_bps", "blkio.throttle.read_bps_device"),
                          ("write_bps", "blkio.throttle.write_bps_device")):
            try:
                text_ = (folder / name).read_text()
            except OSError:
                continue
            for line in text_.splitlines():
                dev, _, value = line.partition(" ")
                if value.strip():
                    out.setdefault(dev, {})[key] = int(value)
    else:
        try:
            text_ = (folder / "io.max").read_text()
        except OSError:
            return {}
        for line in text_.splitlines():
            dev, *pairs = line.split()
            for pair in pairs:
                k, _, v = pair.partition("=")
                if k in ("rbps", "wbps") and v != "max":
                    out.setdefault(dev, {})["read_bps" if k == "rbps" else "write_bps"] = int(v)
    return out


def device_number(path: str) -> str:
    """'major:minor' of a block device."""
    rdev = os.stat(path).st_rdev
    return f"{os.major(rdev)}:{os.minor(rdev)}"


def check_throttles(server: Server, system: System, pid: int) -> tuple[dict[str, Any],
                                                                        list[str]]:
    """The limits a container has on a server's devices, read back from its cgroup, and what
    differs from the system's."""
    limits = read_throttles(pid)
    got: dict[str, Any] = {}
    problems = []
    for dev in server.devices:
        have = limits.get(device_number(dev), {})
        got[dev] = {"read_bps": have.get("read_bps"), "write_bps": have.get("write_bps")}
        for key, want in (("read_bps", system.read_bps), ("write_bps", system.write_bps)):
            if want and have.get(key) != want:
                problems.append(f"{dev}: {key} {have.get(key)} in the cgroup, {want} wanted")
    return got, problems
