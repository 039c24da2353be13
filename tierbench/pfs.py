"""Parallel file system experiments on the OrangeFS tier (compose/pvfs.yml).

Three tests, chosen by an experiment's ``pfs.test``:

- ``concurrent`` (000 §6.2.1): 1..K clients, each in its own container, read and then write one
  contiguous region of ``region_mb_per_server`` x N MB at the same time (N I/O servers).
- ``streams`` (000 §6.2.2): 1..64 concurrent reading streams spread over the client containers.
- ``basic`` (004 Table 1): one sequential writer then reader on tmpfs, a local-disk volume or
  OrangeFS, for several buffer sizes.

Every stream repeats its transfer until ``measure_s`` has passed (so process start-up does not
dominate short transfers); aggregate MB/s is the bytes of all streams over the span from the
common start to the last stream's end. CPU per side (clients, servers) and of the host comes
from counters read at each phase's start and end; what was read and written is checked against
checksums the runner computes itself. A stopped server makes its streams fail within the job
timeout; the point records the errors and the run ends with one message naming the server.
"""

from __future__ import annotations

import csv
import hashlib
import os
import itertools
import json
import random
import shlex
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from tierbench import knobs, modes, netif, provenance, runner, stack
from tierbench.modes import Mode
from tierbench.sampler import PROC_STAT_FIELDS, CgroupCpu, Sampler, host_cpu
from tierbench.schema import PFS_TIERS, TIERS, ConfigError, check_keys, number

TESTS = ("concurrent", "streams", "basic")
FILESYSTEMS = {"tmpfs": "/scratch", "disk": "/disk", "orangefs": "/mnt/orangefs",
               "orangefs-native": "/mnt/orangefs"}
ACCESS = ("native", "fuse")
STORAGE = ("tmpfs", "disk")
MAX_IO_SERVERS = 8
IO_SCRIPT = "/app/workloads/pfs/pfs-io.sh"
MB = 1_000_000
MIB = 1 << 20
START_DELAY_S = 1.5  # every stream starts at the same wall-clock time, this far ahead

SUMMARY_COLUMNS = [
    "point", "test", "mode", "repetition", "io_servers", "clients", "streams", "filesystem",
    "buffer", "access", "region_bytes",
    *(f"{phase}_{col}" for phase in ("read", "write") for col in (
        "mb_per_s", "bytes", "s", "client_cpu_s", "server_cpu_s", "client_cpu_pct",
        "server_cpu_pct", "client_cpu_us_per_kb", "server_cpu_us_per_kb", "host_usr_pct",
        "host_sys_pct", "host_softirq_pct", "host_idle_pct", "failed_streams")),
    "integrity",
]


class PfsError(Exception):
    """The OrangeFS tier cannot run (or stopped running) a test; the message says why."""


# --------------------------------------------------------------------------- experiment


@dataclass(frozen=True)
class PfsPoint:
    """One measured run of a test: a mode, a cluster size and one test factor value."""

    index: int
    mode: str
    repetition: int
    io_servers: int
    clients: int = 1
    streams: int = 1
    filesystem: str = "orangefs"
    buffer: int = MIB

    @property
    def id(self) -> str:
        """Directory name of the point: p001, p002, ..."""
        return f"p{self.index:03d}"


