"""One web point, as a sequence: the load the point asks for, its trace on the load generator,
the deployment's steps before the load, the engine over warm-up and measured time (two marks
in the measured window), then the summary over the samples that bracket it and each step's
figures (kinds.web.steps)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

from tierbench.kinds.contract import PointContext, PointResult
from tierbench.kinds.web import engines, maxrate, services, warm, webmetrics
from tierbench.kinds.web.stack import GENERATOR
from tierbench.kinds.web.load import LoadgenError, LoadSpec, check_counted_window
from tierbench.kinds.web.prepare import WebPrepared
from tierbench.kinds.web.settings import WebSettings
from tierbench.kinds.web.stack import WebInfo
from tierbench.kinds.web.steps import Measured, empty_proxy_caches
from tierbench.measure.counters import MeasureError, window
from workloads import traces as tracelib


WebContext = PointContext[WebSettings, WebInfo, WebPrepared]


def load_spec(ctx: WebContext, s: WebSettings) -> LoadSpec:
    """The load of the point: the experiment's, with the point's users, the target as the load
    generator reaches it (recorded when it differs) and its files fetched back from its node."""
    ld, point, dep = s.load, ctx.point, ctx.deployment
    where = dep.placer
    loadgen = dep.containers[GENERATOR]
    target = where.url(s.target)
    if target != s.target:
        ctx.record["target"] = target
    # several proxies (the target is http://proxy then: settings.proxies_problem): one URL each
    proxies = dep.info.stack.proxies
    targets = tuple(where.url(s.target.replace("://proxy", f"://{name}", 1))
                    for name in services.PROXY_SERVICES[:proxies]) if proxies > 1 else ()
    if targets:
        ctx.record["targets"] = list(targets)
    return LoadSpec(engine=s.engine, users=point["users"], warmup_s=ld.warmup_s,
                    measure_s=ld.measure_s, processes=ld.processes,
                    think=ld.think.model_dump() if ld.think else None,
                    rate=point.factors.get("rate"), arrival=ld.arrival, target=target, targets=targets,
                    allow_foreign_target=s.allow_foreign_target,
                    workers=ld.workers, remote_workers=ld.remote_workers,
                    worker_wait_s=ld.worker_wait_s,
                    master=dep.info.master,
                    own=tuple(where.own_addresses()),
                    fetch=lambda: where.pull(loadgen, ctx.dir),
                    requests_per_client=ld.requests_per_client,
                    dynamic=tracelib.content(point["trace"]) != "static", where=where,
                    warmup_max_s=ld.warmup_max_s if ld.warmup == "steady" else None)


def mark_times(now: float, spec: LoadSpec) -> list[float]:
    """Marks inside the measured window (every third of it from the end of the warm-up), so
    that it holds two samples even when a loaded host delays the ticks; with a warm-up found
    by steady state, every third of a window from the least warm-up to the end of the load,
    so that any window it may choose holds two."""
    step = spec.measure_s / 3
    first, last = now + spec.warmup_s + step, now + spec.warmup_s + 2 * step
    if spec.warmup_max_s is not None:
        last = now + spec.warmup_max_s + spec.measure_s - step / 2
    return [first + i * step for i in range(int((last - first) / step + 1e-9) + 1)]


def offered_fraction(ctx: WebContext, spec: LoadSpec, fraction: float, trace: Any,
                     workers: list[Any] | None) -> LoadSpec:
    """The point's load at `fraction` of its condition's maximum (kinds.web.maxrate), measured
    now by a closed loop when no earlier point of the run has; recorded as `max_rate`."""
    loadgen = ctx.deployment.containers[GENERATOR]

    def closed(closed_spec: LoadSpec, folder: Any) -> Any:
        ctx.log(f"tierbench: {ctx.point.id}: measuring the maximum of mode {ctx.point.mode} "
                f"(closed loop, {closed_spec.users} users) for rate_of_max")
        return engines.run(closed_spec, loadgen, folder, trace, workers)

    entry = maxrate.maximum(ctx.dir.parent.parent,
                            maxrate.condition_key(ctx.point.mode, ctx.point.factors), spec,
                            ctx.point.id, ctx.dir, closed)
    ctx.record["max_rate"] = entry
    return replace(spec, rate=maxrate.offered(fraction, entry))


def run(ctx: WebContext, s: WebSettings) -> PointResult:
    """Replay the point's trace; the summary over the samples bracketing the window."""
    ld, point, dep = s.load, ctx.point, ctx.deployment
    where = dep.placer
    steps = dep.info.steps
    ctx.record["trace"] = point["trace"]["name"]
    ctx.record["stack"] = dep.info.stack.record
    loadgen = dep.containers[GENERATOR]
    # Bytes delivered to the clients: what the host ends of the generator's veths transmit
    # (on a cluster, what its node's NIC receives).
    client_ifaces = where.received(dep.tiers[GENERATOR].endpoints)
    spec = load_spec(ctx, s)
    trace = ctx.prepared.traces[point["trace"]["name"]]
    index = tracelib.index_path(trace)  # the engines read the trace through it
    fraction = point.factors.get("rate_of_max")
    if fraction is not None:  # the closed loop's folder, pushed with the point's
        (ctx.dir / "max").mkdir(exist_ok=True)
    where.push(loadgen, [trace, *([index] if index.exists() else []), ctx.dir])
    workers = list(dep.info.workers) if ld.workers else None
    if fraction is not None:
        try:
            spec = offered_fraction(ctx, spec, fraction, trace, workers)
        except LoadgenError as exc:
            ctx.log(f"tierbench: {point.id} failed: {exc}")
            return PointResult(error=str(exc))
    if ld.warm_pass:  # before the steps: the proxies' fresh connections stay the point's
        warm.run(ctx, spec, trace, empty_proxy_caches)
    for step in steps:
        step.before(ctx)
    unmark = ctx.marks_at(mark_times(time.time(), spec))
    try:
        try:
            result = engines.run(spec, loadgen, ctx.dir, trace, workers)
        finally:
            unmark()
            samples = ctx.close_window()
            for step in steps:
                step.end()
        if ctx.sampling_error:
            raise MeasureError(ctx.sampling_error)
        start, end = result.window
        check_counted_window(spec, result.window, result.extra.get("requests_per_client"))
        # Wall-clock bounds: samples and requests before measure_start are warm-up.
        ctx.record["window"] = {"load_started": result.started, "measure_start": start,
                                "measure_end": end}
        if "warmup" in result.extra:  # how long the warm-up was, and whether it was steady
            ctx.record["warmup"] = result.extra["warmup"]
        if fraction is not None:  # the rate offered as a fraction of the measured maximum
            result.extra.update(rate_of_max=fraction, max_rate=ctx.record["max_rate"]["tps"])
        if "latency" in result.extra:  # where wrk's latency figures come from (window or run)
            ctx.record["latency"] = result.extra["latency"]
        row = engines.summary_row(samples, result, generator=GENERATOR,
                                  bytes_label=client_ifaces)
        # The samples that bracket the numbers above: analysis recomputes from these.
        first, last = window(samples, start, end)
        ctx.record["window"].update({"start": first["t"], "end": last["t"]})
        measured = Measured(result, first, last, samples)
        for step in steps:
            row.update(step.after(ctx, measured))
        asks_misses = point["trace"].get("kind") == "hit-ratio" or dep.info.stack.cold
        row.update(webmetrics.miss_figures(row, asks_misses))
        return PointResult(row, engines.per_second_rows(samples, result), (start, end))
    except (LoadgenError, MeasureError) as exc:
        ctx.log(f"tierbench: {point.id} failed: {exc}")
        return PointResult(error=str(exc))
