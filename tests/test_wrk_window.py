"""wrk's window-only latencies: the replay's reads of wrk's histogram during the run
(`latency_ticks`) turned into the window's histogram, buckets, and the fallbacks. The real wrk
against a server with known delays and a warm-up stall is tests/test_wrk_window_stack.py."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tierbench.kinds.web import webmetrics, wrk

WINDOW_EDGE = 102.0  # started 100.0 + a 2 s warm-up


def summary(ticks: list | None, own: dict[int, int]) -> dict:
    """A wrk summary whose clock started at 100.0 and ran 4.5 s, with its own histogram `own`
    (no coordinated-omission samples: one connection, few slow answers) and the replay's
    reads `ticks`."""
    n = sum(own.values())
    return {"started": 100.0, "started_last": 100.0, "duration_s": 4.5, "requests": n,
            "bytes": 100 * n, "duration_us": 4_500_000,
            "errors": {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0},
            "latency_ms": {"min": 1.0, "max": 500.2, "mean": 9.0, "stdev": 5.0,
                           "percentiles": {"50": 1.0, "99": 500.0}},
            "per_second": [{"t": 100 + s, "requests": n // 5} for s in range(5)],
            "histogram_us": [[v, c] for v, c in sorted(own.items())],
            "latency_ticks": ticks}


# During the warm-up a stall held 4 answers for 500 ms; in the window 1 ms answers and 20 %
# at 40 ms. The reads (bucket starts) at 101, 102, 103, 104; the answers after the last read
# only in wrk's own histogram at the end.
TICKS = [[101.0, [[1000, 50]]], [102.01, [[1000, 50], [500000, 4]]],
         [103.0, [[1000, 100], [40000, 25]]], [104.0, [[1000, 100], [40000, 25]]]]
OWN = {1003: 350, 40012: 60, 500123: 4}  # exact microseconds: 50 + 50 + 100 + 100 + 50 after


def test_buckets_keep_three_significant_digits() -> None:
    assert [wrk.bucket_width(us) for us in (999, 1000, 9999, 12345, 999_999, 10**7, 10**9)] == \
        [1, 10, 10, 100, 1000, 100_000, 100_000]
    assert wrk.bucketed({12345: 2, 12399: 1, 999: 4}) == Counter({12300: 3, 999: 4})
    hist = wrk.histograms_of(Counter({12300: 3, 999: 1}))
    h = hist.merged(webmetrics.SENT)
    assert list(h.values) == [0.999, 12.35] and list(h.counts) == [1, 3]
    for us in range(1, 10**6, 997):  # each value's bucket middle within 1 % of it
        b = us - us % wrk.bucket_width(us)
        assert abs(b + wrk.bucket_width(us) // 2 - us) <= 0.01 * us


def test_the_window_leaves_out_a_warm_up_stall_and_ends_with_wrks_own_histogram() -> None:
    s = summary(TICKS, OWN)
    got = wrk.window_buckets(s, (WINDOW_EDGE, 104.5), wrk.wrk_uncorrected(
        s["histogram_us"], s["duration_us"], s["requests"], 1), at_end=True)
    assert got is not None
    counts, (t0, t1) = got
    # from the read at 102.01 to the end: 100 + 100 + 50 fast, 25 + 25 + 10 slow, no stall
    assert counts == Counter({1000: 250, 40000: 60}) and t0 == 102.01 and t1 == 104.5
    # a window that ends before the run: the read nearest its end
    counts, (_, t1) = wrk.window_buckets(s, (WINDOW_EDGE, 103.1), None, at_end=False) or ({}, ())
    assert counts == Counter({1000: 100, 40000: 25}) and t1 == 103.0


def test_a_timed_point_states_the_windows_percentiles_not_the_runs() -> None:
    agg = wrk.aggregate_of(summary(TICKS, OWN), connections=1, warmup_s=2.0)
    lat = agg["latency_ms"]
    assert lat["window_only"] and "window only" in lat["source"]
    # 310 answers, 60 of them at 40 ms: p90 and p99 at the slow bucket's middle, p99.9 too
    assert agg["p50_ms"] == 1.005 and agg["p99_ms"] == 40.05
    assert lat["percentiles"]["99.9"] == 40.05 and lat["max"] < 100
    hist = agg["histograms"].merged(webmetrics.SENT)
    assert hist.n == 310
    # without the reads (an older replay, or the histogram not found): the whole run, said so
    whole = wrk.aggregate_of(summary(None, OWN), connections=1, warmup_s=2.0)
    assert whole["latency_ms"]["percentiles"]["99.9"] == 500.123
    assert "warm-up" in whole["latency_ms"]["source"]
    assert whole["histograms"] is None


def test_an_own_histogram_that_does_not_hold_the_reads_is_not_used() -> None:
    # wrk's own histogram lacks a bucket the reads saw (not the histogram they read): the
    # window ends at the last read instead
    reads = [[101.0, [[1000, 50], [7000, 3]]], [104.0, [[1000, 100]]]]
    s = summary(reads, {1003: 150, 1900: 3})
    got = wrk.window_buckets(s, (101.0, 104.5), {1003: 150, 1900: 3}, at_end=True)
    assert got is not None and got[0] == Counter({1000: 100}) and got[1][1] == 104.0


def test_the_window_histogram_is_written_as_a_locust_points(tmp_path: Path) -> None:
    agg = wrk.aggregate_of(summary(TICKS, OWN), connections=1, warmup_s=2.0)
    agg["histograms"].write(tmp_path / webmetrics.HISTOGRAMS)
    back = webmetrics.Histograms.read(tmp_path / webmetrics.HISTOGRAMS)
    assert list(back.each) == [(webmetrics.SENT, -1)]
    fig = webmetrics.latency_figures(back, False)
    assert fig["p99_ms"] == pytest.approx(agg["p99_ms"]) and fig["p50_ms"] == agg["p50_ms"]
