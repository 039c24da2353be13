"""The load engines: Locust (users, think time, open loop, processes) and wrk (native, high rate),
both replaying the same trace files inside the loadgen container and giving the same LoadResult;
the point's summary row and per-second rows in the runner's schema, whichever engine ran."""

from __future__ import annotations

from pathlib import Path

from tierbench.kinds.web import locust, wrk
from tierbench.kinds.web import webmetrics
from tierbench.kinds.web.load import LoadResult, LoadSpec, check_spec
from tierbench.placement.model import Container


def run(spec: LoadSpec, loadgen: Container, point_dir: Path, trace: Path,
        workers: list[Container] | None = None) -> LoadResult:
    """Load the stack as spec says; raw engine output goes into point_dir. `workers` are the
    Locust worker containers on this host (spec.workers of them) when the spec asks for any."""
    check_spec(spec)
    if spec.engine == "wrk":
        return wrk.run(spec, loadgen, point_dir, trace)
    if spec.workers or spec.remote_workers:
        return locust.run_distributed(spec, loadgen, workers or [], point_dir, trace)
    return locust.run(spec, loadgen, point_dir, trace)


def summary_row(samples: list[dict], result: LoadResult, *, generator: str,
                bytes_label: str | list[str] | list[tuple[str, str]]) -> dict:
    """The point's summary row (webmetrics.SUMMARY_COLUMNS) for either engine's result.

    With per-request records (Locust) this is webmetrics.summarize over the result's window. With
    an aggregate (wrk) CPU, host and byte figures come from the samples bracketing the window
    exactly as for Locust, and requests, errors, TPS and latency from the engine's own counts
    over exactly its measured run."""
    start, end = result.window
    if result.requests is not None:
        hist = webmetrics.Histograms()
        row = webmetrics.summarize(samples, result.requests, start=start, end=end,
                                generator=generator, generator_allowance=result.allowance_cores,
                                bytes_label=bytes_label, open_loop="target_rate" in result.extra,
                                histograms=hist)
        path = getattr(result.requests, "path", None)  # records in memory have no file
        if path is not None:  # the point's folder: its histograms beside it
            hist.write(path.parent / webmetrics.HISTOGRAMS)
    else:
        agg = result.aggregate or {}
        if agg.get("requests", 0) <= 0:
            raise webmetrics.MetricsError("no successful request completed in the measured window")
        _, last = webmetrics.window(samples, start, end)
        # One stand-in request inside the window lets summarize() compute the sample-based
        # columns; every request-based column is then replaced by the engine's counts.
        stand_in = [webmetrics.Request(last["t"], 0.0, agg["bytes"], 200)]
        row = webmetrics.summarize(samples, stand_in, start=start, end=end, generator=generator,
                                generator_allowance=result.allowance_cores,
                                bytes_label=bytes_label)
        n = agg["requests"]
        # The mean of wrk's histogram without its coordinated-omission correction (aggregate_of).
        # Where that could not be had, wrk's own mean overstates uneven latencies (seen: 331
        # answers in 4.04 s on one connection, wrk's mean 44 ms); a closed loop without think
        # time keeps every connection busy, so connections / TPS bounds it from above.
        conns = result.extra.get("connections")
        latency = agg.get("latency_ms") or {}
        mean = latency["mean"] if latency.get("uncorrected") else \
            1000.0 * conns * (end - start) / n if conns else None
        pct = latency.get("percentiles") or {}
        row.update({"requests": n, "tps": n / (end - start), "p50_ms": agg["p50_ms"],
                    "p90_ms": pct.get("90", float("nan")), "p99_ms": agg["p99_ms"],
                    "p999_ms": pct.get("99.9", float("nan")), "mean_ms": mean,
                    "errors": agg["errors"],
                    # CPU is counted between the bracketing samples, requests over wrk's own
                    # run: normalise as rates so that both cover the same time.
                    "server_cpu_us_per_req": row["cpu_s_servers"] / row["window_s"] * 1e6
                    / (n / (end - start))})
    row["engine"] = result.engine
    row["generator_allowance_cores"] = result.allowance_cores
    for key in ("target_rate", "rate_of_max", "max_rate", "achieved_rate", "late_requests",
                "rate_short", "workers",
                "remote_workers",
                "generator_cpu_scope", "engine_requests", "records_requests", "count_mismatch",
                "threads_apart_s", "requests_per_client", "requests_per_client_asked",
                "warmup_s", "unsteady", "unsteady_why"):
        if key in result.extra:
            row[key] = result.extra[key]
    if row.get("client_bound"):
        row["client_bound_advice"] = client_bound_advice(result, row["generator_cpu_pct"])
    return row


def per_second_rows(samples: list[dict], result: LoadResult) -> list[dict]:
    """per_second.csv rows for either engine (wrk: its per-second counts placed by second),
    between the sampler's 1 Hz ticks (its marks left out)."""
    samples = [s for s in samples if not s.get("mark")]
    if result.requests is not None:
        return webmetrics.per_second(samples, result.requests)
    rows = webmetrics.per_second(samples, [])
    counts = {int(p["t"]): p["requests"] for p in (result.aggregate or {}).get("per_second", [])}
    prev = samples[0]["t"] if samples else 0.0
    for row in rows:
        # a wrk second [s, s+1) belongs to the sample interval holding its middle
        n = sum(c for s, c in counts.items() if prev < s + 0.5 <= row["t"])
        row["tps"] = n / (row["t"] - prev) if row["t"] > prev else 0.0
        prev = row["t"]
    return rows


def client_bound_advice(result: LoadResult, cpu_pct: float) -> str:
    """What to do about a client-bound point, in one sentence for the report."""
    cores = result.allowance_cores
    if result.engine == "locust":
        return (f"the generator used {cpu_pct:.0f} % of its {cores:g}-core allowance, so this "
                "TPS is Locust's limit, not the servers': raise load.processes (one core each), "
                "add worker containers on more cores (load.workers, WORKER_CPUS) or workers on "
                "other nodes (load.remote_workers), or use engine: wrk for high-rate "
                "closed-loop runs")
    return (f"the generator used {cpu_pct:.0f} % of its {cores:g}-core allowance, so this TPS "
            "is wrk's limit, not the servers': give the loadgen more cores (LOADGEN_CPUS) and "
            "threads (load.processes), or move the generator to another node")
