"""The web kind: request traces (single file, Zipf, workload classes, World Cup, several sites)
replayed by Locust or wrk through the proxy -> web stack (000 §5, 004 §4-7); with dynamic
requests in the traces, also through the application and database tiers behind the web tier
(compose/app-db.yml, 004 §7.1; their figures and the write check come from kinds/appdb.py).

Factors: trace x mode x users x docroot, repetitions. A point needs the stack up with the
experiment's server options, the mode's server options and the point's docroot; the engine
replays the trace for warm-up + measured time while the runner samples every second, and the
summary's numbers all come from the samples that bracket the measured window.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import BeforeValidator, Discriminator, Field, Tag, model_validator

from tierbench.config.errors import ConfigError
from tierbench.config.files import ROOT, results_root
from tierbench.config.models import (
    Model,
    choice,
    flag,
    non_empty_list,
    number,
    one_or_many,
    problem,
    safe_name,
    text,
    whole,
)
from tierbench.interfaces.cpu import parse as cpuparse
from tierbench.kinds import appdb, engines, families, webdisks, webmetrics
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
)
from tierbench.measure.counters import MeasureError, window
from tierbench.measure.sampler import CgroupCpu, CgroupGroup, marks_at
from tierbench.modes.model import Mode
from tierbench.placement import compose, disks, placer, space
from workloads import filesets, worldcup
from workloads import target as target_guard
from workloads import traces as tracelib

POINT_OVERHEAD_S = 6.0  # load generator start-up and shut-down, snapshots, restore
GENERATOR = "loadgen"
STACK_TIERS = ("loadgen", "proxy", "web")  # always up
TIERS = STACK_TIERS + compose.APP_TIERS  # app and db: with dynamic requests
DOCROOTS = ("disk", "tmpfs", "orangefs")
HOT = "+hot-tmpfs"  # docroot suffix: the hot site's small files also on a tmpfs, served first
MAPPINGS = tracelib.MAPPINGS
STACK_DATA = ROOT / "workloads" / "data"  # World Cup logs: the folder the fileset job can read


# --------------------------------------------------------------------------- settings


class Think(Model):
    """Think time between a client's requests (closed loop)."""

    kind: choice("fixed", "exponential")
    mean_ms: number(0)


class Load(Model):
    """How the engine loads the stack."""

    users: one_or_many(whole(1), "whole number >= 1") = [16]
    processes: whole(1) = 1
    think: Think | None = None
    rate: number(0.001) | None = None
    warmup_s: number(0) = 5
    measure_s: number(2) = 15
    workers: whole(0) = 0
    remote_workers: whole(0) = 0
    worker_wait_s: number(1) = 60
    # a request-count run (000 §5.2.1, 004 §3.2): after the warm-up each client sends the first
    # N requests of its sequence and stops; TPS over the window until the last one finished.
    # measure_s is then the window's time limit, and must be given.
    requests_per_client: whole(1) | None = None

    @model_validator(mode="after")
    def _counted(self) -> Load:
        if self.requests_per_client is None:
            return self
        if self.rate is not None:
            raise problem("an open-loop run (rate) sends at a fixed rate for measure_s; "
                          "request counts are for closed-loop clients: drop one of the two",
                          sub="requests_per_client")
        if "measure_s" not in self.model_fields_set:
            raise problem("a request-count run (requests_per_client) needs a time limit: give "
                          "measure_s, the longest its measured window may take", sub="measure_s")
        return self


def _docroot(value: Any) -> Any:
    # disk, tmpfs, orangefs or a disk system's name (checked against them in WebSettings)
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9-]*", value.removesuffix(HOT)):
        raise problem("must be one of {choices} or a disk system (each optionally with {hot}) "
                      "or a list of them", choices=", ".join(DOCROOTS), hot=HOT)
    return value


Docroot = Annotated[str, BeforeValidator(_docroot)]


def _system_name(value: Any) -> Any:
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9-]*", value) or \
            value in DOCROOTS:
        raise problem("disk system names must look like ide or my-disk (not disk, tmpfs or "
                      "orangefs), got {got}", got=repr(value))
    return value


def _system_or_storage(value: Any) -> Any:
    # tmpfs, disk or a disk system's name (checked against them in WebSettings)
    if not isinstance(value, str) or not re.fullmatch(r"[a-z][a-z0-9-]*", value):
        raise problem("must be tmpfs, disk or a disk system such as ide, got {got}",
                      got=repr(value))
    return value


class Database(Model):
    """The database tier's data set and memory (compose/app-db.yml): `rows` rows of
    `row_bytes` bytes generated from `seed` (default: the experiment's)."""

    rows: whole(1, 1_000_000_000) = 100_000
    row_bytes: whole(1, 1 << 20) = 256
    seed: whole(0) | None = None
    shared_buffers: text(r"^[1-9][0-9]*(kB|MB|GB)$", "128MB") = "128MB"


class Stack(Model):
    """Server options of the stack (a mode's `server:` overrides them per point)."""

    proxy: choice("apache", "haproxy") = "apache"
    proxy_cache: flag() = False
    web_sendfile: flag() = True
    web_mmap: flag() = True
    docroot: one_or_many(Docroot, "docroot") = ["disk"]
    pvfs_io_servers: whole(1, 8) | None = None
    # where the OrangeFS I/O servers store: tmpfs, disk (Docker volumes) or a disk system's name
    # (each server on its own device(s): 004 §4.1's ext3 on an IDE disk per I/O server)
    pvfs_storage: Annotated[str, BeforeValidator(_system_or_storage)] | None = None
    hot_site: str | None = None
    hot_below: whole(1) | None = None
    # the web tier's memory limit (Docker's, e.g. 512m or 1g): its page cache lives inside it,
    # so a working set larger than this cannot stay cached (004's servers had 512 MB-1 GB)
    web_memory: text(r"^[1-9][0-9]*[mMgG]$", "1g") | None = None
    # each OrangeFS I/O server's memory limit (its page cache over its storage is charged to it)
    pvfs_memory: text(r"^[1-9][0-9]*[mMgG]$", "512m") | None = None
    # cold: the docroot's files are dropped from the page cache before every point, so that
    # the first read of each file comes from the disk (the disk docroot only)
    page_cache: choice("warm", "cold") = "warm"
    # 004 §5.2.4 Table 4: how files lie on 3 disks per web server (a factor; the docroot names
    # the disk system each disk is); each strategy sets its web servers
    placement: one_or_many(choice(*disks.STRATEGIES), "strategy") | None = None
    # 1 or 3 web servers behind the proxy (compose/web-servers.yml; 004's data center had 3)
    web_servers: whole(1, 3) | None = None
    # the proxy and web tiers log every request with its time: per-file figures (004 Fig. 11-12)
    access_log: flag() = False
    # the application and database tiers (with dynamic requests in the traces)
    db: Database | None = None
    app_workers: whole(1, 1024) | None = None


class UniformLog(Model):
    """A file set of `files` files with sizes uniform in log between min_size and max_size."""

    kind: choice("uniform-log")
    files: whole(1)
    min_size: whole(1)
    max_size: whole(1)
    seed: whole(0) | None = None

    @model_validator(mode="after")
    def _range(self) -> UniformLog:
        if self.max_size < self.min_size:
            raise problem("max_size: must be >= min_size")
        return self


class ClassSet(Model):
    """One of 004's workload classes (Table 2)."""

    kind: choice("class")
    class_: whole(0) = Field(alias="class")
    seed: whole(0) | None = None


