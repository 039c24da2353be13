"""Load a results run into tidy pandas tables: one row per point (and phase), and the samples.

Layout read (written by the runner): RUN/summary.csv, RUN/manifest.json and, per point,
RUN/points/<id>/{samples.jsonl, requests.parquet (requests.csv in older runs), per_second.csv,
point.json}; request logs are read a batch at a time, so a point of millions of requests costs
one batch of memory (about 25 MB). The report spec
(manifest.json "report", see analysis/spec.py) says how to read the summary: with `phases`
(e.g. read, write) its `<phase>_<metric>` columns become one row per point and phase with a
`phase` column. Older runs without points/ load their summary; asking for their samples raises
LayoutError naming what is missing. Nothing here imports the runner: results files only.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from analysis import spec as specs
from analysis import stats

TIER_PREFIX = "cpu_s_"
TEXT = ("point", "trace", "mode", "engine", "error", "phase")
BOOLS = ("client_bound", "count_mismatch", "rate_short", "softirq_bound", "unsteady")
GENERATOR = "loadgen"

Progress = Callable[[int, int, float], None]


class LayoutError(Exception):
    """A run directory lacks a file or column the analysis needs (the message names it)."""


@dataclass
class Run:
    """One loaded run: its folder, manifest, report spec and the tidy per-point table."""

    dir: Path | None
    manifest: dict[str, Any]
    points: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    spec: dict[str, Any] = field(default_factory=dict)
    spec_source: str = ""  # "manifest.json" | "given" | "generic"

    @property
    def experiment(self) -> dict[str, Any]:
        """The resolved experiment recorded in the manifest ({} when absent)."""
        exp = self.manifest.get("experiment")
        return exp if isinstance(exp, dict) else {}

    @property
    def name(self) -> str:
        """The experiment's name."""
        return str(self.experiment.get("name") or "tierbench run")

    @property
    def run_id(self) -> str:
        """The run id (folder name when the manifest lacks it)."""
        rid = self.manifest.get("run_id")
        return str(rid) if rid else (self.dir.name if self.dir else "")

    @property
    def seed(self) -> Any:
        """The seed that shuffled the run order (None when not recorded)."""
        return self.experiment.get("seed")

    @property
    def per_point(self) -> pd.DataFrame:
        """One row per point (the first phase row of a point that has several)."""
        return self.points.drop_duplicates("point") if "point" in self.points else self.points


# --------------------------------------------------------------------------- summary


def read_summary_rows(path: Path) -> list[dict[str, str]]:
    """summary.csv as string dicts; cells beyond the header are a failed point's error."""
    rows = []
    with Path(path).open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = [h.strip() for h in next(reader, [])]
        for cells in reader:
            if not any(c.strip() for c in cells):
                continue
            row = {h: (cells[i].strip() if i < len(cells) else "") for i, h in enumerate(header)}
            extra = [c.strip() for c in cells[len(header) :] if c.strip()]
            if extra:
                row["error"] = "; ".join(([row["error"]] if row.get("error") else []) + extra)
            rows.append(row)
    return rows


def as_bool(value: Any) -> Any:
    """true/false/yes/no/1/0 (any case) as a bool, anything else as pd.NA."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    return {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}.get(
        text, pd.NA
    )


def trace_specs(experiment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Trace name -> spec from the experiment (older layouts list bare names: spec from name)."""
    specs_: dict[str, dict[str, Any]] = {}
    for item in experiment.get("traces") or []:
        spec = dict(item) if isinstance(item, dict) else {"name": str(item)}
        specs_[str(spec.get("name"))] = spec
    return specs_



def trace_facts(spec: dict[str, Any] | None) -> dict[str, Any]:
    """What a run recorded of a trace: its spec's kind, size, alpha, class and hit ratio, and
    the factors it names (never guessed from its name). Runs since the runner writes these
    into summary.csv take them from there; this fills them in for older ones."""
    spec = spec or {}
    fileset = got if isinstance(got := spec.get("fileset"), dict) else {}
    out: dict[str, Any] = {"trace_kind": spec.get("kind"), "size_bytes": spec.get("size"),
                           "alpha": spec.get("alpha"),
                           "class": spec.get("class", fileset.get("class")),
                           "hit_ratio": spec.get("hit_ratio")}
    for key in ("docroot", "clients", "connections", "write_size"):
        if key in spec:
            out[key] = spec[key]
    return out


