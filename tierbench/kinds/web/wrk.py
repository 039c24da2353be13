"""The wrk engine: closed-loop connections at a high rate, the trace replayed by a Lua script.
A timed point is one wrk run over warm-up and measured time, on the same connections, its
figures cut from the replay's per-second counts; a request-count run follows a timed warm-up
run. wrk's own counts; the latencies of the window only, from the replay's reads of wrk's
histogram during the run (else its whole-run histogram without its coordinated-omission
correction)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace
from pathlib import Path
from collections import Counter
from urllib.parse import urlsplit

import numpy as np

from tierbench.kinds.web.load import (COUNTED_AIM_S, LoadgenError, LoadResult, LoadSpec,
                                      container_path, count_extra, cpuset_cores, exec_engine,
                                      limit_reached, load_s, log_tail, requests_in,
                                      warmup_extra, warmup_found)
from tierbench.kinds.web import webmetrics
from workloads import counting
from tierbench.placement.model import Container

WRK_SCRIPT = "/app/workloads/wrk/replay.lua"
# wrk's --timeout: answers slower than this count as timeouts; replay.lua also finds wrk's
# latency histogram by the limit it sets (TIMEOUT_S in microseconds)
TIMEOUT_S = 10


def wrk_threads(users: int, processes: int, proxies: int = 1) -> int:
    """wrk threads: the largest count <= processes that divides the connections evenly. With
    several proxies each thread is bound to one (wrk sets a thread's server address, not a
    connection's: replay.lua's setup), so the threads are a multiple of the proxies that
    divides the connections (settings.proxies_problem refuses users that no multiple divides),
    each proxy getting users / proxies connections; fewer connections than proxies: a thread
    each, on the first proxies."""
    if proxies <= 1:
        return max(t for t in range(1, min(users, processes) + 1) if users % t == 0)
    if users <= proxies:
        return users
    return proxies * wrk_threads(users // proxies, max(1, processes // proxies))


def thread_targets(spec: LoadSpec) -> list[str]:
    """host:port of the proxy each wrk thread is bound to, thread t to proxy t mod N (none with
    one target)."""
    if len(spec.targets) <= 1:
        return []
    threads = wrk_threads(spec.users, spec.processes, len(spec.targets))
    out = []
    for t in range(threads):
        parts = urlsplit(spec.targets[t % len(spec.targets)])
        out.append(f"{parts.hostname}:{parts.port or 80}")
    return out




# wrk's own request count and the replay's per-second records may differ by the requests in
# flight when the run stops, and by no more than this share beyond them; past it the point is
# flagged (summary.csv count_mismatch). Locust's TPS comes from its per-request records alone
# (its statistics file counts requests differently: no cross-check).
COUNT_TOLERANCE = 0.02


def count_check(engine_requests: float, records_requests: float, in_flight: int) -> dict:
    """engine_requests, records_requests and count_mismatch for the summary row."""
    apart = abs(engine_requests - records_requests)
    return {"engine_requests": round(engine_requests), "records_requests": round(records_requests),
            "count_mismatch": apart > in_flight + COUNT_TOLERANCE * max(engine_requests,
                                                                          records_requests)}


def wrk_url(target: str) -> str:
    """wrk needs an explicit port: http://proxy -> http://proxy:80/."""
    parts = urlsplit(target)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    return f"{parts.scheme}://{host}:{port}/"


def wrk_argv(spec: LoadSpec, duration_s: int, script: bool = True) -> list[str]:
    """The wrk command line: connections = users, threads as wrk_threads(), latency printed."""
    threads = wrk_threads(spec.users, spec.processes, max(1, len(spec.targets)))
    argv = ["wrk", "-t", str(threads), "-c", str(spec.users), "-d", f"{duration_s}s",
            "--timeout", f"{TIMEOUT_S}s", "--latency"]
    if script:
        argv += ["-s", WRK_SCRIPT]
    return argv + [wrk_url(spec.target)]


def run_once(spec: LoadSpec, loadgen: Container, point_dir: Path, trace: Path, name: str,
             duration_s: int, per_client: int | None = None) -> dict:
    """One wrk run (with per_client, a request-count run that ends when every client has sent
    that many requests and had them answered, duration_s being its limit); returns the JSON
    summary the replay script wrote (wrk-NAME.json)."""
    out = point_dir / f"wrk-{name}.json"
    env = {"TRACE": container_path(trace), "CONNECTIONS": str(spec.users),
           "THREADS": str(wrk_threads(spec.users, spec.processes, max(1, len(spec.targets)))),
           "WRK_OUT": container_path(out), "TIMEOUT_S": str(TIMEOUT_S)}
    if spec.targets:  # each thread's proxy (replay.lua's setup)
        env["THREAD_TARGETS"] = ",".join(thread_targets(spec))
    if per_client:
        env["REQUESTS_PER_CLIENT"] = str(per_client)
    if spec.dynamic:
        env["DYNAMIC"] = "1"
    log = point_dir / f"wrk-{name}.txt"
    code = exec_engine(spec.where, wrk_argv(spec, duration_s), env, loadgen, log,
                       duration_s + 60, "wrk", fetch=spec.fetch)
    if code != 0 or not out.exists():
        raise LoadgenError(f"wrk ({name}) exited with code {code} and no summary: "
                           f"{log_tail(log)}")
    return json.loads(out.read_text())