def _tag(value: Any) -> str | None:
    """The union tag of a trace or file set: from its kind key (a dict) or field (a model)."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    return f"kind={kind}" if kind is not None else None


Fileset = Annotated[
    Union[Annotated[UniformLog, Tag("kind=uniform-log")], Annotated[ClassSet, Tag("kind=class")]],
    Discriminator(_tag, custom_error_type="tierbench",
                  custom_error_message="must be a mapping with kind: uniform-log or class",
                  custom_error_context={"sub": "kind"})]


class Dynamic(Model):
    """A share of a trace's requests made dynamic (workloads/traces.py): served by the
    application tier, which runs a database query and `work` passes of SHA-256 over the body."""

    share: number(0, 1) = 1.0
    query: choice(*tracelib.QUERIES) = "point"
    work: whole(0, 100_000) = 1
    range_rows: whole(1, 100_000) = 10
    requests: whole(1) = 1000


class Single(Model):
    """Every request for one file of `size` bytes."""

    name: safe_name("single-4k")
    kind: choice("single")
    size: whole(1)
    per_client: whole(1) | None = None
    dynamic: Dynamic | None = None


class HitRatio(Model):
    """004 §5.2.2: a page-cache hit ratio made by mixing a hot file with files asked for once."""

    name: safe_name("single-4k")
    kind: choice("hit-ratio")
    size: whole(1)
    hit_ratio: number(0, 1)
    requests: whole(1)


class Zipf(Model):
    """Zipf(alpha) popularity over a file set."""

    name: safe_name("single-4k")
    kind: choice("zipf")
    alpha: number(0)
    requests: whole(1) = 10000
    fileset: Fileset
    mapping: choice(*MAPPINGS) = "random"
    per_client: whole(1) | None = None
    subsets: whole(1) | None = None
    dynamic: Dynamic | None = None


class WorldCup(Model):
    """The successful GETs of a World Cup 98 log in workloads/data/."""

    name: safe_name("single-4k")
    kind: choice("worldcup")
    log: text(example="wc_day46_1.gz")
    requests: whole(0) | None = None
    skip: whole(0) | None = None

    @model_validator(mode="after")
    def _readable_by_the_stack(self) -> WorldCup:
        # The stack's fileset job reads the log inside its container, where only the checkout's
        # workloads/ is mounted (on a cluster node too): a log elsewhere (an absolute path, a
        # link out of the folder, TIERBENCH_DATA elsewhere) would pass the plan and fail there.
        inside = STACK_DATA.resolve()
        path = worldcup.log_path({"log": self.log}).resolve()
        if Path(self.log).is_absolute() or not path.is_relative_to(inside):
            raise problem("the World Cup log {log} is not in workloads/data/, the only folder of "
                          "logs the stack's fileset job can read: put the log (a copy, not a "
                          "link) there and give its name relative to that folder", sub="log",
                          log=repr(self.log))
        return self


class MixPart(Model):
    """One site of a mix trace."""

    site: text(r"^[A-Za-z_]\w*$", "foreground")
    weight: whole(1) = 1
    kind: choice("zipf")
    alpha: number(0)
    fileset: Fileset
    mapping: choice(*MAPPINGS) = "random"


class Mix(Model):
    """Several sites at once, each replayed by its own clients (004 §4.4)."""

    name: safe_name("single-4k")
    kind: choice("mix")
    parts: Annotated[list[MixPart], Field(min_length=2)]
    per_client: whole(1)
    subsets: whole(1)

    @model_validator(mode="after")
    def _sites(self) -> Mix:
        names = [p.site for p in self.parts]
        if len(set(names)) != len(names):
            raise problem("parts: two parts share a site name")
        cycle = sum(p.weight for p in self.parts)
        if self.subsets < cycle or self.subsets % cycle:
            raise problem("subsets: must be a multiple of the weights' sum ({cycle}), so that "
                          "every site keeps its share of the clients", cycle=cycle)
        sets = [tracelib.fileset_of(p.model_dump(by_alias=True, exclude_unset=True))
                for p in self.parts]
        if any(sets.count(fs) > 1 for fs in sets):
            raise problem("parts: two sites use the same file set; give one another seed "
                          "(fileset.seed) so that each site has its own files")
        return self


Trace = Annotated[
    Union[Annotated[Single, Tag("kind=single")], Annotated[Zipf, Tag("kind=zipf")],
          Annotated[HitRatio, Tag("kind=hit-ratio")],
          Annotated[WorldCup, Tag("kind=worldcup")], Annotated[Mix, Tag("kind=mix")]],
    Discriminator(_tag, custom_error_type="tierbench",
                  custom_error_message="must be single, hit-ratio, zipf, worldcup or mix",
                  custom_error_context={"sub": "kind"})]


class Fault(Model):
    """Stop a server tier `after_s` seconds into the measured window of the run's first point
    (once per run): the point records the failed requests; a stopped proxy or web tier ends the
    run with one sentence, a stopped application or database tier is started again after the
    point and the run goes on."""

    stop: choice("web", "proxy", *compose.APP_TIERS)
    after_s: number(0) = 1


class WebSettings(Model):
    """The keys of a web experiment file besides the common ones."""

    engine: choice(*engines.ENGINES) = "locust"
    load: Load = Load()
    traces: non_empty_list(Trace, "traces")
    stack: Stack = Stack()
    target: text(example="http://proxy") = "http://proxy"
    allow_foreign_target: flag() = False
    fault: Fault | None = None
    # disk systems of the experiment's own (real devices, other bandwidths) beside the built-in
    # ide, scsi and raid0 of 004 Table 3; a docroot names one (tierbench/placement/disks.py)
    disk_systems: dict[Annotated[str, BeforeValidator(_system_name)],
                       disks.DiskSystemSpec] | None = None

    @model_validator(mode="after")
    def _together(self) -> WebSettings:
        names = [t.name for t in self.traces]
        if len(set(names)) != len(names):
            raise problem("traces: two traces share a name")
        if self.engine == "wrk" and any(t.kind == "mix" for t in self.traces):
            raise problem("traces: a mix trace needs engine: locust (its per-site TPS comes from "
                          "the per-request log, which wrk does not keep)")
        if self.engine == "wrk" and (self.load.think is not None or self.load.rate is not None):
            raise problem("load: think and rate need engine: locust (wrk is closed loop)")
        if self.engine != "locust" and (self.load.workers or self.load.remote_workers):
            raise problem("load.workers: Locust workers need engine: locust (this experiment "
                          "uses {engine})", engine=self.engine)
        why = target_guard.refusal(self.target, self.allow_foreign_target)
        if why:
            raise problem("target: {why}", why=why)
        for i, spec in enumerate(trace_dicts(self)):
            try:
                tracelib.validate(f"traces[{i}]", spec)
            except tracelib.TraceError as exc:
                raise problem("{msg}", msg=str(exc)) from None
        docroots = self.stack.docroot
        known = webdisks.names(self.disk_systems)
        wrong = webdisks.settings_problem(docroots, DOCROOTS, known, self.stack.placement,
                                          self.stack.web_servers, self.stack.proxy)
        if wrong:
            raise problem("{msg}", msg=wrong)
        wrong = webdisks.pvfs_storage_problem(self.stack.pvfs_storage, known)
        if wrong:
            raise problem("{msg}", msg=wrong)
        on_disks = known.get(str(self.stack.pvfs_storage)) is not None  # OrangeFS on a system
        if self.stack.pvfs_memory is not None and not any(
                d.startswith("orangefs") for d in docroots):
            raise problem("stack.pvfs_memory: limits the OrangeFS I/O servers, which run only "
                          "with a docroot on orangefs: remove it or add that docroot")
        if self.stack.page_cache == "cold" and any(
                d != "disk" and webdisks.system_of(d, known) is None
                and not (on_disks and d.startswith("orangefs")) for d in docroots):
            raise problem("stack.page_cache: cold needs docroot: disk or a disk system, or "
                          "orangefs with pvfs_storage a disk system (files on tmpfs are "
                          "memory), got {got}",
                          got=", ".join(docroots))
        dynamic = any(getattr(t, "dynamic", None) is not None for t in self.traces)
        for key in ("db", "app_workers"):
            if getattr(self.stack, key) is not None and not dynamic:
                raise problem("stack.{key}: the application and database tiers run only with "
                              "dynamic requests (a trace's dynamic:); remove it or add them",
                              key=key)
        if self.fault is not None and self.fault.stop in compose.APP_TIERS and not dynamic:
            raise problem("fault.stop: the {tier} tier runs only with dynamic requests (a "
                          "trace's dynamic:)", tier=self.fault.stop)
        known = {p.site for t in self.traces if isinstance(t, Mix) for p in t.parts}
        if any(d.endswith(HOT) for d in docroots) or self.stack.hot_site is not None:
            if self.stack.hot_site not in known:
                raise problem("stack.hot_site: must name a site of a mix trace ({sites}), got "
                              "{got}", sites=", ".join(sorted(known)) or "there is none",
                              got=repr(self.stack.hot_site))
        return self


@contextmanager
def workload_errors(exp: Experiment) -> Iterator[None]:
    """Problems of the workloads library (a missing or damaged World Cup log, a file set that
    cannot be made) as one sentence naming the experiment."""
    try:
        yield
    except (tracelib.TraceError, filesets.FilesetError, worldcup.WorldCupError) as exc:
        raise ConfigError(f"{exp.source}: {exc}") from None


# What a run writes, for the plan's estimate: Locust's per-request records at most
# LOCUST_RPS_PER_PROCESS requests per second per process (3,870 were measured for a bare
# FastHttpUser on one core, ENVIRONMENT), RECORD_BYTES per record in requests.parquet (11 to
# 15 measured by make bench-scale) and, for the point being converted, CSV_RECORD_BYTES plus the
# path in its CSV log; SAMPLE_BYTES per second of a point (samples, per-second rows, logs).
LOCUST_RPS_PER_PROCESS = 5000
RECORD_BYTES = 16
CSV_RECORD_BYTES = 40
SAMPLE_BYTES = 4096


def trace_bytes(spec: dict[str, Any], seed: int) -> int:
    """Bytes of a trace file's request lines (a World Cup trace's from its log's objects)."""
    if spec["kind"] == "worldcup":
        return worldcup.trace_bytes(spec)
    return sum(len(p) + 1 for chunk in tracelib.chunks(spec, seed) for p in chunk)


