"""The open loop's latencies against a real in-process HTTP server with a known stall, and its
Poisson arrivals, with the real `locust` binary (tests/locust_lab.py): no Docker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from locust_lab import Server, listen_overflows, run_locust, servers, two_subsets

from tierbench.kinds.web import webmetrics as metrics

# Wall-clock latencies against a known stall, so the module runs alone in make test's host part
# (marker timing). The stall case failed twice in CI on 7 Dec (p90 961 ms beside another test,
# 876 ms alone, p99 1,027): more requests at about 1 s than a 1 s stall can make. The cause was
# the test server's listen backlog (Python's default of 5): while the stall held its connections,
# the open loop's new ones queued for the accept loop, which a loaded host delayed; past 5 the
# kernel dropped their SYNs and the clients sent them again 1 s later (locust_lab.Server's note).
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


def test_open_loop_latency_matches_a_stall_that_a_closed_loop_hides(tmp_path: Path,
                                                                      server) -> None:
    """The server stops answering for 1 s of a 3.5 s window. Offered 100 requests/s in Poisson
    arrivals (4 users), the window (the requests that ended 0.5 to 4 s after the server's first)
    holds about 350 requests; the 100 or so that arrive in the stall (1.5 to 2.5 s) wait until
    it ends, U(0, 1 s), the others are answered in a few ms. The top 10 % (35) are thus the
    stall's first 35 arrivals: p90 = 1 s x (1 - 35 / 100) = 650 ms, and p99 = 1 s x (1 - 3.5 /
    100) = 965 ms; none can exceed 1 s plus an answer's time. With this run's seeded gaps (SEED
    1, users started 0 to 0.3 s apart) p90 is 636-683 ms and p99 955-973 ms; bound +-150 ms for
    the host's wake-up delays when the stall ends (every held answer leaves then). A request
    whose connection waited for a retried SYN (1 s more) would push both up: the server's
    backlog is sized so that none does, and the message gives the namespace's count of such
    drops during the run. A generator that waited for its answers and counted from the actual
    send would hide the stall as the closed loop of 2 users does: only its 2 requests in
    flight wait it out, among thousands answered at once, so its p90 stays at a few ms."""
    srv = server()
    srv.stall_s = 1.0
    dropped = listen_overflows()
    opened = stalled_percentiles(tmp_path / "open", srv, users=4, seconds=6,
                                 user_class="OpenLoopUser", RATE="100", ARRIVAL="poisson")
    dropped = listen_overflows() - dropped
    assert 500 <= opened["p90_ms"] <= 800 and 815 <= opened["p99_ms"] <= 1100, \
        (opened, f"{dropped} SYN(s) dropped for a full accept queue")
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