def expand_phases(rows: list[dict[str, Any]], phases: list[str] | None) -> list[dict[str, Any]]:
    """Wide summary rows (`<phase>_<metric>` columns) as one row per point and phase.

    Each phase row keeps the point's other columns, gets the phase's columns without their
    prefix and `phase` = the phase. A phase without any value is left out (pfs-streams only
    reads); a point without any phase value (failed early) appears once, as the first phase.
    """
    if not phases:
        return [dict(r) for r in rows]
    out = []
    for row in rows:
        common = {k: v for k, v in row.items() if not any(k.startswith(f"{p}_") for p in phases)}
        emitted = False
        for p in phases:
            own = {k[len(p) + 1 :]: v for k, v in row.items() if k.startswith(f"{p}_")}
            if not any(str(v).strip() for v in own.values() if v is not None):
                continue
            out.append({**common, **own, "phase": p})
            emitted = True
        if not emitted:
            out.append({**common, "phase": phases[0]})
    return out


def expanded_header(header: list[str], phases: list[str] | None) -> list[str]:
    """The tidy table's columns for a summary header (phase prefixes removed, `phase` added)."""
    if not phases:
        return list(header)
    out = [h for h in header if not any(h.startswith(f"{p}_") for p in phases)]
    for h in header:
        for p in phases:
            if h.startswith(f"{p}_") and h[len(p) + 1 :] not in out:
                out.append(h[len(p) + 1 :])
    return out + ["phase"]


def varying_columns(rows: list[dict[str, Any]]) -> list[str]:
    """Columns whose non-empty values differ between rows."""
    seen: dict[str, set[str]] = {}
    for r in rows:
        for k, v in r.items():
            text = "" if v is None else str(v).strip()
            if text:
                seen.setdefault(k, set()).add(text)
    return [k for k, vals in seen.items() if len(vals) > 1]


def resolve_spec(manifest: dict[str, Any], given: dict[str, Any] | None,
                 rows: list[dict[str, Any]], header: list[str]
                 ) -> tuple[dict[str, Any], str, list[str]]:
    """The report spec of a run: manifest.json "report", else `given`, else a generic one built
    from the summary's columns. An invalid spec is not fatal: it is named in a note and the
    next source is used. Returns (spec, source, notes)."""
    notes: list[str] = []
    if isinstance(manifest, dict) and "report" in manifest:
        try:
            return specs.validate(manifest["report"]), "manifest.json", notes
        except specs.SpecError as exc:
            notes.append(f"manifest.json's report spec was not used ({exc})")
    if given is not None:
        try:
            return specs.validate(given), "given", notes
        except specs.SpecError as exc:
            notes.append(f"the report spec given was not used ({exc})")
    exp = manifest.get("experiment") if isinstance(manifest, dict) else None
    return (specs.generic(header, exp if isinstance(exp, dict) else {}, varying_columns(rows)),
            "generic", notes)


def read_run_files(run: Path) -> tuple[list[dict[str, str]], dict[str, Any], dict[str, Any], str]:
    """A run folder's summary rows, manifest ({} when unreadable), report spec and its source
    (resolve_spec: the manifest's, else a generic one)."""
    rows = read_summary_rows(run / "summary.csv")
    try:
        manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = {}
    header = list(dict.fromkeys(c for r in rows for c in r))
    spec, source, _ = resolve_spec(manifest, None, rows, header)
    return rows, manifest, spec, source


def point_records(run: Path | str) -> dict[str, dict[str, Any]]:
    """Each point's whole record by point id: its points/<id>/point.json, else its entry in the
    manifest (a point that never finished; a run from before 8 Dec 2026, whose manifest held
    every record whole). A finished point's manifest entry lacks the interface and mode
    snapshots (tierbench.modes.apply.without_snapshots); {} when the manifest is unreadable."""
    run = Path(run)
    try:
        manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    entries = manifest.get("points") if isinstance(manifest, dict) else None
    out: dict[str, dict[str, Any]] = {}
    for pid, entry in (entries.items() if isinstance(entries, dict) else ()):
        try:
            whole = json.loads((run / "points" / str(pid) / "point.json").read_text(
                encoding="utf-8"))
        except (OSError, ValueError):
            whole = None
        record = whole if isinstance(whole, dict) else entry
        if isinstance(record, dict):
            out[str(pid)] = record
    return out