def results_bytes(exp: Experiment, specs: list[dict[str, Any]], points: int) -> int:
    """An upper estimate of what a run writes into its results folder: the traces, Locust's
    per-request records (Parquet for every point, the CSV log of one point at a time) and the
    points' samples and logs."""
    s: WebSettings = exp.settings  # type: ignore[assignment]
    ld = s.load
    seconds = ld.warmup_s + ld.measure_s + POINT_OVERHEAD_S
    total = sum(trace_bytes(spec, exp.seed) for spec in specs) + points * seconds * SAMPLE_BYTES
    if s.engine == "locust":
        procs = ld.processes * max(ld.workers, 1) + ld.remote_workers
        records = int((ld.rate or LOCUST_RPS_PER_PROCESS * procs) * seconds)
        if ld.requests_per_client:  # a request-count run: its requests and the warm-up's
            records = min(records, ld.requests_per_client * max(ld.users) + int(
                LOCUST_RPS_PER_PROCESS * procs * (ld.warmup_s + POINT_OVERHEAD_S)))
        total += points * records * RECORD_BYTES + records * (CSV_RECORD_BYTES + 60)
    return int(total)


def progress_every(what: str, seconds: float = 5.0) -> worldcup.Progress:
    """A World Cup progress callback that logs the records read every few seconds."""
    last = [time.monotonic()]

    def show(records: int) -> None:
        if time.monotonic() - last[0] >= seconds:
            last[0] = time.monotonic()
            log(f"tierbench: {what}: {records:,} log records read")
    return show


def trace_dicts(settings: WebSettings) -> list[dict[str, Any]]:
    """The traces as the plain specs the workloads package builds (keys as written; a dynamic
    block with its defaults filled in)."""
    out = []
    for t in settings.traces:
        spec = t.model_dump(by_alias=True, exclude_unset=True)
        if spec.get("dynamic") is not None:
            spec["dynamic"] = tracelib.dynamic_of(spec)
        out.append(spec)
    return out


def has_dynamic(settings: WebSettings) -> bool:
    """Whether any trace has dynamic requests (the application and database tiers run)."""
    return any(spec.get("dynamic") is not None for spec in trace_dicts(settings))


def stack_settings(settings: WebSettings, seed: int = 1) -> dict[str, Any]:
    """The experiment's stack settings with defaults (docroot apart: it is a factor); `seed`
    is the experiment's, the database's data set's unless stack.db.seed says otherwise."""
    s = settings.stack
    out: dict[str, Any] = {"proxy": s.proxy, "proxy_cache": s.proxy_cache,
                           "web_sendfile": s.web_sendfile, "web_mmap": s.web_mmap}
    if any(d.startswith("orangefs") for d in s.docroot) or s.pvfs_io_servers is not None:
        out["pvfs_io_servers"] = s.pvfs_io_servers or 3  # 004 ran PVFS with 3 I/O servers
        # the papers' PVFS servers stored on ramfs (000) or ext3 disks (004): tmpfs or volumes
        out["pvfs_storage"] = s.pvfs_storage or "tmpfs"
        if s.pvfs_memory is not None:
            out["pvfs_memory"] = s.pvfs_memory.lower()
    if any(d.endswith(HOT) for d in s.docroot) or s.hot_site is not None:
        out["hot_site"] = s.hot_site
        out["hot_below"] = s.hot_below or 1048576
    if s.web_memory is not None:
        out["web_memory"] = s.web_memory.lower()
    if s.page_cache != "warm":
        out["page_cache"] = s.page_cache
    if s.web_servers not in (None, 1):
        out["web_servers"] = s.web_servers
    if s.access_log:
        out["access_log"] = True
    if has_dynamic(settings):
        db = s.db or Database()
        out.update({"db_rows": db.rows, "db_row_bytes": db.row_bytes,
                    "db_seed": db.seed if db.seed is not None else seed,
                    "db_shared_buffers": db.shared_buffers, "app_workers": s.app_workers or 16})
    return out


def used_systems(settings: WebSettings) -> dict[str, Any]:
    """The disk systems the experiment's docroots name, as the manifest records them
    (emulated or real; bandwidths; how RAID-0 is made on this host)."""
    known = webdisks.names(settings.disk_systems)
    out: dict[str, Any] = {}
    for d in settings.stack.docroot:
        system = webdisks.system_of(d, known)
        if system is not None:
            out[system.name] = {
                "description": system.describe(), "emulated": system.emulated,
                "devices": list(system.paths) or system.devices,
                "read_mb_s": system.read_bps / 1e6 if system.read_bps else None,
                "write_mb_s": system.write_bps / 1e6 if system.write_bps else None,
                "raid0": disks.raid_words(webdisks.host_of_web()) if system.raid0 else None}
    return out


def counted_total(load: Load) -> str:
    """The requests a point of a request-count run sends, per users value ('64 clients:
    640,000 a point'; 004 §3.2 sent 640,000: 8 hosts x 8 threads x 10,000)."""
    n = load.requests_per_client or 0
    return ", ".join(f"{u} client{'s' if u > 1 else ''}: {u * n:,} a point" for u in load.users)


def settings_text(settings: dict) -> str:
    """key=value pairs of stack settings, booleans as on/off."""
    return " ".join(f"{k}={'on' if v is True else 'off' if v is False else v}"
                    for k, v in settings.items())


# --------------------------------------------------------------------------- the kind


