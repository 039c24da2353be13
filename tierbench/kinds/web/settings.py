"""The keys of a web experiment file (engine, load, traces, stack, target, fault, disk systems),
declared models with one sentence per problem; the traces as the workloads library's specs;
the stack settings a point runs with, and their typed view."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import BeforeValidator, Discriminator, Field, Tag, model_validator

from tierbench.config.files import ROOT
from tierbench.config.models import (Model, choice, flag, non_empty_list, number, one_or_many,
                                     problem, safe_name, text, whole)
from tierbench.kinds.contract import Experiment
from tierbench.kinds.web import services, webdisks
from tierbench.kinds.web.load import ENGINES
from tierbench.tiers import disks
from workloads import target as target_guard
from workloads import worldcup
from workloads import traces as tracelib

DOCROOTS = ("disk", "tmpfs", "orangefs")
HOT = "+hot-tmpfs"  # docroot suffix: the hot site's small files also on a tmpfs, served first
MAPPINGS = tracelib.MAPPINGS
STACK_DATA = ROOT / "workloads" / "data"  # World Cup logs: the folder the fileset job can read


class Think(Model):
    """Think time between a client's requests (closed loop)."""

    kind: Annotated[str, choice("fixed", "exponential")]
    mean_ms: Annotated[float, number(0)]


MAX_FRACTION = 2.0  # rate_of_max: at most twice the closed loop's maximum (past saturation)