@dataclass
class PfsExperiment:
    """A resolved parallel file system experiment file."""

    name: str
    description: str
    source: str
    seed: int
    repetitions: int
    modes: list[Mode]
    test: str
    io_servers: list[int]
    strip_size: int = 65536
    storage: str = "tmpfs"
    clients: list[int] = field(default_factory=lambda: [1])
    streams: list[int] = field(default_factory=lambda: [1])
    client_containers: int = 1
    filesystems: list[str] = field(default_factory=lambda: ["orangefs"])
    buffers: list[int] = field(default_factory=lambda: [MIB])
    access: str = "native"
    region_mb_per_server: float = 2.0
    regions_per_stream: int = 16
    file_mb: float = 256.0
    measure_s: float = 10.0
    settle_s: float = 1.0
    job_timeout_s: int = 15
    drop_caches: bool = False
    fault: dict[str, Any] | None = None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    def points(self) -> list[PfsPoint]:
        """Every factor combination x mode x repetition, shuffled with the seed and grouped by
        cluster size (a different N means a new cluster)."""
        if self.test == "concurrent":
            factors = [{"clients": c, "streams": c} for c in self.clients]
        elif self.test == "streams":
            factors = [{"clients": min(s, self.client_containers), "streams": s}
                       for s in self.streams]
        else:
            factors = [{"filesystem": f, "buffer": b}
                       for f in self.filesystems for b in self.buffers]
        combos = list(itertools.product(self.io_servers, factors, self.modes,
                                        range(1, self.repetitions + 1)))
        random.Random(self.seed).shuffle(combos)
        combos.sort(key=lambda c: self.io_servers.index(c[0]))  # stable: shuffled within N
        return [PfsPoint(i + 1, m.name, r, n, **f)
                for i, (n, f, m, r) in enumerate(combos)]

    def cluster_clients(self) -> int:
        """Client containers the cluster needs."""
        if self.test == "concurrent":
            return max(self.clients)
        return self.client_containers if self.test == "streams" else 1

    def mode(self, name: str) -> Mode:
        """The mode of that name."""
        return next(m for m in self.modes if m.name == name)

    def resolved(self) -> dict[str, Any]:
        """The experiment with every default filled in and modes inlined, for the manifest."""
        pfs = {"test": self.test, "io_servers": self.io_servers, "strip_size": self.strip_size,
               "storage": self.storage, "measure_s": self.measure_s,
               "job_timeout_s": self.job_timeout_s}
        if self.test == "concurrent":
            pfs.update(clients=self.clients, access=self.access,
                       region_mb_per_server=self.region_mb_per_server,
                       regions_per_stream=self.regions_per_stream)
        elif self.test == "streams":
            pfs.update(streams=self.streams, client_containers=self.client_containers,
                       access=self.access, region_mb_per_server=self.region_mb_per_server,
                       regions_per_stream=self.regions_per_stream)
        else:
            pfs.update(filesystems=self.filesystems, buffers=self.buffers, file_mb=self.file_mb,
                       drop_caches=self.drop_caches)
        return {"name": self.name, "description": self.description, "source": self.source,
                "seed": self.seed, "repetitions": self.repetitions, "settle_s": self.settle_s,
                "modes": [m.as_dict() for m in self.modes], "pfs": pfs}


def _int_list(where: str, value: Any, lo: int, hi: int) -> list[int]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise ConfigError(f"{where}: must be a whole number or a list of them")
    out = [number(where, v, minimum=lo, integer=True) for v in values]
    if max(out) > hi:
        raise ConfigError(f"{where}: at most {hi}, got {max(out)}")
    return out


def load_pfs(path: Path, data: dict[str, Any], modes_dir: Path) -> PfsExperiment:
    """Validate a parallel file system experiment (an experiment file with a `pfs:` block)."""
    where = str(path)
    check_keys(where, data, {"name", "description", "seed", "repetitions", "settle_s", "modes",
                             "pfs"})
    pfs = data.get("pfs")
    if not isinstance(pfs, dict):
        raise ConfigError(f"{where}: pfs: must be a mapping with test: {' | '.join(TESTS)}")
    test = pfs.get("test")
    if test not in TESTS:
        raise ConfigError(f"{where}: pfs.test: must be one of {', '.join(TESTS)}, got {test!r}")
    common = {"test", "io_servers", "strip_size", "storage", "measure_s", "job_timeout_s",
              "fault"}
    per_test = {"concurrent": {"clients", "access", "region_mb_per_server", "regions_per_stream"},
                "streams": {"streams", "client_containers", "access", "region_mb_per_server",
                            "regions_per_stream"},
                "basic": {"filesystems", "buffers", "file_mb", "drop_caches"}}
    check_keys(f"{where}: pfs", pfs, common | per_test[test])
    w = f"{where}: pfs"
    loaded = modes.load_mode_list(where, data.get("modes"), modes_dir)
    for m in loaded:
        if m.server:
            raise ConfigError(f"{where}: modes: {m.name} sets options of the web and proxy "
                              "servers, which a parallel file system experiment does not run")
        if not m.host_interfaces and set(m.tiers) != set(TIERS) \
                and not set(m.tiers) & set(PFS_TIERS):
            raise ConfigError(f"{where}: modes: {m.name} applies to {', '.join(m.tiers)}, none of "
                              f"which is an OrangeFS tier ({', '.join(PFS_TIERS)})")
    storage = pfs.get("storage", "tmpfs")
    if storage not in STORAGE:
        raise ConfigError(f"{w}.storage: must be tmpfs or disk, got {storage!r}")
    access = pfs.get("access", "native")
    if access not in ACCESS:
        raise ConfigError(f"{w}.access: must be native (pvfs2 tools) or fuse, got {access!r}")
    filesystems = pfs.get("filesystems", ["tmpfs", "disk", "orangefs"])
    filesystems = filesystems if isinstance(filesystems, list) else [filesystems]
    if not filesystems or any(f not in FILESYSTEMS for f in filesystems):
        raise ConfigError(f"{w}.filesystems: must list some of {', '.join(FILESYSTEMS)}")
    strip = number(f"{w}.strip_size", pfs.get("strip_size", 65536), minimum=4096, integer=True)
    drop = pfs.get("drop_caches", False)
    if not isinstance(drop, bool):
        raise ConfigError(f"{w}.drop_caches: must be true or false")
    return PfsExperiment(
        name=str(data.get("name", path.stem)),
        description=" ".join(str(data.get("description", "")).split()),
        source=where,
        seed=number(f"{where}: seed", data.get("seed", 1), minimum=0, integer=True),
        repetitions=number(f"{where}: repetitions", data.get("repetitions", 1), minimum=1,
                           integer=True),
        modes=loaded,
        test=test,
        io_servers=_int_list(f"{w}.io_servers", pfs.get("io_servers", 2), 1, MAX_IO_SERVERS),
        strip_size=strip,
        storage=storage,
        clients=_int_list(f"{w}.clients", pfs.get("clients", [1, 2]), 1, 16),
        streams=_int_list(f"{w}.streams", pfs.get("streams", [1, 4]), 1, 256),
        client_containers=number(f"{w}.client_containers", pfs.get("client_containers", 4),
                                 minimum=1, maximum=16, integer=True),
        filesystems=filesystems,
        buffers=_int_list(f"{w}.buffers", pfs.get("buffers", [4096, 65536, MIB]), 512, 64 * MIB),
        access=access,
        region_mb_per_server=number(f"{w}.region_mb_per_server",
                                    pfs.get("region_mb_per_server", 2), minimum=0.0625),
        regions_per_stream=number(f"{w}.regions_per_stream", pfs.get("regions_per_stream", 16),
                                  minimum=1, maximum=1024, integer=True),
        file_mb=number(f"{w}.file_mb", pfs.get("file_mb", 256), minimum=1, maximum=4096),
        measure_s=number(f"{w}.measure_s", pfs.get("measure_s", 10), minimum=0.5),
        settle_s=number(f"{where}: settle_s", data.get("settle_s", 1), minimum=0),
        job_timeout_s=number(f"{w}.job_timeout_s", pfs.get("job_timeout_s", 15), minimum=2,
                             maximum=300, integer=True),
        drop_caches=drop,
        fault=_fault(f"{w}.fault", pfs.get("fault")),
        raw=data,
    )


