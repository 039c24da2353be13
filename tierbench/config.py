"""Experiment and mode files: loading, validation (errors name the file and key), expansion."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierbench.modes import MODES_DIR, Mode, load_mode
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
DOCROOTS = ("disk", "tmpfs")

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
    else:
        raise ConfigError(f"{where}.kind: must be single, zipf or worldcup, got {kind!r}")
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
    modes = data.get("modes")
    if not isinstance(modes, list) or not modes or not all(isinstance(m, str) for m in modes):
        raise ConfigError(f"{where}: modes: must be a non-empty list of mode names")
    if len(set(modes)) != len(modes):
        raise ConfigError(f"{where}: modes: lists a mode twice")
    try:
        loaded_modes = [load_mode(m, modes_dir) for m in modes]
    except ConfigError as exc:
        raise ConfigError(f"{where}: modes: {exc}") from None
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
    _check_keys(f"{where}: stack", given, set(stack) | {"docroot"})
    docroots = given.pop("docroot", "disk")
    docroots = docroots if isinstance(docroots, list) else [docroots]
    if not docroots or any(d not in DOCROOTS for d in docroots):
        raise ConfigError(f"{where}: stack.docroot: must be one of {', '.join(DOCROOTS)} or a "
                          "list of them")
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
