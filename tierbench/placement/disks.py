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

A web server's disks are mounted on its host under `<state>/disks/<server>`: one device (ext3,
as in 004) or a RAID-0 at that folder, or, for 004 Table 4's distributions, one device per folder
d1, d2, ... with a map of which file lives where (workloads/placement.py). What was built is
recorded in `<state>/disks.json` before each step, so `tierbench clean` removes it after any
crash: mounts, RAID sets and loop devices of tierbench's own images, and the images themselves
(real devices are unmounted, never erased by clean).

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

import json
import math
import re
import shlex
import subprocess
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
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


# --------------------------------------------------------------------------- where: this host or a node


@dataclass(frozen=True)
class Host:
    """Where a disk system's commands run: this machine (``node`` None) or a cluster node over
    SSH (``ssh``: ssh and its options up to the address, as nodes.ssh_prefix gives; recorded in
    the state file so that `tierbench clean` reaches the node after a crash). Every host-side
    step of this module is a command run through :meth:`run`, here or there alike. On a node
    the mounts go under ``WORKDIR/disks`` and the images under ``WORKDIR/disk-images`` (the
    cluster file's workdir), named ``tierbench-disk@NODE-...`` so that no other host's loop
    devices (the kernel's are shared by the lab's node containers) ever match."""

    node: str | None = None
    ssh: tuple[str, ...] = ()
    workdir: str = ""

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

    def prefix(self) -> str:
        """The image files' name prefix on this host."""
        return f"tierbench-disk@{self.node}-" if self.node else IMAGE_PREFIX

    def record(self) -> dict[str, Any]:
        """For the state file."""
        return {"node": self.node, "ssh": list(self.ssh), "workdir": self.workdir}

    def proc(self, argv: list[str], timeout: float = 300,
             input: str | None = None) -> subprocess.CompletedProcess:
        """Run argv here or on the node; the finished process (never raises on its exit code;
        DiskError when it cannot start or does not finish)."""
        cmd = [*self.ssh, shlex.join(argv)] if self.node else argv
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  check=False, input=input)
        except FileNotFoundError:
            raise DiskError(f"{cmd[0]} is missing{self.where}: "
                            f"{TOOLS.get(cmd[0], 'install it')} (or run `make setup`)") from None
        except subprocess.TimeoutExpired:
            raise DiskError(f"`{' '.join(argv[:3])} ...`{self.where} did not finish within "
                            f"{timeout:.0f} s") from None

    def run(self, argv: list[str], what: str, timeout: float = 300,
            input: str | None = None) -> str:
        """Run argv here or on the node; its output, or DiskError naming what failed."""
        done = self.proc(argv, timeout, input)
        if done.returncode == 0:
            return done.stdout
        if self.node and done.returncode == 255:
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


def host_of(record: Mapping[str, Any] | None) -> Host:
    """The host a state record names (this host when None)."""
    if not record or not record.get("node"):
        return LOCAL
    return Host(record["node"], tuple(record.get("ssh") or ()), record.get("workdir") or "")


# --------------------------------------------------------------------------- host settings


def image_dir(env: Mapping[str, str]) -> Path:
    """Where emulated devices' image files go on this host (DISK_IMAGE_DIR)."""
    return Path(env.get("DISK_IMAGE_DIR") or DEFAULT_IMAGE_DIR)


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


def raid_kind(host: Host = LOCAL) -> str:
    """How RAID-0 is made on the host: 'md' or 'btrfs'."""
    return "md" if has_md(host) else "btrfs"


def raid_words(host: Host = LOCAL) -> str:
    """How RAID-0 will be made, for the plan: this host's tool, or the node's without asking
    it (decided on the node when the system is built)."""
    return f"md or btrfs (as {host.node} has md or not)" if host.node else raid_kind(host)


TOOLS = {"losetup": "install util-linux", "mount": "install util-linux",
         "umount": "install util-linux", "mkfs.ext3": "install e2fsprogs",
         "mkfs.btrfs": "install btrfs-progs", "mdadm": "install mdadm",
         "blockdev": "install util-linux", "fallocate": "install util-linux",
         "python3": "install python3", "ssh": "install openssh-client"}


