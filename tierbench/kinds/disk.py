"""Disk-system micro-benchmark (004 §5.1, Table 3): sequential write, then read, of one file
with fio on each disk system, MB/s beside the paper's.

A point builds (or keeps) its disk system (tierbench/tiers/diskbuild.py: real devices, or loop
devices throttled at the paper's bandwidths, RAID-0 with md or btrfs), mounts it into the
`disk-bench` container (compose/disk.yml) with the devices' limits on that container, reads the
limits back from its cgroup, then runs fio there: the write phase writes `file_mb` sequentially
with direct I/O (under cgroup v1 buffered writes are not charged to a container, so only direct
writes are throttled, and the paper's write figure is the disk's), the read phase reads it back
sequentially with direct I/O for `runtime_s` (no page cache in between). CPU of the container
and of the host per phase come from their counters at each phase's start and end.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, model_validator

from tierbench.config.errors import ConfigError
from tierbench.config.files import ROOT, dotenv
from tierbench.config.models import Model, number, one_or_many, problem, whole
from tierbench.kinds import families
from tierbench.kinds.contract import (SERVER, Column, Deployment, Experiment, Kind, Point,
                                      PointContext, PointResult, Tier, failed, log)
from tierbench.measure.sampler import PROC_STAT_FIELDS
from tierbench.placement import model, placer
from tierbench import space
from tierbench.tiers import diskbuild, disks
from tierbench.placement.model import Role

SERVICE = "disk-bench"
TIER = "disk"
ROLE = "disk"  # the cluster file's role: the node the disk system and the benchmark are on
MOUNT = "/mnt/disk"
OVERLAY = "compose/disk.yml"  # the disk-system benchmark (profile disk)
FILE = f"{MOUNT}/fio.dat"
MIB = 1 << 20
PHASES = ("write", "read")
PHASE_COLUMNS = ("mb_per_s", "iops", "lat_ms", "bytes", "s", "cpu_pct", "cpu_us_per_kb",
                 "host_iowait_pct", "host_idle_pct")
SUMMARY_COLUMNS = ["point", "system", "emulated", "mode", "repetition", "filesystem",
                   "block_size", "file_mb",
                   *(f"{ph}_{c}" for ph in PHASES for c in PHASE_COLUMNS),
                   "throttle_read_mb_s", "throttle_write_mb_s", "throttle", "raid_stripe"]
POINT_OVERHEAD_S = 8.0  # fio start-up, file removal, counters


def _name(value: Any) -> Any:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9-]*", value):
        raise problem("disk system names must look like ide or my-disk, got {got}",
                      got=repr(value))
    return value


Name = Annotated[str, BeforeValidator(_name)]


class DiskBlock(Model):
    """The `disk:` block of an experiment file."""

    systems: Annotated[list[Name], one_or_many(Name, "disk system name")] = ["ide", "scsi", "raid0"]
    block_size: Annotated[int, whole(4096, 64 * MIB)] = MIB
    file_mb: Annotated[float, number(1, 1 << 20)] = 512
    runtime_s: Annotated[float, number(1, 3600)] = 10


class DiskSettings(Model):
    """The keys of a disk-system experiment besides the common ones."""

    disk: DiskBlock
    disk_systems: dict[Name, disks.DiskSystemSpec] | None = None

    @model_validator(mode="after")
    def _known(self) -> DiskSettings:
        known = disks.resolve(self.disk_systems)
        for i, name in enumerate(self.disk.systems):
            if name not in known:
                raise problem("disk.systems[{i}]: no disk system {name} (built in: ide, scsi, "
                              "raid0; or define it under disk_systems)", i=i, name=repr(name))
        if len(set(self.disk.systems)) != len(self.disk.systems):
            raise problem("disk.systems: names a system twice")
        return self


def fio_argv(phase: str, block: DiskBlock) -> list[str]:
    """fio's command line for a phase: sequential, direct I/O, one job, JSON output."""
    argv = ["fio", "--name", phase, "--filename", FILE, "--rw", phase, "--bs",
            str(block.block_size), "--size", f"{int(block.file_mb * MIB)}", "--direct", "1",
            "--ioengine", "psync", "--numjobs", "1", "--output-format", "json"]
    if phase == "read":  # the file written before, read over and over for runtime_s
        argv += ["--time_based", "--runtime", f"{block.runtime_s:g}"]
    return argv


def parse_fio(text_: str, phase: str) -> dict[str, float]:
    """MB/s (10^6 bytes/s), IOPS, mean completion latency (ms), bytes and seconds of a phase,
    from fio's JSON output (its first job)."""
    start = text_.find("{")
    if start < 0:
        raise ValueError("no JSON in fio's output")
    job = json.loads(text_[start:])["jobs"][0][phase]
    seconds = job["runtime"] / 1000
    lat = (job.get("clat_ns") or job.get("lat_ns") or {}).get("mean")
    return {"mb_per_s": job["bw_bytes"] / 1e6, "iops": job["iops"],
            "lat_ms": lat / 1e6 if lat is not None else float("nan"),
            "bytes": job["io_bytes"], "s": seconds}