def points_frame(rows: list[dict[str, Any]], manifest: dict[str, Any],
                 spec: dict[str, Any] | None = None) -> pd.DataFrame:
    """The tidy table from summary rows + manifest: typed, phases expanded, derived columns."""
    manifest = manifest if isinstance(manifest, dict) else {}
    phases = (spec or {}).get("phases")
    df = pd.DataFrame(expand_phases(rows, phases))
    if df.empty:
        return pd.DataFrame(columns=["point", "mode", "repetition", "failed", "order"])
    for col in df.columns:
        if col in TEXT:
            df[col] = df[col].map(lambda v: "" if v is None or v is pd.NA or (
                isinstance(v, float) and math.isnan(v)) else str(v).strip())
        elif col in BOOLS:  # Python bools (or pd.NA) in an object column
            df[col] = pd.Series([as_bool(v) for v in df[col]], index=df.index, dtype=object)
        else:
            converted = pd.to_numeric(df[col].map(lambda v: None if v == "" else v),
                                      errors="coerce")
            if converted.notna().sum() or df[col].map(lambda v: v in ("", None)).all():
                df[col] = converted.astype(float)
    for col in ("point", "mode", "error"):
        if col not in df:
            df[col] = ""
    if "repetition" not in df:
        df["repetition"] = 1.0
    primary = ((spec or {}).get("primary") or {}).get("column", "tps")
    if primary not in df:
        df[primary] = math.nan
    df["failed"] = df["error"].astype(bool)
    order = {p: i for i, p in enumerate(dict.fromkeys(df["point"]), 1)}
    df["order"] = df["point"].map(order)  # summary.csv is written in run (shuffled) order
    if "trace" in df:
        exp = got if isinstance(got := manifest.get("experiment"), dict) else {}
        tspecs = trace_specs(exp)
        recorded = pd.DataFrame([trace_facts(tspecs.get(t)) for t in df["trace"]],
                                index=df.index)
        for fact in recorded:
            if fact not in df:
                df[fact] = recorded[fact]
            elif df[fact].isna().any():  # a fact a summary row leaves empty (older runs)
                df[fact] = df[fact].where(df[fact].notna(), recorded[fact])
    derive(df, manifest)
    return df


# CPU-seconds columns and the cycles-per-KB column estimated from each; hardware-counter
# columns (cycles_<who>) give the same target when the summary has them.
CYCLE_ESTIMATES = {"cpu_s_servers": "server_cycles_per_kb", "host_cpu_s": "host_cycles_per_kb",
                   "client_cpu_s": "client_cycles_per_kb",
                   "server_cpu_s": "server_cycles_per_kb"}
CYCLE_COUNTERS = {"cycles_servers": "server_cycles_per_kb", "cycles_server":
                  "server_cycles_per_kb", "cycles_host": "host_cycles_per_kb",
                  "cycles_client": "client_cycles_per_kb"}