class WebKind(Kind):
    """Traces replayed through the proxy -> web stack."""

    name = "web"
    description = "request traces through the proxy and web tiers (wrk or Locust)"
    model = WebSettings
    scalable = {"load.measure_s": 2, "load.warmup_s": 1, "load.requests_per_client": 20}
    tiers = TIERS
    roles = ("loadgen", "proxy", "web")
    bring_up = "stack bring-up (seconds when images are built)"

    # -- experiment
    def check(self, exp: Experiment) -> None:
        """A real device the experiment names must exist (sizes and use: at preflight; a
        cluster node's devices are checked there at preflight)."""
        s: WebSettings = exp.settings  # type: ignore[assignment]
        if placer.current().cluster is not None:
            return
        wrong = webdisks.device_problem(list(s.stack.docroot), webdisks.names(s.disk_systems))
        if wrong:
            raise ConfigError(f"{exp.source}: {wrong}")

    def cluster_roles(self, exp: Experiment) -> list[str]:
        """loadgen, proxy and web (web, web2 and web3 round the web nodes with
        stack.web_servers: 3); app and db with dynamic requests; the Locust workers' nodes with
        load.workers; the OrangeFS servers' with a docroot on OrangeFS. A docroot on a disk
        system is built on the node of the web server it serves. Refused in one sentence: several
        web servers over disk systems on more than one node, and several web servers over
        OrangeFS (only web mounts it)."""
        s: WebSettings = exp.settings  # type: ignore[assignment]
        known = webdisks.names(s.disk_systems)
        on_disks = [d for d in s.stack.docroot if webdisks.system_of(d, known) is not None]
        servers = s.stack.web_servers or (3 if s.stack.placement else 1)
        cluster = placer.current().cluster
        web_nodes = cluster.nodes_for("web") if cluster is not None else []
        if servers > 1 and (on_disks or s.stack.placement) and len(web_nodes) > 1:
            what = (f"stack.placement: {s.stack.placement[0]}" if s.stack.placement else
                    f"stack.docroot: {on_disks[0]}")
            raise ConfigError(f"{exp.source}: several web servers over disk systems ({what}) "
                              "run on a cluster only when the web role names one node (the "
                              f"cluster file names {len(web_nodes)}): give web one node, or run "
                              "this experiment without --cluster")
        if servers > 1 and any(d.startswith("orangefs") for d in s.stack.docroot):
            raise ConfigError(f"{exp.source}: stack.web_servers: {servers} with a "
                              "docroot on OrangeFS does not run on a cluster yet (only web "
                              "mounts OrangeFS): use docroot disk or tmpfs, or run it without "
                              "--cluster")
        if cluster is not None and known.get(str(s.stack.pvfs_storage)) is not None:
            raise ConfigError(f"{exp.source}: stack.pvfs_storage: {s.stack.pvfs_storage} (the "
                              "OrangeFS servers on a disk system) does not run on a cluster yet "
                              "(disk systems are built on the web node): use pvfs_storage disk "
                              "or tmpfs there, or run it without --cluster")
        roles = list(self.roles)
        if has_dynamic(s):
            roles += list(compose.APP_TIERS)
        if s.load.workers:
            roles.append("loadgen_workers")
        if any(d.startswith("orangefs") for d in s.stack.docroot):
            roles += ["pfs_meta", "pfs_io"]
        return roles

    def resolved(self, exp: Experiment) -> dict[str, Any]:
        """The resolved experiment (manifest and experiment.yml)."""
        s: WebSettings = exp.settings  # type: ignore[assignment]
        ld = s.load
        return {
            "name": exp.name,
            "kind": self.name,
            "description": exp.description,
            "source": exp.source,
            "seed": exp.seed,
            "repetitions": exp.repetitions,
            "engine": s.engine,
            "load": {"users": list(ld.users), "processes": ld.processes, "workers": ld.workers,
                     "remote_workers": ld.remote_workers, "worker_wait_s": ld.worker_wait_s,
                     "think": ld.think.model_dump() if ld.think else None,
                     "rate": ld.rate, "warmup_s": ld.warmup_s, "measure_s": ld.measure_s,
                     **({"requests_per_client": ld.requests_per_client}
                        if ld.requests_per_client else {})},
            "target": s.target,
            "allow_foreign_target": s.allow_foreign_target,
            "settle_s": exp.settle_s,
            "modes": [m.as_dict() for m in exp.modes],
            "traces": trace_dicts(s),
            "stack": {**stack_settings(s, exp.seed), "docroot": list(s.stack.docroot),
                      **({"placement": list(s.stack.placement)} if s.stack.placement else {})},
            **({"fault": s.fault.model_dump()} if s.fault else {}),
            **({"disk_systems": used_systems(s)} if used_systems(s) else {}),
        }

    def axes(self, exp: Experiment) -> list[tuple[str, list[Any]]]:
        """trace x mode x users x docroot x placement (004 Table 4) x repetition."""
        s: WebSettings = exp.settings  # type: ignore[assignment]
        return [("trace", trace_dicts(s)), ("mode", [m.name for m in exp.modes]),
                ("users", list(s.load.users)), ("docroot", list(s.stack.docroot)),
                ("placement", list(s.stack.placement or [None])),
                ("repetition", list(range(1, exp.repetitions + 1)))]

    def point_factors(self, combo: dict[str, Any]) -> dict[str, Any]:
        """A point's factors (placement only when the experiment has the factor)."""
        out = super().point_factors(combo)
        if out.get("placement") is None:
            out.pop("placement", None)
        return out

    def stack_for(self, exp: Experiment, mode: str, docroot: str,
                  placement: str | None = None) -> dict[str, Any]:
        """The stack settings a point runs with: the experiment's, its docroot and placement
        strategy (which sets the web servers), then the mode's server options (which need a
        service restart when they change)."""
        s: WebSettings = exp.settings  # type: ignore[assignment]
        out = {**stack_settings(s, exp.seed), "docroot": docroot}
        if placement is not None:
            out["placement"] = placement
            servers = disks.STRATEGIES[placement].servers
            out.pop("web_servers", None)
            if servers > 1:
                out["web_servers"] = servers
        return {**out, **exp.mode(mode).server}

    def placement(self, exp: Experiment, combo: dict[str, Any] | Point) -> Hashable:
        """The stack settings, as a hashable key."""
        c = combo.factors | {"mode": combo.mode} if isinstance(combo, Point) else combo
        return tuple(sorted(self.stack_for(exp, c["mode"], c["docroot"],
                                           c.get("placement")).items()))

    # -- plan
    def point_seconds(self, exp: Experiment) -> float:
        """settle + warm-up + measured + overhead (a request-count run: its time limit)."""
        ld = exp.settings.load  # type: ignore[attr-defined]
        return exp.settle_s + ld.warmup_s + ld.measure_s + POINT_OVERHEAD_S

    def plan_header(self, exp: Experiment, points: list[Point]) -> list[str]:
        """What runs, how, and what a point costs."""
        s: WebSettings = exp.settings  # type: ignore[assignment]
        ld = s.load
        return [f"experiment {exp.name} ({exp.source}): {len(points)} points, "
                f"order shuffled with seed {exp.seed}; engine {s.engine}, target {s.target}"
                + (f"; Locust master + {ld.workers} worker container(s) x {ld.processes} "
                   f"process(es), {ld.remote_workers} remote" if ld.workers or ld.remote_workers
                   else ""),
                f"per point: settle {exp.settle_s:g} s + warm-up {ld.warmup_s:g} s + measured "
                + (f"until every client has sent {ld.requests_per_client:,} requests "
                   f"({counted_total(ld)}; at most {ld.measure_s:g} s, so times are upper bounds)"
                   if ld.requests_per_client else f"{ld.measure_s:g} s")
                + f" + about {POINT_OVERHEAD_S:g} s overhead "
                "(mode switch, snapshots, load generator start/stop)",
                "NIC modes switch without restarting containers; server options restart the "
                "services whose settings change (points are grouped to restart as rarely as "
                "possible)"]

    def placement_line(self, exp: Experiment, point: Point, first: bool) -> str:
        """The stack settings from this point on."""
        settings = self.stack_for(exp, point.mode, point["docroot"],
                                  point.factors.get("placement"))
        s: WebSettings = exp.settings  # type: ignore[assignment]
        return (f"  -- stack: {settings_text(settings)}" + ("" if first else " (restart)")
                + webdisks.label(settings, webdisks.names(s.disk_systems)))

    def point_line(self, exp: Experiment, point: Point) -> str:
        """trace, mode, repetition, users, time (at most that, in a request-count run)."""
        about = "<=" if exp.settings.load.requests_per_client else "~"  # type: ignore[attr-defined]
        return (f"  {point.id}  trace={point['trace']['name']:<14} mode={point.mode:<16} "
                f"rep={point.repetition}  users={point['users']}  "
                f"{about}{self.point_seconds(exp):.0f} s")

    def needs(self, exp: Experiment, points: list[Point]) -> list[space.Need]:
        """The file sets on each docroot the experiment uses, the hot site's small files."""
        with workload_errors(exp):
            return self._needs(exp, len(points))

    def _needs(self, exp: Experiment, points: int) -> list[space.Need]:
        s: WebSettings = exp.settings  # type: ignore[assignment]
        specs = trace_dicts(s)
        sets: list[dict] = []
        for spec in specs:
            sets += [fs for fs in tracelib.filesets_of(spec) if fs not in sets]
        total = sum(filesets.total_bytes(fs) for fs in sets)
        what = f"the file sets of {exp.source}"
        shrink = "shrink the traces' file sets (size, files or class)"
        out: list[space.Need] = []
        bases = {compose.docroot_parts(d)[0] for d in s.stack.docroot}
        # OrangeFS docroots are copied from the disk volume; a disk system holds its own sets
        if bases & {"disk", "orangefs"}:
            out.append(space.on_disk(what, total, space.docker_root(), "Docker's data folder",
                                     f"{shrink} or free space there", role="web"))
        if "tmpfs" in bases:
            out += space.on_tmpfs(what, total, "DOCROOT_TMPFS_SIZE", "8g", shrink, role="web")
        if "orangefs" in bases:
            n = stack_settings(s).get("pvfs_io_servers", 3)
            per_server = total // n + total // n // 10  # strips spread evenly, plus metadata
            if webdisks.names(s.disk_systems).get(stack_settings(s)["pvfs_storage"]):
                pass  # on a disk system's devices: their images are counted below
            elif stack_settings(s).get("pvfs_storage") == "disk":
                out.append(space.on_disk(f"{what} on {n} OrangeFS I/O servers' volumes",
                                         per_server * n, space.docker_root(),
                                         "Docker's data folder", f"{shrink} or free space there",
                                         role="pfs_io"))
            else:
                out += space.on_tmpfs(f"{what} on each of {n} OrangeFS I/O servers", per_server,
                                      "PVFS_TMPFS_SIZE", "4g",
                                      f"{shrink}, use more I/O servers (stack.pvfs_io_servers) "
                                      "or stack.pvfs_storage: disk", copies=n, role="pfs_io")
        out += webdisks.image_needs(self.disk_plans(exp), space.settings(),
                                    webdisks.host_of_web())
        out.append(space.on_disk(f"the results of {exp.source} (traces, per-request records, "
                                 "samples)", results_bytes(exp, specs, points), results_root(),
                                 "the results folder", "shorten the traces or load.measure_s, "
                                 "run fewer points, or free space there"))
        hot_site = stack_settings(s).get("hot_site")
        if hot_site is not None:
            below = stack_settings(s)["hot_below"]
            hot = [tracelib.fileset_of(part) for t in specs if t["kind"] == "mix"
                   for part in t["parts"] if part["site"] == hot_site]
            nbytes = sum(size for fs in hot for _, size in filesets.files(fs) if size < below)
            out += space.on_tmpfs(f"the small files of site {hot_site}", nbytes,
                                  "HOT_TMPFS_SIZE", "2g", "lower stack.hot_below", role="web")
        if has_dynamic(s):
            st = stack_settings(s, exp.seed)
            out += appdb.needs(exp.source, st["db_rows"], st["db_row_bytes"],
                               space.parse_size(st["db_shared_buffers"], "stack.db.shared_buffers"))
        return out

    def disk_plans(self, exp: Experiment) -> list[disks.Plan]:
        """The disk systems the points need (one per docroot and placement strategy)."""
        s: WebSettings = exp.settings  # type: ignore[assignment]
        known = webdisks.names(s.disk_systems)
        specs = trace_dicts(s)
        sets = self.filesets_of(specs)
        pops = webdisks.popularity(specs, exp.seed) if s.stack.placement else {}
        out = []
        for docroot in s.stack.docroot:
            for strategy in s.stack.placement or [None]:
                made = webdisks.plan_for(self.stack_for(exp, exp.modes[0].name, docroot,
                                                        strategy), known, sets, pops, exp.seed)
                if made is not None:
                    out.append(made[0])
        return out

    @staticmethod
    def filesets_of(specs: list[dict]) -> list[dict]:
        """The file sets of the traces, each once, in order."""
        sets: list[dict] = []
        for spec in specs:
            sets += [fs for fs in tracelib.filesets_of(spec) if fs not in sets]
        return sets

    # -- run
    def preflight(self, exp: Experiment, points: list[Point]) -> None:
        """Every image the run will need is built (the first time, or after its build context
        changed); disk systems can be built where they go (the web node's tools and devices,
        asked there)."""
        s: WebSettings = exp.settings  # type: ignore[assignment]
        known = webdisks.names(s.disk_systems)
        bases = [compose.docroot_parts(docroot)[0] for docroot in s.stack.docroot]
        compose.ensure_images([name for base in bases for name in compose.stack_images(
            s.stack.proxy, "disk" if base in known else base, has_dynamic(s))])
        with workload_errors(exp):
            plans = self.disk_plans(exp)
        try:
            disks.preflight(plans, webdisks.host_of_web())
        except disks.DiskError as exc:
            raise ConfigError(f"{exp.source}: {exc}") from None
        if s.load.remote_workers and placer.current().cluster is None:
            problem = compose.master_bind_problem({**compose.dotenv(), **os.environ})
            if problem:
                raise ConfigError(f"{exp.source}: load.remote_workers: {problem}")

    def prepare(self, exp: Experiment, run_dir: Path) -> dict[str, Any]:
        """Every trace written into run_dir/traces; the file sets and hot sets they need."""
        with workload_errors(exp):
            return self._prepare(exp, run_dir)

    def _prepare(self, exp: Experiment, run_dir: Path) -> dict[str, Any]:
        s: WebSettings = exp.settings  # type: ignore[assignment]
        folder = run_dir / "traces"
        folder.mkdir(exist_ok=True)  # a resumed run writes the same traces again
        paths, sets = {}, []
        for spec in trace_dicts(s):
            for fs in tracelib.filesets_of(spec):
                if fs not in sets:
                    sets.append(fs)
            path = folder / f"{spec['name']}.txt"
            header = (f"trace {spec['name']} of experiment {exp.name}\n"
                      f"spec: {json.dumps(spec, sort_keys=True)}\nseed: {exp.seed}")
            t0 = time.monotonic()
            chunks = (worldcup.trace_chunks(spec, progress_every(f"trace {spec['name']}"))
                      if spec["kind"] == "worldcup" else tracelib.chunks(spec, exp.seed))
            count = tracelib.write_chunks(path, chunks, header, tracelib.subset_size(spec))
            if spec["kind"] == "worldcup":
                log(f"tierbench: trace {spec['name']}: {count:,} requests from "
                    f"{worldcup.log_path(spec).name} in {time.monotonic() - t0:.1f} s")
            paths[spec["name"]] = path
        site = stack_settings(s).get("hot_site")
        hot = [tracelib.fileset_of(part) for t in trace_dicts(s) if t["kind"] == "mix"
               for part in t["parts"] if part["site"] == site]
        specs = trace_dicts(s)
        return {"traces": paths, "filesets": sets, "hot_sets": hot, "fault_done": False,
                "popularity": webdisks.popularity(specs, exp.seed) if s.stack.placement else {},
                "sizes": webdisks.sizes_of(sets) if s.stack.access_log else {}}

    def deploy(self, exp: Experiment, key: Hashable, prepared: Any,
               previous: Deployment | None, point: Point) -> Deployment:
        """compose up with the key's settings (down first when the docroot changes); a disk
        system built first (anew when it changes), its limits read back from the web tier."""
        s: WebSettings = exp.settings  # type: ignore[assignment]
        settings = dict(key)  # type: ignore[arg-type]
        made = webdisks.plan_for(settings, webdisks.names(s.disk_systems), prepared["filesets"],
                                 prepared["popularity"], exp.seed)
        where = placer.current()
        downed = False
        if previous is None:
            log(f"tierbench: bringing the stack up on {where.name} (file sets, healthchecks)")
        else:
            log(f"tierbench: restarting services for {point.mode}: {settings_text(settings)}")
            before = previous.info["settings"]
            if any(settings.get(k) != before.get(k) for k in ("docroot", "placement",
                                                               "web_servers")):
                where.down()  # a volume's driver cannot change in place: the docroot anew
                downed = True
        overlays: list[Path] = []
        built = None
        if made is not None:  # a disk system: on each web server's host (here, or its node)
            hosts = webdisks.hosts_for(made[0])
            if not downed and disks.current(made[0], hosts) is None:
                where.down()  # the containers let go of the disks built before
            try:
                built = webdisks.build(made[0], made[1], space.settings(), log, hosts)
            except disks.DiskError as exc:
                raise compose.StackError(str(exc)) from None
            overlays.append(disks.overlay_path())
        if previous is not None:
            close_probes(previous)
        where.up(compose.stack_spec(settings, prepared["filesets"], s.target, s.load.workers,
                                    s.load.remote_workers, prepared["hot_sets"], overlays))
        dep = discover(key, settings, s.load.workers)
        if built is not None and made is not None:
            try:
                dep.info["disk"] = webdisks.verify(built, made[0].system, where.replicas())
            except disks.DiskError as exc:
                raise compose.StackError(str(exc)) from None
            dep.info["built"] = built
            dep.probes["storage"] = webdisks.StorageReads(built)
        dropped = drop_written_files(dep, settings)
        if dropped is not None:
            dep.info["dropped_after_bring_up"] = dropped
        return dep

    def finish(self, exp: Experiment, deployment: Deployment) -> list[str]:
        """The stack removed when its docroot was on OrangeFS: OrangeFS's servers admit whoever
        connects (any other stack stays up for the next run)."""
        settings = deployment.info.get("settings") or {}
        if compose.docroot_parts(str(settings.get("docroot", "disk")))[0] != "orangefs":
            return []
        placer.current().down()
        return ["removed the stack: its docroot's OrangeFS servers admit whoever connects"]

    def running(self) -> Deployment | None:
        """The stack's tiers, when its services are up (the application and database tiers
        too when they are)."""
        found = placer.current().replicas()
        up = {c.service for c in found}
        if not all(t in up for t in STACK_TIERS):
            return None
        app_db = all(t in up for t in compose.APP_TIERS)
        return discover(None, {}, sum(c.service == compose.WORKER_SERVICE for c in found), app_db)

    def provenance(self, exp: Experiment, deployment: Deployment) -> dict[str, Any]:
        """Locust, wrk and the servers' versions; PostgreSQL's settings and data set."""
        found = deployment.containers
        versions = {"locust": engines.version(found[GENERATOR]),
                    "wrk": engines.wrk_version(found[GENERATOR])}
        probe = ("if command -v apache2 >/dev/null; then apache2 -v | head -n 1; "
                 "else haproxy -v | head -n 1; fi")
        for tier in ("proxy", "web"):
            done = placer.current().exec(found[tier], ["sh", "-c", probe], timeout=60)
            versions[f"{tier}_server"] = done.stdout.strip()
        out: dict[str, Any] = {"versions": versions}
        if "db" in found:
            for tier, argv in (("app", ["php-fpm8.2", "-v"]), ("db", ["postgres", "--version"])):
                done = placer.current().exec(found[tier], argv, timeout=60)
                versions[f"{tier}_server"] = (done.stdout.strip().splitlines() or [""])[0]
            out["database"] = appdb.server_settings(found["db"])
        return out

    def run_point(self, ctx: PointContext) -> PointResult:
        """Replay the point's trace; the summary over the samples bracketing the window."""
        s: WebSettings = ctx.exp.settings  # type: ignore[assignment]
        ld, point, dep = s.load, ctx.point, ctx.deployment
        where = placer.current()
        ctx.record["trace"] = point["trace"]["name"]
        ctx.record["stack"] = dep.info["settings"]
        gen = dep.tiers[GENERATOR]
        loadgen = dep.containers[GENERATOR]
        # Bytes delivered to the clients: what the host ends of the generator's veths transmit
        # (on a cluster, what its node's NIC receives).
        client_ifaces = where.received(gen.endpoints)
        target = where.url(s.target)
        if target != s.target:
            ctx.record["target"] = target
        spec = engines.LoadSpec(engine=s.engine, users=point["users"], warmup_s=ld.warmup_s,
                                measure_s=ld.measure_s, processes=ld.processes,
                                think=ld.think.model_dump() if ld.think else None,
                                rate=ld.rate, target=target,
                                allow_foreign_target=s.allow_foreign_target,
                                workers=ld.workers, remote_workers=ld.remote_workers,
                                worker_wait_s=ld.worker_wait_s,
                                master=dep.info.get("master", engines.MASTER_HOST),
                                own=tuple(where.own_addresses()),
                                fetch=lambda: where.pull(loadgen, ctx.dir),
                                requests_per_client=ld.requests_per_client,
                                dynamic=tracelib.content(point["trace"]) != "static")
        trace = ctx.prepared["traces"][point["trace"]["name"]]
        if dep.info["settings"].get("proxy_cache") and dep.info["settings"].get("proxy") == "apache":
            empty_proxy_cache(dep.containers["proxy"])
        if "disk" in dep.info:
            ctx.record["disk"] = dep.info["disk"]
        if "dropped_after_bring_up" in dep.info:
            ctx.record["dropped_after_bring_up"] = (
                f"{dep.info['dropped_after_bring_up']} docroot files dropped from the page "
                "cache after the bring-up (written there by its one-shot jobs, outside the "
                "memory caps)")
        if dep.info["settings"].get("page_cache") == "cold":
            if "built" in dep.info:
                dropped = disks.evict(dep.info["built"])
                what = "files of the disk system"
            else:
                # each web server's node (on one host, or one node, they share the volume)
                webs = {c.node: c for c in dep.tiers["web"].containers}
                dropped = sum(where.evict_docroot(c) for c in webs.values())
                what = "docroot files"
            ctx.record["page_cache"] = f"cold: {dropped} {what} dropped before the point"
        index = tracelib.index_path(trace)  # the engines read the trace through it
        where.push(loadgen, [trace, *([index] if index.exists() else []), ctx.dir])
        logged = webdisks.logging_tier(dep.containers, s.target, dep.tiers["web"].containers)
        if dep.info["settings"].get("access_log"):
            webdisks.reset_logs(logged)
        if "db" in dep.containers:
            # the waits first: the previous point's last requests (still in the proxy or the
            # application tier when its load stopped) write their rows during them, not after
            # the table was emptied for this point
            if "app" in dep.containers:
                busy, waited = appdb.wait_until_app_idle(dep.containers["app"])
                ctx.record["app_idle_wait_s"] = round(waited, 1)
                if busy:
                    ctx.record["app_busy_before_point"] = (
                        f"{busy} requests still in the application tier after "
                        f"{appdb.APP_IDLE_WAIT_S:g} s" if busy > 0
                        else "its connections could not be read")
            waited = appdb.wait_for_published_counters(dep.containers["db"])
            if waited:
                ctx.record["db_counters_wait_s"] = round(waited, 1)
            if not appdb.empty_writes(dep.containers["db"]):
                ctx.record["db"] = "the database did not answer before the point"
        fault = self.arm_fault(s, ctx, ld.warmup_s)
        # two marks inside the measured window (at a third and two thirds of it, from when the
        # load starts), so that it holds two samples even when a loaded host delays the ticks
        began = time.time() + ld.warmup_s
        unmark = marks_at(ctx.sampler, [began + ld.measure_s / 3, began + ld.measure_s * 2 / 3])
        try:
            try:
                result = engines.run(spec, loadgen, ctx.dir, trace,
                                     list(dep.info["workers"]) if ld.workers else None)
            finally:
                unmark()
                samples = ctx.sampler.stop()
                if fault is not None:
                    fault.join()
            if ctx.sampler.error:
                raise MeasureError(ctx.sampler.error)
            start, end = result.window
            engines.check_counted_window(spec, result.window)
            # Wall-clock bounds: samples and requests before measure_start are warm-up.
            ctx.record["window"] = {"load_started": result.started, "measure_start": start,
                                    "measure_end": end}
            row = engines.summary_row(samples, result, generator=GENERATOR,
                                      bytes_label=client_ifaces)
            # The samples that bracket the numbers above: analysis recomputes from these.
            first, last = window(samples, start, end)
            ctx.record["window"].update({"start": first["t"], "end": last["t"]})
            if dep.info["settings"].get("proxy_cache") and \
                    dep.info["settings"].get("proxy") == "apache":
                row.update(proxy_cache_figures(dep.containers["proxy"], first["t"], last["t"]))
            row.update(webmetrics.page_cache_figures(
                first, last, engines.served_between(result, first["t"], last["t"]),
                point["trace"]))
            row.update(webmetrics.memory_figures(samples, first, last))
            if dep.info["settings"].get("access_log"):  # 004 Fig. 11-12: per file
                row.update(webdisks.per_file(webdisks.read_logs(logged), ctx.prepared["sizes"],
                                             first["t"], last["t"], ctx.dir / "per_file.csv"))
            sites = tracelib.sites(point["trace"])
            if sites:  # a mix trace: each site's TPS and latency (004 §4.4: the foreground's)
                if result.requests is None:
                    raise engines.LoadgenError("a mix trace needs per-request records "
                                               "(engine: locust)")
                row.update(webmetrics.site_figures(result.requests, sites, first["t"],
                                                   last["t"]))
            if "db" in dep.containers:
                row.update(app_db_figures(ctx, result, first, last))
            return PointResult(row, engines.per_second_rows(samples, result), (start, end))
        except (engines.LoadgenError, MeasureError) as exc:
            ctx.log(f"tierbench: {point.id} failed: {exc}")
            return PointResult(error=str(exc))

    def arm_fault(self, s: WebSettings, ctx: PointContext,
                  warmup_s: float) -> threading.Thread | None:
        """The experiment's fault, once per run: stop a server tier into the measured window."""
        if s.fault is None or ctx.prepared["fault_done"]:
            return None
        ctx.prepared["fault_done"] = True
        target = ctx.deployment.containers[s.fault.stop]
        delay = warmup_s + s.fault.after_s
        ctx.record["fault"] = {"stop": s.fault.stop, "after_s": s.fault.after_s}

        def stop() -> None:
            time.sleep(delay)
            ctx.log(f"tierbench: fault: stopping the {s.fault.stop} tier as the experiment asks")
            placer.current().stop(target, 2)

        thread = threading.Thread(target=stop, name="fault", daemon=True)
        thread.start()
        return thread

    def after_point(self, exp: Experiment, point: Point, row: dict[str, Any],
                    deployment: Deployment) -> None:
        """A proxy or web tier that stopped ends the run with one sentence naming it (on a
        cluster, a node whose Docker engine stopped answering); a stopped application or
        database tier is started again (one sentence) and the run goes on."""
        try:
            running = placer.current().containers()
        except compose.StackError as exc:
            raise RunEnds(f"{exc} during {point.id}; the run ends here") from None
        failed = row.get("errors")
        what = (f" ({failed:g} requests failed)" if isinstance(failed, (int, float))
                else f" ({row['error']})" if row.get("error") else "")
        servers = int(deployment.info["settings"].get("web_servers") or 1)
        down = [t for t in ("proxy", *compose.WEB_SERVICES[:servers]) if t not in running]
        if down:
            raise RunEnds(f"the {' and '.join(down)} tier stopped during {point.id}{what}; "
                          "the run ends here")
        gone = [t for t in compose.APP_TIERS if t in deployment.containers and t not in running]
        if not gone:
            return
        log(f"tierbench: the {' and '.join(gone)} tier stopped during {point.id}{what}; "
            "starting it again, the run goes on")
        try:
            for tier in gone:
                appdb.start_again(deployment.containers[tier])
        except compose.StackError as exc:
            raise RunEnds(f"the {' and '.join(gone)} tier stopped during {point.id} and could "
                          f"not be started again ({exc})") from None
        close_probes(deployment)
        fresh = discover(deployment.key, deployment.info["settings"],
                         len(deployment.info["workers"]))
        # The restarted containers have new processes and interfaces: the next point's mode
        # and sampler use them.
        deployment.tiers, deployment.counters = fresh.tiers, fresh.counters
        deployment.ifaces, deployment.containers = fresh.ifaces, fresh.containers
        deployment.probes = {**fresh.probes, **{k: v for k, v in deployment.probes.items()
                                                if k == "storage"}}  # the disks stay the same

    # -- results
    def identity(self, exp: Experiment, point: Point) -> dict[str, Any]:
        """point, trace, mode, repetition, engine, users, docroot, what the trace is (its kind,
        size, alpha, class, hit ratio: tracelib.facts); with dynamic requests what
        the trace asks for (content, dynamic_share, query); with CPU modes the platform the
        mode gives the tiers it covers (cpus, cpu_time: CPUs of time, the limit or the count)."""
        s: WebSettings = exp.settings  # type: ignore[assignment]
        out = {"point": point.id, "trace": point["trace"]["name"], "mode": point.mode,
               "repetition": point.repetition, "engine": s.engine,
               "users": point["users"], "docroot": point["docroot"],
               **({"placement": point.factors["placement"]}
                  if "placement" in point.factors else {}),
               **{k: v for k, v in tracelib.facts(point["trace"]).items() if v is not None}}
        if has_dynamic(s):
            dyn = point["trace"].get("dynamic") or {}
            out.update({"content": tracelib.content(point["trace"]),
                        "dynamic_share": float(dyn.get("share", 0.0)),
                        "query": dyn.get("query", "") if dyn.get("share") else ""})
        if any(m.cpu for m in exp.modes):
            out.update(platform(exp.mode(point.mode)))
        return out

    def columns(self, exp: Experiment) -> list[Column]:
        """webmetrics.SUMMARY_COLUMNS (docroot and per-site columns follow, sorted), with the
        dynamic requests' and the application and database tiers' columns when they run."""
        s: WebSettings = exp.settings  # type: ignore[assignment]
        names = list(webmetrics.SUMMARY_COLUMNS)

        def after(column: str, new: list[str]) -> None:
            at = names.index(column) + 1
            names[at:at] = new

        if any(m.cpu for m in exp.modes):
            after("users", ["cpus", "cpu_time"])
        if has_dynamic(s):
            after("users", ["content", "dynamic_share", "query"])
            after("cpu_s_web", ["cpu_s_app", "cpu_s_db"])
            names += APP_DB_COLUMNS
        return [Column(c) for c in names]

    def brief(self, row: dict[str, Any]) -> str:
        """TPS, MB/s, server CPU per KB, generator CPU (and the database's TPS, the write
        check when it did not pass)."""
        if "error" in row:
            return f"FAILED ({row['error']})"
        flag_ = " CLIENT-BOUND" if row.get("client_bound") else ""
        db = f", database {row['db_tps']:.0f} TPS" if "db_tps" in row else ""
        check = row.get("write_check")
        check = f"; WRITE CHECK: {check}" if check not in (None, "ok") else ""
        errors = f", {row['errors']:g} errors" if row.get("errors") else ""
        return (f"{row['tps']:.0f} TPS, {row['mb_per_s']:.0f} MB/s, server CPU "
                f"{row['server_cpu_us_per_kb']:.2f} us/KB, generator "
                f"{row['generator_cpu_pct']:.0f} %{db}{errors}{flag_}{check}")

    def point_title(self, exp: Experiment, point: Point) -> str:
        """How the progress line names a point (users and docroot when they vary)."""
        s: WebSettings = exp.settings  # type: ignore[assignment]
        extra = (f" {point['users']} users" if len(s.load.users) > 1 else "") + \
            (f" on {point['docroot']}" if len(s.stack.docroot) > 1 else "") + \
            (f" placed {point.factors['placement']}" if "placement" in point.factors else "")
        return f"{point.id} {point['trace']['name']}{extra} {point.mode} rep {point.repetition}"

    def clean(self) -> list[str]:
        """Stop a load generator a crashed run left running."""
        running = placer.current().containers()
        if GENERATOR in running:
            engines.stop(running[GENERATOR])
            return ["stopped any load generator still running in the loadgen container"]
        return []

    def end_note(self, rows: list[dict[str, Any]]) -> str | None:
        """How many points were client-bound, and what to do about it."""
        bound = [r for r in rows if r.get("client_bound")]
        if not bound:
            return None
        return (f"tierbench: {len(bound)} of {len(rows)} points were client-bound: "
                f"{bound[-1].get('client_bound_advice', '')}")

    def report(self, resolved: dict[str, Any]) -> dict[str, Any]:
        """The report section of the experiment's family (by name)."""
        return report_spec(resolved)


