"""The pfs kind as the contract sees it: its settings and roles, the axes and the deployment
key (the number of I/O servers: a new cluster each), the plan's lines, what the largest point
writes, the summary's columns, and each part of the run handed to the module of the package
that does it."""

from __future__ import annotations

import functools
import os
from collections.abc import Hashable
from pathlib import Path
from typing import Any, cast

from tierbench.config.errors import ConfigError
from tierbench.kinds import families
from tierbench.kinds.contract import (Column, Deployment, Experiment, Kind, Point, PointContext,
                                      PointResult, failed)
from tierbench.kinds.pfs import stack
from tierbench.kinds.pfs.phases import START_DELAY_S, Phases
from tierbench.kinds.pfs.roles import ROLES
from tierbench.kinds.pfs.settings import MIB, Pfs, PfsSettings, client_disk_bytes, cluster_clients
from tierbench.kinds.pfs.stack import PfsInfo, PfsPrepared
from tierbench.kinds.pfs.streams import SEND_COLUMNS, SEND_PHASES, PointFactors
from tierbench.tiers import orangefs
from tierbench.placement import placer
from tierbench import space
from tierbench.tiers import disks
from tierbench.tiers.orangefs import PfsError

DROP_CACHES = "/proc/sys/vm/drop_caches"
PHASE_COLUMNS = ("mb_per_s", "bytes", "s", "client_cpu_s", "server_cpu_s", "client_cpu_pct",
                 "server_cpu_pct", "client_cpu_us_per_kb", "server_cpu_us_per_kb",
                 "host_usr_pct", "host_sys_pct", "host_softirq_pct", "host_idle_pct",
                 "failed_streams", "storage_read_mb")
SUMMARY_COLUMNS = [
    "point", "test", "mode", "repetition", "io_servers", "clients", "streams", "filesystem",
    "buffer", "access", "region_bytes",
    *(f"{phase}_{col}" for phase in ("read", "write") for col in PHASE_COLUMNS),
    "integrity",
]
# the basic test's send phases (pfs.send), before integrity
SEND_SUMMARY_COLUMNS = [f"{phase}_{col}" for phase in SEND_PHASES
                        for col in (*PHASE_COLUMNS, *SEND_COLUMNS)]



