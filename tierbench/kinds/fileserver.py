"""The file-server kind (`fs`): standard file-system benchmarks run by client programs against a
real file server over the network, through the same runner and modes as every kind.

Servers (`fs.server`):
- `gluster`: a GlusterFS server (glusterd and one brick server) in the `fs-server` container
  (compose/fs.yml), its volume's brick on a volume of the host's disk, mounted in the
  `fs-client` container with the GlusterFS FUSE client. Debian's dbench has only its local-file
  backend, so it needs a mounted network file system, and this kernel has neither an SMB nor an
  NFS client; Samba through smbnetfs (FUSE) was tried and fails dbench: smbnetfs drops its
  connection after a path with a wildcard (dbench stats FIND_FIRST's patterns), and every later
  operation fails. `load: busy` also runs `fs-hog` (an MPEG decoder in a loop) on the server's
  CPUs: 002's heavily loaded server.
- `orangefs`: the OrangeFS tier (compose/pvfs.yml) with N I/O servers, mounted with FUSE in its
  client containers (PFS-iozone, 003 §5.3).

Tests (`fs.test`):
- `dbench` (002 §4.1-4.2, FS-thinktime and FS-clients): NetBench's Disk Mix replayed by dbench
  4.0 with 1..N client programs, think time per request as a factor (a Sleep before every
  operation of the load file).
- `randread` (002 §4.3, FS-randread): 1..N client programs each reading 1 KB blocks at random
  places of its own file (fio).
- `filebench` (001, 9 Nov 2008): the nine Filebench workloads as fio job files
  (workloads/fs/filebench/), the server's page cache emptied or filled first as each asks.
- `iozone` (003 §5.3, PFS-iozone): 1..N concurrent sessions over the client containers, each
  writing and then reading its own file sequentially (fio in IOzone's throughput-mode role).

Throughput is the tool's own (dbench's MB/s, fio's bytes/s summed over jobs); CPU is
tierbench's, per side (cgroups: client, server, hog) and for the host, over the samples that
bracket the tool's timed part; the server's network MB/s from its veth's byte counters.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import model_validator

from tierbench.config.models import Model, choice, number, one_or_many, problem, whole
from tierbench.interfaces import netif
from tierbench.kinds import families, fstools
from tierbench.kinds.contract import (
    CLIENT,
    SERVER,
    Column,
    Deployment,
    Experiment,
    Kind,
    Point,
    PointContext,
    PointResult,
    RunEnds,
    Tier,
    log,
    refuse_server_modes,
)
from tierbench.measure import counters
from tierbench.measure.counters import MeasureError
from tierbench.measure.sampler import CgroupGroup
from tierbench.placement import compose as stack
from tierbench.placement import orangefs, placer, space
from tierbench.placement.orangefs import MAX_IO_SERVERS, STORAGE, PfsError

TESTS = ("dbench", "randread", "filebench", "iozone")
SERVERS = ("gluster", "orangefs")
LOADS = ("idle", "busy")
CLIENT_TIER, SERVER_TIER, HOG = "fs-client", "fs-server", "fs-hog"
TIERS = (CLIENT_TIER, SERVER_TIER)
IMAGE = "tierbench-fs"
SHARE = "/mnt/share"  # the GlusterFS volume in fs-client
PVFS_MOUNT = "/mnt/orangefs"
VOLUME = "fs-share"  # the brick's Docker volume
BRICK = "brick"  # the brick's folder in it
BRICK_PATH = "/srv/share/brick"  # the brick in fs-server (FS_BRICK)
MIB = 1 << 20
START_DELAY_S = 2.0  # fio clients in several containers start together, this far ahead


@dataclass(frozen=True)
class Workload:
    """One of 001's nine Filebench workloads: its job file, what it reads or writes, and what
    measures it (the paper's figures are in the fs-filebench report family)."""

    name: str
    title: str
    threads: int
    fileset: str  # a, b, c (read sets the runner lays out) or w (new files the job writes)
    cache: str  # uncached, cached, or "" for writes
    direction: str  # read or write
    metric: str  # mb_per_s or iops


FILEBENCH = {w.name: w for w in (
    Workload("1-seqread-uncached", "1 thread streaming reads, uncached set", 1, "a",
             "uncached", "read", "mb_per_s"),
    Workload("2-seqread-cached", "1 thread streaming reads, same set cached", 1, "a",
             "cached", "read", "mb_per_s"),
    Workload("3-seqread20-uncached", "20 threads streaming reads, another uncached set",
             20, "b", "uncached", "read", "mb_per_s"),
    Workload("4-seqread10-cached", "10 threads streaming reads, same set cached", 10, "b",
             "cached", "read", "mb_per_s"),
    Workload("5-seqwrite", "1 thread streaming writes", 1, "w", "", "write", "mb_per_s"),
    Workload("6-seqwrite20", "20 threads streaming writes", 20, "w", "", "write", "mb_per_s"),
    Workload("7-randread20-uncached", "20 threads 8K random reads, another uncached set",
             20, "c", "uncached", "read", "iops"),
    Workload("8-randread128-cached", "128 threads 8K random reads, same set cached", 128,
             "c", "cached", "read", "iops"),
    Workload("9-syncwrite128", "128 threads 8K synchronous writes", 128, "c", "", "write", "iops"),
)}
# the job file that lays out each read set (fio --create_only)
LAYOUT = {"a": "1-seqread-uncached", "b": "3-seqread20-uncached",
          "c": "7-randread20-uncached"}
SET_B_FILES = 20


# --------------------------------------------------------------------------- settings


class Fs(Model):
    """The `fs:` block of a file-server experiment."""

    test: choice(*TESTS)
    server: choice(*SERVERS) = "gluster"
    # 002's server load: idle, or busy with an MPEG decoder running all the time
    load: one_or_many(choice(*LOADS), "server load") = ["idle"]
    # dbench and randread: client programs on the client machine
    programs: one_or_many(whole(1, 64), "whole number") = [1]
    # dbench: think time before every request, in ms
    think_ms: one_or_many(number(0, 1000), "number") = [0]
    # randread: each program's file; iozone: each session's file
    file_mb: whole(1, 65536) = 16
    # randread: the read size; iozone: the record size
    block: whole(512, 64 * MIB) = 1024
    # filebench
    workloads: one_or_many(choice(*FILEBENCH), "workload") = list(FILEBENCH)
    set_mb: whole(16, 1 << 20) = 2048
    write_mb: whole(1, 1 << 20) = 128
    # iozone
    sessions: one_or_many(whole(1, 256), "whole number") = [1, 2, 4]
    io_servers: whole(1, MAX_IO_SERVERS) = 4
    client_containers: whole(1, 16) = 4
    strip_size: whole(4096) = 65536
    storage: choice(*STORAGE) = "tmpfs"
    job_timeout_s: whole(2, 300) = 15
    # fio's time not counted, then counted (dbench: the time limit; it warms up a fifth more)
    warmup_s: whole(0, 600) = 2
    measure_s: whole(2, 3600) = 10

    @model_validator(mode="after")
    def _per_test(self) -> Fs:
        per_test = {"dbench": {"load", "programs", "think_ms"},
                    "randread": {"load", "programs", "file_mb", "block", "warmup_s"},
                    "filebench": {"load", "workloads", "set_mb", "write_mb", "warmup_s"},
                    "iozone": {"sessions", "file_mb", "block", "warmup_s", "io_servers",
                               "client_containers", "strip_size", "storage",
                               "job_timeout_s"}}
        allowed = {"test", "server", "measure_s"} | per_test[self.test]
        extra = sorted(set(self.model_fields_set) - allowed)
        if extra:
            raise problem("unknown key {key} for test {test} (allowed: {allowed})",
                          key=repr(extra[0]), test=self.test, allowed=", ".join(sorted(allowed)))
        if self.server == "orangefs" and self.test != "iozone":
            raise problem("test {test} runs against the GlusterFS server (server: gluster); "
                          "the OrangeFS tier runs test iozone", test=self.test)
        if self.test == "iozone" and self.server == "gluster":
            pvfs_only = sorted({"io_servers", "client_containers", "strip_size", "storage",
                                "job_timeout_s"} & self.model_fields_set)
            if pvfs_only:
                raise problem("{key} is a setting of the OrangeFS tier (server: orangefs)",
                              key=pvfs_only[0])
        return self


class FsSettings(Model):
    """The keys of a file-server experiment besides the common ones."""

    fs: Fs


# --------------------------------------------------------------------------- helpers


def sessions_per_client(sessions: int, containers: int) -> list[int]:
    """Sessions on each client container, spread evenly (the first ones get one more)."""
    base, extra = divmod(sessions, containers)
    return [base + (1 if i < extra else 0) for i in range(containers)
            if base + (1 if i < extra else 0) > 0]


def think_us(think_ms: float) -> int:
    """A think time in ms as dbench's Sleep microseconds."""
    return int(round(think_ms * 1000))


def filebench_env(fs: Fs, directory: str, ramp_s: int, runtime_s: int) -> dict[str, Any]:
    """The job files' environment: folder, times and sizes (set b is 20 files of set_mb/20)."""
    size = int(fs.set_mb * MIB)
    return {"FB_DIR": directory, "FB_RAMP": ramp_s, "FB_RUNTIME": runtime_s,
            "FB_SET_SIZE": size, "FB_PART_SIZE": size // SET_B_FILES,
            "FB_WRITE_SIZE": int(fs.write_mb * MIB)}


def set_files(fileset: str) -> list[str]:
    """The files of a read set, as the job files name them."""
    if fileset == "b":
        return [f"set-b.{i}" for i in range(SET_B_FILES)]
    return [f"set-{fileset}"]


def cpu_figures(first: dict, last: dict, nbytes: float, prefix: str = "",
                server_net: list[str] | None = None) -> dict[str, Any]:
    """CPU per side (client, server, hog) and of the host over two samples, the server's
    network MB/s from its interfaces (the sampled interfaces ``server_net`` names, else those
    whose label starts with the server tier), and CPU µs per KB moved (`nbytes` over the same
    span)."""
    dt = last["t"] - first["t"]
    cpu = counters.cpu_seconds(first, last)
    host = counters.host_breakdown(first["host"], last["host"])
    client, server, hog = (cpu.get(CLIENT_TIER, 0.0), cpu.get(SERVER_TIER, 0.0),
                           cpu.get(HOG))
    ours = (lambda k: k in server_net) if server_net is not None else \
        (lambda k: k.startswith(SERVER_TIER))
    net = sum(last["net"][k][d] - first["net"][k][d] for k in last["net"]
              if ours(k) and k in first["net"]
              for d in ("rx_bytes", "tx_bytes"))
    out: dict[str, Any] = {
        "window_s": dt, f"cpu_s_{CLIENT_TIER}": client, f"cpu_s_{SERVER_TIER}": server,
        "client_cpu_pct": 100 * client / dt if dt else None,
        "server_cpu_pct": 100 * server / dt if dt else None,
        "hog_cpu_pct": 100 * hog / dt if dt and hog is not None else None,
        "server_net_mb_per_s": net / 1e6 / dt if dt else None,
        "host_usr_pct": host["usr_pct"], "host_sys_pct": host["sys_pct"],
        "host_softirq_pct": host["softirq_pct"], "host_idle_pct": host["idle_pct"]}
    if hog is not None:
        out[f"cpu_s_{HOG}"] = hog
    if nbytes > 0:
        kb = nbytes / 1024
        out.update({"client_cpu_us_per_kb": client * 1e6 / kb,
                    "server_cpu_us_per_kb": server * 1e6 / kb,
                    "host_cpu_us_per_kb": host["busy_s"] * 1e6 / kb})
    return {f"{prefix}{k}": v for k, v in out.items()}


def fio_figures(report: dict[str, Any], direction: str, prefix: str = "") -> dict[str, Any]:
    """Throughput, operations and latency of one direction of a (summed) fio report."""
    d = report[direction]
    return {f"{prefix}mb_per_s": d["bytes_per_s"] / 1e6, f"{prefix}iops": d["iops"],
            f"{prefix}latency_ms": d["clat_mean_ms"], f"{prefix}p99_ms": d["clat_p99_ms"],
            f"{prefix}bytes": d["bytes"]}


# --------------------------------------------------------------------------- the kind


class FsKind(Kind):
    """File-server benchmarks: dbench and fio clients against GlusterFS or OrangeFS."""

    name = "fs"
    description = ("file-server benchmarks: dbench (NetBench's Disk Mix) and fio against "
                   "GlusterFS or OrangeFS")
    model = FsSettings
    scalable = {"fs.measure_s": 2, "fs.warmup_s": 1, "fs.set_mb": 64, "fs.write_mb": 16}
    block = "fs"
    tiers = TIERS
    bring_up = "the servers' bring-up (about 10 s; 30 s for OrangeFS)"
    variation_pct = 5.0
    roles = ("fs_server", "fs_client")

    def cluster_roles(self, exp: Experiment) -> list[str]:
        """GlusterFS: the server (and its hog) on the fs_server node, the client on the
        fs_client node; OrangeFS: the pfs kind's roles (compose/host-pvfs.yml)."""
        if self.settings(exp).server == "orangefs":
            return ["pfs_meta", "pfs_io", "pfs_clients"]
        return list(self.roles)

    def settings(self, exp: Experiment) -> Fs:
        """The experiment's `fs:` block."""
        return exp.settings.fs  # type: ignore[attr-defined, no-any-return]

    def check(self, exp: Experiment) -> None:
        """No web or proxy servers here for a mode's server options."""
        refuse_server_modes(exp, "a file-server experiment")

    def resolved(self, exp: Experiment) -> dict[str, Any]:
        """The resolved experiment (manifest and experiment.yml)."""
        f = self.settings(exp)
        block: dict[str, Any] = {"test": f.test, "server": f.server, "measure_s": f.measure_s}
        if f.test == "dbench":
            block.update(load=list(f.load), programs=list(f.programs), think_ms=list(f.think_ms),
                         warmup_s=fstools.dbench_warmup_s(f.measure_s))
        elif f.test == "randread":
            block.update(load=list(f.load), programs=list(f.programs), file_mb=f.file_mb,
                         block=f.block, warmup_s=f.warmup_s)
        elif f.test == "filebench":
            block.update(load=list(f.load), workloads=list(f.workloads), set_mb=f.set_mb,
                         write_mb=f.write_mb, warmup_s=f.warmup_s)
        else:
            block.update(sessions=list(f.sessions), file_mb=f.file_mb, block=f.block,
                         warmup_s=f.warmup_s)
            if f.server == "orangefs":
                block.update(io_servers=f.io_servers, client_containers=f.client_containers,
                             strip_size=f.strip_size, storage=f.storage,
                             job_timeout_s=f.job_timeout_s)
        return {"name": exp.name, "kind": self.name, "description": exp.description,
                "source": exp.source, "seed": exp.seed, "repetitions": exp.repetitions,
                "settle_s": exp.settle_s, "modes": [m.as_dict() for m in exp.modes],
                "fs": block}

    def axes(self, exp: Experiment) -> list[tuple[str, list[Any]]]:
        """(load x) the test's factors x mode x repetition."""
        f = self.settings(exp)
        if f.test == "dbench":
            factors = [("load", list(f.load)), ("programs", list(f.programs)),
                       ("think_ms", list(f.think_ms))]
        elif f.test == "randread":
            factors = [("load", list(f.load)), ("programs", list(f.programs))]
        elif f.test == "filebench":
            factors = [("load", list(f.load)), ("workload", list(f.workloads))]
        else:
            factors = [("sessions", list(f.sessions))]
        return factors + [("mode", [m.name for m in exp.modes]),
                          ("repetition", list(range(1, exp.repetitions + 1)))]

    def placement(self, exp: Experiment, combo: dict[str, Any] | Point) -> Hashable:
        """GlusterFS with the server idle or busy; or an OrangeFS cluster of N I/O servers."""
        f = self.settings(exp)
        if f.server == "orangefs":
            return ("orangefs", f.io_servers)
        factors = combo if isinstance(combo, dict) else combo.factors
        return ("gluster", factors.get("load", "idle"))

    def order(self, exp: Experiment, combos: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Shuffled within each server load, loads in the order listed."""
        f = self.settings(exp)
        if "load" not in combos[0]:
            return combos
        listed = list(f.load)
        return sorted(combos, key=lambda c: listed.index(c["load"]))

    # -- plan
    def point_seconds(self, exp: Experiment) -> float:
        """settle + the tool's time (dbench: warm-up of a fifth, timed part, clean-up) + set-up."""
        f = self.settings(exp)
        if f.test == "dbench":
            return exp.settle_s + f.measure_s + fstools.dbench_warmup_s(f.measure_s) + 6
        if f.test == "iozone":
            return exp.settle_s + 2 * (START_DELAY_S + f.warmup_s + f.measure_s + 2) + 4
        if f.test == "filebench":
            prep = 10.0
        else:  # randread: the programs' files laid out and removed every point, at about
            # 8 MiB/s on average (measured here: 14-24 s a point idle, up to 50 s busy)
            prep = 6 + sum(f.programs) / len(f.programs) * f.file_mb / 8
        return exp.settle_s + START_DELAY_S + f.warmup_s + f.measure_s + prep

    def plan_header(self, exp: Experiment, points: list[Point]) -> list[str]:
        """The test, its tool, the server and what a point takes."""
        f = self.settings(exp)
        tool = {"dbench": f"dbench 4.0 (NetBench's Disk Mix), {fstools.dbench_warmup_s(f.measure_s)}"
                          f" s warm-up + {f.measure_s} s timed",
                "randread": f"fio, {f.block}-byte random reads of a {f.file_mb} MiB file per "
                            f"program, {f.warmup_s} s ramp + {f.measure_s} s timed",
                "filebench": f"fio job files of 001's Filebench workloads, sets of "
                             f"{f.set_mb} MiB, writers' files {f.write_mb} MiB, "
                             f"{f.warmup_s} s ramp + {f.measure_s} s timed",
                "iozone": f"fio in IOzone's role: per session a {f.file_mb} MiB file written "
                          f"then read in {f.block}-byte records, {f.warmup_s} s ramp + "
                          f"{f.measure_s} s timed per phase"}[f.test]
        server = ("GlusterFS, one brick on a volume of the host's disk, FUSE client"
                  if f.server == "gluster" else
                  f"OrangeFS, 1 metadata + {f.io_servers} I/O servers ({f.storage} storage), "
                  f"{f.client_containers} client containers")
        return [f"experiment {exp.name} ({exp.source}): {len(points)} points, order shuffled "
                f"with seed {exp.seed}; test {f.test}: {tool}",
                f"server: {server}; per point about {self.point_seconds(exp):.0f} s"]

    def placement_line(self, exp: Experiment, point: Point, first: bool) -> str:
        """The deployment from this point on."""
        f = self.settings(exp)
        if f.server == "orangefs":
            net = "198.18.3.0/24" if placer.current().cluster is None else "their nodes"
            return (f"  -- OrangeFS cluster: 1 metadata + {f.io_servers} I/O servers, "
                    f"{f.client_containers} client container(s) on {net}")
        load = ("idle server" if point.factors.get("load", "idle") == "idle" else
                "busy server (an MPEG decoder running on its CPUs all the time)")
        where = placer.current()
        net = "198.18.12.0/24" if where.cluster is None else "their nodes"
        return f"  -- file server (GlusterFS) and 1 client on {net}, {load}"

    def what(self, exp: Experiment, point: Point) -> str:
        """A point's factors in a few words."""
        p = point.factors
        test = self.settings(exp).test
        if test == "dbench":
            return f"{p['load']} programs={p['programs']} think={p['think_ms']:g} ms"
        if test == "randread":
            return f"{p['load']} programs={p['programs']}"
        if test == "filebench":
            return f"{p['load']} {p['workload']}"
        return f"sessions={p['sessions']}"

    def point_line(self, exp: Experiment, point: Point) -> str:
        """Factors, mode and repetition."""
        return (f"  {point.id}  {self.what(exp, point):<36} mode={point.mode:<20} "
                f"rep={point.repetition}  ~{self.point_seconds(exp):.0f} s")

    def point_title(self, exp: Experiment, point: Point) -> str:
        """How the progress line names a point."""
        return f"{point.id} {self.what(exp, point)} {point.mode} rep {point.repetition}"

    def needs(self, exp: Experiment, points: list[Point]) -> list[space.Need]:
        """What the largest point writes on the server (the share's volume on the host's disk,
        or the OrangeFS servers' storage) and the think-time load file in the client's /tmp."""
        f = self.settings(exp)
        what = f"the files of {exp.source}'s largest point"
        out: list[space.Need] = []
        if f.test == "dbench":
            nbytes = max(f.programs) * fstools.DBENCH_BYTES_PER_PROGRAM
            if any(t > 0 for t in f.think_ms):
                lines = fstools.DBENCH_LOADFILE_LINES
                out += space.on_tmpfs("the think-time load file", fstools.DBENCH_LOADFILE_BYTES
                                      + lines * len("Sleep 1000000 NT_STATUS_OK\n"),
                                      "FS_CLIENT_TMP_SIZE", "256m", "use think_ms: 0",
                                      role="fs_client")
        elif f.test == "randread":
            nbytes = max(f.programs) * int(f.file_mb * MIB)
        elif f.test == "filebench":
            sets = {FILEBENCH[w].fileset for w in f.workloads}
            nbytes = sum(int(f.set_mb * MIB) for s in sets if s != "w")
            if "w" in sets:
                nbytes += max(FILEBENCH[w].threads for w in f.workloads
                              if FILEBENCH[w].fileset == "w") * int(f.write_mb * MIB)
            what = f"the file sets of {exp.source}"
        else:
            nbytes = max(f.sessions) * int(f.file_mb * MIB)
        if f.server == "orangefs":
            per_server = nbytes // f.io_servers + 1
            if f.storage == "tmpfs":
                return out + space.on_tmpfs(f"{what} on each OrangeFS I/O server", per_server,
                                            "PVFS_TMPFS_SIZE", "4g", "use fewer sessions, a "
                                            "smaller fs.file_mb or more I/O servers",
                                            copies=f.io_servers, role="pfs_io")
            return out + [space.on_disk(what, nbytes, space.docker_root(),
                                        "Docker's data folder", "lower fs.file_mb",
                                        role="pfs_io")]
        fix = {"dbench": "use fewer programs", "randread": "lower fs.file_mb or use fewer "
               "programs", "filebench": "lower fs.set_mb or fs.write_mb",
               "iozone": "lower fs.file_mb or use fewer sessions"}[f.test]
        return out + [space.on_disk(f"{what} on the file server's share", nbytes,
                                    space.docker_root(), "Docker's data folder", fix,
                                    role="fs_server")]

    # -- run
    def preflight(self, exp: Experiment, points: list[Point]) -> None:
        """The images are built (the first time, or after their build context changed)."""
        if self.settings(exp).server == "orangefs":
            orangefs.check_image()
        else:
            stack.require_image(IMAGE)

    def prepare(self, exp: Experiment, run_dir: Path) -> dict[str, Any]:
        """Per-run state: the run id (folder names on the share), the file sets laid out, and
        how many points still read each set (a set is removed after its last one)."""
        uses: dict[str, int] = {}
        if self.settings(exp).test == "filebench":
            for point in self.points(exp, exp.seed):
                fileset = FILEBENCH[point["workload"]].fileset
                uses[fileset] = uses.get(fileset, 0) + 1
        return {"run_id": run_dir.name, "sets": set(), "uses": uses}

    def deploy(self, exp: Experiment, key: Hashable, prepared: Any,
               previous: Deployment | None, point: Point) -> Deployment:
        """GlusterFS: server and client up (the hog too for a busy server; only the hog changes
        between loads). OrangeFS: a cluster of 1 metadata + N I/O servers and the clients."""
        f = self.settings(exp)
        server, arg = key  # type: ignore[misc]
        where = placer.current()
        if server == "orangefs":
            log(f"tierbench: bringing the OrangeFS cluster up on {where.name} (1 metadata + "
                f"{arg} I/O servers, {f.client_containers} clients)")
            where.down()
            where.up(orangefs.cluster_spec(int(arg), f.client_containers,
                                           strip_size=f.strip_size, storage=f.storage,
                                           job_timeout_s=f.job_timeout_s))
            servers, clients = orangefs.cluster_containers(where.replicas())
            return pvfs_deployment(key, servers, clients)
        busy = arg == "busy"
        # the server and the client (and the hog when busy): services already up as asked stay
        spec = stack.Services(fs_paths(), fs_env(),
                              services=[SERVER_TIER, CLIENT_TIER, *([HOG] if busy else [])],
                              timeout=300)
        if previous is None or previous.info.get("server") != "gluster":
            log(f"tierbench: bringing the file-server tier up on {where.name} (GlusterFS "
                "server, 1 client" + (", the CPU hog" if busy else "") + ")")
            where.down()
            prepared["sets"].clear()
            where.up(spec)
        elif busy:
            log("tierbench: starting the CPU hog on the file server's CPUs")
            where.up(spec)
        else:
            log("tierbench: stopping the CPU hog")
            for c in where.replicas():
                if c.service == HOG:
                    where.stop(c, 2)
        return gluster_deployment(key)

    def finish(self, exp: Experiment, deployment: Deployment) -> list[str]:
        """An OrangeFS cluster removed (its servers admit whoever connects; the next run makes
        a new one); the GlusterFS server stays up, admitting only the client's address."""
        if deployment.info.get("server") != "orangefs":
            return []
        placer.current().down()
        return ["removed the OrangeFS cluster (its servers admit whoever connects)"]

    def running(self) -> Deployment | None:
        """The file-server tier, when it is up."""
        found = {c.service for c in placer.current().replicas()}
        if {SERVER_TIER, CLIENT_TIER} <= found:
            return gluster_deployment(("gluster", "busy" if HOG in found else "idle"))
        return None

    def provenance(self, exp: Experiment, deployment: Deployment) -> dict[str, Any]:
        """The tools' and the server's versions as the containers report them."""
        client = deployment.info["clients"][0]
        out: dict[str, Any] = {}
        tools = [("fio", ["fio", "--version"])]
        if deployment.info["server"] == "gluster":  # the OrangeFS clients have no dbench
            tools.append(("dbench", ["sh", "-c", "dbench --help 2>&1 | head -1"]))
        for tool, argv in tools:
            done = stack.exec_in(client, argv, timeout=30)
            lines = (done.stdout + done.stderr).strip().splitlines()
            out[tool] = lines[0] if lines and done.returncode == 0 else "not installed"
        if deployment.info["server"] == "gluster":
            done = stack.exec_in(deployment.info["servers"][0], ["glusterfsd", "--version"],
                                 timeout=30)
            lines = done.stdout.strip().splitlines()
            out["glusterfs"] = lines[0] if lines else "unknown"
        else:
            done = stack.exec_in(deployment.info["servers"][0], ["cat", "/opt/orangefs/SOURCE"],
                                 timeout=30)
            out["orangefs"] = done.stdout.strip()
        return {"tools": out}

    def run_point(self, ctx: PointContext) -> PointResult:
        """The test's tool, then the figures over the samples bracketing its timed part."""
        f = self.settings(ctx.exp)
        runner = {"dbench": self.dbench, "randread": self.randread,
                  "filebench": self.filebench, "iozone": self.iozone}[f.test]
        try:
            values, windows, per_second = runner(ctx, f)
        except (fstools.FsParseError, PfsError, stack.StackError) as exc:
            ctx.sampler.stop()
            return PointResult(error=str(exc))
        except subprocess.TimeoutExpired as exc:
            ctx.sampler.stop()
            return PointResult(error=f"the tool did not finish within {exc.timeout:.0f} s and "
                               "was stopped")
        samples = ctx.sampler.stop()
        error = values.pop("error", None)
        for prefix, (start, end, nbytes) in windows.items():
            try:
                first, last = counters.window(samples, start, end)
            except MeasureError as exc:
                return PointResult(values, per_second, error=error or str(exc))
            values.update(cpu_figures(first, last, nbytes, prefix,
                                      ctx.deployment.info.get("server_net")))
            ctx.record[f"{prefix}window"] = {"start": start, "end": end,
                                             "first_sample": first["t"], "last_sample": last["t"]}
        span = (min(w[0] for w in windows.values()), max(w[1] for w in windows.values()))
        return PointResult(values, per_second, span, error=error)

    # -- the tests
    def dbench(self, ctx: PointContext, f: Fs) -> tuple[dict, dict, list]:
        """dbench with the point's programs and think time; its lines stamped as they arrive."""
        p = ctx.point.factors
        client = ctx.deployment.info["clients"][0]
        folder = f"{SHARE}/{ctx.prepared['run_id']}-{ctx.point.id}"
        loadfile = fstools.DBENCH_LOADFILE
        us = think_us(p["think_ms"])
        if us:
            loadfile = f"/tmp/think-{us}.txt"
            checked(client, ["sh", "-c", fstools.think_loadfile(us, loadfile)],
                    "write the think-time load file", 120)
        checked(client, ["mkdir", "-p", folder], "make the point's folder on the share", 60)
        argv = fstools.dbench_command(p["programs"], f.measure_s, loadfile, folder)
        timed: list[tuple[float, str]] = []
        limit = f.measure_s * 2 + 120 + 0.005 * us * p["programs"]
        try:
            with (ctx.dir / "dbench.txt").open("w") as raw:
                proc = subprocess.Popen([*stack.docker_cmd(client), "exec", client.id, *argv],
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
                killer = threading.Timer(limit, proc.kill)
                killer.start()
                try:
                    assert proc.stdout is not None
                    for line in proc.stdout:
                        timed.append((time.time(), line.rstrip("\n")))
                        raw.write(line)
                    proc.wait()
                finally:
                    killer.cancel()
        finally:
            stack.exec_in(client, ["sh", "-c", f"rm -rf {folder} /tmp/think-*.txt"],
                          timeout=300)
        text = "".join(line + "\n" for _, line in timed)
        report = fstools.parse_dbench(text)
        start, end = fstools.dbench_window(timed)
        nbytes = report["mb_per_s"] * 1e6 * (end - start)
        per_second = [{"t": round(t, 3), "clients": d.clients, "lines": d.lines,
                       "mb_per_s": d.mb_per_s, "phase": d.phase, "second": d.second,
                       "latency_ms": d.latency_ms}
                      for t, line in timed if (d := fstools.parse_dbench_line(line))]
        # dbench resets its operation counts after the warm-up: these are the timed part's
        operations = sum(o["count"] for o in report["operations"].values())
        values: dict[str, Any] = {"mb_per_s": report["mb_per_s"],
                                  "ops_per_s": operations / (end - start),
                                  "max_latency_ms": report["max_latency_ms"],
                                  "bytes": round(nbytes), "operations": operations}
        if report["errors"]:
            values["error"] = f"dbench reported: {report['errors'][0][:200]}"
        ctx.record["operations"] = report["operations"]
        return values, {"": (start, end, nbytes)}, per_second

    def randread(self, ctx: PointContext, f: Fs) -> tuple[dict, dict, list]:
        """fio: each program reads `block` bytes at random places of its own file."""
        p = ctx.point.factors
        client = ctx.deployment.info["clients"][0]
        folder = f"{SHARE}/{ctx.prepared['run_id']}-{ctx.point.id}"
        argv = fstools.fio_command(name="randread", directory=folder, rw="randread",
                                   block=f.block, size=int(f.file_mb * MIB),
                                   jobs=p["programs"], runtime_s=f.measure_s,
                                   ramp_s=f.warmup_s, direct=True)
        checked(client, ["mkdir", "-p", folder], "make the point's folder on the share", 60)
        try:
            checked(client, [*argv, "--create_only=1"], "lay out the programs' files",
                    600)
            report, start = self.fio_at(ctx, [(client, argv)], "fio")
        finally:
            stack.exec_in(client, ["rm", "-rf", folder], timeout=300)
        begin = start + f.warmup_s
        values = fio_figures(report, "read")
        if report["errors"]:
            values["error"] = f"fio: {report['errors'][0]}"
        return values, {"": (begin, begin + f.measure_s, report["read"]["bytes"])}, []

    def filebench(self, ctx: PointContext, f: Fs) -> tuple[dict, dict, list]:
        """One of the nine workloads: its set laid out once per run, the server's cache emptied
        (uncached) or filled (cached) on the host, then fio on its job file."""
        w = FILEBENCH[ctx.point["workload"]]
        client = ctx.deployment.info["clients"][0]
        folder = f"{SHARE}/{ctx.prepared['run_id']}-filebench"
        env = filebench_env(f, folder, f.warmup_s, f.measure_s)
        checked(client, ["mkdir", "-p", folder], "make the file sets' folder on the share", 60)
        if w.fileset != "w" and w.fileset not in ctx.prepared["sets"]:
            ctx.log(f"tierbench: laying out file set {w.fileset} ({f.set_mb} MiB) on the share")
            checked(client, [*fstools.filebench_command(LAYOUT[w.fileset], env),
                             "--create_only=1"], f"lay out file set {w.fileset}", 3600)
            ctx.prepared["sets"].add(w.fileset)
        if w.cache:
            server = ctx.deployment.info["servers"][0]
            brick = f"{BRICK_PATH}/{ctx.prepared['run_id']}-filebench"
            checked(server, ["sh", "-c", server_cache(w.cache, [
                f"{brick}/{name}" for name in set_files(w.fileset)])],
                    f"{'empty' if w.cache == 'uncached' else 'fill'} the server's page cache",
                    1800)
            ctx.record["server_cache"] = w.cache
        try:
            report, start = self.fio_at(ctx, [(client, fstools.filebench_command(w.name, env))],
                                        "fio")
        finally:
            uses = ctx.prepared["uses"]
            uses[w.fileset] = uses.get(w.fileset, 1) - 1
            if w.fileset == "w" or uses[w.fileset] <= 0:  # the set's last point: remove it
                files = " ".join(f"{folder}/{name}" for name in set_files(w.fileset)) \
                    if w.fileset != "w" else f"{folder}/write.*"
                stack.exec_in(client, ["sh", "-c", f"rm -f {files}"], timeout=300)
                ctx.prepared["sets"].discard(w.fileset)
        direction = w.direction
        begin = start + f.warmup_s
        values = fio_figures(report, direction)
        values["threads"] = w.threads
        if w.fileset in ("a", "c") and w.cache == "uncached":
            values["set_passes"] = report[direction]["bytes"] / (f.set_mb * MIB)
        if report["errors"]:
            values["error"] = f"fio: {report['errors'][0]}"
        return values, {"": (begin, begin + f.measure_s, report[direction]["bytes"])}, []

    def iozone(self, ctx: PointContext, f: Fs) -> tuple[dict, dict, list]:
        """Sessions spread over the client containers write, then read, their own files at the
        same time (fio, sequential, `block`-byte records)."""
        sessions = ctx.point["sessions"]
        clients = ctx.deployment.info["clients"]
        mount = SHARE if ctx.deployment.info["server"] == "gluster" else PVFS_MOUNT
        spread = sessions_per_client(sessions, len(clients))
        folders = [f"{mount}/{ctx.prepared['run_id']}-{ctx.point.id}-c{i + 1}"
                   for i in range(len(spread))]
        values: dict[str, Any] = {}
        windows: dict[str, tuple[float, float, float]] = {}
        try:
            for folder, client in zip(folders, clients):
                checked(client, ["mkdir", "-p", folder], "make the session folder", 60)
            for phase in ("write", "read"):
                jobs = [(client, fstools.fio_command(
                    name=phase, directory=folder, rw=phase, block=f.block,
                    size=int(f.file_mb * MIB), jobs=n, runtime_s=f.measure_s,
                    ramp_s=f.warmup_s, direct=True))
                    for client, folder, n in zip(clients, folders, spread)]
                report, start = self.fio_at(ctx, jobs, f"fio-{phase}")
                begin = start + f.warmup_s
                values.update(fio_figures(report, phase, f"{phase}_"))
                windows[f"{phase}_"] = (begin, begin + f.measure_s, report[phase]["bytes"])
                if report["errors"]:
                    values["error"] = f"fio ({phase}): {report['errors'][0]}"
                    break
        finally:
            for folder, client in zip(folders, clients):
                stack.exec_in(client, ["rm", "-rf", folder], timeout=300)
        values["client_containers_used"] = len(spread)
        return values, windows, []

    def fio_at(self, ctx: PointContext, jobs: list[tuple[stack.Container, list[str]]],
               name: str) -> tuple[dict[str, Any], float]:
        """fio in each container at once, all starting at the same wall-clock instant; their
        reports (kept as NAME-K.json) summed."""
        f = self.settings(ctx.exp)
        lead = START_DELAY_S + placer.current().exec_lead_s
        start = time.time() + lead
        limit = lead + f.warmup_s + f.measure_s + 600
        outputs: list[str] = [""] * len(jobs)

        def one(k: int) -> None:
            container, argv = jobs[k]
            done = stack.exec_in(container, fstools.at_start(start, argv), timeout=limit)
            outputs[k] = done.stdout + done.stderr

        threads = [threading.Thread(target=one, args=(k,)) for k in range(len(jobs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        reports = []
        for k, text in enumerate(outputs, 1):
            (ctx.dir / f"{name}-{k}.json").write_text(text)
            reports.append(fstools.parse_fio(text))
        return fstools.sum_fio(reports), start

    def after_point(self, exp: Experiment, point: Point, row: dict[str, Any],
                    deployment: Deployment) -> None:
        """A server or client container that stopped ends the run with one sentence."""
        running = {c.id for c in placer.current().replicas()}
        everyone = deployment.info["servers"] + deployment.info["clients"]
        down = [c.name for c in everyone if c.id not in running]
        down_services = [c.service for c in everyone if c.id not in running]
        if down:
            raise RunEnds(f"{', '.join(down)} stopped during {point.id}"
                          + (f" ({row['error']})" if row.get("error") else "")
                          + f": see `docker{placer.current().context_arg(down_services[0])} logs "
                          f"{down[0]}`; the run ends here")

    # -- results
    def identity(self, exp: Experiment, point: Point) -> dict[str, Any]:
        """point, test, server, the factors, mode, repetition."""
        f = self.settings(exp)
        return {"point": point.id, "test": f.test, "server": f.server, **point.factors,
                "mode": point.mode, "repetition": point.repetition}

    def columns(self, exp: Experiment) -> list[Column]:
        """Identity, then the test's figures and the CPU figures (per phase for iozone)."""
        f = self.settings(exp)
        ident = [name for name, _ in self.axes(exp) if name not in ("mode", "repetition")]
        cpu = ["window_s", f"cpu_s_{CLIENT_TIER}", f"cpu_s_{SERVER_TIER}", "client_cpu_pct",
               "server_cpu_pct", "hog_cpu_pct", "server_net_mb_per_s", "host_usr_pct",
               "host_sys_pct", "host_softirq_pct", "host_idle_pct", "client_cpu_us_per_kb",
               "server_cpu_us_per_kb", "host_cpu_us_per_kb"]
        if f.test == "dbench":
            figures = ["mb_per_s", "ops_per_s", "max_latency_ms", "operations", "bytes"] + cpu
        elif f.test == "iozone":
            figures = [f"{phase}_{c}" for phase in ("write", "read")
                       for c in ["mb_per_s", "iops", "latency_ms", "p99_ms", "bytes", *cpu]]
        else:
            figures = ["mb_per_s", "iops", "latency_ms", "p99_ms", "bytes"] + cpu
        return [Column(c) for c in ["point", "test", "server", *ident, "mode", "repetition",
                                    *figures]]

    def brief(self, row: dict[str, Any]) -> str:
        """Throughput and the server's CPU."""
        if row.get("error"):
            return f"FAILED ({row['error']})"
        parts = []
        for prefix in ("", "write_", "read_"):
            if row.get(f"{prefix}mb_per_s") is None:
                continue
            iops = row.get(f"{prefix}iops")
            parts.append(f"{prefix.rstrip('_') + ' ' if prefix else ''}"
                         f"{row[f'{prefix}mb_per_s']:.1f} MB/s"
                         + (f" ({iops:.0f} IOPS)" if iops else "")
                         + (f", server CPU {row[f'{prefix}server_cpu_pct']:.0f} %"
                            if row.get(f"{prefix}server_cpu_pct") is not None else ""))
        return "; ".join(parts)

    def report(self, resolved: dict[str, Any]) -> dict[str, Any]:
        """The family of the experiment (by name, else by test), factors in the file's order."""
        block = resolved.get("fs") or {}
        name = str(resolved.get("name", ""))
        by_test = {"dbench": "fs-clients", "randread": "fs-randread",
                   "filebench": "fs-filebench", "iozone": "pfs-iozone"}
        spec = families.load(families.by_name(
            "fs", name, by_test.get(str(block.get("test")), "fs-clients")))
        order = {k: list(block[key]) for k, key in (("load", "load"), ("programs", "programs"),
                                                    ("think_ms", "think_ms"),
                                                    ("workload", "workloads"),
                                                    ("sessions", "sessions"))
                 if isinstance(block.get(key), list)}
        spec["order"] = {k: v for k, v in order.items() if len(v) > 1 and k in spec["factors"]}
        return spec


# --------------------------------------------------------------------------- deployments


def fs_paths() -> list[str]:
    """The file-server tier's compose files (the base file names the project's networks)."""
    return [str(stack.ROOT / "docker-compose.yml"), str(stack.ROOT / stack.FS_OVERLAY)]


def fs_env() -> dict[str, str]:
    """.env, then the environment (as docker compose reads them)."""
    return {**stack.dotenv(), **os.environ}


def checked(container: stack.Container, argv: list[str], what: str, timeout: float) -> str:
    """A command in a container that must succeed; StackError naming what failed otherwise."""
    done = stack.exec_in(container, argv, timeout=timeout)
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
        raise stack.StackError(f"could not {what} in {container.name}: {said[-1][:300]}")
    return done.stdout


def server_cache(cache: str, paths: list[str]) -> str:
    """A shell command, run in the file server's container (so on its node), that empties
    (uncached: written back, then each file dropped with posix_fadvise DONTNEED, which dd's
    nocache flag asks for) or fills (cached: each file read) the page cache the server reads
    the files from."""
    quoted = " ".join(shlex.quote(p) for p in paths)
    if cache == "uncached":
        return f"sync && for f in {quoted}; do dd if=\"$f\" iflag=nocache count=0 status=none; done"
    return f"for f in {quoted}; do cat \"$f\" >/dev/null; done"


def tier_ifaces(where: placer.Placer, groups: dict[str, list[netif.Endpoint]],
                ) -> dict[str, str]:
    """The interfaces to sample, by label: on one host each container's host-side veth named
    TIER:NAME:IFNAME (as groups' keys say), on a cluster each node's NIC (node:interface)."""
    if where.cluster is not None:
        return where.ifaces([e for eps in groups.values() for e in eps])
    return {f"{name}:{ifname}": ifname for name, eps in groups.items()
            for ifname in where.ifaces(eps).values()}


def tier_deployment(key: Hashable, where: placer.Placer, server_kind: str,
                    servers: list[stack.Container], clients: list[stack.Container],
                    labels: dict[str, str], extra: dict[str, stack.Container],
                    grouped: bool) -> Deployment:
    """Client and server tiers wherever the placement runs them: their interfaces for modes,
    CPU counters (one per tier, or a group of the tier's containers when ``grouped``) and
    sampled interfaces, with the server's named for its network figures."""
    def group(cs: list[stack.Container]) -> Any:
        counters = {labels[c.id]: where.counter(c) for c in cs}
        return CgroupGroup(counters) if grouped else where.counter(cs[0])

    def named(tier: str, cs: list[stack.Container]) -> dict[str, list[netif.Endpoint]]:
        return {labels[c.id] if labels[c.id] == tier else f"{tier}:{labels[c.id]}": eps[c.id]
                for c in cs}

    eps = {c.id: where.endpoints(labels[c.id], c) for c in servers + clients}
    tiers = {CLIENT_TIER: Tier(CLIENT_TIER, CLIENT, list(dict.fromkeys(
                 e for c in clients for e in eps[c.id])), clients),
             SERVER_TIER: Tier(SERVER_TIER, SERVER, list(dict.fromkeys(
                 e for c in servers for e in eps[c.id])), servers)}
    cpus: dict[str, Any] = {CLIENT_TIER: group(clients), SERVER_TIER: group(servers)}
    containers = {labels[c.id]: c for c in servers + clients}
    for name, c in extra.items():
        cpus[name] = where.counter(c)
        containers[name] = c
    server_ifaces = tier_ifaces(where, named(SERVER_TIER, servers))
    ifaces = {**tier_ifaces(where, named(CLIENT_TIER, clients)), **server_ifaces}
    return Deployment(key, tiers, cpus, ifaces, containers=containers,
                      info={"server": server_kind, "servers": servers, "clients": clients,
                            "server_net": list(server_ifaces)}, placer=where)


def gluster_deployment(key: Hashable) -> Deployment:
    """The running GlusterFS tier: client and server tiers, the hog's CPU counter when it
    runs."""
    where = placer.current()
    found = where.containers()
    missing = [s for s in (SERVER_TIER, CLIENT_TIER) if s not in found]
    if missing:
        raise stack.StackError(f"{missing[0]} is not running{where.where(missing[0])}: see "
                               f"`docker{where.context_arg(missing[0])} logs "
                               f"{stack.PROJECT}-{missing[0]}-1`")
    client, server = found[CLIENT_TIER], found[SERVER_TIER]
    return tier_deployment(key, where, "gluster", [server], [client],
                           {server.id: SERVER_TIER, client.id: CLIENT_TIER},
                           {HOG: found[HOG]} if HOG in found else {}, grouped=False)


def pvfs_deployment(key: Hashable, servers: list[stack.Container],
                    clients: list[stack.Container]) -> Deployment:
    """The running OrangeFS cluster as the fs kind's client and server tiers."""
    labels = {c.id: orangefs.label(c) for c in servers + clients}
    return tier_deployment(key, placer.current(), "orangefs", servers, clients, labels, {},
                           grouped=True)