def derive(df: pd.DataFrame, manifest: dict[str, Any]) -> None:
    """Add per-tier and host CPU per request / per KB, utilisation and cycles per KB."""
    def col(name: str) -> pd.Series:
        return df[name] if name in df else pd.Series(math.nan, index=df.index)

    moved = "bytes_moved" if "bytes_moved" in df else "bytes"
    kb = col(moved) / 1024.0
    kb = kb.where(kb > 0)
    reqs = col("requests").where(col("requests") > 0)
    for c in [c for c in df.columns if c.startswith(TIER_PREFIX)]:
        tier = c[len(TIER_PREFIX):]
        df[f"cpu_us_per_req_{tier}"] = df[c] * 1e6 / reqs
        df[f"cpu_us_per_kb_{tier}"] = df[c] * 1e6 / kb
    if "host_cpu_us_per_kb" in df:  # host busy CPU seconds over the window
        df["host_cpu_s"] = df["host_cpu_us_per_kb"] * kb / 1e6
        if "requests" in df:
            df["host_cpu_us_per_req"] = df["host_cpu_s"] * 1e6 / reqs
    if "cpu_s_servers" in df and "window_s" in df:
        df["server_cpu_util"] = df["cpu_s_servers"] / df["window_s"].where(df["window_s"] > 0)
    host = got if isinstance(got := manifest.get("host"), dict) else {}
    clk = stats.clock(host.get("cpu_model"), host.get("cpu_mhz"))
    counted, estimated = [], []
    for source, target in CYCLE_COUNTERS.items():
        if source in df and target not in df:
            df[target] = df[source] / kb
            counted.append(target)
    for c in [c for c in df.columns if c.startswith("cycles_") and c not in CYCLE_COUNTERS]:
        df[f"cycles_per_kb_{c[len('cycles_'):]}"] = df[c] / kb
        counted.append(c)
    if clk:
        for source, target in CYCLE_ESTIMATES.items():
            if source in df and target not in df:
                df[target] = df[source] * clk.hz / kb
                estimated.append(target)
    parts = []
    if counted:
        parts.append(stats.HARDWARE_COUNTERS)
    if estimated and clk:
        parts.append(f"{stats.ESTIMATE}, {clk.hz / 1e9:.2f} GHz from {clk.source}"
                     + (f" ({', '.join(estimated)})" if counted else ""))
    if parts:
        df["cycles_source"] = "; ".join(parts)


def load_run(run_dir: Path | str, spec: dict[str, Any] | None = None) -> Run:
    """Load RUN/summary.csv and RUN/manifest.json into a Run; LayoutError names what is missing.

    The report spec is manifest.json's "report", else `spec`, else a generic one."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise LayoutError(f"{run_dir}: no such run folder; give results/<experiment>/<run-id>")
    summary = run_dir / "summary.csv"
    if not summary.is_file():
        raise LayoutError(f"{run_dir}: summary.csv is missing; this is not a tierbench run "
                          "folder (results/<experiment>/<run-id>)")
    rows = read_summary_rows(summary)
    header = list(rows[0]) if rows else _header(summary)
    notes = []
    manifest: dict[str, Any] = {}
    mpath = run_dir / "manifest.json"
    if mpath.is_file():
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise LayoutError(f"{mpath}: not valid JSON ({exc})") from None
        manifest = manifest if isinstance(manifest, dict) else {}
    else:
        notes.append("manifest.json is missing: no provenance, seed or trace specs")
    spec, source, spec_notes = resolve_spec(manifest, spec, rows, header)
    notes += spec_notes
    tidy = expanded_header(header, spec["phases"])
    missing = [c for c in ("point", "mode", spec["primary"]["column"]) if c not in tidy]
    if missing:
        raise LayoutError(f"{summary}: column(s) {', '.join(missing)} missing; this summary "
                          "predates the current layout or its report spec names another "
                          "primary column")
    if "repetition" not in header:
        notes.append("summary.csv has no repetition column: every point counted as repetition 1")
        for r in rows:
            r["repetition"] = "1"
    if spec["samples"] and not (run_dir / "points").is_dir():
        notes.append("points/ is missing (older layout): no per-second samples, so no "
                     "warm-up check, stability check or recomputation from samples")
    return Run(run_dir, manifest, points_frame(rows, manifest, spec), notes, spec, source)


def _header(path: Path) -> list[str]:
    with path.open(newline="", encoding="utf-8") as handle:
        return [h.strip() for h in next(csv.reader(handle), [])]


# --------------------------------------------------------------------------- samples


def _point_dir(run: Run, point: str) -> Path:
    if run.dir is None:
        raise LayoutError("this run was not loaded from a folder: no per-point samples")
    pdir = run.dir / "points" / point
    if not (pdir / "samples.jsonl").is_file():
        raise LayoutError(f"{pdir / 'samples.jsonl'} is missing: per-second samples of {point} "
                          "are not available (older layout or a point that failed early)")
    return pdir


def read_samples(path: Path) -> list[dict[str, Any]]:
    """samples.jsonl: one JSON object per line (1 Hz counters)."""
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


REQUEST_LOGS = ("requests.parquet", "requests.csv")  # this layout, then older runs'


@dataclass
class RequestCounts:
    """Successful requests (2xx, 3xx) and their bytes per interval between samples, counted
    from a point's request log a row group at a time (memory: one, whatever the requests):
    index k holds those that ended in (times[k-1], times[k]]; 0 before the first sample and
    len(times) after the last."""

    times: np.ndarray
    counts: np.ndarray
    bytes: np.ndarray

    def between(self, i: int, j: int) -> tuple[int, int]:
        """Requests and bytes that ended in (times[i], times[j]]."""
        return int(self.counts[i + 1:j + 1].sum()), int(self.bytes[i + 1:j + 1].sum())


def request_log(pdir: Path) -> Path | None:
    """A point's per-request records: requests.parquet, else an older run's requests.csv."""
    return next((pdir / n for n in REQUEST_LOGS if (pdir / n).is_file()), None)


def request_batches(path: Path) -> Any:
    """(end_s, bytes, status) arrays of a request log, a row group (or a CSV block) at a
    time."""
    cols = ["end_s", "bytes", "status"]
    if path.suffix == ".csv":
        batches = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=16 << 20),
                                 convert_options=pacsv.ConvertOptions(
                                     include_columns=cols,
                                     column_types={"end_s": pa.float64(), "bytes": pa.int64(),
                                                   "status": pa.int64()}))
    else:
        # a row group at a time: iter_batches, reading across row groups, holds more the longer
        # the file (tierbench/kinds/web/webmetrics.py)
        records = pq.ParquetFile(path)
        batches = (b for g in range(records.metadata.num_row_groups)
                   for b in records.read_row_group(g, columns=cols).combine_chunks().to_batches())
    for batch in batches:
        yield tuple(batch.column(c).to_numpy(zero_copy_only=False) for c in cols)


def count_requests(path: Path, samples: list[dict[str, Any]]) -> RequestCounts:
    """The request log counted per interval between the samples' times."""
    times = np.array([s["t"] for s in samples], dtype=float)
    counts = np.zeros(len(times) + 1, np.int64)
    nbytes = np.zeros(len(times) + 1, np.int64)
    for end_s, size, status in request_batches(path):
        ok = (status >= 200) & (status < 400)
        at = np.searchsorted(times, end_s[ok], side="left")
        counts += np.bincount(at, minlength=len(times) + 1)
        nbytes += np.bincount(at, weights=size[ok], minlength=len(times) + 1).astype(np.int64)
    return RequestCounts(times, counts, nbytes)