def point_s(exp: PfsExperiment) -> float:
    """Estimated wall time of one point: settle, the timed phases, set-up and checksums."""
    return exp.settle_s + (2 if exp.test != "streams" else 1) * (exp.measure_s + START_DELAY_S) + 8


def _fault(where: str, value: Any) -> dict[str, Any] | None:
    """`fault: {stop: pvfs-ioK, after_s: T}`: stop that server T s into the first timed phase."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: must be {{stop: pvfs-ioN, after_s: T}}")
    check_keys(where, value, {"stop", "after_s"})
    name = value.get("stop")
    if name not in server_services(MAX_IO_SERVERS):
        raise ConfigError(f"{where}.stop: must name a server (pvfs-meta, pvfs-io1..), got {name!r}")
    return {"stop": name, "after_s": number(f"{where}.after_s", value.get("after_s", 1),
                                            minimum=0)}


def plan_lines(exp: PfsExperiment) -> list[str]:
    """The dry-run plan of a PFS experiment: points in order and an estimated duration."""
    per_point = point_s(exp)
    lines = [f"experiment {exp.name} ({exp.source}): {len(exp.points())} points, order shuffled "
             f"with seed {exp.seed}; test {exp.test}, storage {exp.storage}, strip "
             f"{exp.strip_size} B, job timeout {exp.job_timeout_s} s",
             f"per point: settle {exp.settle_s:g} s + {exp.measure_s:g} s per phase + set-up "
             "and checksums"]
    current = None
    for p in exp.points():
        if p.io_servers != current:
            lines.append(f"  -- cluster: 1 metadata + {p.io_servers} I/O servers, "
                         f"{exp.cluster_clients()} client container(s)"
                         + (" (new cluster)" if current is not None else ""))
            current = p.io_servers
        what = (f"fs={p.filesystem:<15} buffer={p.buffer}" if exp.test == "basic"
                else f"clients={p.clients} streams={p.streams}")
        lines.append(f"  {p.id}  {what}  mode={p.mode:<16} rep={p.repetition}  "
                     f"~{per_point:.0f} s")
    total = per_point * len(exp.points())
    lines.append(f"estimated duration: {total / 60:.1f} min plus cluster bring-up (about 10 s "
                 "each)")
    return lines


# --------------------------------------------------------------------------- cluster


def compose_args(storage: str) -> list[str]:
    """-f arguments of the OrangeFS tier (base file, pvfs.yml, and pvfs-disk.yml for disk)."""
    files = ["docker-compose.yml", stack.OVERLAYS["pvfs"]]
    if storage == "disk":
        files.append(stack.OVERLAYS["pvfs-disk"])
    return [a for f in files for a in ("-f", str(stack.ROOT / f))]


def cluster_env(io_servers: int, strip_size: int, job_timeout_s: int) -> dict[str, str]:
    """Environment for docker compose: .env, the shell's, then the cluster's settings."""
    return {**stack.dotenv(), **os.environ, "PVFS_IO_SERVERS": str(io_servers),
            "PVFS_STRIP_SIZE": str(strip_size), "PVFS_JOB_TIMEOUT": str(job_timeout_s)}


def server_services(io_servers: int) -> list[str]:
    """Compose services of a cluster with N I/O servers."""
    return ["pvfs-meta", *(f"pvfs-io{i}" for i in range(1, io_servers + 1))]


def check_image() -> None:
    """Fail with the command to run when the OrangeFS image has not been built."""
    stack.require_image("tierbench-orangefs", stack.ORANGEFS_BUILD)


def cluster_up(io_servers: int, clients: int, *, strip_size: int = 65536,
               storage: str = "tmpfs", job_timeout_s: int = 15) -> None:
    """Bring up 1 metadata + N I/O servers and K clients, waiting until all are healthy."""
    if not 1 <= io_servers <= MAX_IO_SERVERS or clients < 1:
        raise PfsError(f"the overlay has 1-{MAX_IO_SERVERS} I/O servers and needs at least one "
                       f"client; asked for {io_servers} servers and {clients} clients")
    check_image()
    env = cluster_env(io_servers, strip_size, job_timeout_s)
    stack.check_cpusets(env)
    stack.compose([*compose_args(storage), "up", "-d", "--wait", "--no-build",
                   "--scale", f"pvfs-client={clients}", *server_services(io_servers),
                   "pvfs-client"], env=env, timeout=300)


def cluster_containers() -> tuple[list[stack.Container], list[stack.Container]]:
    """(servers, clients) of the running cluster, servers metadata first then pvfs-io1.."""
    found = stack.replicas()
    servers = [c for c in found if c.service == "pvfs-meta"]
    servers += sorted((c for c in found if c.service.startswith("pvfs-io")),
                      key=lambda c: int(c.service.removeprefix("pvfs-io")))
    clients = [c for c in found if c.service == "pvfs-client"]
    if not servers or not clients:
        raise PfsError("the OrangeFS cluster is not running: `tierbench pfs up` starts it")
    return servers, clients


def label(c: stack.Container) -> str:
    """A container's name in results: pvfs-meta, pvfs-io2, pvfs-client-3."""
    if c.service == "pvfs-client":
        return f"pvfs-client-{c.name.rsplit('-', 1)[-1]}"
    return c.service


