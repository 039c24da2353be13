"""The real wrk (the loadgen image's) through wrk.run() against the in-process test server of
tests/locust_lab.py, with known delays and a stall during the warm-up: the point's window-only
latency histogram (replay.lua's reads of wrk's histogram) matches the delays, and the stall
does not appear in it though it is in wrk's whole-run histogram.

Needs Docker and `tierbench-loadgen:TAG` (TBE_LOADGEN_IMAGE). Its own container (`tbe-w-...`, on
the host's network to reach the server on 127.0.0.1), removed at the end."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from locust_lab import ROOT, Server

from tierbench import bench
from tierbench.kinds.web import webmetrics, wrk
from tierbench.kinds.web.load import LoadSpec
from workloads import traces

pytestmark = pytest.mark.stack

TAG = os.environ.get("TIERBENCH_TAG", "0.1.0")
LOADGEN_IMAGE = os.environ.get("TBE_LOADGEN_IMAGE", f"tierbench-loadgen:{TAG}")
SLOW_S = 0.040  # every 5th answer: 20 % of the answers take 40 ms, the others none


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120,
                          check=False)


@pytest.fixture()
def gen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)
    monkeypatch.setenv("TIERBENCH_RESULTS", str(results))
    name = f"tbe-w-{uuid.uuid4().hex[:6]}"
    started = docker("run", "-d", "--name", name, "--network", "host",
                     "-v", f"{ROOT / 'workloads'}:/app/workloads:ro", "-v",
                     f"{results}:/results", LOADGEN_IMAGE)
    assert started.returncode == 0, started.stderr
    srv = Server(0.0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield {"gen": bench.container(name), "results": results, "srv": srv}
    finally:
        docker("rm", "-f", name)
        srv.shutdown()
        srv.server_close()


def test_wrk_window_latencies_match_the_delays_and_leave_out_a_warm_up_stall(gen) -> None:
    """4 connections, 2 threads, 3.5 s of warm-up and 3 s measured. The server answers every
    5th request 40 ms late and the others at once, and holds every request that arrives from
    1.5 to 2.5 s after its first one until 2.5 s (a stall inside the warm-up). In the window
    20 % of the answers took 40 ms: p50 under 10 ms, p90 within [40, 60] ms and p99 within
    [40, 80] ms (40 ms, the bucket's 1 %, and a busy shared host's scheduling: seen 40.3 and
    55.1 ms), and no answer near the stall's second (largest under 500 ms); wrk's whole-run
    histogram does hold the stall (over 900 ms)."""
    srv = gen["srv"]
    srv.slow_every, srv.slow_s, srv.stall_s = 5, SLOW_S, 1.0
    pdir = gen["results"] / "point"
    pdir.mkdir()
    pdir.chmod(0o777)
    trace = pdir / "trace.txt"
    traces.write(trace, [f"/a/{i}" for i in range(10)], "wrk window test")
    spec = LoadSpec("wrk", 4, 3.5, 3.0, processes=2,
                    target=f"http://127.0.0.1:{srv.server_address[1]}")
    result = wrk.run(spec, gen["gen"], pdir, trace)
    assert result.aggregate is not None
    lat = result.extra["latency"]
    assert lat["window_only"], lat
    hist = webmetrics.Histograms.read(pdir / webmetrics.HISTOGRAMS)
    fig = webmetrics.latency_figures(hist, False)
    assert list(hist.each) == [(webmetrics.SENT, -1)]
    assert fig["p50_ms"] < 10 and 40 <= fig["p90_ms"] <= 60 and 40 <= fig["p99_ms"] <= 80, fig
    assert hist.merged(webmetrics.SENT).values[-1] < 500, fig
    assert fig["p99_ms"] == result.aggregate["p99_ms"]
    # the slow share in the window: every 5th answer, within a few answers of 20 %
    merged = hist.merged(webmetrics.SENT)
    slow = int(merged.counts[merged.values >= 40].sum())
    assert abs(slow / merged.n - 0.2) < 0.03, (slow, merged.n)
    # the stall happened, in the warm-up: wrk's whole-run histogram holds it
    whole = json.loads((pdir / "wrk-measure.json").read_text())
    assert max(v for v, _ in whole["histogram_us"]) > 900_000
