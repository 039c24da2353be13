"""The warm-up found by steady state (tierbench.measure.steady, MSER-5) on synthetic per-second
series whose transient is known, and the windows the engines cut with it (wrk's per-second
counts, Locust's request records)."""

from __future__ import annotations

import random

import pytest

from tierbench.kinds.web import locust, wrk
from tierbench.kinds.web import webmetrics as metrics
from tierbench.kinds.web.load import LoadSpec
from tierbench.measure import steady

SEEDS = 300


def ramp(n: int, settle_s: float, rng: random.Random, cv: float = 0.05,
         start: float = 0.5) -> list[float]:
    """1000 requests/s after a linear rise from ``start`` of it that ends at ``settle_s``,
    with multiplicative Gaussian noise of ``cv``."""
    return [1000 * (start + (1 - start) * min(1.0, t / settle_s) if settle_s else 1000.0)
            * (1 + rng.gauss(0, cv)) for t in range(n)]


def test_mser5_finds_the_end_of_a_known_transient() -> None:
    rng = random.Random(1)
    found = [steady.detect(ramp(90, 20, rng), 30, 0, 60) for _ in range(SEEDS)]
    ends = sorted(f.warmup_s for f in found)
    # the rise ends at 20 s: the warm-up found is never more than a batch before it, most
    # often at it, and in most series within two batches after it (MSER errs late: a few stop
    # at half the series, 45 s, its search's end)
    assert min(ends) >= 15
    assert ends[SEEDS // 2] == 20
    assert sum(w <= 30 for w in ends) >= 0.8 * SEEDS
    assert max(ends) <= 45  # never past half the series, nor warmup_max_s
    assert sum(not f.steady for f in found) <= 0.05 * SEEDS


def test_a_series_steady_from_the_start_keeps_the_least_warmup_and_is_rarely_flagged() -> None:
    rng = random.Random(2)
    found = [steady.detect(ramp(90, 0, rng, cv=0.1), 30, 5, 60) for _ in range(SEEDS)]
    assert sorted(f.warmup_s for f in found)[SEEDS // 2] == 5  # the least, warmup_s
    assert min(f.warmup_s for f in found) == 5
    assert sum(not f.steady for f in found) <= 0.07 * SEEDS


def test_the_warmup_never_passes_its_maximum_and_a_late_transient_is_flagged() -> None:
    rng = random.Random(3)
    found = [steady.detect(ramp(90, 45, rng, cv=0.02, start=0.3), 30, 0, 20)
             for _ in range(SEEDS)]
    assert max(f.warmup_s for f in found) == 20
    assert all(not f.steady for f in found)
    assert "after warmup_max_s" in found[0].why


def test_a_series_that_never_settles_is_flagged() -> None:
    rng = random.Random(4)
    rising = [[1000 * (0.5 + t / 120) * (1 + rng.gauss(0, 0.03)) for t in range(60)]
              for _ in range(SEEDS)]
    found = [steady.detect(s, 30, 0, 30) for s in rising]
    assert sum(not f.steady for f in found) >= 0.95 * SEEDS
    assert all(f.warmup_s <= 30 for f in found)
    # a fixed warm-up's window is checked too (slope test only)
    fixed = [steady.detect(s, 30, 5) for s in rising]
    assert all(f.warmup_s == 5 for f in fixed)
    assert sum(not f.steady for f in fixed) >= 0.95 * SEEDS
    assert "trend" in fixed[0].why


def test_too_short_a_series_is_cut_at_the_maximum_and_flagged() -> None:
    found = steady.detect([1000.0] * 8, 4, 0, 4)
    assert (found.warmup_s, found.steady) == (4, False)


def wrk_run(per_second: dict[int, int], duration_s: float) -> dict:
    return {"started": 100.0, "started_last": 100.0, "duration_s": duration_s,
            "requests": sum(per_second.values()), "bytes": 10 * sum(per_second.values()),
            "errors": {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0},
            "latency_ms": {"min": 0.1, "max": 9.0, "mean": 1.0, "stdev": 0.5,
                           "percentiles": {"50": 0.9, "99": 4.5}},
            "per_second": [{"t": t, "requests": n} for t, n in per_second.items()]}


def test_wrk_counts_the_window_after_the_steady_warmup_only() -> None:
    # 40 s of load (warmup_max_s 30 + a 10 s window): 500 requests/s until 115, then 1000
    rate = {100 + s: (500 if s < 15 else 1000) for s in range(40)}
    summary = wrk_run(rate, 40.0)
    spec = LoadSpec("wrk", 4, 0.0, 10.0, warmup_max_s=30.0)
    found = wrk.warmup_found(spec, lambda n: wrk.seconds_of(summary, n))
    assert (found.warmup_s, found.steady) == (15, True)
    agg = wrk.aggregate_of(summary, 4, found.warmup_s, spec.measure_s)
    assert agg["window"] == (115.0, 125.0)
    assert agg["requests"] == 10_000  # the window's, not the warm-up's or the load after it
    # a fixed warm-up of 2 s over the same run: its window counts the slow seconds
    fixed = wrk.aggregate_of(summary, 4, 2.0)
    assert fixed["window"] == (102.0, 140.0)


def test_locust_window_starts_after_the_steady_warmup() -> None:
    # one request every 2 ms (500/s) for 12 s from 100.0, then every 1 ms (1000/s) until 140
    ends = [100 + k * 0.002 for k in range(1, 6000)] + [112 + k * 0.001 for k in range(28_000)]
    reqs = [metrics.Request(e, 1.0, 10, 200) for e in ends]
    spec = LoadSpec("locust", 10, 0.0, 10.0, warmup_max_s=30.0)
    window, found = locust.locust_window(100.0, reqs, spec)
    assert found is not None and found.steady
    assert found.warmup_s == 15  # the first whole batch of 5 s after the change at 12 s
    assert window == pytest.approx((115.0, 125.0), abs=0.01)  # from the first request sent
    fixed, checked = locust.locust_window(100.0, reqs, LoadSpec("locust", 10, 2.0, 10.0))
    assert fixed == pytest.approx((102.0, 112.0), abs=0.01)
    assert checked is not None and checked.warmup_s == 2