APP_DB_COLUMNS = ["dyn_tps", "db_tps", "db_rows_read", "db_rows_written", "db_blocks_read",
                  "writes_ok", "rows_written", "write_check"]


def platform(mode: Mode) -> dict[str, Any]:
    """The CPUs a mode's `cpu:` gives the tiers it covers: how many (its cpuset) and how much
    of their time (cpu_time: its limit, else the count); empty without a cpuset."""
    cpu = mode.cpu or {}
    if not cpu.get("cpuset"):
        return {"cpus": None, "cpu_time": cpu.get("limit")}
    count = len(cpuparse(str(cpu["cpuset"])))
    return {"cpus": count, "cpu_time": cpu.get("limit") or float(count)}


def discover(key: Hashable, settings: dict[str, Any], expected: int,
             app_db: bool | None = None) -> Deployment:
    """The running stack's tiers (containers, CPU counters, interfaces) wherever they run; the
    loadgen tier
    includes its `expected` Locust worker containers; the application and database tiers
    when the settings have them (or `app_db` says so), with the database's counters as a
    sampler probe."""
    where = placer.current()
    if app_db is None:
        app_db = compose.has_app_db(settings)
    found = where.service_containers(STACK_TIERS + (compose.APP_TIERS if app_db else ()))
    counters: dict[str, CgroupCpu | CgroupGroup] = {}
    tiers: dict[str, Tier] = {}
    for name, c in found.items():
        counters[name] = where.counter(c)
        tiers[name] = Tier(name, CLIENT if name == GENERATOR else SERVER,
                           where.endpoints(name, c), [c])
    workers = [c for c in where.replicas() if c.service == compose.WORKER_SERVICE]
    if expected:
        if len(workers) != expected:
            raise compose.StackError(f"load.workers is {expected} but {len(workers)} "
                                     "worker container(s) are running: see `docker compose "
                                     f"logs {compose.WORKER_SERVICE}`")
        parts = {GENERATOR: counters[GENERATOR]}
        gen = tiers[GENERATOR]
        for n, w in enumerate(workers, 1):
            label = f"{compose.WORKER_SERVICE}-{n}"
            parts[label] = where.counter(w)
            gen.endpoints += where.endpoints(label, w)
            gen.containers.append(w)
        counters[GENERATOR] = CgroupGroup(parts)
    webs = [c for c in where.replicas() if c.service in compose.WEB_SERVICES[1:]]
    if webs:  # web_servers: 3: one tier, its counters summed
        counters["web"] = CgroupGroup({"web": counters["web"],
                                       **{c.service: where.counter(c) for c in webs}})
        for c in webs:
            tiers["web"].endpoints += where.endpoints(c.service, c)
            tiers["web"].containers.append(c)
            found = {**found, c.service: c}
    ifaces = where.ifaces([ep for t in tiers.values() for ep in t.endpoints])
    info = {"settings": settings, "workers": workers}
    if where.shares_ports():  # host networking: workers reach the master at its node
        info["master"] = where.address(found[GENERATOR])
    probes = {"db": appdb.PgStats(found["db"])} if "db" in found else {}
    return Deployment(key, tiers, counters, ifaces, containers=found, info=info, placer=where,
                      probes=probes)