def phase_cpu(before: dict, after: dict, host0: dict, host1: dict, seconds: float,
              nbytes: float) -> dict[str, float]:
    """The container's CPU (% of one core, µs per KB) and the host's iowait and idle shares."""
    if "usage_s" not in after or "usage_s" not in before:
        used = float("nan")  # the container's counter could not be read
    else:
        used = after["usage_s"] - before["usage_s"]
    ticks = {k: host1[k] - host0[k] for k in PROC_STAT_FIELDS}
    total = sum(ticks.values()) or 1
    return {"cpu_pct": 100 * used / seconds if seconds else float("nan"),
            "cpu_us_per_kb": 1e6 * used / (nbytes / 1024) if nbytes else float("nan"),
            "host_iowait_pct": 100 * ticks["iowait"] / total,
            "host_idle_pct": 100 * ticks["idle"] / total}


@dataclass
class DiskInfo:
    """The disk system a point runs on: as built, as declared, the limits read back from the
    benchmark container (by device), and its manifest record."""

    built: diskbuild.Built
    system: disks.System
    limits: dict[str, Any]
    record: dict[str, Any]


class DiskKind(Kind[DiskSettings, DiskInfo | None, None]):
    """Sequential fio write and read on each disk system (004 Table 3). The deployment's info
    is None while nothing is built (``running``: the container as `modes check` finds it)."""

    name = "disk"
    description = "disk systems (real or emulated): sequential write and read with fio"
    model = DiskSettings
    scalable = {"disk.runtime_s": 2, "disk.file_mb": 64}
    block = "disk"
    tiers = (TIER,)
    declared_roles = (Role(ROLE, "the disk-system benchmark (fio) and its disk systems"),)
    roles = (ROLE,)
    bring_up = "disk system and container bring-up (seconds to a minute each)"
    plan_widths = (17, 16)  # "system=" and the name in 10
    variation_pct = 3.0

    # -- experiment
    def check(self, exp: Experiment[DiskSettings]) -> None:
        """No server options (there are no web servers); named devices exist (here; a cluster
        node's are checked there at preflight)."""
        super().check(exp)
        s = exp.settings
        known = disks.resolve(s.disk_systems)
        if not exp.placer.here(ROLE):
            return
        for name in s.disk.systems:
            for dev in known[name].paths:
                if not Path(dev).exists():
                    raise ConfigError(f"{exp.source}: disk_systems.{name}.devices: {dev} does "
                                      "not exist on this host: name one of its block devices "
                                      "(lsblk lists them)")

    def host(self, exp: Experiment) -> disks.Host:
        """Where the disk systems are built: this host, or the `disk` role's node."""
        return disks.of_role(exp.placer, ROLE)

    def systems(self, exp: Experiment[DiskSettings]) -> dict[str, disks.System]:
        """Every system the experiment can name."""
        return disks.resolve(exp.settings.disk_systems)

    def resolved(self, exp: Experiment[DiskSettings]) -> dict[str, Any]:
        """The resolved experiment (manifest and experiment.yml)."""
        s = exp.settings
        known = self.systems(exp)
        b = s.disk
        return {**self.envelope(exp),
                "disk": {"systems": list(b.systems), "block_size": b.block_size,
                         "file_mb": b.file_mb, "runtime_s": b.runtime_s, "direct": True},
                "disk_systems": {n: {"description": known[n].describe(),
                                     "emulated": known[n].emulated,
                                     "devices": list(known[n].paths) or known[n].devices,
                                     "read_mb_s": (known[n].read_bps or 0) / 1e6 or None,
                                     "write_mb_s": (known[n].write_bps or 0) / 1e6 or None,
                                     "raid0": disks.raid_words(self.host(exp)) if known[n].raid0
                                     else None}
                                 for n in b.systems}}

    def axes(self, exp: Experiment[DiskSettings]) -> list[tuple[str, list[Any]]]:
        """system x mode x repetition."""
        s = exp.settings
        return [("system", list(s.disk.systems)), ("mode", [m.name for m in exp.modes]),
                ("repetition", list(range(1, exp.repetitions + 1)))]

    def deployment_key(self, exp: Experiment[DiskSettings], combo: dict[str, Any] | Point) -> Hashable:
        """The disk system: a new one is built for each."""
        return combo["system"] if isinstance(combo, dict) else combo["system"]

    def order(self, exp: Experiment[DiskSettings], combos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Shuffled within each system, systems in the order listed."""
        listed = list(exp.settings.disk.systems)
        return sorted(combos, key=lambda c: listed.index(c["system"]))

    def plan_of(self, exp: Experiment[DiskSettings], name: str) -> disks.Plan:
        """The disk plan of one system: one server (the benchmark container), the file."""
        s = exp.settings
        system = self.systems(exp)[name]
        lay = disks.layout(system, 1)
        per_disk = disks.per_disk_bytes(lay, int(s.disk.file_mb * MIB))
        return disks.plan(system, lay, [SERVICE], per_disk)

    # -- plan
    def point_seconds(self, exp: Experiment[DiskSettings]) -> float:
        """settle, the write phase at the slowest system's rate, the read phase, overhead."""
        s = exp.settings
        known = self.systems(exp)
        rates = [bps * (known[n].devices if known[n].raid0 else 1)
                 for n in s.disk.systems if (bps := known[n].write_bps)]
        write_s = s.disk.file_mb * MIB / min(rates) if rates else 5.0
        return exp.settle_s + write_s + s.disk.runtime_s + POINT_OVERHEAD_S

    def plan_header(self, exp: Experiment[DiskSettings], points: list[Point]) -> list[str]:
        """What runs and how."""
        b = exp.settings.disk
        return [f"{self.plan_head(exp, points)}; fio in the {SERVICE} container",
                f"per point: sequential direct write of {b.file_mb:g} MB, then sequential "
                f"direct read for {b.runtime_s:g} s, {b.block_size} B per call (about "
                f"{self.point_seconds(exp):.0f} s at the slowest system)"]

    def deployment_line(self, exp: Experiment[DiskSettings], point: Point, first: bool) -> str:
        """The disk system from this point on, labelled emulated or real."""
        system = self.systems(exp)[point["system"]]
        raid = f"; RAID-0 by {disks.raid_words(self.host(exp))}" if system.raid0 else ""
        return (f"  -- disk system {system.describe()}{raid}"
                + ("" if first else " (new disk system)"))

    def what(self, exp: Experiment[DiskSettings], point: Point) -> str:
        """The disk system."""
        return f"system={point['system']}"

    def needs(self, exp: Experiment[DiskSettings], points: list[Point]) -> list[space.Need]:
        """The largest system's images (one is built at a time)."""
        plans = [self.plan_of(exp, n) for n in exp.settings.disk.systems]
        emulated = [p for p in plans if p.system.emulated]
        if not emulated:
            return []
        biggest = max(emulated, key=lambda p: p.image_bytes())
        host = self.host(exp)
        return [space.on_disk(f"the loop-device images of disk system {biggest.system.name}",
                              biggest.image_bytes(), host.image_dir(space.settings()),
                              "the disk images' folder",
                              "lower disk.file_mb or set DISK_IMAGE_DIR (.env) to a folder "
                              "with room", role=ROLE if host.node else None)]

    # -- run
    def preflight(self, exp: Experiment[DiskSettings], points: list[Point]) -> None:
        """The image exists; the systems can be built where they go (tools, devices: asked
        there)."""
        exp.placer.ensure_images(["tierbench-disk"])
        plans = [self.plan_of(exp, n) for n in exp.settings.disk.systems]
        try:
            disks.preflight(plans, self.host(exp))
        except disks.DiskError as exc:
            raise ConfigError(f"{exp.source}: {exc}") from None

    def deploy(self, exp: Experiment[DiskSettings], key: Hashable, prepared: None,
               previous: Deployment[DiskInfo | None] | None,
               point: Point) -> Deployment[DiskInfo | None]:
        """The disk system built on the node of the `disk` role (this host without a cluster;
        whatever used the disks before is removed first), the benchmark container up on it,
        its limits read back there."""
        p = self.plan_of(exp, str(key))
        where = exp.placer
        host = self.host(exp)
        log(f"tierbench: disk system {p.system.describe()}{host.where}")
        if diskbuild.current(p, host) is None:
            where.down()  # containers let go of the disks built before; they go too
        try:
            built = diskbuild.ensure(p, space.settings(), log, host)
        except disks.DiskError as exc:
            raise model.StackError(str(exc)) from None
        server = built.server(SERVICE)
        diskbuild.write_overlay({SERVICE: {
            "volumes": [{"type": "bind", "source": server.root, "target": MOUNT}],
            "blkio_config": diskbuild.throttles(server, p.system)}})
        files = [str(ROOT / f) for f in ("docker-compose.yml", OVERLAY)]
        where.up(model.Services(files=[*files, str(disks.overlay_path())],
                                  env={**dotenv(), **os.environ}, services=[SERVICE],
                                  profiles=["disk"]))
        dep = self.running(where)
        if dep is None:
            raise model.StackError(f"the {SERVICE} container is not running"
                                     f"{where.where(SERVICE)}: see `docker"
                                     f"{where.context_arg(SERVICE)} compose logs {SERVICE}`")
        container = dep.containers[SERVICE]
        try:
            limits, problems = diskbuild.check_throttles(server, p.system, container.pid)
        except disks.DiskError as exc:
            raise model.StackError(str(exc)) from None
        if problems:
            raise model.StackError(f"the {SERVICE} container's block-I/O limits are not the "
                                     f"disk system's: {problems[0]}")
        dep.key = key
        dep.info = DiskInfo(built, p.system, limits,
                            {**built.record(), "description": p.system.describe(),
                             "throttles_read_back": {SERVICE: limits}})
        return dep

    def running(self, where: placer.Placer) -> Deployment[DiskInfo | None] | None:
        """The benchmark container, when it runs (here, or on the disk role's node)."""
        found = where.containers()
        if SERVICE not in found:
            return None
        c = found[SERVICE]
        eps = where.endpoints(TIER, c)
        tier = Tier(TIER, SERVER, eps, [c])
        return Deployment(None, {TIER: tier}, {TIER: where.counter(c)}, where.ifaces(eps),
                          containers={SERVICE: c}, info=None, placer=where)

    def run_point(self, ctx: PointContext[DiskSettings, DiskInfo | None, None]) -> PointResult:
        """fio's write phase, then its read phase; CPU per phase."""
        s = ctx.exp.settings
        dep = ctx.deployment
        assert dep.info is not None  # deploy() built the disk system
        container = dep.containers[SERVICE]
        where = dep.placer
        ctx.record["disk"] = dep.info.record
        system = dep.info.system
        row: dict[str, Any] = {"filesystem": dep.info.built.filesystem,
                               "raid_stripe": disks.stripe_check(dep.info.built.filesystem)}
        limits = dep.info.limits
        reads = [v["read_bps"] for v in limits.values() if v.get("read_bps")]
        writes = [v["write_bps"] for v in limits.values() if v.get("write_bps")]
        row["throttle_read_mb_s"] = min(reads) / 1e6 if reads else None
        row["throttle_write_mb_s"] = min(writes) / 1e6 if writes else None
        row["throttle"] = "ok" if (system.read_bps is None or reads) else "mismatch"
        error = None
        try:
            for phase in PHASES:
                first = ctx.mark()  # the container's and its host's CPU, there
                done = where.exec(container, fio_argv(phase, s.disk),
                                  timeout=s.disk.runtime_s + 3600)
                last = ctx.mark()
                (ctx.dir / f"fio-{phase}.json").write_text(done.stdout)
                if done.returncode != 0:
                    tail = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
                    error = f"fio {phase} failed: {tail[-1][:300]}"
                    break
                try:
                    figures = parse_fio(done.stdout, phase)
                except (ValueError, KeyError, IndexError) as exc:
                    error = f"fio {phase}: unreadable output ({exc})"
                    break
                figures.update(phase_cpu(first["cpu"].get(TIER, {}), last["cpu"].get(TIER, {}),
                                         first["host"], last["host"], figures["s"],
                                         figures["bytes"]))
                row.update({f"{phase}_{k}": v for k, v in figures.items()})
                ctx.log(f"tierbench: {ctx.point.id} {phase}: {figures['mb_per_s']:.1f} MB/s")
        finally:
            where.exec(container, ["sh", "-c", f"rm -f {shlex.quote(FILE)}"], timeout=120)
            ctx.close_window()
        return PointResult(row, error=error)

    # -- results
    def identity(self, exp: Experiment[DiskSettings], point: Point) -> dict[str, Any]:
        """point, system, emulated, mode, repetition, block size, file size."""
        b = exp.settings.disk
        system = self.systems(exp)[point["system"]]
        return {"point": point.id, "system": system.name, "emulated": system.emulated,
                "mode": point.mode, "repetition": point.repetition, "block_size": b.block_size,
                "file_mb": b.file_mb}

    def columns(self, exp: Experiment[DiskSettings]) -> list[Column]:
        """Identity, then write_* and read_* figures, then the limits read back."""
        return [Column(c) for c in SUMMARY_COLUMNS]

    def brief(self, row: dict[str, Any]) -> str:
        """MB/s per phase."""
        if note := failed(row):
            return note
        return ", ".join(f"{ph} {row[f'{ph}_mb_per_s']:.1f} MB/s" for ph in PHASES
                         if f"{ph}_mb_per_s" in row) + f" (limits {row.get('throttle')})"

    def report(self, resolved: dict[str, Any]) -> dict[str, Any]:
        """The report section, systems in the experiment's order."""
        spec = families.load("dc-disk-basic")
        systems = list((resolved.get("disk") or {}).get("systems") or [])
        spec["order"] = {"system": systems} if len(systems) > 1 else {}
        return disks.with_stripe_check(spec)