def _setting(run: Run, key: str, default: float) -> float:
    exp = run.experiment
    load = got if isinstance(got := exp.get("load"), dict) else {}
    value = load.get(key, exp.get(key))
    if value is None and key == "measure_s":
        value = exp.get("window_s")
    return float(value) if value is not None else default


def point_window(run: Run, point: str, samples: list[dict[str, Any]],
                 requests: RequestCounts | None = None) -> dict[str, Any]:
    """The measured window [start, end] of a point and where it came from.

    1. point.json "window" {"start", "end"} when the runner recorded it;
    2. else the sample pair after the warm-up that reproduces summary.csv (window_s, requests):
       the runner starts the sampler just before the load generator, so the window starts at
       first sample + warm-up, give or take one sample;
    3. else first sample + warm-up, first sample + warm-up + measured time.
    """
    pdir = run.dir / "points" / point if run.dir else None
    if pdir and (pdir / "point.json").is_file():
        rec = json.loads((pdir / "point.json").read_text(encoding="utf-8"))
        win = rec.get("window")
        if isinstance(win, dict) and "start" in win and "end" in win:
            return {"start": float(win["start"]), "end": float(win["end"]),
                    "source": "recorded in point.json"}
    warmup, measure = _setting(run, "warmup_s", 0.0), _setting(run, "measure_s", math.nan)
    t0 = samples[0]["t"]
    row = run.points.loc[run.points["point"] == point]

    def want(col: str) -> float:
        return float(row[col].iloc[0]) if col in row and len(row) else math.nan

    if not math.isnan(measure) and not math.isnan(want("window_s")):
        times = [s["t"] for s in samples]
        label = _client_label(run, point)
        firsts = [i for i, t in enumerate(times) if warmup - 1.5 <= t - t0 <= warmup + 1.5]
        for i in firsts:
            for j in range(i + 1, len(times)):
                if abs(times[j] - times[i] - want("window_s")) > 0.0015:
                    continue
                a, b = samples[i], samples[j]
                cpu = sum(b["cpu"][k]["usage_s"] - a["cpu"][k]["usage_s"] for k in b["cpu"]
                          if k != GENERATOR)
                if not math.isnan(want("cpu_s_servers")) and not math.isclose(
                        cpu, want("cpu_s_servers"), rel_tol=1e-4, abs_tol=1e-4):
                    continue
                if label and label in a.get("net", {}) and not math.isnan(want("bytes_moved")):
                    moved = b["net"][label]["tx_bytes"] - a["net"][label]["tx_bytes"]
                    if not math.isclose(moved, want("bytes_moved"), rel_tol=1e-5):
                        continue
                if requests is not None and not math.isnan(want("requests")):
                    if requests.between(i, j)[0] != int(want("requests")):
                        continue
                return {"start": times[i] - 1e-6, "end": times[j],
                        "source": "matched to summary.csv"}
    end = t0 + warmup + (measure if not math.isnan(measure) else samples[-1]["t"] - t0)
    return {"start": t0 + warmup, "end": end, "source": "derived: first sample + warm-up"}