def wrk_uncorrected(histogram: list[list[int]], duration_us: int, requests: int,
                    connections: int) -> dict[int, int] | None:
    """wrk's latency histogram ({microseconds: count}) without its coordinated-omission
    correction, or None when the histogram does not invert to the answers wrk counted.

    After its run wrk adds, for every recorded latency v of at least 2e (e = the run's
    microseconds / (answers / connections), integer division as in its C), one synthetic sample
    at each of v - e, v - 2e, ... while above e (wrk's stats_correct). So a recorded value v > e
    holds its own count plus the counts of v + e, v + 2e, ...: taken from the top down, each
    value's own count is what is left after those above it in steps of e."""
    if not histogram or connections <= 0 or requests // connections <= 0:
        return None
    e = duration_us // (requests // connections)
    corrected = {int(v): int(c) for v, c in histogram}
    own: dict[int, int] = {}
    chain: dict[int, int] = {}  # v -> own counts of v, v + e, v + 2e, ...
    for v in sorted(corrected, reverse=True):
        above = chain.get(v + e, 0)
        own[v] = corrected[v] - (above if v > e else 0)
        chain[v] = own[v] + above
    total = sum(own.values())
    if any(c < 0 for c in own.values()) or not 0 < total <= requests:
        return None
    return {v: c for v, c in own.items() if c}


def latency_of(histogram: dict[int, int]) -> dict:
    """min, max, mean, stdev and percentiles (ms) of a {microseconds: count} histogram, each
    percentile the value at rank round(p / 100 * n + 0.5) as wrk computes it (C's round)."""
    values = sorted(histogram)
    n = sum(histogram.values())
    mean = sum(v * c for v, c in histogram.items()) / n
    var = sum(c * (v - mean) ** 2 for v, c in histogram.items()) / max(1, n - 1)
    pct = {}
    for p in (50, 75, 90, 99, 99.9, 99.99):
        rank, seen = math.floor(p / 100 * n + 0.5 + 0.5), 0  # C's round(), half up
        for v in values:
            seen += histogram[v]
            if seen >= rank:
                break
        pct[str(p) if p != int(p) else str(int(p))] = v / 1000
    return {"min": values[0] / 1000, "max": values[-1] / 1000, "mean": mean / 1000,
            "stdev": math.sqrt(var) / 1000, "percentiles": pct}


def bucket_width(us: int) -> int:
    """The width of the latency bucket holding `us` microseconds, as replay.lua buckets them:
    3 significant digits (1 us below 1 ms, 10 us below 10 ms, ...), each value within 1 %."""
    width = 1
    while us >= 1000 * width and width < 100_000:
        width *= 10
    return width


def bucketed(histogram: dict[int, int]) -> Counter[int]:
    """A {microseconds: count} histogram in replay.lua's buckets ({bucket start: count})."""
    out: Counter[int] = Counter()
    for us, count in histogram.items():
        out[us - us % bucket_width(us)] += count
    return out


def window_buckets(summary: dict, window: tuple[float, float], own: dict[int, int] | None,
                   at_end: bool) -> tuple[Counter[int], tuple[float, float]] | None:
    """The latencies wrk recorded between the replay's reads of its histogram nearest the
    window's ends ({bucket start: count}, and the times of those reads), None without reads.
    A window that ends with the run ends with wrk's whole histogram (`own`, without its
    coordinated-omission samples), which also holds the answers after the last read."""
    ticks = summary.get("latency_ticks")
    if not ticks:
        return None
    cum: Counter[int] = Counter()
    reads: list[tuple[float, Counter[int]]] = [(float(summary["started"]), Counter())]
    for t, added in ticks:
        cum.update({int(b): int(c) for b, c in added})
        reads.append((float(t), cum.copy()))

    def nearest(t: float) -> tuple[float, Counter[int]]:
        return min(reads, key=lambda r: abs(r[0] - t))

    t0, first = nearest(window[0])
    ends = [nearest(window[1])]
    if at_end and own is not None:
        ends.insert(0, (window[1], bucketed(own)))
    for t1, last in ends:
        diff = {b: c - first.get(b, 0) for b, c in last.items()}
        if all(c >= 0 for c in diff.values()) and all(b in last for b in first):
            return Counter({b: c for b, c in diff.items() if c}), (t0, t1)
    return None


