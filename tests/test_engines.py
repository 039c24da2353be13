"""The engines without Docker: the target guard, command lines, result parsing, and the Locust
users (the real `locust` binary) against a real in-process HTTP server."""

import csv
import json
import math
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from locust_lab import (LOCUST, ROOT, Server, four_subsets, parquet_rows, run_locust, servers,
                        two_subsets)

from tierbench.kinds.web import engines, load, locust, wrk
from tierbench.kinds.web import webmetrics as metrics
from tierbench.kinds.web.load import LoadgenError, LoadSpec
from tierbench.placement.model import Container
from workloads import counting, traces



# --- target guard and spec checks ----------------------------------------------------------


@pytest.mark.parametrize("target", ["http://proxy", "http://web:80", "http://198.18.1.10",
                                    "http://198.19.250.20:8080/x"])
def test_guard_accepts_the_testbeds_own_services(target: str) -> None:
    load.check_target(target, allow_foreign=False)


@pytest.mark.parametrize("target", ["http://192.168.1.10", "http://10.0.0.1", "http://8.8.8.8",
                                    "http://127.0.0.1:8080", "http://example.org",
                                    "http://198.20.0.1"])
def test_guard_refuses_a_foreign_address_in_one_sentence(target: str) -> None:
    with pytest.raises(LoadgenError) as err:
        load.check_target(target, allow_foreign=False)
    message = str(err.value)
    assert message.startswith("refusing to send load to ") and "allow_foreign_target" in message
    assert "\n" not in message
    load.check_target(target, allow_foreign=True)  # the explicit option lets it through


def test_guard_refuses_what_is_not_an_http_url_even_when_allowed() -> None:
    with pytest.raises(LoadgenError, match="not an http:// URL"):
        load.check_target("proxy:80", allow_foreign=True)


def test_run_refuses_a_foreign_target_before_touching_docker(tmp_path: Path) -> None:
    spec = LoadSpec("wrk", 4, 0, 1, target="http://203.0.113.7")
    with pytest.raises(LoadgenError, match="refusing to send load to 203.0.113.7"):
        engines.run(spec, None, tmp_path, tmp_path / "t.txt")  # type: ignore[arg-type]


@pytest.mark.parametrize("spec, fragment", [
    (LoadSpec("ab", 1, 0, 1), "engine 'ab' is unknown"),
    (LoadSpec("wrk", 4, 0, 1, think={"kind": "fixed", "mean_ms": 5}), "need engine: locust"),
    (LoadSpec("wrk", 4, 0, 1, rate=100.0), "need engine: locust"),
    (LoadSpec("locust", 4, 0, 1, think={"kind": "gamma", "mean_ms": 5}), "think must be"),
    (LoadSpec("locust", 4, 0, 1, rate=-1.0), "rate must be > 0"),
    (LoadSpec("locust", 0, 0, 1), "users and processes must be >= 1"),
    (LoadSpec("locust", 4, 0, 5, rate=10.0, requests_per_client=10), "needs closed-loop"),
    (LoadSpec("wrk", 4, 0, 5, requests_per_client=0), "requests_per_client must be >= 1"),
])
def test_specs_an_engine_cannot_honour_are_refused(spec: LoadSpec, fragment: str) -> None:
    with pytest.raises(LoadgenError, match=fragment):
        load.check_spec(spec)


# --- wrk command line and summary ----------------------------------------------------------


def test_wrk_threads_divide_the_connections() -> None:
    assert wrk.wrk_threads(64, 2) == 2
    assert wrk.wrk_threads(1, 2) == 1
    assert wrk.wrk_threads(9, 2) == 1
    assert wrk.wrk_threads(12, 8) == 6


def test_wrk_url_and_argv() -> None:
    assert wrk.wrk_url("http://proxy") == "http://proxy:80/"
    assert wrk.wrk_url("http://198.18.1.10:8080/x") == "http://198.18.1.10:8080/"
    argv = wrk.wrk_argv(LoadSpec("wrk", 64, 5, 15, processes=2), 15)
    assert argv[:7] == ["wrk", "-t", "2", "-c", "64", "-d", "15s"]
    assert argv[-3:] == ["-s", wrk.WRK_SCRIPT, "http://proxy:80/"]


def test_wrk_summary_becomes_the_common_aggregate() -> None:
    summary = {"started": 100.0, "duration_s": 10.0, "requests": 1000, "bytes": 4_200_000,
               "errors": {"connect": 1, "read": 0, "write": 0, "status": 5, "timeout": 2},
               "latency_ms": {"min": 0.1, "max": 9.0, "mean": 1.0, "stdev": 0.5,
                              "percentiles": {"50": 0.9, "99": 4.5}},
               "per_second": [{"t": 101, "requests": 100}]}
    agg = wrk.aggregate_of(summary)
    assert (agg["requests"], agg["errors"], agg["bytes"]) == (995, 8, 4_200_000)
    assert (agg["p50_ms"], agg["p99_ms"]) == (0.9, 4.5)
    assert agg["per_second"] == [{"t": 101, "requests": 100}]


