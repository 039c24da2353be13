"""The web kind's numbers: from a point's 1 Hz counter samples and per-request records to its
summary row (TPS, latency, CPU per tier, per request and per KB, client-bound flag, the
cache-miss share and its cold-cache flag); the
per-request records themselves (Locust's CSV logs converted to Parquet, read in batches).

The measured window is bracketed by samples: from the first sample at or after the end of the
warm-up to the last sample at or before the end of the measured period. Requests, CPU and bytes
are all counted over that same interval, so per-request and per-KB figures are consistent.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from tierbench.measure.counters import MeasureError, cpu_seconds, host_breakdown, window

CLIENT_BOUND_PCT = 85.0
SUMMARY_COLUMNS = [
    "point", "trace", "mode", "repetition", "engine", "users", "window_s", "requests", "tps",
    "p50_ms", "p99_ms", "mean_ms", "errors", "cpu_s_loadgen", "cpu_s_proxy", "cpu_s_web", "cpu_s_servers",
    "host_usr_pct", "host_sys_pct", "host_irq_pct", "host_softirq_pct", "host_iowait_pct",
    "host_steal_pct", "host_idle_pct", "host_unattributed_cpu_s", "generator_cpu_pct", "bytes_moved", "mb_per_s",
    "server_cpu_us_per_req", "server_cpu_us_per_kb", "host_cpu_us_per_kb", "client_bound",
]
# Per-request records: the engine's CSV log (end_s,latency_ms,bytes,path,status,late_ms, one per
# process or worker) becomes one Parquet file per point, with the worker's index (-1: one
# process). A row group per CSV_BLOCK of the log (about 220,000 records), read back one row
# group at a time: summarising a point holds one row group's columns and one count per distinct
# latency value, whatever the number of requests. (pyarrow's iter_batches, which reads across
# row groups, held more the longer the file: 47 MB at 1 million records, 108 MB at 4 million,
# measured; one row group at a time stays at the size of one.)
RECORDS = "requests.parquet"
SCHEMA = pa.schema([("end_s", pa.float64()), ("latency_ms", pa.float64()),
                    ("bytes", pa.int64()), ("path", pa.string()), ("status", pa.int32()),
                    ("late_ms", pa.float64()), ("worker", pa.int32())])
CSV_BLOCK = 16 << 20


MetricsError = MeasureError  # the name the web kind's callers use


@dataclass(frozen=True)
class Request:
    """One request as logged by the load generator."""

    end_s: float
    latency_ms: float
    bytes: int
    status: int

    @property
    def ok(self) -> bool:
        """A 2xx or 3xx answer."""
        return 200 <= self.status < 400


def _csv_blocks(path: Path, columns: list[str]) -> Iterator[pa.Table]:
    """A request log's CSV, CSV_BLOCK bytes of whole lines at a time. (pyarrow's streaming
    reader reads ahead as fast as the disk allows: on a large log it held most of the file.)"""
    types = {f.name: f.type for f in SCHEMA if f.name != "worker"}
    convert = pacsv.ConvertOptions(column_types=types, include_columns=columns,
                                   include_missing_columns=True)
    with path.open("rb") as fh:
        names = fh.readline().decode().strip().split(",")
        read = pacsv.ReadOptions(column_names=names, use_threads=False)
        rest = b""
        while True:
            block = fh.read(CSV_BLOCK)
            data, cut = rest + block, (rest + block).rfind(b"\n") + 1
            if not block:
                cut = len(data)
            data, rest = data[:cut], data[cut:]
            if data.strip():
                yield pacsv.read_csv(pa.py_buffer(data), read_options=read,
                                     convert_options=convert)
            if not block:
                return


class RequestLog:
    """A point's per-request records, read in batches: requests.parquet, an older run's
    requests.csv, or records in memory (tests, wrk's stand-in)."""

    def __init__(self, path: Path | None = None, records: list[Request] | None = None) -> None:
        self.path, self.records = path, records

    @classmethod
    def of(cls, requests: RequestLog | list[Request]) -> RequestLog:
        """A RequestLog of records given either way."""
        return requests if isinstance(requests, RequestLog) else cls(records=list(requests))

    def batches(self, columns: tuple[str, ...] = ("end_s", "latency_ms", "bytes", "status")
                ) -> Iterator[pa.RecordBatch]:
        """The records a row group (or a CSV block) at a time, with the columns asked for."""
        cols = list(columns)
        if self.records is not None:
            data = {"end_s": [r.end_s for r in self.records],
                    "latency_ms": [r.latency_ms for r in self.records],
                    "bytes": [r.bytes for r in self.records],
                    "status": [r.status for r in self.records],
                    "late_ms": [0.0] * len(self.records), "worker": [-1] * len(self.records)}
            yield pa.record_batch({c: pa.array(data[c], SCHEMA.field(c).type) for c in cols})
        elif self.path is not None and self.path.suffix == ".csv":
            for table in _csv_blocks(self.path, cols):
                yield from table.combine_chunks().to_batches()
        elif self.path is not None:
            records = pq.ParquetFile(self.path)
            for group in range(records.metadata.num_row_groups):
                yield from records.read_row_group(group, columns=cols).combine_chunks() \
                    .to_batches()

    def arrays(self, columns: tuple[str, ...] = ("end_s", "latency_ms", "bytes", "status")
               ) -> Iterator[dict[str, np.ndarray]]:
        """The numeric columns of each batch as numpy arrays."""
        for batch in self.batches(columns):
            yield {c: batch.column(c).to_numpy(zero_copy_only=False) for c in columns}


def convert_request_logs(point_dir: Path) -> RequestLog | None:
    """requests.parquet from the engine's CSV logs in point_dir (requests.csv, or one
    requests-wN.csv per worker), streamed a block at a time; the CSV logs are removed once the
    Parquet file is complete. None when there are neither."""
    out = point_dir / RECORDS
    parts = sorted(point_dir.glob("requests-w*.csv")) or \
        [p for p in [point_dir / "requests.csv"] if p.is_file()]
    if not parts:
        return RequestLog(out) if out.is_file() else None
    tmp = out.with_suffix(".tmp")
    with pq.ParquetWriter(tmp, SCHEMA, compression="zstd") as writer:
        for part in parts:
            found = re.search(r"-w(\d+)\.csv$", part.name)
            worker = int(found.group(1)) if found else -1
            if part.stat().st_size == 0:
                continue
            for table in _csv_blocks(part, [f.name for f in SCHEMA if f.name != "worker"]):
                # one row group per block (write_batch would make one per parsed chunk of 1 MB)
                writer.write_table(table.append_column(
                    "worker", pa.array(np.full(table.num_rows, worker, np.int32))))
    tmp.replace(out)
    for part in parts:
        part.unlink()
    return RequestLog(out)


def records_of(point_dir: Path) -> RequestLog | None:
    """The per-request records of a point: requests.parquet, else an older requests.csv."""
    for name in (RECORDS, "requests.csv"):
        if (point_dir / name).is_file():
            return RequestLog(point_dir / name)
    return None


class Latencies:
    """Latencies counted per distinct value: exact nearest-rank percentiles in memory that
    grows with the distinct values (the log keeps microseconds), not with the requests."""

    def __init__(self) -> None:
        self.values = np.zeros(0)
        self.counts = np.zeros(0, np.int64)

    def add(self, latencies: np.ndarray) -> None:
        """Count more latencies."""
        if len(latencies):
            self.add_counts(*np.unique(latencies, return_counts=True))

    def add_counts(self, values: np.ndarray, counts: np.ndarray) -> None:
        """Count values already counted elsewhere (another histogram's)."""
        merged, inv = np.unique(np.concatenate([self.values, values]), return_inverse=True)
        total = np.zeros(len(merged), np.int64)
        np.add.at(total, inv, np.concatenate([self.counts, counts]))
        self.values, self.counts = merged, total

    @property
    def n(self) -> int:
        """How many latencies were counted."""
        return int(self.counts.sum())

    def mean(self) -> float:
        """The mean; NaN when nothing was counted."""
        n = self.n
        return float((self.values * self.counts).sum() / n) if n else float("nan")

    def percentile(self, q: float) -> float:
        """Nearest-rank percentile (q in 0..100); NaN when nothing was counted."""
        n = self.n
        if not n:
            return float("nan")
        rank = max(1, math.ceil(q / 100 * n))
        return float(self.values[np.searchsorted(np.cumsum(self.counts), rank)])


# The percentiles every point states, from the merged histograms of its generator processes.
PERCENTILES = {"p50_ms": 50.0, "p90_ms": 90.0, "p99_ms": 99.0, "p999_ms": 99.9}
HISTOGRAMS = "latency_histogram.csv"  # a point's histograms: one per generator process
SENT, INTENDED = "sent", "intended"  # latency counted from the actual or the scheduled send


class Histograms:
    """A window's latency histograms, one per generator process (worker index, -1: a single
    process) and per starting point: from the time the request left (`sent`), and for an open
    loop from the time its schedule said it should leave (`intended`: coordinated omission
    corrected, as wrk2 counts). Each histogram counts exact values (the logs keep microseconds),
    so merging them loses nothing: the merged percentiles equal one process's doing all the
    load."""

    def __init__(self) -> None:
        self.each: dict[tuple[str, int], Latencies] = {}

    def add(self, measure: str, workers: np.ndarray, latencies: np.ndarray) -> None:
        """Count latencies of one measure, each with its worker index."""
        for w in np.unique(workers):
            self.each.setdefault((measure, int(w)), Latencies()).add(latencies[workers == w])

    def merged(self, measure: str) -> Latencies:
        """Every process's histogram of one measure, added up."""
        return merge([h for (m, _), h in sorted(self.each.items()) if m == measure])

    def rows(self) -> Iterator[dict]:
        """latency_histogram.csv's rows: measure, worker, latency_ms, count."""
        for (measure, worker), h in sorted(self.each.items()):
            for value, count in zip(h.values, h.counts):
                yield {"measure": measure, "worker": worker, "latency_ms": round(float(value), 3),
                       "count": int(count)}

    def write(self, path: Path) -> None:
        """The histograms as CSV (HISTOGRAMS)."""
        with path.open("w") as fh:
            fh.write("measure,worker,latency_ms,count\n")
            fh.writelines(f"{r['measure']},{r['worker']},{r['latency_ms']:.3f},{r['count']}\n"
                          for r in self.rows())

    @classmethod
    def read(cls, path: Path) -> Histograms:
        """Histograms written by `write`."""
        out = cls()
        table = pacsv.read_csv(path)
        measure = np.array(table.column("measure").to_pylist())
        worker = table.column("worker").to_numpy()
        value = table.column("latency_ms").to_numpy()
        count = table.column("count").to_numpy()
        for key in sorted(set(zip(measure.tolist(), worker.tolist()))):
            mine = (measure == key[0]) & (worker == key[1])
            h = out.each.setdefault(key, Latencies())
            h.values, h.counts = value[mine].astype(float), count[mine].astype(np.int64)
        return out


def merge(histograms: list[Latencies]) -> Latencies:
    """Histograms added up (counts of equal values summed)."""
    out = Latencies()
    for h in histograms:
        out.add_counts(h.values, h.counts)
    return out


def _ok(status: np.ndarray) -> np.ndarray:
    return (status >= 200) & (status < 400)


def first_sent(requests: RequestLog | list[Request]) -> float | None:
    """When the first request was sent (end minus latency), None without requests."""
    first = None
    for b in RequestLog.of(requests).arrays(("end_s", "latency_ms")):
        if len(b["end_s"]):
            m = float(np.min(b["end_s"] - b["latency_ms"] / 1000))
            first = m if first is None else min(first, m)
    return first


def served_per_second(requests: RequestLog | list[Request], origin: float, n: int) -> list[float]:
    """Successful requests (2xx, 3xx) that ended in each of the n seconds from ``origin``."""
    counts = np.zeros(n)
    edges = origin + np.arange(n + 1, dtype=float)
    for b in RequestLog.of(requests).arrays(("end_s", "status")):
        ok = (b["status"] >= 200) & (b["status"] < 400)
        counts += np.histogram(b["end_s"][ok], bins=edges)[0]
    return [float(c) for c in counts]


def last_ended(requests: RequestLog | list[Request]) -> float | None:
    """When the last request ended, None without requests."""
    last = None
    for b in RequestLog.of(requests).arrays(("end_s",)):
        if len(b["end_s"]):
            m = float(np.max(b["end_s"]))
            last = m if last is None else max(last, m)
    return last


def open_loop_counts(requests: RequestLog, window_: tuple[float, float],
                     late_ms: float) -> tuple[int, int]:
    """Open loop: successful requests that ended in the window, and requests that left more
    than late_ms after their schedule."""
    ok = late = 0
    for b in requests.arrays(("end_s", "status", "late_ms")):
        inside = (b["end_s"] > window_[0]) & (b["end_s"] <= window_[1])
        ok += int((inside & _ok(b["status"])).sum())
        late += int((inside & (np.nan_to_num(b["late_ms"]) > late_ms)).sum())
    return ok, late


def page_cache_figures(first: dict, last: dict, served: float, trace: dict) -> dict[str, float]:
    """What the web tier read from its disk between two samples (MB), and for a hit-ratio trace
    the page-cache hit ratio that made real: 1 - bytes read from disk / bytes of the files
    served, with `served` the successful requests completed between the same two samples (a
    cold page cache makes the request rate uneven, so a rate over another interval would not
    do). {} where the kernel does not count the tier's reads."""
    a, b = first["cpu"].get("web", {}), last["cpu"].get("web", {})
    if "read_bytes" not in a or "read_bytes" not in b:
        return {}
    read = b["read_bytes"] - a["read_bytes"]
    out = {"web_disk_read_mb": read / 1e6}
    if trace.get("kind") == "hit-ratio" and served > 0:
        out["page_cache_hit_ratio"] = max(0.0, 1.0 - read / (served * int(trace["size"])))
    return out


# A point is flagged `cold_cache` when more than COLD_CACHE_SHARE of its window missed the
# caches in front of the disks: a shortened run (--scale) from a cold, capped cache then
# measures first touches, not the regime 004 measured warm (issue 44).
COLD_CACHE_SHARE = 0.5


def miss_figures(row: dict[str, Any], asks_misses: bool) -> dict[str, Any]:
    """The share of a window's work that missed a cache, from what the point's steps counted:
    the proxies' misses over their hits and misses (ProxyCache), and the bytes the web tier or
    its docroot's storage read over the bytes served (web_disk_read_mb, storage_read_mb,
    bytes_moved); the larger as `cache_miss_share` (at most 1), and `cold_cache` when it is
    above COLD_CACHE_SHARE, never where the point asks for misses (``asks_misses``: a hit-ratio
    trace or a cold page cache). {} when nothing was counted."""
    shares = []
    hits, misses = row.get("proxy_cache_hits"), row.get("proxy_cache_misses")
    if hits is not None and misses is not None and hits + misses > 0:
        shares.append(misses / (hits + misses))
    served = row.get("bytes_moved") or 0
    read = [row[k] for k in ("web_disk_read_mb", "storage_read_mb") if row.get(k) is not None]
    if read and served > 0:
        shares.append(min(1.0, max(read) * 1e6 / served))
    if not shares:
        return {}
    share = max(shares)
    return {"cache_miss_share": share,
            "cold_cache": share > COLD_CACHE_SHARE and not asks_misses}


def memory_figures(samples: list[dict], first: dict, last: dict) -> dict[str, float]:
    """Whether the web tier's memory cap held over a window and what its docroot's storage read:
    `web_memory_mb` (the tier's memory limit read back from its cgroups, summed over its
    servers), `web_cache_mb` (its page cache, memory.stat's file, the largest of the window's
    samples), `storage_read_mb` (bytes read from the docroot's disk-system devices between the
    two samples, its `storage` probe). Each left out where it was not counted (no limit, no
    disk system)."""
    inside = [s for s in samples if first["t"] <= s["t"] <= last["t"]] or [first, last]
    out: dict[str, float] = {}
    caches = [s["cpu"]["web"]["file_bytes"] for s in inside
              if "file_bytes" in s.get("cpu", {}).get("web", {})]
    if caches:
        out["web_cache_mb"] = max(caches) / 1e6
    limit = last.get("cpu", {}).get("web", {}).get("mem_limit_bytes")
    if limit is not None:
        out["web_memory_mb"] = limit / 1e6
    a = (first.get("probes") or {}).get("storage") or {}
    b = (last.get("probes") or {}).get("storage") or {}
    if "read_bytes" in a and "read_bytes" in b:
        out["storage_read_mb"] = (b["read_bytes"] - a["read_bytes"]) / 1e6
    return out


def site_figures(requests: RequestLog, sites: dict[str, str], start: float,
                 end: float) -> dict[str, float]:
    """Per site of a mix trace (name -> URL prefix): TPS (successful requests ending in
    (start, end] per second) and median latency, from the request log; `tps_<site>`, `p50_ms_<site>`."""
    latencies = {site: Latencies() for site in sites}
    for batch in requests.batches(("end_s", "latency_ms", "status", "path")):
        end_s = batch.column("end_s").to_numpy(zero_copy_only=False)
        keep = (end_s > start) & (end_s <= end) & \
            _ok(batch.column("status").to_numpy(zero_copy_only=False))
        lat = batch.column("latency_ms").to_numpy(zero_copy_only=False)
        for site, prefix in sites.items():
            mine = pc.starts_with(batch.column("path"), prefix).to_numpy(zero_copy_only=False)
            latencies[site].add(lat[keep & mine])
    span = end - start
    out: dict[str, float] = {}
    for site, counted in latencies.items():
        out[f"tps_{site}"] = counted.n / span if span > 0 else 0.0
        out[f"p50_ms_{site}"] = counted.percentile(50)
    return out


def dynamic_figures(requests: RequestLog, start: float, end: float, dynamic_prefix: str,
                    write_prefix: str) -> dict[str, float]:
    """From the request log: successful dynamic requests (paths under `dynamic_prefix`) per
    second in (start, end] (`dyn_tps`) and over the whole run (`dynamic_answered`: against the
    database's counters over the load), and successful writes over the whole run (`writes_ok`:
    the rows they inserted are counted after the point)."""
    dynamic = answered = writes = 0
    for batch in requests.batches(("end_s", "status", "path")):
        end_s = batch.column("end_s").to_numpy(zero_copy_only=False)
        ok = _ok(batch.column("status").to_numpy(zero_copy_only=False))
        paths = batch.column("path")
        writes += int((ok & pc.starts_with(paths, write_prefix).to_numpy(
            zero_copy_only=False)).sum())
        dyn = pc.starts_with(paths, dynamic_prefix).to_numpy(zero_copy_only=False)
        dynamic += int((ok & dyn & (end_s > start) & (end_s <= end)).sum())
        answered += int((ok & dyn).sum())
    span = end - start
    return {"dyn_tps": dynamic / span if span > 0 else 0.0, "dynamic_answered": answered,
            "writes_ok": writes}


def summarize(samples: list[dict], requests: RequestLog | list[Request], *, start: float,
              end: float, generator: str, generator_allowance: float,
              bytes_label: str | list[str] | list[tuple[str, str]],
              open_loop: bool = False, histograms: Histograms | None = None) -> dict:
    """The measured numbers of one point (see SUMMARY_COLUMNS); bytes moved are the tx bytes of
    the interface(s) `bytes_label` names (the host ends of the generator's veths), summed, or
    the counter a (label, counter) pair names (a cluster node's NIC: rx_bytes); with none, the
    bytes of the requests. The request log is read a batch at a time.

    Latency percentiles (PERCENTILES) come from the merged histograms of the generator
    processes over the window (`histograms`, filled here when given); an open loop's are counted
    from each request's scheduled send time (coordinated omission corrected), with the
    percentiles from the actual send beside them (`p99_ms_sent`, ...)."""
    first, last = window(samples, start, end)
    dt = last["t"] - first["t"]
    hist = histograms if histograms is not None else Histograms()
    counted, good, good_bytes = count_window(requests, first["t"], last["t"], open_loop, hist)
    if not good:
        raise MetricsError("no successful request completed in the measured window")
    cpu = cpu_seconds(first, last)
    servers = sum(v for tier, v in cpu.items() if tier != generator)
    host = host_breakdown(first["host"], last["host"])
    busy_s = host["busy_s"]
    labels = [(lb, "tx_bytes") if isinstance(lb, str) else tuple(lb)
              for lb in ([bytes_label] if isinstance(bytes_label, str) else bytes_label)]
    if labels and all(lb in first["net"] and lb in last["net"] for lb, _ in labels):
        moved = sum(last["net"][lb][c] - first["net"][lb][c] for lb, c in labels)
    else:
        moved = good_bytes
    kbytes = moved / 1024 or float("nan")
    gen_pct = 100.0 * cpu.get(generator, 0.0) / dt / generator_allowance
    row = {
        "window_s": round(dt, 3),
        "requests": good,
        "tps": good / dt,
        **latency_figures(hist, open_loop),
        "errors": counted - good,
        **{f"cpu_s_{tier}": v for tier, v in sorted(cpu.items())},
        "cpu_s_servers": servers,
        **{f"host_{k}": v for k, v in host.items() if k != "busy_s"},
        # Busy host CPU no tier's cgroup was charged for: other processes on the host and
        # interrupt work the kernel did not account to a container. High values mean interference.
        "host_unattributed_cpu_s": max(0.0, busy_s - sum(cpu.values())),
        "generator_cpu_pct": gen_pct,
        "bytes_moved": moved,
        "mb_per_s": moved / dt / 1e6,
        "server_cpu_us_per_req": servers * 1e6 / good,
        "server_cpu_us_per_kb": servers * 1e6 / kbytes,
        "host_cpu_us_per_kb": busy_s * 1e6 / kbytes,
        "client_bound": gen_pct >= CLIENT_BOUND_PCT,
    }
    return row


def count_window(requests: RequestLog | list[Request], start: float, end: float,
                 open_loop: bool, hist: Histograms) -> tuple[int, int, int]:
    """Requests that ended in (start, end]: how many, how many succeeded and their bytes; the
    successful ones' latencies counted into `hist` per generator process (and, for an open loop,
    from their intended send time: the latency plus how late the request left)."""
    counted = good = good_bytes = 0
    for b in RequestLog.of(requests).arrays(("end_s", "latency_ms", "bytes", "status",
                                             "late_ms", "worker")):
        inside = (b["end_s"] > start) & (b["end_s"] <= end)
        ok = inside & _ok(b["status"])
        counted += int(inside.sum())
        good += int(ok.sum())
        good_bytes += int(b["bytes"][ok].sum())
        workers = np.nan_to_num(b["worker"].astype(float), nan=-1).astype(int)[ok]
        hist.add(SENT, workers, b["latency_ms"][ok])
        if open_loop:
            late = np.nan_to_num(b["late_ms"].astype(float))[ok]
            hist.add(INTENDED, workers, b["latency_ms"][ok] + late)
    return counted, good, good_bytes


def latency_figures(hist: Histograms, open_loop: bool) -> dict[str, float]:
    """p50/p90/p99/p99.9 and the mean from the merged histograms: from the intended send time
    for an open loop (and from the actual send as `*_sent`), else from the actual send."""
    sent = hist.merged(SENT)
    main = hist.merged(INTENDED) if open_loop else sent
    out = {k: main.percentile(q) for k, q in PERCENTILES.items()}
    out["mean_ms"] = main.mean()
    if open_loop:
        out.update({f"{k}_sent": sent.percentile(q) for k, q in PERCENTILES.items()})
    return out


def per_second(samples: list[dict], requests: RequestLog | list[Request]) -> list[dict]:
    """Per-second rates between consecutive samples: requests, CPU per tier, host busy %."""
    times = np.array([s["t"] for s in samples], dtype=float)
    counts = np.zeros(len(times) + 1, np.int64)
    for b in RequestLog.of(requests).arrays(("end_s", "status")):
        ends = b["end_s"][_ok(b["status"])]
        # request k counts in the interval (times[i-1], times[i]] with i = searchsorted(...)
        counts += np.bincount(np.searchsorted(times, ends, side="left"),
                              minlength=len(times) + 1)
    rows = []
    for i, (a, b) in enumerate(zip(samples, samples[1:]), 1):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        ticks = {k: b["host"][k] - a["host"][k] for k in b["host"]}
        total = sum(ticks.values()) or 1
        rows.append({
            "t": b["t"],
            "tps": int(counts[i]) / dt,
            **{f"cpu_{tier}": (b["cpu"][tier]["usage_s"] - a["cpu"][tier]["usage_s"]) / dt
               for tier in b["cpu"]},
            "host_busy_pct": 100.0 * (total - ticks["idle"] - ticks["iowait"]) / total,
        })
    return rows