def drop_written_files(dep: Deployment, settings: dict[str, Any]) -> int | None:
    """Under a memory cap (web_memory, pvfs_memory), drop the docroot's files from the page
    cache once the stack is up: the fileset job wrote them, so they sit in the host's page cache
    charged to that job, outside any cap (a cgroup is charged for the pages it brings in first),
    and a capped tier would read them from memory however large the working set. After this,
    what a capped tier reads is charged to it, and its cap decides what stays cached. Returns
    how many files were dropped (None: no cap, or nothing the testbed can drop: tmpfs)."""
    if not (settings.get("web_memory") or settings.get("pvfs_memory")):
        return None
    if "built" in dep.info:
        return disks.evict(dep.info["built"])
    if compose.docroot_parts(str(settings.get("docroot", "disk")))[0] == "disk":
        webs = {c.node: c for c in dep.tiers["web"].containers}
        return sum(placer.current().evict_docroot(c) for c in webs.values())
    return None


def close_probes(deployment: Deployment) -> None:
    """End the probes' sessions (the database's psql)."""
    for probe in deployment.probes.values():
        close = getattr(probe, "close", None)
        if close is not None:
            close()


def app_db_figures(ctx: PointContext, result: engines.LoadResult, first: dict,
                   last: dict) -> dict[str, Any]:
    """The application and database tiers' figures of a point: dynamic requests per second,
    the database's transactions per second and rows read and written over the window (its own
    counters), and for a trace with writes the write check."""
    out: dict[str, Any] = {}
    dyn = ctx.point["trace"].get("dynamic") or {}
    if result.requests is not None:
        counts = webmetrics.dynamic_figures(result.requests, first["t"], last["t"],
                                            tracelib.DYNAMIC_PREFIX, tracelib.WRITE_PREFIX)
        in_flight = ctx.point["users"]
    else:
        span = float(result.extra.get("wrk_duration_s") or 0)
        counts = {"dyn_tps": result.extra.get("dynamic_ok", 0) / span if span > 0 else 0.0,
                  "writes_ok": result.extra.get("writes_ok")}
        in_flight = ctx.point["users"] * int(result.extra.get("runs", 1))
    out["dyn_tps"] = counts["dyn_tps"]
    out.update(appdb.db_figures(first, last))
    if dyn.get("query") == "write" and dyn.get("share", 0) > 0:
        rows = appdb.rows_written(ctx.deployment.containers["db"])
        out.update({"writes_ok": counts["writes_ok"], "rows_written": rows,
                    "write_check": appdb.write_check(counts["writes_ok"], rows, in_flight)})
    return out