def histograms_of(buckets: Counter[int], exact: bool = False) -> webmetrics.Histograms:
    """A bucketed window (window_buckets) as the point's histograms: one generator process (wrk),
    each bucket counted at its middle, a whole microsecond (exact: the keys are the values), in
    ms."""
    hist = webmetrics.Histograms()
    lat = hist.each.setdefault((webmetrics.SENT, -1), webmetrics.Latencies())
    starts = sorted(buckets)
    lat.values = np.array([(b if exact else b + bucket_width(b) // 2) / 1000
                           for b in starts])
    lat.counts = np.array([buckets[b] for b in starts], np.int64)
    return hist


def figures_of(hist: webmetrics.Histograms, source: str) -> dict:
    """latency_ms of a window's histograms: percentiles and mean as every point states them."""
    fig = webmetrics.latency_figures(hist, False)
    return {"percentiles": {str(q) if q != int(q) else str(int(q)): fig[k]
                            for k, q in webmetrics.PERCENTILES.items()},
            "mean": fig["mean_ms"], "max": float(hist.merged(webmetrics.SENT).values[-1]),
            "uncorrected": True, "window_only": True, "source": source}


def aggregate_of(summary: dict, connections: int = 0, warmup_s: float = 0.0,
                 measure_s: float | None = None) -> dict:
    """The LoadResult aggregate of a wrk run: counts over exactly its measured window.

    wrk's clock starts when its last thread has read the trace; earlier threads are already
    sending. The window runs from there, after `warmup_s` of warm-up on the same connections
    (a timed run over warm-up and measured time), to the end of wrk's duration, or in a
    request-count run until the last thread's clients had all their requests answered
    (`finished_last`). With a warm-up in the run, or when the threads started apart (more than
    1 % of the window), the requests, errors and bytes are those the replay counted inside the
    window (per second, prorated). wrk's own count is checked against the replay's over the
    whole run; its latency histogram covers the whole run (with warm-up, said in `source`).
    With `measure_s` (a warm-up found by steady state, load.warmup: steady) the window is that
    long from the end of the warm-up; the load that ran after it is not counted."""
    errors = summary["errors"]
    failed = sum(errors.values())
    last = max(summary["started"], summary.get("started_last") or summary["started"])
    apart = last - summary["started"]
    end = summary["finished_last"] if summary.get("requests_per_client") else \
        last + summary["duration_s"]
    window = (last + warmup_s,
              end if measure_s is None else min(end, last + warmup_s + measure_s))
    if window[1] <= window[0]:
        raise LoadgenError(f"wrk ran {end - last:.1f} s, not more than its {warmup_s:g} s of "
                           "warm-up: nothing was measured")
    active = (summary["started"], end)
    in_window = requests_in(summary["per_second"], window, active)
    counted = summary["requests"] - errors["status"]
    ok = 1 - errors["status"] / summary["requests"] if summary["requests"] else 0.0
    share = in_window / summary["requests"] if summary["requests"] else 0.0
    late = apart > 0.01 * (end - last)
    whole = warmup_s > 0 or measure_s is not None  # the run holds more than the window
    cut = late or whole
    records = requests_in(summary["per_second"], active, active) if whole else in_window
    own = wrk_uncorrected(summary.get("histogram_us") or [], summary.get("duration_us", 0),
                          summary["requests"], connections)
    over = " over warm-up and measured time (one run)" if whole else ""
    inside = window_buckets(summary, window, own, window[1] >= end - 1e-6)
    hist = None
    if inside is not None and inside[0]:
        hist = histograms_of(inside[0])
        latency = figures_of(hist, "wrk's latencies recorded between its histogram's reads at "
                             f"{inside[1][0] - last:+.2f} s and {inside[1][1] - last:+.2f} s from "
                             "its start (the window only, without coordinated-omission "
                             "samples), in buckets within 1 %")
    elif own is not None and not cut:  # the run is the window
        hist = histograms_of(Counter(own), exact=True)
        latency = figures_of(hist, "wrk's histogram without its coordinated-omission "
                             "correction (the run is the window)")
    elif own is not None:
        latency = {**latency_of(own), "uncorrected": True,
                   "source": f"wrk's histogram{over} without its coordinated-"
                   "omission correction", "wrk_corrected": summary["latency_ms"]}
    else:
        latency = {**summary["latency_ms"], "uncorrected": False,
                   "source": f"wrk's own{over}, corrected for coordinated "
                   "omission (its histogram was not available or did not invert)"}
    return {
        "window": window,
        "active": active,
        "ok_share": ok,
        "share": share if cut else 1.0,
        "threads_apart_s": round(apart, 3) if late else 0.0,
        "counts": count_check(counted, records * ok, connections),
        "requests": round(in_window * ok) if cut else counted,
        "errors": round(failed * share) if cut else failed,
        "bytes": round(summary["bytes"] * share) if cut else summary["bytes"],
        "p50_ms": latency["percentiles"]["50"],
        "p99_ms": latency["percentiles"]["99"],
        "latency_ms": latency,
        "histograms": hist,
        "error_kinds": errors,
        "per_second": summary["per_second"],
    }


def seconds_of(summary: dict, n: int) -> list[float]:
    """The requests the replay counted in each of the first n seconds after wrk's clock
    started (its last thread's start), as aggregate_of counts them."""
    last = max(summary["started"], summary.get("started_last") or summary["started"])
    active = (summary["started"], last + summary["duration_s"])
    return [requests_in(summary["per_second"], (last + i, last + i + 1), active)
            for i in range(n)]




def counted_enough(per_client: int, warm: dict, users: int) -> int:
    """The requests per client a request-count run sends: as asked, or, when the warm-up's rate
    says that many would be answered in less than COUNTED_AIM_S (twice the least measurable
    window, MIN_COUNTED_S: the 1 Hz samples that give CPU and bytes need it), enough for
    COUNTED_AIM_S at that rate. A shortened run (`--scale`) of small files or one client would
    otherwise end in a fraction of a second and measure nothing; the row records both counts."""
    return counting.counted_enough(per_client, int(warm.get("requests") or 0),
                                   float(warm.get("duration_s") or 0), users, COUNTED_AIM_S)


def run(spec: LoadSpec, loadgen: Container, point_dir: Path, trace: Path) -> LoadResult:
    # A timed point is one wrk run over warm-up and measured time: the measured requests travel
    # on the connections the warm-up opened, their TCP state (windows, buffers) already grown,
    # as in the papers' long runs. (Two runs measured fresh connections: with 1 MB answers their
    # throughput kept rising for seconds into the window, the spread between repetitions.)
    # A request-count run warms up with a timed run, then replays every client's sequence from
    # its start until each has sent its requests.
    started = time.time()
    warm: dict = {}
    per_client = spec.requests_per_client
    counted = bool(per_client)
    asked = per_client
    if per_client and spec.warmup_s > 0:
        warm = run_once(spec, loadgen, point_dir, trace, "warmup",
                        max(1, math.ceil(spec.warmup_s)))
        per_client = counted_enough(per_client, warm, spec.users)
        spec = replace(spec, requests_per_client=per_client)
    summary = run_once(spec, loadgen, point_dir, trace, "measure",
                       max(1, math.ceil(spec.measure_s if counted else load_s(spec))),
                       spec.requests_per_client)
    threads = wrk_threads(spec.users, spec.processes, max(1, len(spec.targets)))
    if per_client and summary.get("threads_finished", 0) < threads:
        want = per_client * spec.users
        raise limit_reached("wrk", spec, f"{threads - summary.get('threads_finished', 0)} of "
                            f"{threads} threads had not had their clients' "
                            f"{per_client:,} requests each answered "
                            f"({summary.get('sent', 0):,} of {want:,} sent)")
    found = None if counted else warmup_found(spec, lambda n: seconds_of(summary, n))
    agg = aggregate_of(summary, spec.users, found.warmup_s if found else 0.0,
                       None if spec.warmup_max_s is None else spec.measure_s)
    hist = agg.pop("histograms")
    if hist is not None:  # the window's latencies, as a Locust point's (webmetrics.HISTOGRAMS)
        hist.write(point_dir / webmetrics.HISTOGRAMS)
    allowance = float(min(threads, cpuset_cores(loadgen)))
    measured_s = agg["window"][1] - agg["window"][0]
    extra = {"threads": threads, "connections": spec.users, "wrk_duration_s": summary["duration_s"],
             "measured_s": round(measured_s, 6), **agg["counts"], **count_extra(spec)}
    if agg["threads_apart_s"] > 0:
        extra["threads_apart_s"] = agg["threads_apart_s"]
    # Dynamic requests answered in the window (the run's, in the window's share of its
    # requests), and over the whole load (against the database's counters), and write requests
    # answered over the whole load (the rows they inserted are counted after the point: the
    # write check).
    extra["dynamic_ok"] = round(summary.get("dynamic_ok", 0) * agg["share"])
    extra["dynamic_answered"] = summary.get("dynamic_ok", 0) + warm.get("dynamic_ok", 0)
    extra["writes_ok"] = summary.get("writes_ok", 0) + warm.get("writes_ok", 0)
    extra["runs"] = 2 if warm else 1
    extra["latency"] = {k: v for k, v in agg["latency_ms"].items() if k != "wrk_corrected"}
    extra.update(warmup_extra(spec, found))
    if per_client != asked:
        extra["requests_per_client_asked"] = asked
    return LoadResult("wrk", started, agg["window"], None, agg, allowance, extra)