class Load(Model):
    """How the engine loads the stack."""

    users: Annotated[list[int], one_or_many(whole(1), "whole number >= 1")] = [16]
    processes: Annotated[int, whole(1)] = 1
    think: Think | None = None
    # an open loop's offered rate in requests/s; a list of rates is a factor (a load curve:
    # one point per rate, `rate` beside `users`)
    rate: Annotated[list[float], one_or_many(number(0.001), "rate in requests/s")] | None = None
    # an open loop's offered rate as fractions of the mode's measured maximum (0.5: half of
    # it): the first point of each mode (and trace, users, stack) measures that maximum with a
    # closed loop of the same engine, users and windows, recorded in the run's max_rate.json and
    # the points' rows (max_rate); a list is a factor (rate_of_max), as rate. Not with rate.
    rate_of_max: Annotated[list[float], one_or_many(number(0.001),
                                                    "fraction of the maximum")] | None = None
    # an open loop's arrival process: evenly spaced, or Poisson (exponential gaps, seeded)
    arrival: Annotated[str, choice("constant", "poisson")] = "constant"
    warmup_s: Annotated[float, number(0)] = 5
    measure_s: Annotated[float, number(2)] = 15
    # steady: the warm-up ends where the successful requests per second reach steady state
    # (MSER-5, tierbench.measure.steady), at least warmup_s and at most warmup_max_s; fixed:
    # warmup_s (the window is checked for drift either way)
    warmup: Annotated[str, choice("fixed", "steady")] = "fixed"
    warmup_max_s: Annotated[float, number(1)] = 60
    workers: Annotated[int, whole(0)] = 0
    remote_workers: Annotated[int, whole(0)] = 0
    worker_wait_s: Annotated[float, number(1)] = 60
    # a request-count run (000 §5.2.1, 004 §3.2): after the warm-up each client sends the first
    # N requests of its sequence and stops; TPS over the window until the last one finished.
    # measure_s is then the window's time limit, and must be given.
    requests_per_client: Annotated[int, whole(1)] | None = None
    # before every point whose trace's working set the caches do not hold, one unmeasured pass
    # over it, each distinct file once through the load's path (kinds.web.warm); a study row's
    # recommended scale turns it on
    warm_pass: Annotated[bool, flag()] = False

    @model_validator(mode="after")
    def _counted(self) -> Load:
        if "arrival" in self.model_fields_set and self.rate is None and \
                self.rate_of_max is None:
            raise problem("arrival sets an open loop's arrival process: give rate (requests/s) "
                          "or rate_of_max too, or drop arrival", sub="arrival")
        if self.rate is not None and len(set(self.rate)) != len(self.rate):
            raise problem("two rates are the same: list each offered rate once", sub="rate")
        if self.rate_of_max is not None:
            if self.rate is not None:
                raise problem("rate gives the offered rates in requests/s and rate_of_max as "
                              "fractions of each mode's maximum: give one of the two",
                              sub="rate_of_max")
            if len(set(self.rate_of_max)) != len(self.rate_of_max):
                raise problem("two fractions are the same: list each once", sub="rate_of_max")
            if max(self.rate_of_max) > MAX_FRACTION:
                raise problem(f"a fraction above {MAX_FRACTION:g} offers more than the "
                              "generator's closed loop reached: give fractions of the maximum "
                              f"up to {MAX_FRACTION:g}", sub="rate_of_max")
        if self.warmup == "steady" and self.warmup_max_s < self.warmup_s:
            raise problem(f"warmup_max_s ({self.warmup_max_s:g}) is shorter than the least "
                          f"warm-up, warmup_s ({self.warmup_s:g})", sub="warmup_max_s")
        if "warmup_max_s" in self.model_fields_set and self.warmup != "steady":
            raise problem("warmup_max_s bounds a warm-up found by steady state: add "
                          "warmup: steady, or drop it", sub="warmup_max_s")
        if self.requests_per_client is None:
            return self
        if self.warmup == "steady":
            raise problem("a request-count run (requests_per_client) warms up in a run of its "
                          "own, for warmup_s: drop warmup: steady", sub="warmup")
        if self.rate is not None or self.rate_of_max is not None:
            raise problem("an open-loop run (rate) sends at a fixed rate for measure_s; "
                          "request counts are for closed-loop clients: drop one of the two",
                          sub="requests_per_client")
        if "measure_s" not in self.model_fields_set:
            raise problem("a request-count run (requests_per_client) needs a time limit: give "
                          "measure_s, the longest its measured window may take", sub="measure_s")
        return self

    @property
    def rates(self) -> list[float | None]:
        """The rate axis: the offered rates, or [None] for a closed loop."""
        return list(self.rate) if self.rate is not None else [None]

    @property
    def fractions(self) -> list[float | None]:
        """The rate_of_max axis: the fractions of each mode's maximum, or [None]."""
        return list(self.rate_of_max) if self.rate_of_max is not None else [None]

    @property
    def open_loop(self) -> bool:
        """Does the load arrive at a rate (rate or rate_of_max) rather than from clients?"""
        return self.rate is not None or self.rate_of_max is not None

    def rate_record(self) -> float | list[float] | None:
        """The rate as the resolved experiment records it: one value, or the list of several."""
        if self.rate is None:
            return None
        return self.rate[0] if len(self.rate) == 1 else list(self.rate)


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

    rows: Annotated[int, whole(1, 1_000_000_000)] = 100_000
    row_bytes: Annotated[int, whole(1, 1 << 20)] = 256
    seed: Annotated[int, whole(0)] | None = None
    shared_buffers: Annotated[str, text(r"^[1-9][0-9]*(kB|MB|GB)$", "128MB")] = "128MB"


# The options a mode's `server:` block may set (Stack's own keys of the same names)
SERVER_OPTIONS = ("web_sendfile", "web_mmap", "proxy_cache")