def empty_proxy_cache(proxy: compose.Container) -> None:
    """Every point starts with an empty proxy cache (filled again during its warm-up), so that
    points do not depend on the order they run in; its log starts empty too."""
    compose.exec_in(proxy, ["sh", "-c", "rm -rf /var/cache/apache2/mod_cache_disk/*"],
                    user="www-data", timeout=120)
    compose.exec_in(proxy, ["sh", "-c", ": > /var/log/apache2/cache.log"], timeout=60)


def proxy_cache_figures(proxy: compose.Container, start: float, end: float) -> dict[str, Any]:
    """The caching proxy's hits and misses in the measured window, from its cache log (one
    line per request: epoch second and mod_cache's verdict); whole seconds at the edges."""
    script = (f"awk -v a={int(start)} -v b={int(end)} '$1 >= a && $1 <= b "
              "{ if ($0 ~ /hit/) h++; else m++ } END { print h + 0, m + 0 }' "
              "/var/log/apache2/cache.log 2>/dev/null || echo 0 0")
    done = compose.exec_in(proxy, ["sh", "-c", script], timeout=60)
    try:
        hits, misses = (int(x) for x in done.stdout.split()[:2])
    except ValueError:
        return {}
    total = hits + misses
    return {"proxy_cache_hits": hits, "proxy_cache_misses": misses,
            "proxy_hit_ratio": hits / total if total else float("nan")}