def stopped_servers(io_servers: int) -> list[str]:
    """Servers of the cluster that are not running (stopped or crashed)."""
    running = {c.service for c in stack.replicas()}
    return [s for s in server_services(io_servers) if s not in running]


# --------------------------------------------------------------------------- data


def pattern(stream: int, nbytes: int, seed: int) -> bytes:
    """The bytes stream ``stream`` writes: a repeated line, as the client makes it with yes."""
    line = f"tierbench pfs stream {stream} seed {seed}\n".encode()
    return (line * (nbytes // len(line) + 1))[:nbytes]


def make_source_cmd(stream: int, nbytes: int, seed: int, path: str) -> str:
    """Shell command writing ``pattern(...)`` to ``path`` in a client (coreutils only)."""
    return (f"[ -f {path} ] || yes {shlex.quote(f'tierbench pfs stream {stream} seed {seed}')} "
            f"| head -c {nbytes} > {path}")


def sha256(stream: int, nbytes: int, seed: int) -> str:
    """The checksum a stream's data must have."""
    return hashlib.sha256(pattern(stream, nbytes, seed)).hexdigest()


def parse_io_line(text: str) -> dict[str, Any]:
    """The result line of pfs-io.sh (``start= end= iterations= bytes= last= status= error=``)."""
    line = next((ln for ln in reversed(text.strip().splitlines()) if "status=" in ln), "")
    if not line:
        return {"status": "error", "error": (text.strip().splitlines() or ["no output"])[-1]}
    head, _, error = line.partition(" error=")
    out: dict[str, Any] = dict(kv.split("=", 1) for kv in head.split() if "=" in kv)
    out["error"] = error.strip()
    for key in ("start", "end"):
        out[key] = float(out.get(key, 0) or 0)
    for key in ("iterations", "bytes"):
        out[key] = int(out.get(key, 0) or 0)
    return out


@dataclass(frozen=True)
class Stream:
    """One client stream of a phase: where it runs and what it transfers."""

    number: int
    client: stack.Container
    access: str  # native | posix
    file: str
    offset: int
    nbytes: int
    buffer: int
    local: str


def phase_cpu(before: dict[str, dict], after: dict[str, dict], host0: dict[str, int],
              host1: dict[str, int], clients: list[str], servers: list[str], span_s: float,
              nbytes: int) -> dict[str, float]:
    """CPU of one phase: seconds and percent of one core per side, host breakdown."""
    def used(names: list[str]) -> float:
        return sum(after[n]["usage_s"] - before[n]["usage_s"] for n in names)

    client_s, server_s = used(clients), used(servers)
    ticks = {k: host1[k] - host0[k] for k in PROC_STAT_FIELDS}
    total = sum(ticks.values()) or 1
    kb = nbytes / 1024
    span = span_s if span_s > 0 else float("nan")
    return {"client_cpu_s": client_s, "server_cpu_s": server_s,
            "client_cpu_pct": 100 * client_s / span, "server_cpu_pct": 100 * server_s / span,
            "client_cpu_us_per_kb": 1e6 * client_s / kb if kb else float("nan"),
            "server_cpu_us_per_kb": 1e6 * server_s / kb if kb else float("nan"),
            "host_usr_pct": 100 * (ticks["user"] + ticks["nice"]) / total,
            "host_sys_pct": 100 * ticks["system"] / total,
            "host_softirq_pct": 100 * ticks["softirq"] / total,
            "host_idle_pct": 100 * (ticks["idle"] + ticks["iowait"]) / total}


def aggregate(results: list[dict[str, Any]], start: float) -> dict[str, Any]:
    """Aggregate MB/s of a phase: all streams' bytes over common start .. last end."""
    nbytes = sum(r["bytes"] for r in results if r["status"] == "ok")
    end = max((r["end"] for r in results if r.get("end")), default=start)
    span = max(end - start, 1e-9)
    return {"mb_per_s": nbytes / MB / span if nbytes else 0.0, "bytes": nbytes, "s": span,
            "failed_streams": sum(r["status"] != "ok" for r in results)}


# --------------------------------------------------------------------------- run


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


class PfsRun:
    """One execution of a PFS experiment, writing results/<experiment>/<run-id>/."""

    def __init__(self, exp: PfsExperiment) -> None:
        self.exp = exp
        self.run_id, self.dir = runner.new_run_dir(exp)  # type: ignore[arg-type]
        self.rows: list[dict] = []
        self.manifest: dict = {}
        self.state = netif.StateFile()
        self.io_servers = 0
        self.servers: list[stack.Container] = []
        self.clients: list[stack.Container] = []
        self.cgroups: dict[str, CgroupCpu] = {}
        self.endpoints: dict[str, list[netif.Endpoint]] = {}
        self.fault_done = False

    # -- cluster
    def _cluster(self, io_servers: int) -> None:
        exp = self.exp
        if self.io_servers:
            _log(f"tierbench: new cluster with {io_servers} I/O servers")
        stack.down()
        cluster_up(io_servers, exp.cluster_clients(), strip_size=exp.strip_size,
                   storage=exp.storage, job_timeout_s=exp.job_timeout_s)
        self.io_servers = io_servers
        self.servers, self.clients = cluster_containers()
        everyone = self.servers + self.clients
        self.cgroups = {label(c): CgroupCpu(c.pid) for c in everyone}
        self.endpoints = {label(c): netif.veth_endpoints(label(c), c.pid) for c in everyone}
        problems = [p for m in exp.modes for p in knobs.check_mode(m, self._mode_endpoints(m))]
        if problems:
            raise netif.NetifError("; ".join(problems))

    def _mode_endpoints(self, mode: Mode) -> list[netif.Endpoint]:
        if mode.host_interfaces:
            return modes.mode_endpoints(mode)
        tiers = set(mode.tiers) & set(PFS_TIERS) or set(PFS_TIERS)
        names = [label(c) for c in self.clients] if "pfs-client" in tiers else []
        names += [label(c) for c in self.servers] if "pfs-server" in tiers else []
        return [ep for n in names for ep in self.endpoints[n]]

    def execute(self) -> Path:
        """Run every point; returns the run directory. Interfaces are restored on any exit."""
        exp = self.exp
        (self.dir / "experiment.yml").write_text(yaml.safe_dump(exp.resolved(), sort_keys=False))
        points = exp.points()
        _log(f"tierbench: run {self.run_id} of {exp.name}: {len(points)} points, about "
             f"{point_s(exp) * len(points) / 60:.1f} min; results in {self.dir}")
        _log(f"tierbench: bringing the OrangeFS cluster up (1 metadata + {points[0].io_servers} "
             "I/O servers)")
        self._cluster(points[0].io_servers)
        self.manifest = {
            "run_id": self.run_id,
            "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "finished": None, "status": "running", "kind": "pfs",
            "experiment": exp.resolved(),
            **provenance.collect({label(c): c for c in self.servers + self.clients}),
            "orangefs": self._orangefs_source(),
            "points": {},
        }
        self._save()
        status = "complete"
        try:
            with runner.signals_raise():
                for n, point in enumerate(points, 1):
                    t0 = time.monotonic()
                    if point.io_servers != self.io_servers:
                        self._cluster(point.io_servers)
                    row = self._point(point)
                    left = (len(points) - n) * (time.monotonic() - t0)
                    what = (f"{point.filesystem} {point.buffer} B" if exp.test == "basic" else
                            f"N={point.io_servers} {point.streams} stream(s)")
                    _log(f"[{n}/{len(points)}] {point.id} {what} {point.mode} rep "
                         f"{point.repetition}: " + brief(row) + (f"; about {left / 60:.1f} min left" if left else ""))
                    if row.get("error"):
                        down = stopped_servers(self.io_servers)
                        if down:
                            raise PfsError(
                                f"OrangeFS server {', '.join(down)} stopped during {point.id}: "
                                f"{row['error']}; the run ends here, results so far are in "
                                f"{self.dir}")
        except runner.RunInterrupted as exc:
            status = f"interrupted by {exc}"
            raise
        except (PfsError, netif.NetifError) as exc:
            status = f"failed: {exc}"
            raise
        finally:
            runner.finish(self, status)
        return self.dir

    def _orangefs_source(self) -> str:
        done = stack.exec_in(self.servers[0], ["cat", "/opt/orangefs/SOURCE"], timeout=30)
        return done.stdout.strip()

    # -- one point
    def _point(self, point: PfsPoint) -> dict:
        exp, mode = self.exp, self.exp.mode(point.mode)
        pdir = self.dir / "points" / point.id
        pdir.mkdir(parents=True)
        record: dict = {"point": point.id, "mode": point.mode, "repetition": point.repetition,
                        "io_servers": point.io_servers}
        self.manifest["points"][point.id] = record
        row: dict[str, Any] = {
            "point": point.id, "test": exp.test, "mode": point.mode,
            "repetition": point.repetition, "io_servers": point.io_servers,
            "clients": point.clients, "streams": point.streams}
        if exp.test == "basic":
            row.update(filesystem=point.filesystem, buffer=point.buffer,
                       access="native" if point.filesystem == "orangefs-native" else "posix")
        else:
            row.update(access=exp.access, buffer=MIB)
        eps = self._mode_endpoints(mode)
        watched = [ep for eps_ in self.endpoints.values() for ep in eps_]
        ifaces = {ep.label: ep.ifname for ep in watched if ep.netns_pid is None}
        sampler = Sampler(pdir / "samples.jsonl", self.cgroups, ifaces)
        try:
            with runner.mode_applied(mode, eps, watched, self.state, record, exp.settle_s,
                                     self._save):
                sampler.start()
                try:
                    row.update(self._phases(point, row, pdir, record))
                except PfsError as exc:  # a set-up or checksum step failed
                    row["error"] = str(exc)
                finally:
                    sampler.stop()
        finally:
            record["summary"] = row
            self.rows.append(row)
            runner.write_json(pdir / "point.json", record)
            self._save()
        return row

    def _streams(self, point: PfsPoint, row: dict) -> list[Stream]:
        exp = self.exp
        prefix = f"/mnt/orangefs/{self.run_id}-{point.id}"
        if exp.test == "basic":
            nbytes = int(exp.file_mb * MIB)
            root = FILESYSTEMS[point.filesystem]
            access = "native" if point.filesystem == "orangefs-native" else "posix"
            return [Stream(1, self.clients[0], access, f"{root}/{self.run_id}-{point.id}", 0,
                           nbytes, point.buffer, "/scratch/io-1")]
        # Every call moves one region (2 MB per I/O server); a stream's file holds several, so
        # that one pvfs2-cp start-up is shared by many requests.
        region = int(exp.region_mb_per_server * point.io_servers * MIB)
        nbytes = region * exp.regions_per_stream
        row["region_bytes"] = region
        out = []
        for s in range(1, point.streams + 1):
            client = self.clients[(s - 1) % point.clients]
            if exp.access == "native":
                out.append(Stream(s, client, "native", f"{prefix}-s{s}", 0, nbytes, region,
                                  f"/scratch/io-{s}"))
            else:  # one shared file, a contiguous stretch per stream (as pvfs-test does)
                out.append(Stream(s, client, "posix", f"{prefix}-shared", (s - 1) * nbytes,
                                  nbytes, region, f"/scratch/io-{s}"))
        return out

    def _phases(self, point: PfsPoint, row: dict, pdir: Path, record: dict) -> dict:
        exp = self.exp
        streams = self._streams(point, row)
        seed = exp.seed
        out: dict[str, Any] = {}
        checks: list[str] = []
        sources = {s.number: f"/scratch/src-{s.nbytes}-{s.number}" for s in streams}
        self._each(streams, lambda s: make_source_cmd(s.number, s.nbytes, seed,
                                                      sources[s.number]), "write source data")
        phases = ["write", "read"] if exp.test == "basic" else (
            ["read", "write"] if exp.test == "concurrent" else ["read"])
        if phases[0] == "read":  # the files to read, written before the clock starts
            self._each(streams, lambda s: self._write_once(s, sources[s.number]),
                       "write the files to read")
        written: dict[int, str] = {}
        try:
            for phase in phases:
                if phase == "read" and exp.test == "basic" and exp.drop_caches:
                    Path("/proc/sys/vm/drop_caches").write_text("3\n")
                # pvfs2-cp never overwrites: a native stream reads back the file it wrote last
                active = [dc_replace(s, file=written[s.number]) if s.access == "native"
                          and written.get(s.number) else s for s in streams]
                results = self._run_phase(phase, active, sources, pdir)
                record[f"{phase}_streams"] = results
                figures = results["figures"]
                out.update({f"{phase}_{k}": v for k, v in figures.items()})
                failed = [r for r in results["streams"] if r["status"] != "ok"]
                if failed:
                    out["error"] = (f"{phase}: {len(failed)} of {len(streams)} streams failed: "
                                    f"{failed[0].get('error') or 'no output'}")
                    break
                if phase == "read":
                    checks += self._verify_reads(streams, seed)
                else:
                    written = {r["stream"]: r.get("last") or "" for r in results["streams"]}
            else:
                if "write" in phases:
                    checks += self._verify_writes(streams, written, seed)
        finally:
            self._cleanup(streams)
        if "error" not in out:
            out["integrity"] = "ok" if not checks else "mismatch"
            if checks:
                out["error"] = "integrity: " + "; ".join(checks[:3])
        else:
            out["integrity"] = "not checked"
        record["integrity_problems"] = checks
        return out

    def _write_once(self, s: Stream, source: str) -> str:
        if s.access == "native":
            return f"pvfs2-cp {source} {s.file}"
        return (f"dd if={source} of={s.file} bs=1M oflag=seek_bytes seek={s.offset} "
                "conv=notrunc status=none")

    def _each(self, streams: list[Stream], cmd: Any, what: str) -> list[str]:
        """Run a shell command per stream (grouped per client container); fail on error."""
        timeout = self.exp.job_timeout_s * 3 + 60
        outputs = []
        for s in streams:
            done = stack.exec_in(s.client, ["sh", "-c", cmd(s)], timeout=timeout)
            if done.returncode != 0:
                lines = (done.stderr or done.stdout).strip().splitlines() or ["no output"]
                raise PfsError(f"{what} failed in {label(s.client)}: {lines[-1][:300]}")
            outputs.append(done.stdout)
        return outputs

    def _run_phase(self, phase: str, streams: list[Stream], sources: dict[int, str],
                   pdir: Path) -> dict:
        exp = self.exp
        start = time.time() + START_DELAY_S + 0.02 * len(streams)
        by_client: dict[str, list[Stream]] = {}
        for s in streams:
            by_client.setdefault(s.client.id, []).append(s)
        clients_used = [label(self.clients[i]) for i in range(len(self.clients))
                        if self.clients[i].id in by_client]
        servers = [label(c) for c in self.servers]
        before = self._cpu()
        host0 = host_cpu()
        timeout = START_DELAY_S + exp.measure_s + 3 * exp.job_timeout_s + 60

        def run_client(group: list[Stream]) -> list[dict]:
            parts = []
            for s in group:
                local = s.local if phase == "read" else sources[s.number]
                if phase == "read" and exp.test == "basic" and s.access == "posix":
                    # only dd gets /dev/null: pvfs2-cp deletes its destination when it fails
                    local = "/dev/null"
                file = s.file
                args = [IO_SCRIPT, phase, s.access, file, s.offset, s.nbytes, s.buffer,
                        f"{start:.6f}", exp.measure_s, local]
                parts.append(f"(sh {' '.join(shlex.quote(str(a)) for a in args)} "
                             f"| sed 's/^/stream={s.number} /') &")
            script = " ".join(parts) + " wait"
            try:
                done = stack.exec_in(group[0].client, ["sh", "-c", script], timeout=timeout)
                text = done.stdout + done.stderr
            except subprocess.TimeoutExpired:
                text = ""
            results = []
            for s in group:
                line = next((ln for ln in text.splitlines() if ln.startswith(f"stream={s.number} ")),
                            "")
                r = parse_io_line(line) if line else {
                    "status": "error", "error": f"no result within {timeout:.0f} s"}
                r.update(stream=s.number, client=label(s.client))
                results.append(r)
            return results

        fault = self._arm_fault(start)
        with ThreadPoolExecutor(max_workers=len(by_client)) as pool:
            results = [r for rs in pool.map(run_client, by_client.values()) for r in rs]
        if fault:
            fault.join()
        after = self._cpu(before)
        host1 = host_cpu()
        figures = aggregate(results, start)
        figures.update(phase_cpu(before, after, host0, host1, clients_used, servers,
                                 figures["s"], figures["bytes"]))
        with (pdir / f"{phase}.csv").open("w", newline="") as fh:
            cols = ["stream", "client", "status", "start", "end", "iterations", "bytes", "last",
                    "error"]
            writer = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(sorted(results, key=lambda r: r["stream"]))
        return {"start": start, "figures": figures, "streams": results}

    def _cpu(self, fallback: dict[str, dict] | None = None) -> dict[str, dict]:
        """CPU counters of every container; one that stopped keeps its ``fallback`` value (its
        CPU since then is unknown and counted as none)."""
        out = {}
        for name, cg in self.cgroups.items():
            try:
                out[name] = cg.read()
            except OSError:
                out[name] = (fallback or {}).get(name, {"usage_s": 0.0, "user_s": 0.0,
                                                        "system_s": 0.0})
        return out

    def _arm_fault(self, start: float) -> threading.Thread | None:
        """The experiment's fault, once per run: stop a server `after_s` into a timed phase."""
        fault = self.exp.fault
        if not fault or self.fault_done:
            return None
        self.fault_done = True
        target = next((c for c in self.servers if c.service == fault["stop"]), None)
        if target is None:
            _log(f"tierbench: fault: {fault['stop']} is not part of this cluster; nothing stopped")
            return None

        def stop() -> None:
            time.sleep(max(0.0, start + fault["after_s"] - time.time()))
            _log(f"tierbench: fault: stopping {fault['stop']} as the experiment asks")
            subprocess.run(["docker", "stop", "-t", "5", target.id], capture_output=True,
                           timeout=60, check=False)

        thread = threading.Thread(target=stop, name="fault", daemon=True)
        thread.start()
        return thread

    def _verify_reads(self, streams: list[Stream], seed: int) -> list[str]:
        if self.exp.test == "basic":
            return []  # basic reads go to /dev/null; the write check covers the data
        problems = []
        sums = self._each(streams, lambda s: f"sha256sum {s.local} | cut -d' ' -f1",
                          "checksum what was read")
        for s, got in zip(streams, sums):
            if got.strip() != sha256(s.number, s.nbytes, seed):
                problems.append(f"stream {s.number} read back data that differs from what "
                                "was written")
        return problems

    def _verify_writes(self, streams: list[Stream], written: dict[int, str],
                       seed: int) -> list[str]:
        def cmd(s: Stream) -> str:
            if s.access == "native":
                target = written.get(s.number) or s.file
                return (f"rm -f /scratch/check-{s.number} && pvfs2-cp {target} "
                        f"/scratch/check-{s.number} >/dev/null && sha256sum /scratch/check-"
                        f"{s.number} | cut -d' ' -f1")
            return (f"dd if={s.file} bs=1M iflag=skip_bytes,count_bytes skip={s.offset} "
                    f"count={s.nbytes} status=none | sha256sum | cut -d' ' -f1")

        problems = []
        for s, got in zip(streams, self._each(streams, cmd, "checksum what was written")):
            if got.strip() != sha256(s.number, s.nbytes, seed):
                problems.append(f"stream {s.number}: the file system returned data that "
                                "differs from what was written")
        return problems

    def _cleanup(self, streams: list[Stream]) -> None:
        """Remove the point's files (OrangeFS through the FUSE mount, local ones directly)."""
        paths = sorted({s.file for s in streams})
        script = " ".join(f"rm -f {shlex.quote(p)} {shlex.quote(p)}.*;" for p in paths)
        if stopped_servers(self.io_servers):  # rm on the mount would hang for the job timeout
            script = ""
        script += " rm -f /scratch/io-* /scratch/check-*"
        for c in {s.client.id: s.client for s in streams}.values():
            try:
                stack.exec_in(c, ["sh", "-c", script], timeout=self.exp.job_timeout_s * 2 + 10)
            except subprocess.TimeoutExpired:
                _log(f"tierbench: removing the files of the point in {label(c)} timed out")

    def _save(self) -> None:
        runner.write_json(self.dir / "manifest.json", self.manifest)
        write_summary(self.dir / "summary.csv", self.rows)


def write_summary(path: Path, rows: list[dict]) -> None:
    """summary.csv of a PFS run: one row per point, SUMMARY_COLUMNS then error."""
    columns = SUMMARY_COLUMNS + ["error"]
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: runner.csv_cell(row.get(k)) for k in columns})


def brief(row: dict) -> str:
    """One progress line of a point."""
    if row.get("error"):
        return f"FAILED ({row['error']})"
    parts = []
    for phase in ("write", "read"):
        if f"{phase}_mb_per_s" in row:
            parts.append(f"{phase} {row[f'{phase}_mb_per_s']:.0f} MB/s (clients "
                         f"{row[f'{phase}_client_cpu_pct']:.0f} %, servers "
                         f"{row[f'{phase}_server_cpu_pct']:.0f} % CPU)")
    return "; ".join(parts) + f", integrity {row.get('integrity')}"


def status_json() -> str:
    """The running cluster, for `tierbench pfs status`."""
    servers, clients = cluster_containers()
    return json.dumps({"servers": [label(c) for c in servers],
                       "clients": [label(c) for c in clients]}, indent=1)