def tools_for(plans: list[Plan], host: Host = LOCAL) -> list[str]:
    """Host commands building these plans takes there."""
    need = ["mount", "umount", "mkfs.ext3", "python3"]
    if any(p.system.emulated for p in plans):
        need += ["losetup", "fallocate"]
    if any(p.layout.raid0 for p in plans):
        need.append("mdadm" if has_md(host) else "mkfs.btrfs")
    if any(not p.system.emulated for p in plans):
        need.append("blockdev")
    return need


def mounted_sources(host: Host = LOCAL) -> dict[str, str]:
    """Mounted block devices (resolved paths) -> where, on the host."""
    sources = [(s, m) for s, m in host.mounts() if s.startswith("/dev/")]
    if not sources:
        return {}
    real = host.run(["realpath", "-m", *(s for s, _ in sources)], "resolving devices",
                    60).split("\n")
    return {r: m for r, (_, m) in zip(real, sources)}


def preflight(plans: list[Plan], host: Host = LOCAL) -> None:
    """Refuse, before anything is written, what cannot be built on the host: not root, a
    missing tool, a named device that does not exist, is not a block device, is in use or too
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


# --------------------------------------------------------------------------- built state


@dataclass
class Server:
    """One web server's (or the disk benchmark's) disks as built: the host they are on, its
    root folder there, the block devices to throttle, the mounts (deepest last) and the parts
    made for them (images, loop devices, md sets), each recorded before it is made."""

    name: str
    root: str
    devices: list[str]
    mounts: list[str]
    spread: bool = False
    host: dict[str, Any] | None = None
    images: list[str] = field(default_factory=list)
    loops: list[str] = field(default_factory=list)
    md: list[str] = field(default_factory=list)

    def on(self) -> Host:
        """The host its disks are on."""
        return host_of(self.host)


@dataclass
class Built:
    """What is built now (the state file's content)."""

    key: dict[str, Any]
    servers: list[Server] = field(default_factory=list)
    direct_io: bool = True
    filesystem: str = ""
    hosts: list[dict[str, Any]] = field(default_factory=list)

    def server(self, name: str) -> Server:
        """The server of that name."""
        return next(s for s in self.servers if s.name == name)

    @property
    def loops(self) -> list[str]:
        """Every loop device made."""
        return [lp for s in self.servers for lp in s.loops]

    def record(self) -> dict[str, Any]:
        """For the manifest: the system, how it is laid out and made, its devices."""
        sysd = self.key.get("system", {})
        return {"system": sysd.get("name"), "emulated": not sysd.get("paths"),
                "layout": self.key.get("layout"), "filesystem": self.filesystem,
                "direct_io": self.direct_io if self.loops else None,
                "servers": {s.name: {"root": s.root, "devices": s.devices,
                                     **({"node": s.on().node} if s.on().node else {})}
                            for s in self.servers}}


def load() -> Built | None:
    """The recorded state, or None (an older layout's parts become one server's, here)."""
    try:
        data = json.loads(state_path().read_text())
    except (OSError, ValueError):
        return None
    legacy = {k: data.pop(k) for k in ("images", "loops", "md") if k in data}
    servers = [Server(**s) for s in data.pop("servers", [])]
    if any(legacy.values()):
        servers.append(Server("", "", [], [], **legacy))
    known = {f.name for f in fields(Built)}
    return Built(servers=servers, **{k: v for k, v in data.items() if k in known})


def _save(built: Built) -> None:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(built), indent=1) + "\n")
    tmp.replace(path)


def current(p: Plan, hosts: Mapping[str, Host] | Host = LOCAL) -> Built | None:
    """What is built, when it is this plan on these hosts and its mounts are all there."""
    built = load()
    if built is None or built.key != json.loads(json.dumps(p.key())):
        return None
    for s in built.servers:
        if s.on() != _host_for(hosts, s.name):
            return None
    for s in built.servers:
        there = {m for _, m in s.on().mounts()}
        if not all(m in there for m in s.mounts):
            return None
    return built


def _host_for(hosts: Mapping[str, Host] | Host, server: str) -> Host:
    return hosts if isinstance(hosts, Host) else hosts.get(server, LOCAL)