def point_samples(run: Run, point: str) -> pd.DataFrame:
    """Per-second table of one point: rates between consecutive samples, warm-up marked.

    Columns: point, t (end of the interval), rel_s (since the first sample), dt, tps (from
    the request log, else per_second.csv), cpu_<tier> (cores), host_busy_pct, phase
    (warm-up | measured | after), window_source.
    """
    pdir = _point_dir(run, point)
    # the 1 Hz ticks: a mark (an extra sample that keeps a short window bracketed) would make a
    # short interval in the series
    samples = [s for s in read_samples(pdir / "samples.jsonl") if not s.get("mark")]
    if len(samples) < 2:
        raise LayoutError(f"{pdir / 'samples.jsonl'} has {len(samples)} sample(s); need two")
    log = request_log(pdir)
    requests = count_requests(log, samples) if log else None
    win = point_window(run, point, samples, requests)
    fallback = {}
    if requests is None and (pdir / "per_second.csv").is_file():
        with (pdir / "per_second.csv").open(newline="", encoding="utf-8") as handle:
            fallback = {round(float(r["t"]), 6): float(r["tps"]) for r in csv.DictReader(handle)}
    rows = []
    for n, (a, b) in enumerate(zip(samples, samples[1:]), 1):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        if requests is not None:
            tps = requests.between(n - 1, n)[0] / dt
        else:
            tps = fallback.get(round(b["t"], 6), math.nan)
        ticks = {k2: b["host"][k2] - a["host"][k2] for k2 in b["host"]}
        total = sum(ticks.values()) or 1
        phase = ("warm-up" if a["t"] < win["start"] else
                 "measured" if b["t"] <= win["end"] + 1e-6 else "after")
        rows.append({
            "point": point, "t": b["t"], "rel_s": b["t"] - samples[0]["t"], "dt": dt, "tps": tps,
            **{f"cpu_{tier}": (b["cpu"][tier]["usage_s"] - a["cpu"][tier]["usage_s"]) / dt
               for tier in b["cpu"]},
            "host_busy_pct": 100.0 * (total - ticks.get("idle", 0) - ticks.get("iowait", 0))
            / total,
            "phase": phase, "window_source": win["source"],
        })
    return pd.DataFrame(rows)


