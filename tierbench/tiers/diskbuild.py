"""Disk systems built, used and removed on a host (tierbench.tiers.disks says what a system
is and where its commands run): each server's devices made (loop devices over image files, or
real devices), RAID-0 made with md or btrfs, ext3 made and mounted, every part recorded in the
state file before it is made (so that `tierbench clean` removes it after any crash); the Compose
overlay that binds the mounts into the containers and throttles each device; the files dropped
from the page cache; the limits read back from a container's cgroup; and teardown."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from tierbench.config.files import dotenv
from tierbench.placement import placer
from tierbench.placement.model import StackError
from tierbench.tiers.disks import (BTRFS_STRIPE_KIB, LOCAL, MD_CHUNK_KIB, MIB, DiskError, Host,
                                   Plan, System, at, dm_table, free_bytes, host_of,
                                   load_raid_modules, overlay_path, raid_kind, state_path)
from workloads import spread


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
    for host in {_host_for(hosts, s): None for s in p.servers}:
        host.claim()
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
            load_raid_modules(host)
            kind = raid_kind(host)
            if kind == "md":
                md = f"/dev/md/tierbench-{s}"
                server.md.append(md)
                _save(built)
                host.run(["mdadm", "--create", md, "--run", "--level=0",
                          f"--chunk={MD_CHUNK_KIB}", f"--raid-devices={len(mine)}",
                          *mine], f"RAID-0 of {s}")
                host.run(["mkfs.ext3", "-q", "-F", md], f"ext3 on {md}")
                _mount(host, md, folder, built, server)
                built.filesystem = f"ext3 on md RAID-0, {MD_CHUNK_KIB} KiB chunk"
            elif kind == "dm":
                name = f"{host.prefix()}{s}".replace("@", "-")
                server.md.append(f"/dev/mapper/{name}")
                _save(built)
                host.run(["dmsetup", "create", name, "--table",
                          dm_table(mine, p.device_bytes)], f"striped RAID-0 of {s}")
                host.run(["mkfs.ext3", "-q", "-F", f"/dev/mapper/{name}"], f"ext3 on {name}")
                _mount(host, f"/dev/mapper/{name}", folder, built, server)
                built.filesystem = f"ext3 on device-mapper RAID-0, {MD_CHUNK_KIB} KiB chunk"
            else:
                host.run(["mkfs.btrfs", "-q", "-f", "-d", "raid0", "-m", "raid0", *mine],
                         f"btrfs RAID-0 of {s}")
                _mount(host, mine[0], folder, built, server, fstype="btrfs",
                       options=",".join(f"device={d}" for d in mine))
                built.filesystem = (f"btrfs raid0, {BTRFS_STRIPE_KIB} KiB stripe (no md "
                                    "in this kernel)")
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
    """A spread server's map of which disk holds each file (workloads.spread), on its host."""
    s = built.server(server)
    path = str(Path(s.root) / spread.MAP_NAME)
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


def teardown(env: Mapping[str, str], hosts: Sequence[Host] = ()) -> list[str]:
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


def after_down(where: placer.Placer, every: bool = False) -> None:
    """A placement's `down`, once its containers are gone: every disk system tierbench built
    removed (:func:`teardown`) here and on every host of the placement, not only the recorded
    ones (Placer.every_host); StackError saying what stays."""
    try:
        teardown({**dotenv(), **os.environ},
                 [at(via, folder) for via, folder in where.every_host()])
    except DiskError as exc:
        raise StackError(str(exc)) from None


# every placer's `down` ends with it (Placer.tiers_down): the placement imports no tier
placer.AFTER_DOWN.append(after_down)


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
                host.run(["dmsetup", "remove", Path(md).name] if md.startswith("/dev/mapper/")
                         else ["mdadm", "--stop", md], f"stop {md}")
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
    for key, rate in (("device_read_iops", system.read_iops),
                      ("device_write_iops", system.write_iops)):
        if rate:
            out[key] = [{"path": d, "rate": rate} for d in server.devices]
    return out


def write_overlay(services: dict[str, dict[str, Any]]) -> Path:
    """The Compose overlay for what is built (services -> their binds, throttles, settings),
    written on the controller (overlay_path)."""
    path = overlay_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = ("# Written by tierbench (tierbench/tiers/diskbuild.py) for the disk systems it built:"
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


IO_MAX = {"rbps": "read_bps", "wbps": "write_bps", "riops": "read_iops", "wiops": "write_iops"}


def read_throttles(pid: int, host: Host = LOCAL) -> dict[str, dict[str, int]]:
    """The read/write limits a process's cgroup has (bytes and requests a second: read_bps,
    write_bps, read_iops, write_iops), by 'major:minor' (read on the host the process runs
    on)."""
    found = _blkio_dir(pid, host)
    if found is None:
        return {}
    version, folder = found
    out: dict[str, dict[str, int]] = {}
    if version == 1:
        for key, name in (("read_bps", "blkio.throttle.read_bps_device"),
                          ("write_bps", "blkio.throttle.write_bps_device"),
                          ("read_iops", "blkio.throttle.read_iops_device"),
                          ("write_iops", "blkio.throttle.write_iops_device")):
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
                if k in IO_MAX and v != "max":
                    out.setdefault(dev, {})[IO_MAX[k]] = int(v)
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
        got[dev] = {key: have.get(key) for key in IO_MAX.values()}
        for key, want in (("read_bps", system.read_bps), ("write_bps", system.write_bps),
                          ("read_iops", system.read_iops), ("write_iops", system.write_iops)):
            if want and have.get(key) != want:
                problems.append(f"{dev}: {key} {have.get(key)} in the cgroup, {want} wanted")
    return got, problems


def verify(built: Built, system: System, containers: Sequence[Any]) -> dict[str, Any]:
    """The record of the disk system with the limits of each container that uses it (a
    model.Container whose service is one of its servers) read back from its cgroup;
    DiskError when one differs from the system's bandwidths."""
    record = built.record()
    record["description"] = system.describe()
    got: dict[str, Any] = {}
    for c in containers:
        if c.service not in {s.name for s in built.servers}:
            continue
        limits, problems = check_throttles(built.server(c.service), system, c.pid)
        got[c.service] = limits
        if problems:
            raise DiskError(f"the {c.service} container's block-I/O limits are not the "
                            f"disk system's: {problems[0]}")
    record["throttles_read_back"] = got
    return record


class StorageReads:
    """The bytes a built disk system read from its devices, as a sampler probe:
    {"read_bytes": N}, {} where they cannot be read."""

    def __init__(self, built: Built) -> None:
        self.built = built

    def __call__(self) -> dict[str, int]:
        read = device_read_bytes(self.built)
        return {} if read is None else {"read_bytes": read}