def ensure(p: Plan, env: Mapping[str, str], log: Any = print,
           hosts: Mapping[str, Host] | Host = LOCAL) -> Built:
    """Build the plan (or keep it when it is what is built): devices, file systems, mounts,
    each server's on its host (``hosts``: one for all, or by server name; default this host).
    Whatever else is built is removed first; a failure removes what was made."""
    found = current(p, hosts)
    if found is not None:
        return found
    teardown(env)
    used = list({_host_for(hosts, s): None for s in p.servers})
    built = Built(key=json.loads(json.dumps(p.key())),
                  hosts=[h.record() for h in used if h.node])
    _save(built)
    try:
        _build(p, built, env, log, hosts)
    except BaseException:
        try:
            teardown(env)
        except DiskError as exc:
            log(f"tierbench: removing the half-built disk system: {exc}")
        raise
    return built


def _build(p: Plan, built: Built, env: Mapping[str, str], log: Any,
           hosts: Mapping[str, Host] | Host) -> None:
    sysm, lay = p.system, p.layout
    if sysm.emulated:
        for host in {_host_for(hosts, s): None for s in p.servers}:
            folder = host.image_dir(env)
            count = sum(lay.disks for s in p.servers if _host_for(hosts, s) == host)
            need = count * p.device_bytes
            room = free_bytes(host, folder)
            if need > room:
                raise DiskError(f"disk system {sysm.name}: {count} image(s) of "
                                f"{p.device_bytes / MIB:.0f} MiB need {need / MIB:.0f} MiB in "
                                f"{folder}{host.where}, where {room / MIB:.0f} MiB are free: "
                                "shrink the file sets or make room")
            log(f"tierbench: disk system {sysm.name}{host.where}: {count} loop device(s) of "
                f"{p.device_bytes / MIB:.0f} MiB ({need / (1 << 30):.1f} GiB of images in "
                f"{folder})")
    else:
        log(f"tierbench: disk system {sysm.name}: real devices {', '.join(sysm.paths)}, "
            "new file systems")
    for i, s in enumerate(p.servers):
        host = _host_for(hosts, s)
        folder = host.root() / s
        server = Server(s, str(folder), [], [], spread=lay.spread is not None,
                        host=host.record() if host.node else None)
        built.servers.append(server)
        _save(built)
        if sysm.emulated:
            images = host.image_dir(env)
            host.run(["mkdir", "-p", str(images)], f"making {images}", 60)
            for d in range(lay.disks):
                image = images / f"{host.prefix()}{sysm.name}-{s}-d{d + 1}.img"
                server.images.append(str(image))
                _save(built)
                host.run(["fallocate", "-l", str(p.device_bytes), str(image)],
                         f"image file {image}")
                server.devices.append(_attach(host, image, built, server))
        else:
            server.devices = list(sysm.paths[i * lay.disks:(i + 1) * lay.disks])
        _save(built)
        mine = server.devices
        host.run(["mkdir", "-p", str(folder)], f"making {folder}", 60)
        if lay.raid0:
            if has_md(host):
                md = f"/dev/md/tierbench-{s}"
                server.md.append(md)
                _save(built)
                host.run(["mdadm", "--create", md, "--run", "--level=0",
                          f"--raid-devices={len(mine)}", *mine], f"RAID-0 of {s}")
                host.run(["mkfs.ext3", "-q", "-F", md], f"ext3 on {md}")
                _mount(host, md, folder, built, server)
                built.filesystem = "ext3 on md RAID-0"
            else:
                host.run(["mkfs.btrfs", "-q", "-f", "-d", "raid0", "-m", "raid0", *mine],
                         f"btrfs RAID-0 of {s}")
                _mount(host, mine[0], folder, built, server, fstype="btrfs",
                       options=",".join(f"device={d}" for d in mine))
                built.filesystem = "btrfs raid0 (no md in this kernel)"
        elif lay.disks > 1:
            for d, dev in enumerate(mine):
                sub = folder / f"d{d + 1}"
                host.run(["mkdir", "-p", str(sub)], f"making {sub}", 60)
                host.run(["mkfs.ext3", "-q", "-F", dev], f"ext3 on {dev}")
                _mount(host, dev, sub, built, server)
            built.filesystem = "ext3 on each disk"
        else:
            host.run(["mkfs.ext3", "-q", "-F", mine[0]], f"ext3 on {mine[0]}")
            _mount(host, mine[0], folder, built, server)
            built.filesystem = "ext3"
    _save(built)


