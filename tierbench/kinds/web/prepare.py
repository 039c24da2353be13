"""A web run's traces: written into the run's folder before the first point (a World Cup log
read with progress lines), with what the points need of them: the file sets, the hot site's
sets, the files' popularity (004 Table 4) and sizes (per-file figures)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tierbench.config.errors import ConfigError
from tierbench.kinds.contract import Experiment, log
from tierbench.kinds.web import webdisks
from tierbench.kinds.web.settings import WebSettings, stack_settings, trace_dicts
from workloads import filesets, worldcup
from workloads import traces as tracelib


@dataclass
class WebPrepared:
    """What a web run's points need of its traces: each trace's file (by name), the file sets
    and the hot site's sets they need, each set's files by popularity rank (a docroot spread by
    popularity, 004 Table 4), every file's size (per-file figures from access logs), and
    whether the experiment's fault has fired (once per run)."""

    traces: dict[str, Path]
    filesets: list[dict]
    hot_sets: list[dict]
    popularity: dict[str, list[int]]
    sizes: dict[str, int]
    fault_done: bool = False


@contextmanager
def workload_errors(exp: Experiment) -> Iterator[None]:
    """Problems of the workloads library (a missing or damaged World Cup log, a file set that
    cannot be made) as one sentence naming the experiment."""
    try:
        yield
    except (tracelib.TraceError, filesets.FilesetError, worldcup.WorldCupError) as exc:
        raise ConfigError(f"{exp.source}: {exc}") from None


def progress_every(what: str, seconds: float = 5.0) -> worldcup.Progress:
    """A World Cup progress callback that logs the records read every few seconds."""
    last = [time.monotonic()]

    def show(records: int) -> None:
        if time.monotonic() - last[0] >= seconds:
            last[0] = time.monotonic()
            log(f"tierbench: {what}: {records:,} log records read")
    return show


def filesets_of(specs: list[dict]) -> list[dict]:
    """The file sets of the traces, each once, in order."""
    sets: list[dict] = []
    for spec in specs:
        sets += [fs for fs in tracelib.filesets_of(spec) if fs not in sets]
    return sets


def hot_sets(specs: list[dict], site: str | None) -> list[dict]:
    """The file sets of a mix trace's hot site (stack.hot_site)."""
    return [tracelib.fileset_of(part) for t in specs if t["kind"] == "mix"
            for part in t["parts"] if part["site"] == site]


def prepare(exp: Experiment[WebSettings], run_dir: Path) -> WebPrepared:
    """Every trace written into run_dir/traces; the file sets and hot sets they need."""
    s = exp.settings
    with workload_errors(exp):
        folder = run_dir / "traces"
        folder.mkdir(exist_ok=True)  # a resumed run writes the same traces again
        specs = trace_dicts(s)
        paths = {}
        for spec in specs:
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
        sets = filesets_of(specs)
        return WebPrepared(
            traces=paths, filesets=sets,
            hot_sets=hot_sets(specs, stack_settings(s).get("hot_site")),
            popularity=webdisks.popularity(specs, exp.seed) if s.stack.placement else {},
            sizes=webdisks.sizes_of(sets) if s.stack.access_log else {})