class PfsKind(Kind[PfsSettings, PfsInfo, PfsPrepared]):
    """Parallel file system benchmarks on the OrangeFS tier (000 §6.2, 004 §4.1)."""

    name = "pfs"
    description = "OrangeFS benchmarks: concurrent reads/writes, streams, basic file systems"
    model = PfsSettings
    scalable = {"pfs.measure_s": 2, "pfs.file_mb": 16}
    block = "pfs"
    tiers = stack.TIERS
    declared_roles = ROLES
    roles = ("pfs_meta", "pfs_io", "pfs_clients")
    bring_up = "cluster bring-up (about 10 s each)"

    def settings(self, exp: Experiment[PfsSettings]) -> Pfs:
        """The experiment's `pfs:` block."""
        return exp.settings.pfs

    def resolved(self, exp: Experiment[PfsSettings]) -> dict[str, Any]:
        """The resolved experiment (manifest and experiment.yml)."""
        p = self.settings(exp)
        pfs: dict[str, Any] = {"test": p.test, "io_servers": list(p.io_servers),
                               "strip_size": p.strip_size, "storage": p.storage,
                               "measure_s": p.measure_s, "job_timeout_s": p.job_timeout_s}
        if p.test == "concurrent":
            pfs.update(clients=list(p.clients), access=p.access,
                       region_mb_per_server=p.region_mb_per_server,
                       regions_per_stream=p.regions_per_stream)
        elif p.test == "streams":
            pfs.update(streams=list(p.streams), client_containers=p.client_containers,
                       access=p.access, region_mb_per_server=p.region_mb_per_server,
                       regions_per_stream=p.regions_per_stream)
        else:
            pfs.update(filesystems=list(p.filesystems), buffers=list(p.buffers),
                       file_mb=p.file_mb, drop_caches=p.drop_caches,
                       single_pass=p.single_pass, send=p.send)
        system = exp.settings.storage_system()
        extra = {} if system is None else {"disk_systems": {system.name: {
            "description": system.describe(), "emulated": system.emulated,
            "devices": list(system.paths) or system.devices,
            "read_mb_s": (system.read_bps or 0) / 1e6 or None,
            "write_mb_s": (system.write_bps or 0) / 1e6 or None}}}
        return {**self.envelope(exp), "pfs": pfs, **extra}

    def axes(self, exp: Experiment[PfsSettings]) -> list[tuple[str, list[Any]]]:
        """I/O servers x the test's factor x mode x repetition."""
        p = self.settings(exp)
        factors: list[dict[str, Any]]
        if p.test == "concurrent":
            factors = [{"clients": c, "streams": c} for c in p.clients]
        elif p.test == "streams":
            factors = [{"clients": min(s, p.client_containers), "streams": s}
                       for s in p.streams]
        else:
            factors = [{"filesystem": f, "buffer": b} for f in p.filesystems for b in p.buffers]
        return [("io_servers", list(p.io_servers)), ("factor", factors),
                ("mode", [m.name for m in exp.modes]),
                ("repetition", list(range(1, exp.repetitions + 1)))]

    def point_factors(self, combo: dict[str, Any]) -> dict[str, Any]:
        """io_servers, clients, streams, filesystem, buffer (the phases' defaults filled in)."""
        out = {"io_servers": combo["io_servers"], "clients": 1, "streams": 1,
               "filesystem": "orangefs", "buffer": MIB}
        return out | combo["factor"]

    def deployment_key(self, exp: Experiment[PfsSettings], combo: dict[str, Any] | Point) -> Hashable:
        """The number of I/O servers: a different N is a new cluster."""
        return combo["io_servers"] if isinstance(combo, dict) else combo["io_servers"]

    def order(self, exp: Experiment[PfsSettings], combos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Shuffled within each cluster size, cluster sizes in the order listed."""
        listed = list(self.settings(exp).io_servers)
        return sorted(combos, key=lambda c: listed.index(c["io_servers"]))

    # -- plan
    def point_seconds(self, exp: Experiment[PfsSettings]) -> float:
        """settle, the timed phases, set-up and checksums."""
        p = self.settings(exp)
        lead = START_DELAY_S + exp.placer.exec_lead_s
        phases = 1 if p.test == "streams" else 2 + (len(SEND_PHASES) if p.send else 0)
        return exp.settle_s + phases * (p.measure_s + lead) + 8

    def plan_header(self, exp: Experiment[PfsSettings], points: list[Point]) -> list[str]:
        """The test, storage, strip and timeouts."""
        p = self.settings(exp)
        system = exp.settings.storage_system()
        return [f"{self.plan_head(exp, points)}; test {p.test}, storage {p.storage}, strip "
                f"{p.strip_size} B, job timeout {p.job_timeout_s} s"] + ([
                    f"  storage: disk system {system.describe()}, one per I/O server"
                    + (" and one for the client's local disk (fs=disk)"
                       if client_disk_bytes(p) else "")
                    + "; each phase records the MB its devices read ("
                    + ("read_, write_, sendrw_ and sendfile_storage_read_mb)"
                       if p.test == "basic" and p.send else "read_ and write_storage_read_mb)")]
                    if system is not None else []) + [
                f"per point: settle {exp.settle_s:g} s + {p.measure_s:g} s per phase + set-up "
                "and checksums"] + ([
                    "  each phase moves the file once"
                    + (", the page caches dropped before the read"
                       + (" and each send" if p.send else "") + " (the file not in cache)"
                       if p.drop_caches else "")
                    + f"; {p.measure_s:g} s per phase is its bound in the estimate"]
                    if p.test == "basic" and p.single_pass else []) + ([
                    "  the page caches dropped after the write and before each later phase, so "
                    "the read starts from the devices (004 Table 1's figures are disk-bound)"]
                    if p.test == "basic" and p.drop_caches and not p.single_pass else []) + ([
                    "  after the read, the file sent to a TCP sink on 127.0.0.1 in the client "
                    "container (filesend) with read/write calls of the buffer's size (phase "
                    "sendrw) and with sendfile(2) of as many bytes per call (phase sendfile): "
                    "004 Fig. 4-5; not for orangefs-native (the native library gives no file "
                    "descriptor to send from)"] if p.test == "basic" and p.send else [])

    def deployment_line(self, exp: Experiment[PfsSettings], point: Point, first: bool) -> str:
        """The cluster from this point on."""
        p = self.settings(exp)
        made = stack.storage_plan(exp.settings, point["io_servers"])
        disk = "" if made is None else (
            f", on disk system {made.system.name}: {len(made.servers)} x {made.layout.disks} "
            f"device(s) of {made.device_bytes // MIB} MiB ({', '.join(made.servers)})")
        return (f"  -- cluster: 1 metadata + {point['io_servers']} I/O servers, "
                f"{cluster_clients(p)} client container(s)" + disk
                + ("" if first else " (new cluster)"))

    def point_line(self, exp: Experiment[PfsSettings], point: Point) -> str:
        """The factor values, mode and repetition."""
        p = self.settings(exp)
        f = point.factors
        what = (f"fs={f['filesystem']:<15} buffer={f['buffer']}" if p.test == "basic"
                else f"clients={f['clients']} streams={f['streams']}")
        system = exp.settings.storage_system()
        if system is not None:
            fs = f["filesystem"] if p.test == "basic" else "orangefs"
            what += f"  storage={point_storage(system, fs):<6}"
        return (f"  {point.id}  {what}  mode={point.mode:<16} rep={point.repetition}  "
                f"~{self.point_seconds(exp):.0f} s")

    def point_title(self, exp: Experiment[PfsSettings], point: Point) -> str:
        """How the progress line names a point."""
        f = point.factors
        what = (f"{f['filesystem']} {f['buffer']} B" if self.settings(exp).test == "basic" else
                f"N={f['io_servers']} {f['streams']} stream(s)")
        return f"{point.id} {what} {point.mode} rep {point.repetition}"

    def needs(self, exp: Experiment[PfsSettings], points: list[Point]) -> list[space.Need]:
        """The largest point's files: on the I/O servers' storage, in a client's scratch
        tmpfs (the source data and what is read back), on the clients' disk volume."""
        p = self.settings(exp)
        out: list[space.Need] = []
        worst: dict[str, int] = {"servers": 0, "scratch": 0, "disk": 0}
        for point in points:
            f = point.factors
            n = f["io_servers"]
            if p.test == "basic":
                nbytes = int(p.file_mb * MIB)
                worst["scratch"] = max(worst["scratch"], nbytes * (2 if f["filesystem"] ==
                                                                   "tmpfs" else 1))
                if f["filesystem"] == "disk":
                    worst["disk"] = max(worst["disk"], nbytes)
                elif f["filesystem"].startswith("orangefs"):
                    worst["servers"] = max(worst["servers"], nbytes // n + 1)
                continue
            region = int(p.region_mb_per_server * n * MIB)
            per_stream = region * p.regions_per_stream
            per_client = -(-f["streams"] // f["clients"])  # streams on the busiest client
            worst["scratch"] = max(worst["scratch"], 2 * per_stream * per_client)
            worst["servers"] = max(worst["servers"], per_stream * f["streams"] // n + 1)
        what = f"the files of {exp.source}'s largest point"
        made = [m for n in p.io_servers if (m := stack.storage_plan(exp.settings, n))]
        if made:  # the servers' and the local disk's files on the devices: their images
            out += disks.disk_images(made, space.settings(),
                                     functools.partial(orangefs.storage_hosts, exp.placer),
                                     "pfs_io")
        elif worst["servers"]:
            if p.storage == "tmpfs":
                out += space.on_tmpfs(f"{what} on each OrangeFS I/O server", worst["servers"],
                                      "PVFS_TMPFS_SIZE", "4g", "use fewer streams, smaller "
                                      "regions (pfs.region_mb_per_server, regions_per_stream) "
                                      "or more I/O servers", copies=max(p.io_servers),
                                      role="pfs_io")
            else:
                out.append(space.on_disk(what, worst["servers"] * max(p.io_servers),
                                         space.docker_root(), "Docker's data folder",
                                         "use fewer streams or smaller regions", role="pfs_io"))
        if worst["scratch"]:
            out += space.on_tmpfs(f"{what} in a client's scratch", worst["scratch"],
                                  "PVFS_SCRATCH_SIZE", "2g", "use fewer streams per client "
                                  "(pfs.client_containers) or smaller regions or files",
                                  copies=cluster_clients(p), role="pfs_clients")
        if worst["disk"] and not made:
            out.append(space.on_disk(what, worst["disk"], space.docker_root(),
                                     "Docker's data folder", "lower pfs.file_mb",
                                     role="pfs_clients"))
        return out

    # -- run
    def preflight(self, exp: Experiment[PfsSettings], points: list[Point]) -> None:
        """The OrangeFS image exists; the disk system pfs.storage names can be built here
        (root, tools, named devices)."""
        orangefs.check_image()
        p = self.settings(exp)
        if p.test == "basic" and p.drop_caches and exp.placer.here("pfs_clients") and \
                not os.access(DROP_CACHES, os.W_OK):
            raise ConfigError(f"{exp.source}: pfs.drop_caches needs {DROP_CACHES} writable "
                              "(root on this host); run as root, or set drop_caches: false and "
                              "the reads come from the page cache")
        plans = [m for n in self.settings(exp).io_servers
                 if (m := stack.storage_plan(exp.settings, n))]
        try:
            disks.preflight_on(plans, functools.partial(orangefs.storage_hosts, exp.placer))
        except disks.DiskError as exc:
            raise ConfigError(f"{exp.source}: {exc}") from None

    def prepare(self, exp: Experiment[PfsSettings], run_dir: Path) -> PfsPrepared:
        """Per-run state: the run id (file names) and whether the fault fired."""
        return PfsPrepared(run_dir.name)

    def deploy(self, exp: Experiment[PfsSettings], key: Hashable, prepared: PfsPrepared,
               previous: Deployment[PfsInfo] | None, point: Point) -> Deployment[PfsInfo]:
        """A new cluster of 1 metadata + N I/O servers (the key: deployment_key's io_servers)
        and the clients the test needs."""
        return stack.deploy(exp.placer, exp.settings, cast(int, key), previous)

    def finish(self, exp: Experiment[PfsSettings], deployment: Deployment[PfsInfo]) -> list[str]:
        """The OrangeFS cluster removed: its servers admit whoever connects (the next run makes
        a new cluster anyway)."""
        return orangefs.remove(exp.placer)

    def running(self, where: placer.Placer) -> Deployment[PfsInfo] | None:
        """The OrangeFS cluster, when one is up."""
        return stack.running(where)

    def provenance(self, exp: Experiment[PfsSettings], deployment: Deployment[PfsInfo],
                   ) -> dict[str, Any]:
        """The OrangeFS source the image was built from (tarball and sha256)."""
        server = deployment.info.servers[0]
        done = deployment.placer.exec(server, ["cat", "/opt/orangefs/SOURCE"], timeout=30)
        return {"orangefs": done.stdout.strip()}

    def run_point(self, ctx: PointContext[PfsSettings, PfsInfo, PfsPrepared]) -> PointResult:
        """Streams, timed phases and checks; the figures are per phase."""
        p = self.settings(ctx.exp)
        f = ctx.point.factors
        point = PointFactors(ctx.point.id, ctx.point.mode, ctx.point.repetition, f["io_servers"],
                         f["clients"], f["streams"], f["filesystem"], f["buffer"])
        ctx.record["io_servers"] = point.io_servers
        if ctx.deployment.info.disk:
            ctx.record["disk_system"] = ctx.deployment.info.disk
        phases = Phases(p, ctx.exp.seed, ctx.prepared.run_id, ctx.deployment, ctx.prepared,
                        ctx.now)
        row: dict[str, Any] = {}
        try:
            row.update(phases.run(point, row, ctx.dir, ctx.record))
        except PfsError as exc:  # a set-up or checksum step failed
            row["error"] = str(exc)
        finally:
            ctx.close_window()
        error = row.pop("error", None)
        return PointResult(row, window=phases.window, error=error)

    def after_point(self, exp: Experiment[PfsSettings], point: Point, row: dict[str, Any],
                    deployment: Deployment[PfsInfo]) -> None:
        """A stopped server ends the run with one sentence naming it."""
        stack.after_point(point, row, deployment)

    # -- results
    def identity(self, exp: Experiment[PfsSettings], point: Point) -> dict[str, Any]:
        """point, test, mode, repetition, cluster size, clients, streams, fs, buffer, access."""
        p = self.settings(exp)
        f = point.factors
        row: dict[str, Any] = {"point": point.id, "test": p.test, "mode": point.mode,
                               "repetition": point.repetition, "io_servers": f["io_servers"],
                               "clients": f["clients"], "streams": f["streams"]}
        if p.test == "basic":
            row.update(filesystem=f["filesystem"], buffer=f["buffer"],
                       access="native" if f["filesystem"] == "orangefs-native" else "posix")
        else:
            row.update(access=p.access, buffer=MIB)
        return row

    def columns(self, exp: Experiment[PfsSettings]) -> list[Column]:
        """Identity, then read_* and write_* figures (and with pfs.send the sendrw_* and
        sendfile_* ones), then integrity."""
        p = self.settings(exp)
        sends = SEND_SUMMARY_COLUMNS if p.test == "basic" and p.send else []
        return [Column(c) for c in [*SUMMARY_COLUMNS[:-1], *sends, SUMMARY_COLUMNS[-1]]]

    def brief(self, row: dict[str, Any]) -> str:
        """MB/s and CPU per side for each phase, integrity."""
        return brief(row)

    def report(self, resolved: dict[str, Any]) -> dict[str, Any]:
        """The report section of the experiment's test, factors in the file's order."""
        block = resolved.get("pfs") or {}
        spec = families.load(f"pfs-{block.get('test', 'concurrent')}")
        spec["order"] = families.order(block, {
            "io_servers": "io_servers", "clients": "clients", "streams": "streams",
            "filesystem": "filesystems", "buffer": "buffers"})
        return spec


def point_storage(system: disks.System, filesystem: str) -> str:
    """Where a point's file is, in the plan's words, when pfs.storage names a disk system."""
    return "memory" if filesystem == "tmpfs" else system.name


def brief(row: dict) -> str:
    """One progress line of a point."""
    if note := failed(row):
        return note
    parts = []
    for phase in ("write", "read"):
        if f"{phase}_mb_per_s" in row:
            parts.append(f"{phase} {row[f'{phase}_mb_per_s']:.0f} MB/s (clients "
                         f"{row[f'{phase}_client_cpu_pct']:.0f} %, servers "
                         f"{row[f'{phase}_server_cpu_pct']:.0f} % CPU)")
    for phase in SEND_PHASES:
        if f"{phase}_mb_per_s" in row:
            parts.append(f"{phase} {row[f'{phase}_mb_per_s']:.0f} MB/s (sender "
                         f"{row[f'{phase}_sender_cpu_ms_per_mb']:.2f} ms CPU/MB)")
    return "; ".join(parts) + f", integrity {row.get('integrity')}"