def wrk_summary(started: float, started_last: float, per_second: dict[int, int]) -> dict:
    return {"started": started, "started_last": started_last, "duration_s": 10.0,
            "requests": sum(per_second.values()), "bytes": 100 * sum(per_second.values()),
            "errors": {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0},
            "latency_ms": {"min": 0.1, "max": 9.0, "mean": 1.0, "stdev": 0.5,
                           "percentiles": {"50": 0.9, "99": 4.5}},
            "per_second": [{"t": t, "requests": n} for t, n in per_second.items()]}


def wrk_correct(own: dict[int, int], expected: int) -> dict[int, int]:
    """wrk's stats_correct (src/stats.c) as the oracle: every value n >= 2e adds its count at
    n - e, n - 2e, ... while above e."""
    out = dict(own)
    for n in sorted(own):
        if n >= 2 * expected:
            m = n - expected
            while m > expected:
                out[m] = out.get(m, 0) + own[n]
                m -= expected
    return out


def test_wrk_latencies_without_its_correction_are_the_recorded_ones() -> None:
    # one connection, 100 answers: 97 of 1 ms and three stalls of 50, 80 and 200 ms
    own = {1000: 97, 50_000: 1, 80_000: 1, 200_000: 1}
    duration_us = 97 * 1000 + 330_000
    e = duration_us // 100
    corrected = wrk_correct(own, e)
    assert sum(corrected.values()) > 100  # wrk's synthetic samples
    back = wrk.wrk_uncorrected([[v, c] for v, c in corrected.items()], duration_us, 100, 1)
    assert back == own
    lat = wrk.latency_of(back)
    assert lat["percentiles"]["75"] == 1.0 and lat["percentiles"]["99"] == 200.0
    assert wrk.latency_of(corrected)["percentiles"]["75"] > 10  # what wrk would report
    assert lat["mean"] == pytest.approx((97 * 1000 + 330_000) / 100 / 1000)