# A loop device over an image: a free one from the kernel (/dev/loop-control), its node made
# when the host's /dev lacks it (a node that is a container: the lab), attached with direct I/O
# when the image's file system allows it (DIO=off printed otherwise); tried again when another
# host took the same free device first.
_ATTACH = r"""
img=$1
for try in 1 2 3 4 5 6 7 8; do
  dev=$(losetup --find) || exit 1
  n=${dev#/dev/loop}
  [ -b "$dev" ] || mknod "$dev" b 7 "$n" || exit 1
  if losetup --direct-io=on "$dev" "$img" 2>/dev/null; then echo "$dev"; exit 0; fi
  if losetup "$dev" "$img"; then echo "$dev DIO=off"; exit 0; fi
  sleep 0.2
done
echo "no free loop device could be attached" >&2; exit 1
"""


def _attach(host: Host, image: Path, built: Built, server: Server) -> str:
    """A loop device over the image (see _ATTACH), recorded."""
    out = host.run(["sh", "-c", _ATTACH, "sh", str(image)], f"loop device for {image}").split()
    if not out or not out[0].startswith("/dev/loop"):
        raise DiskError(f"loop device for {image}{host.where}: losetup printed no device")
    if "DIO=off" in out:
        built.direct_io = False
    server.loops.append(out[0])
    _save(built)
    return out[0]


def _mount(host: Host, dev: str, where: Path, built: Built, server: Server,
           fstype: str = "ext3", options: str = "") -> None:
    host.run(["mount", "-t", fstype, *(["-o", options] if options else []), dev, str(where)],
             f"mount {dev}")
    server.mounts.append(str(where))
    _save(built)


def write_map(built: Built, server: str, lines: list[str]) -> None:
    """A spread server's map of which disk holds each file (workloads.placement), on its host."""
    from workloads import placement

    s = built.server(server)
    path = str(Path(s.root) / placement.MAP_NAME)
    s.on().run(["sh", "-c", 'cat > "$1"', "sh", path], f"writing {path}",
               input="\n".join(lines) + "\n")


# --------------------------------------------------------------------------- teardown


def _loops_of(host: Host, folder: Path) -> list[tuple[str, str]]:
    """(loop device, image) of every loop device over one of tierbench's images of this host
    in that folder (the prefix names the host: another host's never match)."""
    done = host.proc(["losetup", "--list", "--json", "--output", "NAME,BACK-FILE"], 60)
    try:
        rows = json.loads(done.stdout or "{}").get("loopdevices", [])
    except ValueError:
        return []
    found = []
    for r in rows:
        back = (r.get("back-file") or "").removesuffix(" (deleted)")
        if back and Path(back).parent == folder and Path(back).name.startswith(host.prefix()):
            found.append((r["name"], back))
    return found


def _mounts_under(host: Host, root: Path) -> list[str]:
    """Mount points at or under root on the host, deepest first."""
    prefix = str(root).rstrip("/") + "/"
    found = {m for _, m in host.mounts() if m.startswith(prefix)}
    return sorted(found, key=lambda m: (-m.count("/"), m))


def _images_in(host: Host, folder: Path) -> list[str]:
    done = host.proc(["find", str(folder), "-maxdepth", "1", "-name", f"{host.prefix()}*.img"], 60)
    return [ln for ln in done.stdout.splitlines() if ln.strip()] if done.returncode == 0 else []


def teardown(env: Mapping[str, str], hosts: list[Host] = ()) -> list[str]:
    """Remove every disk system tierbench built (recorded, or found on this host, the hosts the
    state names and ``hosts``: mounts under its folder, loop devices of its images): unmount,
    stop RAID sets, detach, delete the images, on each host. The containers using them must be
    gone. Returns notes; DiskError when something stays."""
    built = load()
    every = [LOCAL, *(host_of(h) for h in (built.hosts if built else [])),
             *(s.on() for s in (built.servers if built else [])), *hosts]
    problems: list[str] = []
    removed = False
    for host in dict.fromkeys(every):
        mine = [s for s in (built.servers if built else []) if s.on() == host]
        try:
            removed |= _teardown_on(host, mine, env, problems)
        except DiskError as exc:
            problems.append(str(exc))
    if problems:
        raise DiskError("some disk-system parts could not be removed (stop what uses them, "
                        "then `tierbench clean` again): " + "; ".join(problems[:3]))
    state_path().unlink(missing_ok=True)
    overlay_path().unlink(missing_ok=True)
    if built is None and not removed:
        return []
    return ["removed the disk systems (unmounted, RAID sets stopped, loop devices detached, "
            "images deleted" + (" on " + ", ".join(sorted({h.node for h in every if h.node}))
                                if any(h.node for h in every) else "") + ")"]


