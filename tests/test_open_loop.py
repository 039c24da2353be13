"""The open loop's latencies against a real in-process HTTP server with a known stall, and its
Poisson arrivals, with the real `locust` binary (tests/locust_lab.py): no Docker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from locust_lab import Server, run_locust, servers, two_subsets

from tierbench.kinds.web import webmetrics as metrics

# Wall-clock latencies against a known stall: beside another test on the two cores, Locust's
# sends ran late and p90 came out at 961 ms against the 650 ms the stall implies (CI, 7 Dec).
# Alone in make test's host part it still came out at 876 ms once (a CI run of 7 Dec, p99 1027
# within its bound), while four runs on an idle machine passed: not understood yet (more slow
# requests than the stall explains: the generator behind?), so the stall case runs in make
# test-cluster (marker full) until it is; the Poisson case stays in make test.
pytestmark = pytest.mark.timing


@pytest.fixture()
def server() -> Iterator[Any]:
    yield from servers()


def stalled_percentiles(tmp_path: Path, srv: Server, **run: Any) -> dict[str, float]:
    """Latency percentiles of the requests that ended 0.5 to 4 s after the server's first one
    (the stall from 1.5 to 2.5 s inside), counted as the summary counts them."""
    tmp_path.mkdir()
    run_locust(tmp_path, srv, two_subsets(tmp_path), **run)
    hist = metrics.Histograms()
    open_loop = run.get("user_class") == "OpenLoopUser"
    assert srv.first is not None
    metrics.count_window(metrics.records_of(tmp_path), srv.first + 0.5, srv.first + 4.0,
                         open_loop, hist)
    return metrics.latency_figures(hist, open_loop)


@pytest.mark.full  # see the module's note: make test-cluster runs it
def test_open_loop_latency_matches_a_stall_that_a_closed_loop_hides(tmp_path: Path,
                                                                      server) -> None:
    """The server stops answering for 1 s of a 3.5 s window. Offered 100 requests/s in Poisson
    arrivals, 1 s / 3.5 s of them arrive in the stall and wait U(0, 1 s); the others are
    answered at once. So the q-th percentile is 1 s x (1 - (1 - q) x
    3.5) above q = 1 - 1/3.5: p90 650 ms, p99 965 ms; bound +-150 ms (Poisson counts, a shared
    host). A closed loop of 2 users has only its 2 requests in flight waiting out the stall,
    among thousands answered at once: its p90 stays at a few ms."""
    srv = server()
    srv.stall_s = 1.0
    opened = stalled_percentiles(tmp_path / "open", srv, users=4, seconds=6,
                                 user_class="OpenLoopUser", RATE="100", ARRIVAL="poisson")
    assert 500 <= opened["p90_ms"] <= 800 and 815 <= opened["p99_ms"] <= 1100, opened
    assert opened["p50_ms"] < 100
    srv2 = server()
    srv2.stall_s = 1.0
    closed = stalled_percentiles(tmp_path / "closed", srv2, users=2, seconds=6)
    assert closed["p90_ms"] < 50 < 500 <= opened["p90_ms"]


def test_poisson_arrivals_keep_the_rate_with_exponential_gaps(tmp_path: Path, server) -> None:
    srv = server()
    rows = run_locust(tmp_path, srv, two_subsets(tmp_path), users=1, seconds=5,
                      user_class="OpenLoopUser", RATE="80", ARRIVAL="poisson")
    # each request's intended send time: when it left, less how late it left
    intended = np.sort([float(r["end_s"]) - (float(r["latency_ms"]) + float(r["late_ms"])) / 1000
                        for r in rows])
    gaps = np.diff(intended)
    assert len(gaps) > 200 and 64 <= 1 / gaps.mean() <= 96
    # exponential gaps: their coefficient of variation is 1 (evenly spaced ones: 0); over 200+
    # gaps its standard error is below 0.07
    assert 0.8 <= gaps.std() / gaps.mean() <= 1.2