class Stack(Model):
    """Server options of the stack (a mode's `server:` overrides them per point)."""

    proxy: Annotated[str, choice("apache", "haproxy")] = "apache"
    proxy_cache: Annotated[bool, flag()] = False
    web_sendfile: Annotated[bool, flag()] = True
    web_mmap: Annotated[bool, flag()] = True
    docroot: Annotated[list[Docroot], one_or_many(Docroot, "docroot")] = ["disk"]
    pvfs_io_servers: Annotated[int, whole(1, 8)] | None = None
    # where the OrangeFS I/O servers store: tmpfs, disk (Docker volumes) or a disk system's name
    # (each server on its own device(s): 004 §4.1's ext3 on an IDE disk per I/O server)
    pvfs_storage: Annotated[str, BeforeValidator(_system_or_storage)] | None = None
    hot_site: str | None = None
    hot_below: Annotated[int, whole(1)] | None = None
    # the web tier's memory limit (Docker's, e.g. 512m or 1g): its page cache lives inside it,
    # so a working set larger than this cannot stay cached (004's servers had 512 MB-1 GB)
    web_memory: Annotated[str, text(r"^[1-9][0-9]*[mMgG]$", "1g")] | None = None
    # each OrangeFS I/O server's memory limit (its page cache over its storage is charged to it)
    pvfs_memory: Annotated[str, text(r"^[1-9][0-9]*[mMgG]$", "512m")] | None = None
    # cold: the docroot's files are dropped from the page cache before every point, so that
    # the first read of each file comes from the disk (the disk docroot only)
    page_cache: Annotated[str, choice("warm", "cold")] = "warm"
    # 004 §5.2.4 Table 4: how files lie on 3 disks per web server (a factor; the docroot names
    # the disk system each disk is); each strategy sets its web servers
    placement: Annotated[list[str], one_or_many(choice(*webdisks.STRATEGIES), "strategy")] | None = None
    # 1 or 3 web servers behind the proxy (compose/web-servers.yml; 004's data center had 3)
    web_servers: Annotated[int, whole(1, 3)] | None = None
    # 1 to 4 proxies in front of the web servers (004's data center had 4), each balancing over
    # every web server, each with its own cache; the clients are bound to them round robin
    # (kinds/web/services.py: the overlay of proxy2.., kinds/web/load.py: the clients' targets)
    proxies: Annotated[int, whole(1, 4)] | None = None
    # the proxy and web tiers log every request with its time: per-file figures (004 Fig. 11-12)
    access_log: Annotated[bool, flag()] = False
    # the application and database tiers (with dynamic requests in the traces)
    db: Database | None = None
    app_workers: Annotated[int, whole(1, 1024)] | None = None


class UniformLog(Model):
    """A file set of `files` files with sizes uniform in log between min_size and max_size."""

    kind: Annotated[str, choice("uniform-log")]
    files: Annotated[int, whole(1)]
    min_size: Annotated[int, whole(1)]
    max_size: Annotated[int, whole(1)]
    seed: Annotated[int, whole(0)] | None = None

    @model_validator(mode="after")
    def _range(self) -> UniformLog:
        if self.max_size < self.min_size:
            raise problem("max_size: must be >= min_size")
        return self


class ClassSet(Model):
    """One of 004's workload classes (Table 2)."""

    kind: Annotated[str, choice("class")]
    class_: Annotated[int, whole(0)] = Field(alias="class")
    seed: Annotated[int, whole(0)] | None = None


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

    share: Annotated[float, number(0, 1)] = 1.0
    query: Annotated[str, choice(*tracelib.QUERIES)] = "point"
    work: Annotated[int, whole(0, 100_000)] = 1
    range_rows: Annotated[int, whole(1, 100_000)] = 10
    requests: Annotated[int, whole(1)] = 1000


class Single(Model):
    """Every request for one file of `size` bytes."""

    name: Annotated[str, safe_name("single-4k")]
    kind: Annotated[str, choice("single")]
    size: Annotated[int, whole(1)]
    per_client: Annotated[int, whole(1)] | None = None
    dynamic: Dynamic | None = None


class HitRatio(Model):
    """004 §5.2.2: a page-cache hit ratio made by mixing a hot file with files asked for once."""

    name: Annotated[str, safe_name("single-4k")]
    kind: Annotated[str, choice("hit-ratio")]
    size: Annotated[int, whole(1)]
    hit_ratio: Annotated[float, number(0, 1)]
    requests: Annotated[int, whole(1)]