def _teardown_on(host: Host, servers: list[Server], env: Mapping[str, str],
                 problems: list[str]) -> bool:
    """One host's part of teardown; whether there was anything."""
    root = host.root()
    folder = host.image_dir(env)
    folders = {folder} | {Path(i).parent for s in servers for i in s.images}
    loops = {name: back for f in folders for name, back in _loops_of(host, f)}
    mounts = _mounts_under(host, root)
    recorded = [m for s in servers for m in reversed(s.mounts)]
    mounts += [m for m in recorded if m not in mounts and m in {w for _, w in host.mounts()}]
    images = {i for s in servers for i in s.images} | {i for f in folders
                                                       for i in _images_in(host, f)}
    there = host.proc(["test", "-d", str(root)], 60).returncode == 0
    if not (servers or loops or mounts or images or there):
        return False
    for m in mounts:
        try:
            host.run(["umount", m], f"unmount {m}", timeout=120)
        except DiskError as exc:
            problems.append(str(exc))
    for md in (m for s in servers for m in s.md):
        if host.proc(["test", "-e", md], 60).returncode == 0:
            try:
                host.run(["mdadm", "--stop", md], f"stop {md}")
            except DiskError as exc:
                problems.append(str(exc))
    # a loop device may have gone meanwhile (detached on unmount, or by another clean): only
    # those still attached are detached
    attached = {name for f in folders for name, _ in _loops_of(host, f)}
    for lp in sorted(lp for lp in loops if lp in attached):
        try:
            host.run(["losetup", "--detach", lp], f"detach {lp}")
        except DiskError as exc:
            problems.append(str(exc))
    still = {back for f in folders for _, back in _loops_of(host, f)}
    gone = sorted(i for i in images if i not in still)
    if gone:
        host.run(["rm", "-f", *gone], "deleting the disk images", 120)
    if not _mounts_under(host, root) and root != Path("/"):
        # mount points and maps (and here, the overlay): only when nothing is mounted there
        host.run(["sh", "-c", 'mountpoint -q "$1" || rm -rf "$1"', "sh", str(root)],
                 f"removing {root}", 120)
    return True


# --------------------------------------------------------------------------- use


def throttles(server: Server, system: System) -> dict[str, Any]:
    """Compose `blkio_config` for a container reading (and writing) a server's devices (paths
    on the server's host, where its Docker engine resolves them)."""
    out: dict[str, Any] = {}
    if system.read_bps:
        out["device_read_bps"] = [{"path": d, "rate": system.read_bps} for d in server.devices]
    if system.write_bps:
        out["device_write_bps"] = [{"path": d, "rate": system.write_bps}
                                   for d in server.devices]
    return out


def write_overlay(services: dict[str, dict[str, Any]]) -> Path:
    """The Compose overlay for what is built (services -> their binds, throttles, settings),
    written on the controller (overlay_path)."""
    path = overlay_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = ("# Written by tierbench (tierbench/placement/disks.py) for the disk systems it built:"
            "\n# their mounts bound into the containers that use them, and each device's "
            "throttle.\n" + yaml.safe_dump({"services": services}, sort_keys=False))
    path.write_text(text)
    return path


# Drop files and devices from the page cache (written back first): posix_fadvise DONTNEED on
# each, run by python3 on the host they are on. Prints how many files.
_EVICT = r"""
import json, os, sys
os.sync()
n = 0
def drop(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return 0
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return 1
    finally:
        os.close(fd)
mounts, devices = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for m in filter(None, mounts):
    for folder, _, names in os.walk(m):
        for entry in names:
            n += drop(os.path.join(folder, entry))
for d in filter(None, devices):
    drop(d)
print(n)
"""


