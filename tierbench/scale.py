"""The scale benchmark (`make bench-scale`; prints figures, is not a test).

At 1, 4 and 16 million records (`--sizes`): a World Cup log of that many records is made (a
seeded synthetic day: Zipf-popular objects, 20-byte records), then three stages each run in
their own process, which reports its time and peak memory (ru_maxrss):

  trace    the web kind's preparation: the file set and the trace written (workloads)
  records  a point's Locust log of that many requests (requests.csv) converted to
           requests.parquet and summarised, as the runner does after a point
  report   the report of a run holding that point (analysis.report), and its size

It prints each figure and the ratios between sizes: the goal is time in proportion to the
records and memory flat. Before writing anything it checks the disk space and memory it needs.

Usage: python -m tierbench.scale [--sizes 1,4,16] [--work DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from tierbench.config.errors import TierbenchError
from tierbench.config.files import ROOT, results_root
from tierbench.kinds.web import webmetrics
from tierbench.kinds.web.report import report_spec
from tierbench import space
from tierbench.transport import run_argv
from workloads import worldcup

MILLION = 1_000_000
OBJECTS = 30_000  # distinct objects of the synthetic day (a World Cup day had about 20-40 k)
CSV_BYTES = 75  # a Locust request-log line, with a World Cup path
PARQUET_BYTES = 16  # one record in requests.parquet (measured: 11-15 bytes)
TRACE_BYTES = 30  # one request line of a World Cup trace
STAGE_MEMORY = 1 << 30  # room each stage's process may need


class ScaleError(TierbenchError):
    """The benchmark cannot run here (space, memory)."""


def make_log(path: Path, records: int, seed: int = 1998, largest: int = 2_000_000) -> None:
    """A synthetic World Cup log: Zipf-popular objects of 200 bytes to `largest` (log-uniform),
    92 % GETs answered 200, written a million records at a time."""
    rng = np.random.default_rng(seed)
    sizes = np.round(np.exp(rng.uniform(np.log(200), np.log(largest), OBJECTS))).astype(np.int64)
    with path.open("wb") as fh:
        for start in range(0, records, MILLION):
            n = min(MILLION, records - start)
            recs = np.zeros(n, worldcup.DTYPE)
            recs["timestamp"] = 894000000 + (start + np.arange(n)) // 1000
            recs["client"] = rng.integers(0, 200_000, n)
            recs["obj"] = (rng.zipf(1.2, n) - 1) % OBJECTS
            recs["size"] = sizes[recs["obj"]]
            recs["method"] = np.where(rng.random(n) < 0.97, 0, 1)
            recs["status"] = (1 << 6) | np.where(rng.random(n) < 0.95, 2, 13)
            recs["type"] = 1
            fh.write(recs.tobytes())


def synthetic_point(run_dir: Path, requests: int, seconds: int = 60, seed: int = 7) -> None:
    """A run of one web point with `requests` per-request records over `seconds` (Locust's
    layout: samples.jsonl, requests.parquet, point.json, summary.csv, manifest.json), its
    summary computed from them as the runner would. For the report's scale tests."""
    rng = np.random.default_rng(seed)
    pdir = run_dir / "points" / "p001"
    pdir.mkdir(parents=True)
    t0, rate = 1_800_000_000.0, requests / seconds
    samples: list[dict[str, Any]] = []
    for i in range(seconds + 3):
        t = t0 + i
        busy = 0.9 * i
        samples.append({"t": t, "host": {"user": int(60 * i), "nice": 0, "system": int(30 * i),
                                         "idle": int(100 * i), "iowait": 0, "irq": 0,
                                         "softirq": int(10 * i), "steal": 0},
                        "cpu": {"loadgen": {"usage_s": busy}, "proxy": {"usage_s": busy / 2},
                                "web": {"usage_s": busy / 3}},
                        "net": {"host:veth0": {"tx_bytes": int(i * rate * 4096),
                                               "rx_bytes": 0}}})
    (pdir / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    with pq.ParquetWriter(pdir / webmetrics.RECORDS, webmetrics.SCHEMA,
                          compression="zstd") as writer:
        for first_request in range(0, requests, MILLION):
            n = min(MILLION, requests - first_request)
            ends = t0 + 1 + (first_request + np.arange(n)) / rate
            writer.write_batch(pa.record_batch({
                "end_s": ends, "latency_ms": np.round(rng.exponential(3.0, n), 3),
                "bytes": np.full(n, 4096), "path": pa.array(["/single-4096/file.bin"] * n),
                "status": np.where(rng.random(n) < 0.999, 200, 503).astype(np.int32),
                "late_ms": np.zeros(n), "worker": np.full(n, -1, np.int32)},
                schema=webmetrics.SCHEMA))
    start, end = t0 + 5, t0 + seconds
    row = {"point": "p001", "trace": "single-4k", "mode": "offloads-on", "repetition": 1,
           "engine": "locust", "users": 64, "docroot": "disk",
           **webmetrics.summarize(samples, webmetrics.RequestLog(pdir / webmetrics.RECORDS),
                                  start=start, end=end, generator="loadgen",
                                  generator_allowance=1.0, bytes_label="host:veth0")}
    inside = [s for s in samples if start <= s["t"] <= end]
    first, last = inside[0], inside[-1]
    record = {"point": "p001", "mode": "offloads-on", "repetition": 1, "complete": True,
              "window": {"start": first["t"], "end": last["t"]}, "summary": row}
    (pdir / "point.json").write_text(json.dumps(record))
    with (run_dir / "summary.csv").open("w") as fh:
        fh.write(",".join(row) + "\n")
        fh.write(",".join("true" if v is True else "false" if v is False else str(v)
                          for v in row.values()) + "\n")
    resolved = {"name": "dc-single", "kind": "web", "engine": "locust", "seed": 1,
                "load": {"users": [64], "warmup_s": 5, "measure_s": seconds - 5},
                "modes": [{"name": "offloads-on"}],
                "traces": [{"name": "single-4k", "kind": "single", "size": 4096}],
                "stack": {"docroot": ["disk"]}}
    (run_dir / "manifest.json").write_text(json.dumps({
        "run_id": run_dir.name, "status": "complete", "kind": "web", "experiment": resolved,
        "report": report_spec(resolved), "points": {"p001": {k: v for k, v in record.items()
                                                              if k != "summary"}}}))


def make_request_csv(path: Path, requests: int, seed: int = 11) -> None:
    """A Locust request log (requests.csv) of `requests` records, a million at a time."""
    rng = np.random.default_rng(seed)
    with path.open("wb") as fh:
        fh.write(b"end_s,latency_ms,bytes,path,status,late_ms\n")
        for start in range(0, requests, MILLION):
            n = min(MILLION, requests - start)
            table = pa.table({
                "end_s": np.round(1_800_000_001 + (start + np.arange(n)) / 5000.0, 6),
                "latency_ms": np.round(rng.exponential(3.0, n), 3),
                "bytes": rng.integers(200, 2_000_000, n),
                "path": pa.array([f"/wc98-wc_day66_1-5ba1e16a/o{o}.bin"
                                  for o in rng.zipf(1.2, n) % OBJECTS]),
                "status": np.full(n, 200), "late_ms": np.zeros(n)})
            pacsv.write_csv(table, fh, pacsv.WriteOptions(include_header=False))


PEAK = """
def peak_mb():  # this process's own high-water mark (ru_maxrss would count its parent's)
    with open("/proc/self/status") as fh:
        return next(int(l.split()[1]) for l in fh if l.startswith("VmHWM")) / 1024
"""
STAGE_TRACE = """
import json, sys, time
from pathlib import Path
from workloads import filesets, traces
spec = {"name": "wc", "kind": "worldcup", "log": sys.argv[1]}
t = time.monotonic()
files = filesets.files(spec)
n = traces.write_chunks(Path(sys.argv[2]), traces.chunks(spec, 1), "scale benchmark")
print(json.dumps({"s": time.monotonic() - t, "requests": n, "files": len(files),
                  "peak_mb": peak_mb()}))
"""
STAGE_RECORDS = """
import json, sys, time
from pathlib import Path
from tierbench.kinds.web import webmetrics
from tierbench.kinds.web.report import report_spec
point = Path(sys.argv[1])
t = time.monotonic()
log = webmetrics.convert_request_logs(point)
first = webmetrics.first_sent(log)
stats = webmetrics.Latencies()
n = 0
for b in log.arrays():
    ok = (b["status"] >= 200) & (b["status"] < 400)
    n += int(ok.sum())
    stats.add(b["latency_ms"][ok])
print(json.dumps({"s": time.monotonic() - t, "requests": n, "p99_ms": stats.percentile(99),
                  "parquet_bytes": (point / webmetrics.RECORDS).stat().st_size,
                  "peak_mb": peak_mb()}))
"""
STAGE_REPORT = """
import json, sys, time
from pathlib import Path
from analysis import report
t = time.monotonic()
out = report.write_report(Path(sys.argv[1]))
print(json.dumps({"s": time.monotonic() - t, "report_bytes": out.stat().st_size,
                  "peak_mb": peak_mb()}))
"""


def stage(code: str, *args: Path) -> dict:
    """Run one stage in its own process; its JSON line (time, peak memory, figures)."""
    done = run_argv([sys.executable, "-c", PEAK + code, *map(str, args)], cwd=ROOT,
                    timeout=3600)
    if done.returncode != 0:
        raise ScaleError(f"a stage failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def needs(work: Path, largest_m: int) -> list[space.Need]:
    """Disk and memory the largest size needs at once (log, trace, records, the run)."""
    n = largest_m * MILLION
    disk = n * (worldcup.DTYPE.itemsize + TRACE_BYTES + CSV_BYTES + 2 * PARQUET_BYTES)
    return [space.on_disk(f"the scale benchmark at {largest_m} million records", disk, work,
                          "the work folder", "use smaller --sizes or another --work folder"),
            space.Need("one stage of the scale benchmark", STAGE_MEMORY, "memory",
                       space.memory_room(), "close other programs")]


def run_size(work: Path, millions: int, out=print) -> dict[str, dict]:
    """The three stages at one size; their figures by stage."""
    n = millions * MILLION
    folder = work / f"{millions}m"
    folder.mkdir()
    log = folder / "wc_synthetic.bin"
    t = time.monotonic()
    make_log(log, n)
    out(f"{millions:>3} M: log of {n:,} records made in {time.monotonic() - t:.1f} s")
    got = {"trace": stage(STAGE_TRACE, log, folder / "wc.txt")}
    log.unlink()
    (folder / "wc.txt").unlink()
    run = folder / "run"
    synthetic_point(run, n)
    point = run / "points" / "p001"
    (point / webmetrics.RECORDS).unlink()
    make_request_csv(point / "requests.csv", n)
    got["records"] = stage(STAGE_RECORDS, point)
    got["report"] = stage(STAGE_REPORT, run)
    for name, fig in got.items():
        extra = {"trace": lambda f: f"{f['requests']:,} requests, {f['files']:,} files",
                 "records": lambda f: f"{f['parquet_bytes'] / n:.1f} bytes per record",
                 "report": lambda f: f"report {f['report_bytes'] / 1024:.0f} KiB"}[name](fig)
        out(f"{millions:>3} M: {name:<8} {fig['s']:7.2f} s  peak {fig['peak_mb']:6.0f} MB  "
            f"({extra})")
    shutil.rmtree(folder)
    return got


def main(argv: list[str] | None = None) -> int:
    """Command line: the stages at every size, then the ratios between sizes."""
    ap = argparse.ArgumentParser(prog="python -m tierbench.scale", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,4,16", help="millions of records, comma-separated")
    ap.add_argument("--work", type=Path, default=None, help="where to write (default: a "
                    "temporary folder under the results folder)")
    args = ap.parse_args(argv)
    try:
        sizes = [int(x) for x in args.sizes.split(",")]
        if not sizes or min(sizes) < 1:
            raise ValueError
    except ValueError:
        print(f"scale: --sizes {args.sizes!r}: give whole millions >= 1, e.g. 1,4,16",
              file=sys.stderr)
        return 2
    base = args.work or results_root()
    base.mkdir(parents=True, exist_ok=True)
    problems = space.problems(needs(base, max(sizes)))
    if problems:
        print(f"scale: {problems[0]}; nothing was written", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="scale-", dir=base))
    results: dict[int, dict[str, dict]] = {}
    try:
        for m in sizes:
            results[m] = run_size(work, m)
    except ScaleError as exc:
        print(f"scale: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\nratios between sizes (time should follow the records, memory stay flat):")
    for a, b in zip(sizes, sizes[1:]):
        for name in ("trace", "records", "report"):
            fa, fb = results[a][name], results[b][name]
            print(f"  {b} M / {a} M  {name:<8} time x{fb['s'] / fa['s']:.2f} "
                  f"(records x{b / a:g})  peak memory x{fb['peak_mb'] / fa['peak_mb']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
