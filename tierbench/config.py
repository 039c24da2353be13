"""Experiment and mode files: loading, validation (errors name the file and key), expansion."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierbench.modes import MODES_DIR, Mode, load_mode, load_mode_list
from workloads import traces
from tierbench.schema import (
    ROOT,
    TIERS,
    ConfigError,
    check_keys,
    number,
    read_yaml,
    resolve_path,
)

__all__ = ["ConfigError", "Experiment", "Mode", "Point", "load_experiment", "load_mode",
           "resolve_path", "EXPERIMENTS_DIR", "MODES_DIR", "TIERS", "ROOT"]

EXPERIMENTS_DIR = ROOT / "experiments"
PROXIES = ("apache", "haproxy")
ENGINES = ("locust", "wrk")
DOCROOTS = ("disk", "tmpfs", "orangefs")
HOT = "+hot-tmpfs"  # docroot suffix: the hot site's small files also on a tmpfs, served first

_read_yaml = read_yaml
_check_keys = check_keys
_number = number


@dataclass(frozen=True)
class Point:
    """One measured run: a trace under a mode, one repetition."""

    index: int
    trace: dict[str, Any]
    mode: str
    repetition: int
    users: int = 16
    docroot: str = "disk"

    @property
    def id(self) -> str:
        """Directory name of the point: p001, p002, ..."""
        return f"p{self.index:03d}"


@dataclass
class Experiment:
    """A resolved experiment file."""

    name: str
    description: str
    source: str
    seed: int
    repetitions: int
    engine: str
    users: list[int]
    warmup_s: float
    measure_s: float
    settle_s: float
    modes: list[Mode]
    traces: list[dict[str, Any]]
    stack: dict[str, Any]
    processes: int = 1
    workers: int = 0
    remote_workers: int = 0
    worker_wait_s: float = 60.0
    think: dict[str, Any] | None = None
    rate: float | None = None
    target: str = "http://proxy"
    allow_foreign_target: bool = False
    docroots: list[str] = field(default_factory=lambda: ["disk"])
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    def points(self) -> list[Point]:
        """Every trace x mode x users x docroot x repetition, in an order shuffled with the
        experiment's seed; points that need the same stack settings (server options, docroot)
        run together, so services restart as rarely as possible."""
        combos = list(itertools.product(self.traces, self.modes, self.users, self.docroots,
                                        range(1, self.repetitions + 1)))
        random.Random(self.seed).shuffle(combos)
        groups: dict[tuple, list] = {}
        for combo in combos:
            key = tuple(sorted(self.stack_for(combo[1], combo[3]).items()))
            groups.setdefault(key, []).append(combo)
        ordered = [combo for group in groups.values() for combo in group]
        return [Point(i + 1, t, m.name, r, users=u, docroot=d)
                for i, (t, m, u, d, r) in enumerate(ordered)]

    def stack_for(self, mode: Mode, docroot: str = "disk") -> dict[str, Any]:
        """The stack settings a point runs with: the experiment's, its docroot, then the mode's
        server options (which need a service restart when they change)."""
        return {**self.stack, "docroot": docroot, **getattr(mode, "server", {})}

    def mode(self, name: str) -> Mode:
        """The mode of that name."""
        return next(m for m in self.modes if m.name == name)

    def resolved(self) -> dict[str, Any]:
        """The experiment with every default filled in and modes inlined, for the manifest."""
        return {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "seed": self.seed,
            "repetitions": self.repetitions,
            "engine": self.engine,
            "load": {"users": self.users, "processes": self.processes, "workers": self.workers,
                     "remote_workers": self.remote_workers, "worker_wait_s": self.worker_wait_s,
                     "think": self.think,
                     "rate": self.rate, "warmup_s": self.warmup_s, "measure_s": self.measure_s},
            "target": self.target,
            "allow_foreign_target": self.allow_foreign_target,
            "settle_s": self.settle_s,
            "modes": [m.as_dict() for m in self.modes],
            "traces": self.traces,
            "stack": {**self.stack, "docroot": self.docroots},
        }


def _trace(where: str, spec: Any) -> dict[str, Any]:
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: must be a mapping with name and kind")
    name, kind = spec.get("name"), spec.get("kind")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name: required")
    if kind == "single":
        _check_keys(where, spec, {"name", "kind", "size", "per_client"})
        _number(f"{where}.size", spec.get("size"), minimum=1, integer=True)
    elif kind == "zipf":
        _check_keys(where, spec, {"name", "kind", "alpha", "requests", "fileset", "mapping",
                                  "per_client", "subsets"})
        _number(f"{where}.alpha", spec.get("alpha"), minimum=0)
        _number(f"{where}.requests", spec.get("requests", 10000), minimum=1, integer=True)
        fs = spec.get("fileset")
        if not isinstance(fs, dict) or fs.get("kind") not in ("uniform-log", "class"):
            raise ConfigError(f"{where}.fileset: must be a mapping with kind: uniform-log or class")
        if fs["kind"] == "class":
            _check_keys(f"{where}.fileset", fs, {"kind", "class", "seed"})
        else:
            _check_keys(f"{where}.fileset", fs, {"kind", "files", "min_size", "max_size", "seed"})
            for key in ("files", "min_size", "max_size"):
                _number(f"{where}.fileset.{key}", fs.get(key), minimum=1, integer=True)
            if fs["max_size"] < fs["min_size"]:
                raise ConfigError(f"{where}.fileset.max_size: must be >= min_size")
    elif kind == "worldcup":
        _check_keys(where, spec, {"name", "kind", "log", "requests", "skip"})
    elif kind == "mix":
        _check_keys(where, spec, {"name", "kind", "parts", "per_client", "subsets"})
        parts = spec.get("parts")
        if not isinstance(parts, list) or len(parts) < 2:
            raise ConfigError(f"{where}.parts: must list two or more traces, each with a site")
        names = []
        for i, part in enumerate(parts):
            w = f"{where}.parts[{i}]"
            if not isinstance(part, dict) or part.get("kind") != "zipf":
                raise ConfigError(f"{w}.kind: a part is a zipf trace")
            _check_keys(w, part, {"site", "weight", "kind", "alpha", "fileset", "mapping"})
            site = part.get("site")
            if not isinstance(site, str) or not site.isidentifier():
                raise ConfigError(f"{w}.site: a name such as foreground, got {site!r}")
            _number(f"{w}.weight", part.get("weight", 1), minimum=1, integer=True)
            _trace(w, {k: v for k, v in part.items() if k not in ("site", "weight")}
                   | {"name": site})
            names.append(site)
        if len(set(names)) != len(names):
            raise ConfigError(f"{where}.parts: two parts share a site name")
        _number(f"{where}.per_client", spec.get("per_client"), minimum=1, integer=True)
        cycle = sum(int(p.get("weight", 1)) for p in parts)
        count = _number(f"{where}.subsets", spec.get("subsets"), minimum=cycle, integer=True)
        if count % cycle:
            raise ConfigError(f"{where}.subsets: must be a multiple of the weights' sum "
                              f"({cycle}), so that every site keeps its share of the clients")
        sets = [traces.fileset_of(p) for p in parts]
        if any(sets.count(fs) > 1 for fs in sets):
            raise ConfigError(f"{where}.parts: two sites use the same file set; give one another "
                              "seed (fileset.seed) so that each site has its own files")
    else:
        raise ConfigError(f"{where}.kind: must be single, zipf, worldcup or mix, got {kind!r}")
    try:
        traces.validate(where, spec)
    except traces.TraceError as exc:
        raise ConfigError(str(exc)) from None
    return dict(spec)


def load_experiment(name: str, modes_dir: Path = MODES_DIR) -> Experiment:
    """Load and validate an experiment file (by name in experiments/, or by path); one with a
    `pfs:` block is a parallel file system experiment (tierbench.pfs.PfsExperiment)."""
    path = resolve_path(name, EXPERIMENTS_DIR, "experiment")
    data = _read_yaml(path)
    where = str(path)
    if "pfs" in data:  # a parallel file system experiment on the OrangeFS tier
        from tierbench import pfs

        return pfs.load_pfs(path, data, modes_dir)
    _check_keys(where, data, {"name", "description", "seed", "repetitions", "engine", "load",
                              "settle_s", "modes", "traces", "stack", "target",
                              "allow_foreign_target"})
    engine = data.get("engine", "locust")
    if engine not in ENGINES:
        raise ConfigError(f"{where}: engine: must be one of {', '.join(ENGINES)}, got {engine!r}")
    load = data.get("load") or {}
    if not isinstance(load, dict):
        raise ConfigError(f"{where}: load: must be a mapping")
    _check_keys(f"{where}: load", load, {"users", "processes", "think", "rate", "warmup_s",
                                         "measure_s", "workers", "remote_workers",
                                         "worker_wait_s"})
    users = load.get("users", 16)
    users = users if isinstance(users, list) else [users]
    if not users:
        raise ConfigError(f"{where}: load.users: must be a whole number >= 1 or a list of them")
    users = [_number(f"{where}: load.users", u, minimum=1, integer=True) for u in users]
    think, rate = load.get("think"), load.get("rate")
    if think is not None:
        if not isinstance(think, dict) or think.get("kind") not in ("fixed", "exponential"):
            raise ConfigError(f"{where}: load.think: must be {{kind: fixed|exponential, mean_ms: N}}")
        _check_keys(f"{where}: load.think", think, {"kind", "mean_ms"})
        _number(f"{where}: load.think.mean_ms", think.get("mean_ms"), minimum=0)
    if rate is not None:
        _number(f"{where}: load.rate", rate, minimum=0.001)
    if engine == "wrk" and any(t.get("kind") == "mix" for t in data.get("traces") or []
                               if isinstance(t, dict)):
        raise ConfigError(f"{where}: traces: a mix trace needs engine: locust (its per-site TPS "
                          "comes from the per-request log, which wrk does not keep)")
    if engine == "wrk" and (think is not None or rate is not None):
        raise ConfigError(f"{where}: load: think and rate need engine: locust (wrk is closed loop)")
    workers = _number(f"{where}: load.workers", load.get("workers", 0), minimum=0, integer=True)
    remote = _number(f"{where}: load.remote_workers", load.get("remote_workers", 0), minimum=0,
                     integer=True)
    worker_wait = _number(f"{where}: load.worker_wait_s", load.get("worker_wait_s", 60),
                          minimum=1)
    if engine != "locust" and (workers or remote):
        raise ConfigError(f"{where}: load.workers: Locust workers need engine: locust "
                          f"(this experiment uses {engine})")
    from tierbench.loadgen import LoadgenError, check_target  # loadgen imports the stack

    target = data.get("target", "http://proxy")
    allow_foreign = data.get("allow_foreign_target", False)
    if not isinstance(allow_foreign, bool):
        raise ConfigError(f"{where}: allow_foreign_target: must be true or false")
    if not isinstance(target, str):
        raise ConfigError(f"{where}: target: must be a URL such as http://proxy")
    try:
        check_target(target, allow_foreign)
    except LoadgenError as exc:
        raise ConfigError(f"{where}: target: {exc}") from None
    loaded_modes = load_mode_list(where, data.get("modes"), modes_dir)
    traces = data.get("traces")
    if not isinstance(traces, list) or not traces:
        raise ConfigError(f"{where}: traces: must be a non-empty list")
    traces = [_trace(f"{where}: traces[{i}]", t) for i, t in enumerate(traces)]
    names = [t["name"] for t in traces]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: traces: two traces share a name")
    stack = {"proxy": "apache", "proxy_cache": False, "web_sendfile": True, "web_mmap": True}
    given = dict(data.get("stack") or {})
    if not isinstance(data.get("stack") or {}, dict):
        raise ConfigError(f"{where}: stack: must be a mapping")
    _check_keys(f"{where}: stack", given, set(stack) | {"docroot", "pvfs_io_servers",
                                                        "hot_site", "hot_below"})
    docroots = given.pop("docroot", "disk")
    docroots = docroots if isinstance(docroots, list) else [docroots]
    if not docroots or any(d.removesuffix(HOT) not in DOCROOTS for d in docroots):
        raise ConfigError(f"{where}: stack.docroot: must be one of {', '.join(DOCROOTS)} (each "
                          f"optionally with {HOT}) or a "
                          "list of them")
    if any(d.startswith("orangefs") for d in docroots) or "pvfs_io_servers" in given:
        # the docroot on OrangeFS: 1 metadata + N I/O servers (004 ran PVFS with 3)
        stack["pvfs_io_servers"] = _number(f"{where}: stack.pvfs_io_servers",
                                           given.pop("pvfs_io_servers", 3), minimum=1,
                                           integer=True, maximum=8)
    if any(d.endswith(HOT) for d in docroots) or "hot_site" in given:
        # 004 §4.4: the hot site's files below hot_below bytes also live on a tmpfs
        site = given.pop("hot_site", None)
        known = {p["site"] for t in traces if t["kind"] == "mix" for p in t["parts"]}
        if site not in known:
            raise ConfigError(f"{where}: stack.hot_site: must name a site of a mix trace "
                              f"({', '.join(sorted(known)) or 'there is none'}), got {site!r}")
        stack["hot_site"] = site
        stack["hot_below"] = _number(f"{where}: stack.hot_below", given.pop("hot_below", 1048576),
                                     minimum=1, integer=True)
    stack.update(given)
    if stack["proxy"] not in PROXIES:
        raise ConfigError(f"{where}: stack.proxy: must be one of {', '.join(PROXIES)}")
    for key in ("proxy_cache", "web_sendfile", "web_mmap"):
        if not isinstance(stack[key], bool):
            raise ConfigError(f"{where}: stack.{key}: must be on or off")
    return Experiment(
        name=str(data.get("name", path.stem)),
        description=" ".join(str(data.get("description", "")).split()),
        source=str(path),
        seed=_number(f"{where}: seed", data.get("seed", 1), minimum=0, integer=True),
        repetitions=_number(f"{where}: repetitions", data.get("repetitions", 1), minimum=1, integer=True),
        engine=engine,
        users=users,
        processes=_number(f"{where}: load.processes", load.get("processes", 1), minimum=1,
                          integer=True),
        workers=workers,
        remote_workers=remote,
        worker_wait_s=worker_wait,
        think=think,
        rate=rate,
        target=target,
        allow_foreign_target=allow_foreign,
        docroots=docroots,
        warmup_s=_number(f"{where}: load.warmup_s", load.get("warmup_s", 5), minimum=0),
        measure_s=_number(f"{where}: load.measure_s", load.get("measure_s", 15), minimum=2),
        settle_s=_number(f"{where}: settle_s", data.get("settle_s", 1), minimum=0),
        modes=loaded_modes,
        traces=traces,
        stack=stack,
        raw=data,
    )