def load_samples(run: Run, progress: Progress | None = None) -> pd.DataFrame:
    """Per-second tables of every point that has samples, concatenated; progress(done, total, s_left)."""
    ids = [p for p in run.points["point"] if run.dir and
           (run.dir / "points" / p / "samples.jsonl").is_file()]
    frames, t0 = [], time.monotonic()
    for n, pid in enumerate(ids, 1):
        frames.append(point_samples(run, pid))
        if progress:
            elapsed = time.monotonic() - t0
            progress(n, len(ids), elapsed / n * (len(ids) - n))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def recompute_point(run: Run, point: str) -> dict[str, Any]:
    """TPS, requests, window, CPU seconds and bytes of a point recomputed from its raw files."""
    pdir = _point_dir(run, point)
    samples = read_samples(pdir / "samples.jsonl")
    log = request_log(pdir)
    requests = count_requests(log, samples) if log else None
    win = point_window(run, point, samples, requests)
    inside = [s for s in samples if win["start"] <= s["t"] <= win["end"] + 1e-6]
    if len(inside) < 2:
        raise LayoutError(f"{point}: fewer than two samples in the measured window")
    first, last = inside[0], inside[-1]
    dt = last["t"] - first["t"]
    out: dict[str, Any] = {"point": point, "window_source": win["source"], "window_s": dt,
                           "warmup_samples": sum(1 for s in samples if s["t"] < first["t"])}
    for tier in last["cpu"]:
        out[f"cpu_s_{tier}"] = last["cpu"][tier]["usage_s"] - first["cpu"][tier]["usage_s"]
    out["cpu_s_servers"] = sum(v for k, v in out.items()
                               if k.startswith("cpu_s_") and k != f"cpu_s_{GENERATOR}")
    if requests is not None:
        at = [i for i, s in enumerate(samples) if s is first or s is last]
        n, nbytes = requests.between(at[0], at[-1])
        out["requests"] = n
        out["tps"] = n / dt
        out["request_bytes"] = nbytes
    out.update(locust_check(pdir, first["t"], last["t"]))
    label = _client_label(run, point)
    if label and label in first.get("net", {}) and label in last.get("net", {}):
        out["bytes_moved"] = last["net"][label]["tx_bytes"] - first["net"][label]["tx_bytes"]
        out["mb_per_s"] = out["bytes_moved"] / dt / 1e6
    return out


def locust_check(pdir: Path, start: float, end: float) -> dict[str, Any]:
    """The load generator's own view: whole-run totals (locust_stats.csv) and the window's TPS
    from its cumulative history (locust_stats_history.csv, 1 s timestamps: approximate)."""
    out: dict[str, Any] = {}
    stats_csv, hist_csv = pdir / "locust_stats.csv", pdir / "locust_stats_history.csv"
    if stats_csv.is_file():
        with stats_csv.open(newline="", encoding="utf-8") as handle:
            for r in csv.DictReader(handle):
                if r.get("Name") == "Aggregated":
                    out["locust_requests_total"] = int(float(r["Request Count"]))
                    out["locust_failures_total"] = int(float(r["Failure Count"]))
    if hist_csv.is_file():
        with hist_csv.open(newline="", encoding="utf-8") as handle:
            rows = [(float(r["Timestamp"]), int(float(r["Total Request Count"])))
                    for r in csv.DictReader(handle) if r.get("Name") == "Aggregated"]
        inside = [r for r in rows if start <= r[0] <= end]
        if len(inside) >= 2 and inside[-1][0] > inside[0][0]:
            out["locust_window_tps"] = (inside[-1][1] - inside[0][1]) / (inside[-1][0]
                                                                          - inside[0][0])
            out["locust_window_s"] = inside[-1][0] - inside[0][0]
    return out


def _client_label(run: Run, point: str) -> str | None:
    """The host side of the load generator's veth: the endpoint listed after loadgen's own."""
    entry = (run.manifest.get("points") or {}).get(point) if isinstance(
        run.manifest.get("points"), dict) else None
    eps = (entry or {}).get("endpoints") or []
    for i, label in enumerate(eps):
        if str(label).startswith(f"{GENERATOR}:") and i + 1 < len(eps):
            return str(eps[i + 1])
    return None


def stderr_progress(label: str) -> Progress:
    """A progress callback that prints 'label: done/total points, about N s left' to stderr."""
    last = [0.0]

    def show(done: int, total: int, left: float) -> None:
        if done < total and time.monotonic() - last[0] < 1.0:
            return
        last[0] = time.monotonic()
        print(f"{label}: {done}/{total} points, about {left:.0f} s left", file=sys.stderr,
              flush=True)
    return show