class Zipf(Model):
    """Zipf(alpha) popularity over a file set."""

    name: Annotated[str, safe_name("single-4k")]
    kind: Annotated[str, choice("zipf")]
    alpha: Annotated[float, number(0)]
    requests: Annotated[int, whole(1)] = 10000
    fileset: Fileset
    mapping: Annotated[str, choice(*MAPPINGS)] = "random"
    per_client: Annotated[int, whole(1)] | None = None
    subsets: Annotated[int, whole(1)] | None = None
    dynamic: Dynamic | None = None


class WorldCup(Model):
    """The successful GETs of a World Cup 98 log in workloads/data/."""

    name: Annotated[str, safe_name("single-4k")]
    kind: Annotated[str, choice("worldcup")]
    log: Annotated[str, text(example="wc_day46_1.gz")]
    requests: Annotated[int, whole(0)] | None = None
    skip: Annotated[int, whole(0)] | None = None

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

    site: Annotated[str, text(r"^[A-Za-z_]\w*$", "foreground")]
    weight: Annotated[int, whole(1)] = 1
    kind: Annotated[str, choice("zipf")]
    alpha: Annotated[float, number(0)]
    fileset: Fileset
    mapping: Annotated[str, choice(*MAPPINGS)] = "random"


class Mix(Model):
    """Several sites at once, each replayed by its own clients (004 §4.4)."""

    name: Annotated[str, safe_name("single-4k")]
    kind: Annotated[str, choice("mix")]
    parts: Annotated[list[MixPart], Field(min_length=2)]
    per_client: Annotated[int, whole(1)]
    subsets: Annotated[int, whole(1)]

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

    stop: Annotated[str, choice("web", "proxy", *services.APP_TIERS)]
    after_s: Annotated[float, number(0)] = 1


class WebSettings(Model):
    """The keys of a web experiment file besides the common ones."""

    engine: Annotated[str, choice(*ENGINES)] = "locust"
    load: Load = Load()
    traces: Annotated[list[Trace], non_empty_list(Trace, "traces")]
    stack: Stack = Stack()
    target: Annotated[str, text(example="http://proxy")] = "http://proxy"
    allow_foreign_target: Annotated[bool, flag()] = False
    fault: Fault | None = None
    # disk systems of the experiment's own (real devices, other bandwidths) beside the built-in
    # ide, scsi and raid0 of 004 Table 3; a docroot names one (tierbench/tiers/disks.py)
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
        if self.engine == "wrk" and (self.load.think is not None or self.load.open_loop):
            raise problem("load: think and rate need engine: locust (wrk is closed loop; "
                          "rate_of_max too)")
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
        wrong = proxies_problem(self.stack.proxies or 1, self.target, self.engine,
                                list(self.load.users))
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
        if self.fault is not None and self.fault.stop in services.APP_TIERS and not dynamic:
            raise problem("fault.stop: the {tier} tier runs only with dynamic requests (a "
                          "trace's dynamic:)", tier=self.fault.stop)
        sites = {p.site for t in self.traces if isinstance(t, Mix) for p in t.parts}
        if any(d.endswith(HOT) for d in docroots) or self.stack.hot_site is not None:
            if self.stack.hot_site not in sites:
                raise problem("stack.hot_site: must name a site of a mix trace ({sites}), got "
                              "{got}", sites=", ".join(sorted(sites)) or "there is none",
                              got=repr(self.stack.hot_site))
        return self



def proxies_problem(proxies: int, target: str, engine: str, users: list[int]) -> str | None:
    """What is wrong with several proxies for this target and load (one sentence), or None.
    The clients are spread over the proxies only when they load the proxy (target
    http://proxy); wrk binds each of its threads to one proxy, so the connections must split
    evenly over the proxies' threads (fewer connections than proxies: one each, on the first)."""
    if proxies == 1:
        return None
    if not loads_proxy(target):
        return (f"stack.proxies: {proxies} proxies share the load only when the clients load "
                f"them (target: http://proxy), got target {target}: set target to http://proxy "
                "or remove stack.proxies")
    if engine == "wrk":
        odd = [u for u in users if u > proxies and u % proxies]
        if odd:
            return (f"load.users: engine wrk binds each thread to one of the {proxies} proxies, "
                    f"so users above {proxies} must be a multiple of {proxies}, got {odd[0]}")
    return None