# --------------------------------------------------------------------------- report


def report_spec(resolved: dict[str, Any]) -> dict[str, Any]:
    """The report section of a web experiment: its family's figures, tables and the paper's
    numbers, with the factors in the experiment file's order."""
    spec = families.load(families.by_name("web", str(resolved.get("name", "")), "dc-single"))
    def listed(value: Any) -> list[Any]:  # older resolved experiments hold single values
        return list(value) if isinstance(value, list) else [value]

    if any(isinstance(t, dict) and t.get("dynamic") for t in resolved.get("traces") or []):
        # dynamic requests in a family of static ones: the application and database tiers'
        # columns may be empty where they do not apply, and the write check is a check
        spec["optional"] = list(dict.fromkeys([*spec.get("optional", []), *APP_DB_OPTIONAL]))
        spec["checks"] = list(dict.fromkeys([*spec.get("checks", []), "write_check"]))
    order = {"trace": [t["name"] if isinstance(t, dict) else t
                       for t in resolved.get("traces") or []],
             "users": listed((resolved.get("load") or {}).get("users")),
             "docroot": listed((resolved.get("stack") or {}).get("docroot")),
             "placement": listed((resolved.get("stack") or {}).get("placement"))}
    spec["order"] = {k: v for k, v in order.items() if len(v) > 1}
    return spec


# The application and database tiers' columns, optional where a point does not have them: the
# write check on traces without writes, the query of a static trace, the database's counters
# of a point during which it was down.
APP_DB_OPTIONAL = ["query", "writes_ok", "rows_written", "write_check", "db_tps", "db_rows_read",
                   "db_rows_written", "db_blocks_read"]