def evict(built: Built) -> int:
    """Drop the disk systems' files and devices from the page cache of their hosts: the next
    read of each comes from the (emulated) disk. Returns how many files."""
    count = 0
    for host in dict.fromkeys(s.on() for s in built.servers):
        mine = [s for s in built.servers if s.on() == host]
        out = host.run(["python3", "-c", _EVICT, json.dumps([m for s in mine for m in s.mounts]),
                        json.dumps([d for s in mine for d in s.devices])],
                       "dropping the disk systems from the page cache", 600)
        count += int(out.strip() or 0)
    return count


def device_read_bytes(built: Built, root: str = "/sys/class/block") -> int | None:
    """Bytes read from the built system's block devices since they were made (sectors read in
    ROOT/NAME/stat, x 512), summed over every server and host: what reached the (emulated)
    disks, page-cache hits left out. None where a device's counter cannot be read."""
    total = 0
    for s in built.servers:
        host = s.on()
        for dev in s.devices:
            path = f"{root}/{Path(dev).name}/stat"
            text_ = host.read(path) if host.node else _read_local(path)
            fields_ = (text_ or "").split()
            if len(fields_) < 3 or not fields_[2].isdigit():
                return None
            total += int(fields_[2]) * 512
    return total


def _read_local(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def _blkio_dir(pid: int, host: Host = LOCAL) -> tuple[int, Path] | None:
    """(cgroup version, folder) of the block-I/O controller of a process on the host."""
    lines = (host.read(f"/proc/{pid}/cgroup") or "").splitlines()
    v1 = [ln.split(":", 2) for ln in lines
          if ln.count(":") >= 2 and "blkio" in ln.split(":", 2)[1].split(",")]
    for line in (host.read("/proc/self/mountinfo") or "").splitlines():
        left, _, right = line.partition(" - ")
        fields_, rest = left.split(), right.split()
        if not rest:
            continue
        if v1 and rest[0] == "cgroup" and "blkio" in rest[-1].split(","):
            return 1, Path(fields_[4]) / v1[0][2].lstrip("/")
        if not v1 and rest[0] == "cgroup2":
            path = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), None)
            if path is not None:
                return 2, Path(fields_[4]) / path.lstrip("/")
    return None


def read_throttles(pid: int, host: Host = LOCAL) -> dict[str, dict[str, int]]:
    """The read/write bytes-per-second limits a process's cgroup has, by 'major:minor' (read
    on the host the process runs on)."""
    found = _blkio_dir(pid, host)
    if found is None:
        return {}
    version, folder = found
    out: dict[str, dict[str, int]] = {}
    if version == 1:
        for key, name in (("read_bps", "blkio.throttle.read_bps_device"),
                          ("write_bps", "blkio.throttle.write_bps_device")):
            text_ = host.read(str(folder / name))
            for line in (text_ or "").splitlines():
                dev, _, value = line.partition(" ")
                if value.strip():
                    out.setdefault(dev, {})[key] = int(value)
    else:
        for line in (host.read(str(folder / "io.max")) or "").splitlines():
            dev, *pairs = line.split()
            for pair in pairs:
                k, _, v = pair.partition("=")
                if k in ("rbps", "wbps") and v != "max":
                    out.setdefault(dev, {})["read_bps" if k == "rbps" else "write_bps"] = int(v)
    return out


def device_number(path: str, host: Host = LOCAL) -> str:
    """'major:minor' of a block device on the host."""
    out = host.run(["stat", "-L", "-c", "%t:%T", path], f"device number of {path}", 60).strip()
    major, _, minor = out.partition(":")
    return f"{int(major, 16)}:{int(minor, 16)}"


def check_throttles(server: Server, system: System, pid: int) -> tuple[dict[str, Any],
                                                                        list[str]]:
    """The limits a container (``pid`` on the server's host) has on a server's devices, read
    back from its cgroup there, and what differs from the system's."""
    host = server.on()
    limits = read_throttles(pid, host)
    got: dict[str, Any] = {}
    problems = []
    for dev in server.devices:
        have = limits.get(device_number(dev, host), {})
        got[dev] = {"read_bps": have.get("read_bps"), "write_bps": have.get("write_bps")}
        for key, want in (("read_bps", system.read_bps), ("write_bps", system.write_bps)):
            if want and have.get(key) != want:
                problems.append(f"{dev}: {key} {have.get(key)} in the cgroup, {want} wanted")
    return got, problems