def loads_proxy(target: str) -> bool:
    """Whether the clients load the proxy tier (target http://proxy, the default): only then
    are they spread over several proxies and do their responses fill a proxy's cache."""
    return target.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0] == "proxy"


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
    if s.proxies not in (None, 1):
        out["proxies"] = s.proxies
    if s.access_log:
        out["access_log"] = True
    if has_dynamic(settings):
        db = s.db or Database()
        out.update({"db_rows": db.rows, "db_row_bytes": db.row_bytes,
                    "db_seed": db.seed if db.seed is not None else seed,
                    "db_shared_buffers": db.shared_buffers, "app_workers": s.app_workers or 16})
    return out



def stack_for(exp: Experiment[WebSettings], mode: str, docroot: str,
              placement: str | None = None) -> dict[str, Any]:
    """The stack settings a point runs with: the experiment's, its docroot and placement
    strategy (which sets the web servers), then the mode's server options (which need a service
    restart when they change)."""
    s = exp.settings
    out = {**stack_settings(s, exp.seed), "docroot": docroot}
    if placement is not None:
        out["placement"] = placement
        servers = webdisks.STRATEGIES[placement].servers
        out.pop("web_servers", None)
        if servers > 1:
            out["web_servers"] = servers
    return {**out, **exp.mode(mode).server}


@dataclass(frozen=True)
class StackSettings:
    """The stack settings a point runs with (``record``: as the plan, the manifest and Compose
    read them, kinds.web.kind.WebKind.stack_for), typed for what the point's sequence asks."""

    record: dict[str, Any]

    @property
    def proxy(self) -> str:
        """apache or haproxy."""
        return str(self.record.get("proxy", "apache"))

    @property
    def proxy_cache(self) -> bool:
        """The Apache proxy caches (mod_cache_disk)."""
        return bool(self.record.get("proxy_cache")) and self.proxy == "apache"

    @property
    def docroot(self) -> str:
        """The point's docroot (disk, tmpfs, orangefs or a disk system, +hot-tmpfs or not)."""
        return str(self.record.get("docroot", "disk"))

    @property
    def memory_capped(self) -> bool:
        """The web tier or the OrangeFS I/O servers run under a memory cap (web_memory,
        pvfs_memory)."""
        return bool(self.record.get("web_memory") or self.record.get("pvfs_memory"))

    @property
    def cold(self) -> bool:
        """The docroot's files are dropped from the page cache before every point."""
        return self.record.get("page_cache") == "cold"

    @property
    def access_log(self) -> bool:
        """The proxy and web tiers log every request with its time."""
        return bool(self.record.get("access_log"))

    @property
    def web_servers(self) -> int:
        """Web servers behind the proxy (1 or 3)."""
        return int(self.record.get("web_servers") or 1)

    @property
    def proxies(self) -> int:
        """Proxies in front of the web servers (1 to 4)."""
        return int(self.record.get("proxies") or 1)

    @property
    def app_db(self) -> bool:
        """The application and database tiers run (dynamic requests)."""
        return services.has_app_db(self.record)

    def text(self) -> str:
        """key=value pairs, booleans as on/off (the plan's and the progress lines')."""
        return " ".join(f"{k}={'on' if v is True else 'off' if v is False else v}"
                        for k, v in self.record.items())

    def rebuilds(self, other: StackSettings) -> bool:
        """Whether going from ``other`` to these settings needs the stack down first (a
        volume's driver cannot change in place: the docroot anew)."""
        return any(self.record.get(k) != other.record.get(k)
                   for k in ("docroot", "placement", "web_servers"))