def test_a_real_wrk_histogram_inverts_to_the_answers_wrk_counted() -> None:
    d = json.loads((ROOT / "tests" / "data" / "wrk" / "corrected-histogram.json").read_text())
    corrected = {v: c for v, c in d["histogram_us"]}
    # the percentile rule is wrk's own: on its corrected histogram it gives wrk's figures
    assert wrk.latency_of(corrected)["percentiles"]["50"] * 1000 == d["wrk_p50_us"]
    assert wrk.latency_of(corrected)["percentiles"]["99"] * 1000 == d["wrk_p99_us"]
    own = wrk.wrk_uncorrected(d["histogram_us"], d["duration_us"], d["requests"],
                                  d["connections"])
    assert own is not None and sum(own.values()) == d["requests"] < sum(corrected.values())
    assert wrk.latency_of(own)["percentiles"]["99"] * 1000 < d["wrk_p99_us"]
    summary = wrk_summary(100.0, 100.0, {100 + t: d["requests"] // 3 for t in range(3)})
    summary.update(requests=d["requests"], duration_s=d["duration_us"] / 1e6,
                   duration_us=d["duration_us"], histogram_us=d["histogram_us"])
    agg = wrk.aggregate_of(summary, connections=d["connections"])
    result = load.LoadResult("wrk", 100.0, agg["window"], None, agg, 1.0,
                                {"connections": d["connections"]})
    row = engines.summary_row(samples_every_second(), result, generator="loadgen",
                              bytes_label="host:veth")
    assert row["mean_ms"] == pytest.approx(wrk.latency_of(own)["mean"])
    assert row["p99_ms"] == wrk.latency_of(own)["percentiles"]["99"]


def test_a_histogram_that_does_not_invert_keeps_wrks_figures_and_says_so() -> None:
    summary = wrk_summary(100.0, 100.0, {t: 100 for t in range(100, 110)})
    summary.update(duration_us=10_000_000, histogram_us=[[1000, 5]])  # 5 samples, 1,000 answers
    assert wrk.wrk_uncorrected(summary["histogram_us"], 10_000_000, 1000, 4) == {1000: 5}
    summary["histogram_us"] = [[1000, 2000]]  # more samples than answers: not wrk's
    agg = wrk.aggregate_of(summary, connections=4)
    assert agg["p50_ms"] == 0.9 and "corrected" in agg["latency_ms"]["source"]


def test_wrk_threads_started_apart_count_only_the_window_and_are_flagged() -> None:
    # thread 0 read its trace and ran alone for 7 s before the last thread (and wrk's clock)
    # started: 1,000 TPS alone, then 2,000 TPS for wrk's 10 s
    alone = {t: 1000 for t in range(100, 107)}
    both = {t: 2000 for t in range(107, 117)}
    agg = wrk.aggregate_of(wrk_summary(100.0, 107.0, {**alone, **both}), connections=64)
    assert agg["window"] == (107.0, 117.0) and agg["threads_apart_s"] == 7.0
    assert agg["requests"] == 20_000 and agg["bytes"] == 2_000_000  # the window's, not 27,000
    assert agg["counts"] == {"engine_requests": 27_000, "records_requests": 20_000,
                             "count_mismatch": True}


def test_wrk_threads_started_together_keep_wrks_own_counts() -> None:
    per = {t: 2000 for t in range(100, 110)}
    summary = wrk_summary(100.0, 100.02, per)
    summary["requests"] -= 30  # in flight at the end: issued but not completed
    agg = wrk.aggregate_of(summary, connections=64)
    assert agg["window"] == (100.02, 110.02) and agg["threads_apart_s"] == 0.0
    assert agg["requests"] == 19_970
    assert agg["counts"]["count_mismatch"] is False


def test_a_timed_run_is_measured_after_its_warm_up_on_the_same_connections() -> None:
    """One wrk run of 10 s with 3 s of warm-up (a 1 MB trace ramping as its connections' TCP
    state grows): the window is the last 7 s, its requests, bytes and errors those the replay
    counted there, wrk's own count checked against the replay's over the whole run."""
    per = {100: 50, 101: 80, 102: 100, **{t: 120 for t in range(103, 110)}}
    summary = wrk_summary(100.0, 100.0, per)
    summary["errors"]["read"] = 46  # spread over the run: the window's share, 46 x 840 / 1,070
    agg = wrk.aggregate_of(summary, connections=16, warmup_s=3.0)
    assert agg["window"] == (103.0, 110.0) and agg["threads_apart_s"] == 0.0
    assert agg["requests"] == 840 and agg["bytes"] == 84_000 and agg["errors"] == 36
    assert agg["counts"] == {"engine_requests": 1070, "records_requests": 1070,
                             "count_mismatch": False}
    assert "over warm-up and measured time" in agg["latency_ms"]["source"]
    with pytest.raises(LoadgenError, match="nothing was measured"):
        wrk.aggregate_of(summary, connections=16, warmup_s=10.0)


def counted_summary(started: float, started_last: float, finished_last: float,
                    per_second: dict[int, int], per_client: int, threads: int = 2) -> dict:
    """A request-count run's summary as replay.lua writes it."""
    return {**wrk_summary(started, started_last, per_second), "requests_per_client": per_client,
            "sent": sum(per_second.values()), "threads_finished": threads,
            "finished_last": finished_last}


def test_a_request_count_run_is_measured_until_its_last_client_finished() -> None:
    # 8 clients x 1,000 requests, both threads started together at 101.25; the last client's
    # last answer came at 105.25 (wrk's own duration, 4.3 s, includes stopping): 2,000 TPS
    per = {101: 1500, 102: 2000, 103: 2000, 104: 2000, 105: 500}
    summary = counted_summary(101.25, 101.25, 105.25, per, 1000)
    summary["duration_s"] = 4.3
    agg = wrk.aggregate_of(summary, connections=8)
    assert agg["window"] == (101.25, 105.25) and agg["threads_apart_s"] == 0.0
    assert agg["requests"] == 8000 and agg["counts"]["count_mismatch"] is False
    result = load.LoadResult("wrk", 100.0, agg["window"], None, agg, 1.0,
                                {"requests_per_client": 1000})
    row = engines.summary_row(samples_every_second(), result, generator="loadgen",
                              bytes_label="host:veth")
    assert row["tps"] == pytest.approx(2000.0) and row["requests_per_client"] == 1000
    # CPU over the samples bracketing the window, 102 .. 105: 0.5 core of servers x 3 s
    assert row["window_s"] == pytest.approx(3.0) and row["cpu_s_servers"] == pytest.approx(1.5)


def test_wrk_mean_response_time_is_connections_over_tps_not_its_corrected_mean() -> None:
    """Seen on an emulated IDE disk: one connection, 331 answers in 4.04 s (mean at most
    12.2 ms), while wrk, correcting for coordinated omission, reported a 44 ms mean."""
    summary = wrk_summary(100.0, 100.0, {100: 82, 101: 83, 102: 83, 103: 83})
    summary["duration_s"] = 4.04
    summary["latency_ms"] = {"min": 2.2, "max": 545.1, "mean": 44.151, "stdev": 99.7,
                             "percentiles": {"50": 8.9, "99": 496.3}}
    agg = wrk.aggregate_of(summary, connections=1)
    result = load.LoadResult("wrk", 100.0, agg["window"], None, agg, 1.0,
                                {"connections": 1})
    row = engines.summary_row(samples_every_second(), result, generator="loadgen",
                              bytes_label="host:veth")
    assert row["requests"] == 331
    assert row["mean_ms"] == pytest.approx(1000 * 4.04 / 331)  # 12.2 ms, not wrk's 44


def test_a_request_count_window_too_short_to_measure_is_one_sentence() -> None:
    spec = LoadSpec("wrk", 4, 0, 30, requests_per_client=20)
    load.check_counted_window(spec, (100.0, 102.5))
    with pytest.raises(LoadgenError) as err:
        load.check_counted_window(spec, (100.0, 100.6))
    assert str(err.value) == (
        "the clients sent their 20 requests each in 0.6 s, too short to measure (CPU comes from "
        "samples taken every second; at least 2 s): raise load.requests_per_client")
    load.check_counted_window(LoadSpec("wrk", 4, 0, 30), (100.0, 100.6))  # timed: not here


def test_a_request_count_too_small_for_the_warm_ups_rate_is_raised_to_about_4_s() -> None:
    """100 requests for 1 client at the warm-up's 2,453 answers a second would end in 0.04 s:
    raised to 4 s at that rate. Counts that last 4 s or more stay as asked, and so do runs
    without a measured warm-up."""
    warm = {"duration_s": 1.000765, "requests": 2453}
    assert wrk.counted_enough(100, warm, 1) == math.ceil(4 * 2453 / 1.000765)
    assert wrk.counted_enough(20, warm, 64) == math.ceil(4 * 2453 / 1.000765 / 64)
    assert wrk.counted_enough(100, warm, 64) == math.ceil(4 * 2453 / 1.000765 / 64)  # 2.6 s
    assert wrk.counted_enough(10000, warm, 1) == 10000  # 4.08 s at that rate
    assert wrk.counted_enough(10000, warm, 64) == 10000
    assert wrk.counted_enough(100, {}, 1) == 100
    assert wrk.counted_enough(100, {"duration_s": 1.0, "requests": 0}, 1) == 100


def test_a_request_count_run_whose_threads_started_apart_counts_the_window_only() -> None:
    # thread 0 ran alone from 100 to 102 (500/s), then both until the last finished at 106
    per = {100: 500, 101: 500, 102: 1000, 103: 1000, 104: 1000, 105: 1000}
    agg = wrk.aggregate_of(counted_summary(100.0, 102.0, 106.0, per, 625), connections=8)
    assert agg["window"] == (102.0, 106.0) and agg["threads_apart_s"] == 2.0
    assert agg["requests"] == 4000 and agg["counts"]["count_mismatch"] is True


def test_a_run_starting_and_ending_mid_second_is_not_counted_short() -> None:
    """A real quick point (wrk, 16 connections): the load began 0.387 s into its first second
    and stopped 0.392 s into its last; those seconds hold only requests of the run."""
    per = {714: 3984, 715: 6832, 716: 6432, 717: 6672, 718: 6784, 719: 6464, 720: 2768}
    summary = wrk_summary(714.387085, 714.387085, per)
    summary["duration_s"], summary["requests"] = 6.004983, 39920
    agg = wrk.aggregate_of(summary, connections=16)
    assert agg["requests"] == 39920 and agg["threads_apart_s"] == 0.0
    assert agg["counts"] == {"engine_requests": 39920, "records_requests": 39936,
                             "count_mismatch": False}


def test_requests_served_between_two_samples_follow_an_uneven_rate() -> None:
    """A hit-ratio point on a cold page cache (seen here): 720 requests in wrk's first second,
    then 240 and 448, so the run's mean rate times an interval misstates what it served."""
    summary = wrk_summary(539.03, 539.03, {539: 720, 540: 240, 541: 448, 542: 35})
    summary["duration_s"], summary["requests"] = 3.02, 1443
    summary["errors"]["status"] = 0
    agg = wrk.aggregate_of(summary, connections=1)
    result = load.LoadResult("wrk", 539.0, agg["window"], None, agg, 1.0)
    assert load.served_between(result, 540.0, 542.0) == pytest.approx(688)
    # the same second's requests spread over the part of it the load ran in (from 539.03)
    assert load.served_between(result, 539.03, 539.515) == pytest.approx(360, abs=1)
    # Locust: the records themselves, failures left out
    records = [metrics.Request(540.5, 1.0, 10, 200), metrics.Request(541.0, 1.0, 10, 500),
               metrics.Request(541.5, 1.0, 10, 200), metrics.Request(542.5, 1.0, 10, 200)]
    records_result = load.LoadResult("locust", 539.0, (540.0, 543.0),
                                        metrics.RequestLog.of(records), None, 1.0)
    assert load.served_between(records_result, 540.0, 542.0) == 2


def test_locust_window_starts_at_the_first_request() -> None:
    spec = LoadSpec("locust", 10, 2.0, 5.0)
    # the users read their traces for 4 s before the first request went out
    reqs = [metrics.Request(104.0 + k / 100, 10.0, 1, 200) for k in range(1, 801)]
    assert locust.locust_window(100.0, reqs, spec)[0] == pytest.approx((106.0, 111.0))
    # a request-count run's window ends with its last request, whatever its time limit
    counted = LoadSpec("locust", 10, 2.0, 60.0, requests_per_client=50)
    assert locust.locust_window(100.0, reqs, counted)[0] == pytest.approx((106.0, 112.0))


def test_worker_request_logs_become_one_parquet_file_and_open_loop_figures(
        tmp_path: Path) -> None:
    head = "end_s,latency_ms,bytes,path,status,late_ms\n"
    (tmp_path / "requests-w0.csv").write_text(head + "10.5,1,10,/a,200,0\n11.5,1,10,/a,200,50\n")
    (tmp_path / "requests-w1.csv").write_text(head + "10.7,1,10,/b,500,0\n12.5,1,10,/b,200,0\n")
    merged = metrics.convert_request_logs(tmp_path)
    assert not list(tmp_path.glob("*.csv"))  # the CSV logs are gone once converted
    table = pq.read_table(tmp_path / "requests.parquet").to_pylist()
    assert [(r["end_s"], r["path"], r["status"], r["worker"]) for r in table] == [
        (10.5, "/a", 200, 0), (11.5, "/a", 200, 0), (10.7, "/b", 500, 1), (12.5, "/b", 200, 1)]
    assert locust.workers_logged(merged) == 2
    fig = locust.open_loop_figures(merged, (10.0, 12.0), rate=4.0)
    assert fig == {"target_rate": 4.0, "achieved_rate": 1.0, "late_requests": 1,
                   "late_threshold_ms": locust.LATE_MS, "rate_short": False}


def test_an_open_loop_falls_short_beyond_a_poisson_counts_noise() -> None:
    # 1,000 offered: 95 % less 3 sd of a Poisson count (95) is 855
    assert not locust.rate_short(856, 1000.0) and locust.rate_short(854, 1000.0)
    # 100,000 offered: the noise is 949 of 95,000
    assert locust.rate_short(94_000, 100_000.0) and not locust.rate_short(94_100, 100_000.0)


# --- Locust users against a real HTTP server -------------------------------------------------


@pytest.fixture()
def server() -> Iterator[Any]:
    yield from servers()


def test_trace_users_replay_their_own_subsets_closed_loop(tmp_path: Path, server) -> None:
    srv = server(delay=0.005)
    rows = run_locust(tmp_path, srv, two_subsets(tmp_path), users=2, seconds=3)
    assert len(rows) > 50 and all(r["status"] == "200" for r in rows)
    assert Counter(r["path"] for r in rows) == Counter(srv.paths)  # every request logged
    # each user walks its own subset in order: /a/0../a/4 and /b/0../b/4, wrapping
    seq_a = [p for p in srv.paths if p.startswith("/a/")]
    seq_b = [p for p in srv.paths if p.startswith("/b/")]
    assert seq_a[:7] == [f"/a/{i % 5}" for i in range(7)]
    assert seq_b[:7] == [f"/b/{i % 5}" for i in range(7)]
    assert abs(len(seq_a) - len(seq_b)) <= 0.2 * len(srv.paths)
    assert srv.max_inflight <= 2  # closed loop: one request at a time per user


@pytest.mark.parametrize("processes, warmup", [(1, 0.0), (1, 0.5), (2, 0.5)])
def test_request_count_clients_send_exactly_their_requests_then_the_run_ends(
        tmp_path: Path, server, processes: int, warmup: float) -> None:
    srv = server(delay=0.002)
    spec = LoadSpec("locust", 4, warmup, 120.0, processes=processes, requests_per_client=23)
    started = time.time()
    rows = run_locust(tmp_path, srv, four_subsets(tmp_path), users=4, seconds=120,
                  processes=processes, REQUESTS_PER_CLIENT="23", WARMUP_S=f"{warmup:g}")
    assert time.time() - started < 60  # it ended when the clients were done, not at -t 120 s
    assert (tmp_path / load.FINISHED_FILE).read_text().split() == ["4", "4", "23"]
    load.check_clients_finished(spec, tmp_path)
    assert Counter(r["path"] for r in rows) == Counter(srv.paths)  # every request logged
    for c in "abcd":
        mine = [p for p in srv.paths if p.startswith(f"/{c}/")]
        # the counted requests: the client's sequence from its start, 23 of them, last
        assert mine[-23:] == [f"/{c}/{i % 5}" for i in range(23)]
        if not warmup:
            assert len(mine) == 23  # nothing else was sent
    requests = metrics.records_of(tmp_path)
    window, _ = locust.locust_window(started, requests, spec)
    ends = [float(r["end_s"]) for r in rows]
    assert window[1] == max(ends)
    in_window = sum(window[0] < e <= window[1] for e in ends)
    if processes == 1:
        # every counted request, and at most one warm-up request per client still in flight
        assert 92 <= in_window <= 92 + 4
    else:  # each process counts its warm-up from its own first request
        assert in_window >= 92 - 4


@pytest.mark.parametrize("processes", [1, 2])
def test_a_locust_request_count_too_small_for_the_warm_ups_rate_is_raised(
        tmp_path: Path, server, processes: int) -> None:
    """5 requests a client, answered in about 10 ms: each process raises its clients' count to
    COUNTED_AIM_S (here 1 s) at its warm-up's rate, the finished file says the least count, and
    every client's counted requests are its sequence from its start, that many of them."""
    srv = server(delay=0.002)
    spec = LoadSpec("locust", 4, 0.5, 120.0, processes=processes, requests_per_client=5)
    rows = run_locust(tmp_path, srv, four_subsets(tmp_path), users=4, seconds=120,
                      processes=processes, REQUESTS_PER_CLIENT="5", WARMUP_S="0.5",
                      COUNTED_AIM_S="1")
    load.check_clients_finished(spec, tmp_path)
    done, users, sent = (int(x) for x in (tmp_path / load.FINISHED_FILE).read_text().split())
    assert (done, users) == (4, 4) and load.sent_per_client(tmp_path) == sent
    # 2 ms a request is at most 500 a second a client: the raised count is well above 5
    # and below what a whole second could have held
    assert 20 < sent <= 500, sent
    for c in "abcd":
        mine = [p for p in srv.paths if p.startswith(f"/{c}/")]
        if processes == 1:  # one count for every client: its last `sent` requests, from /c/0
            assert mine[-sent:] == [f"/{c}/{i % 5}" for i in range(sent)]
        else:  # each process its own count, the file the least: a tail of at least that many
            assert any(mine[-n:] == [f"/{c}/{i % 5}" for i in range(n)]
                       for n in range(sent, len(mine) + 1))
    assert len(rows) == len(srv.paths)
    assert counting.counted_enough(5, 0, 0.5, 4, 1.0) == 5  # no warm-up: as asked
    assert counting.counted_enough(5, 100, 0.5, 4, 1.0) == 50  # 50 a second a client
    assert counting.counted_enough(500, 100, 0.5, 4, 1.0) == 500  # enough already
    assert counting.counted_enough(5, 100, 0.5, 4, 0.0) == 5  # no aim: as asked


def test_a_request_count_run_over_its_time_limit_fails_in_one_sentence(tmp_path: Path,
                                                                       server) -> None:
    srv = server(delay=0.05)
    run_locust(tmp_path, srv, two_subsets(tmp_path), users=2, seconds=2,
           REQUESTS_PER_CLIENT="100000", WARMUP_S="0")
    spec = LoadSpec("locust", 2, 0, 2, requests_per_client=100_000)
    with pytest.raises(LoadgenError) as err:
        load.check_clients_finished(spec, tmp_path)
    assert str(err.value) == (
        "Locust: 0 of 2 clients had sent their 100,000 requests within load.measure_s = 2 s, "
        "the time limit of a request-count run: raise load.measure_s or lower "
        "load.requests_per_client")


def rate_between_first_and_last(rows: list[dict]) -> float:
    """Requests per second over the stretch the users were running (start-up excluded)."""
    ends = sorted(float(r["end_s"]) for r in rows)
    return (len(ends) - 1) / (ends[-1] - ends[0])


def test_fixed_think_time_paces_each_user(tmp_path: Path, server) -> None:
    srv = server()
    rows = run_locust(tmp_path, srv, two_subsets(tmp_path), users=2, seconds=4,
                  THINK_KIND="fixed", THINK_MS="250")
    # 2 users, one request per 250 ms each: 8/s; without think time it would be thousands
    assert len(rows) >= 8
    assert 5.5 <= rate_between_first_and_last(rows) <= 9.0


def test_exponential_think_time_has_its_mean(tmp_path: Path, server) -> None:
    srv = server()
    rows = run_locust(tmp_path, srv, two_subsets(tmp_path), users=8, seconds=5,
                  THINK_KIND="exponential", THINK_MS="100")
    # 8 users, exponential think time of mean 100 ms: 80/s; the spread of an exponential mean
    # over a few hundred draws and scheduling noise on a shared host allow about +-30 %
    assert len(rows) >= 100
    assert 55.0 <= rate_between_first_and_last(rows) <= 105.0


def test_open_loop_keeps_its_rate_when_answers_are_slow(tmp_path: Path, server) -> None:
    srv = server(delay=0.2)
    rows = run_locust(tmp_path, srv, two_subsets(tmp_path), users=2, seconds=4,
                  user_class="OpenLoopUser", RATE="50")
    # closed loop with 2 users at 200 ms per answer would manage 10/s
    ends = sorted(float(r["end_s"]) for r in rows)
    window = (ends[0] + 0.5, ends[0] + 3.0)
    fig = locust.open_loop_figures(metrics.records_of(tmp_path), window, rate=50.0)
    assert 40 <= fig["achieved_rate"] <= 60
    assert srv.max_inflight >= 5
    assert fig["late_requests"] <= 0.1 * len(rows)


def test_dynamic_writes_are_posted_and_counted_from_the_request_log(tmp_path: Path,
                                                                     server) -> None:
    """Locust sends a dynamic trace's writes as POST (Content-Length: 0) and everything else as
    GET; the summary's successful writes come from its request log."""
    srv = server(delay=0.002)
    path = tmp_path / "trace.txt"
    spec = {"name": "w", "kind": "single", "size": 4096,
            "dynamic": {"share": 0.5, "query": "write", "requests": 40}}
    traces.write(path, traces.build(spec, 3), "writes")
    rows = run_locust(tmp_path, srv, path, users=2, seconds=3)
    assert len(rows) > 40
    for method, sent, length in srv.methods:
        if sent.startswith(traces.WRITE_PREFIX):
            assert (method, length) == ("POST", "0"), (method, sent, length)
        else:
            assert method == "GET" and sent == "/single-4096/file.bin", (method, sent)
    posted = sum(m == "POST" for m, _, _ in srv.methods)
    assert 0.4 * len(srv.methods) <= posted <= 0.6 * len(srv.methods)
    ends = [float(r["end_s"]) for r in rows]
    fig = metrics.dynamic_figures(metrics.RequestLog(tmp_path / "requests.parquet"),
                                  min(ends) - 1, max(ends),
                                  traces.DYNAMIC_PREFIX, traces.WRITE_PREFIX)
    assert fig["writes_ok"] == posted  # every POST was answered 200 and logged
    assert fig["dyn_tps"] * (max(ends) - min(ends) + 1) == pytest.approx(posted)
    # over the whole run whatever the window (the database's counters cover the whole load)
    narrow = metrics.dynamic_figures(metrics.RequestLog(tmp_path / "requests.parquet"),
                                     min(ends), min(ends) + 0.5,
                                     traces.DYNAMIC_PREFIX, traces.WRITE_PREFIX)
    assert narrow["dynamic_answered"] == fig["dynamic_answered"] == posted
    assert narrow["dyn_tps"] * 0.5 < posted


def test_processes_write_one_log_each_and_keep_clients_distinct(tmp_path: Path, server) -> None:
    srv = server(delay=0.002)
    rows = run_locust(tmp_path, srv, two_subsets(tmp_path), users=2, seconds=4, processes=2)
    assert sorted({r["worker"] for r in rows}) == ["0", "1"]  # one log per process
    prefixes = Counter(r["path"][:3] for r in rows)
    assert set(prefixes) == {"/a/", "/b/"}  # worker 0's user is client 0, worker 1's client 1
    assert Counter(r["path"] for r in rows) == Counter(srv.paths)


def test_bench_prints_usage() -> None:
    done = subprocess.run([sys.executable, "-m", "tierbench.bench", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and "--loadgen" in done.stdout


# --- results in the runner's schema --------------------------------------------------------


def samples_every_second() -> list[dict]:
    host0 = {k: 0 for k in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")}
    out = []
    for i in range(11):
        host = {**host0, "user": 50 * i, "idle": 50 * i}
        cpu = {n: {"usage_s": v * i, "user_s": 0.0, "system_s": 0.0}
               for n, v in (("loadgen", 0.9), ("proxy", 0.25), ("web", 0.25))}
        out.append({"t": 100.0 + i, "host": host, "cpu": cpu,
                    "net": {"host:veth": {"tx_bytes": 1000 * i, "rx_bytes": 0}}})
    return out


def test_wrk_aggregate_gives_the_same_summary_columns_as_locust() -> None:
    agg = {"requests": 4000, "errors": 3, "bytes": 5000, "p50_ms": 1.5, "p99_ms": 7.0,
           "per_second": [{"t": 101 + i, "requests": 1000} for i in range(5)]}
    wrk_result = load.LoadResult("wrk", 99.0, (101.0, 105.0), None, agg, 1.0, {})
    row = engines.summary_row(samples_every_second(), wrk_result, generator="loadgen",
                              bytes_label="host:veth")
    assert (row["requests"], row["errors"], row["tps"]) == (4000, 3, 1000.0)
    assert (row["p50_ms"], row["p99_ms"]) == (1.5, 7.0)
    assert row["cpu_s_servers"] == pytest.approx(2.0)  # 0.5 core x 4 s
    assert row["server_cpu_us_per_req"] == pytest.approx(2.0e6 / 4000)
    assert row["generator_cpu_pct"] == pytest.approx(90.0) and row["client_bound"]
    assert "wrk's limit" in row["client_bound_advice"]
    reqs = [metrics.Request(101.0 + k / 1000, 1.0, 1, 200) for k in range(1, 4001)]
    locust_result = load.LoadResult("locust", 99.0, (101.0, 105.0), reqs, None, 1.0,
                                       {"target_rate": 1000.0, "achieved_rate": 999.0,
                                        "late_requests": 2})
    lrow = engines.summary_row(samples_every_second(), locust_result, generator="loadgen",
                               bytes_label="host:veth")
    assert set(row) - {"client_bound_advice"} <= set(lrow)
    assert lrow["tps"] == pytest.approx(1000.0) and lrow["late_requests"] == 2
    assert "load.processes" in lrow["client_bound_advice"]
    per = engines.per_second_rows(samples_every_second(), wrk_result)
    assert [r["tps"] for r in per[:6]] == [0.0, 1000.0, 1000.0, 1000.0, 1000.0, 1000.0]
    # marks (extra samples that keep a window bracketed) leave the per-second series as it was
    marked = samples_every_second()
    marked.insert(3, {**marked[2], "t": 102.3, "mark": True})
    assert engines.per_second_rows(marked, wrk_result) == per


# --- distributed workers ---------------------------------------------------------------------


def test_master_and_worker_command_lines(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TIERBENCH_RESULTS", str(tmp_path))
    spec = LoadSpec("locust", 8, 2, 10, processes=3, workers=2, remote_workers=4,
                    worker_wait_s=45)
    argv = locust.master_argv(spec, tmp_path / "p001", 13)
    assert argv[:4] == ["locust", "-f", locust.LOCUSTFILE, "--headless"]
    assert "--processes" not in argv  # the master is one process; workers run elsewhere
    joined = " ".join(argv)
    assert "--master --master-bind-port 5557 --expect-workers 10" in joined  # 2 x 3 + 4
    assert "--expect-workers-max-wait 45" in joined and "-t 13s" in joined
    assert "--csv /results/p001/locust" in joined and argv[-1] == "TraceUser"
    assert locust.worker_argv("loadgen", 3) == [
        "locust", "-f", locust.LOCUSTFILE, "--worker", "--master-host", "loadgen",
        "--master-port", "5557", "--processes", "3"]
    assert "--processes" not in locust.worker_argv("loadgen", 1)
    cmd = locust.remote_worker_cmd("198.18.0.5", processes=2, cpus="0-3")
    assert cmd[:2] == ["docker", "run"] and "--cap-drop" in cmd and "ALL" in cmd
    assert cmd[cmd.index("--cpuset-cpus") + 1] == "0-3"
    assert cmd[cmd.index("--network") + 1] == "host"
    assert "ALLOW_FOREIGN_TARGET=1" not in cmd  # the guard holds unless the node's user lifts it
    assert cmd[-7:] == ["--worker", "--master-host", "198.18.0.5", "--master-port", "5557",
                        "--processes", "2"]


def test_worker_specs_are_checked() -> None:
    with pytest.raises(LoadgenError, match="workers and remote_workers need engine: locust"):
        load.check_spec(LoadSpec("wrk", 4, 0, 1, workers=2))
    with pytest.raises(LoadgenError, match="must be >= 0"):
        load.check_spec(LoadSpec("locust", 4, 0, 1, workers=-1))


def container(cpuset: str) -> Container:
    return Container("loadgen-worker", "id", "n", 1, "img", "sha", cpuset)


def test_worker_allowance_is_their_processes_capped_by_their_cores() -> None:
    spec = LoadSpec("locust", 8, 0, 1, workers=2)
    assert locust.workers_allowance(spec, [container("0"), container("0")]) == 1.0
    assert locust.workers_allowance(spec, [container("0"), container("1")]) == 2.0
    spec3 = LoadSpec("locust", 8, 0, 1, processes=3, workers=2)
    assert locust.workers_allowance(spec3, [container("0-3"), container("2-5")]) == 6.0
    assert locust.workers_allowance(spec3, [container("0-1"), container("1")]) == 2.0


def distributed(tmp_path: Path, srv: Server, trace: Path, users: int, seconds: int,
                workers: int, expect: int, wait_s: int = 20, ship: bool = True,
                **env: str) -> tuple[int, Path]:
    """A real Locust master and `workers` separate worker processes (no TRACE: they run in
    another directory with a bare environment, as on another node). With `ship` the master
    sends the trace's lines (workers on other nodes); without, the workers open the trace file
    the master names (workers on this host)."""
    port = 20000 + os.getpid() % 20000
    log = tmp_path / "requests.csv"
    master_env = {**os.environ, "TRACE": str(trace), "REQUEST_LOG": str(log),
                  "USERS": str(users), "PYTHONPATH": str(ROOT), "SHIP_TRACE": "1" if ship else "0",
                  **env}
    locustfile = str(ROOT / "workloads/locust/trace_replay.py")
    master = [str(LOCUST), "-f", locustfile, "--headless", "--host",
              f"http://127.0.0.1:{srv.server_address[1]}", "-u", str(users), "-r", str(users),
              "-t", f"{seconds}s", "--stop-timeout", "2", "--only-summary",
              "--exit-code-on-error", "0", "--master", "--master-bind-host", "127.0.0.1",
              "--master-bind-port", str(port), "--expect-workers", str(expect),
              "--expect-workers-max-wait", str(wait_s), "TraceUser"]
    elsewhere = tmp_path / "node2"
    elsewhere.mkdir()
    worker_env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT),
                  "ALLOW_FOREIGN_TARGET": "1"}
    procs = [subprocess.Popen([str(LOCUST), "-f", locustfile, "--worker", "--master-host",
                               "127.0.0.1", "--master-port", str(port)], cwd=elsewhere,
                              env=worker_env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(workers)]
    master_log = tmp_path / "locust.log"
    try:
        with master_log.open("w") as out:
            code = subprocess.run(master, env=master_env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=seconds + wait_s + 60, check=False).returncode
    finally:
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
    return code, master_log


@pytest.mark.parametrize("ship", [True, False], ids=["lines-sent", "file-read"])
def test_separate_workers_get_the_trace_from_the_master_and_send_back_their_records(
        tmp_path: Path, server, ship: bool) -> None:
    srv = server(delay=0.002)
    code, _ = distributed(tmp_path, srv, two_subsets(tmp_path), users=2, seconds=3, workers=2,
                          expect=2, ship=ship)
    assert code == 0
    assert sorted(p.name for p in tmp_path.glob("requests-w*.csv")) == [
        "requests-w0.csv", "requests-w1.csv"]
    assert not list((tmp_path / "node2").iterdir())  # the workers wrote nothing themselves
    by_worker = {}
    for k in (0, 1):
        with (tmp_path / f"requests-w{k}.csv").open() as fh:
            by_worker[k] = {r["path"][:3] for r in csv.DictReader(fh)}
    # one user per worker: worker 0 runs client 0 (/a/ subset), worker 1 client 1 (/b/)
    assert sorted(map(sorted, by_worker.values())) == [["/a/"], ["/b/"]]
    rows = parquet_rows(tmp_path)
    assert Counter(r["path"] for r in rows) == Counter(srv.paths)  # every request logged
    assert (tmp_path / "locust-start.txt").exists()


def test_separate_workers_stop_their_clients_after_their_requests(tmp_path: Path,
                                                                  server) -> None:
    srv = server(delay=0.002)
    started = time.time()
    code, _ = distributed(tmp_path, srv, four_subsets(tmp_path), users=4, seconds=120,
                          workers=2, expect=2, ship=False, REQUESTS_PER_CLIENT="17",
                          WARMUP_S="0")
    assert code == 0 and time.time() - started < 60  # the master quit when all were done
    assert (tmp_path / load.FINISHED_FILE).read_text().split() == ["4", "4", "17"]
    for c in "abcd":  # each of the 4 clients (2 per worker) sent exactly its 17 requests
        assert [p for p in srv.paths if p.startswith(f"/{c}/")] == \
            [f"/{c}/{i % 5}" for i in range(17)]
    assert len(parquet_rows(tmp_path)) == 4 * 17


def test_master_gives_up_naming_how_many_workers_arrived(tmp_path: Path, server) -> None:
    srv = server()
    code, log = distributed(tmp_path, srv, two_subsets(tmp_path), users=2, seconds=2, workers=1,
                            expect=3, wait_s=7)
    assert code != 0 and not (tmp_path / "locust-start.txt").exists()
    assert locust.connected_workers(log) == 1
