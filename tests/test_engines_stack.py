"""Both engines for real, in standalone tbe- containers (never the lead's Compose project): wrk's
replay checked against the web server's access log, Locust through the same run() API.

Needs Docker and the images tierbench-web:TAG and tierbench-loadgen:TAG (TIERBENCH_TAG, default
0.1.0) with wrk (override with TBE_WEB_IMAGE / TBE_LOADGEN_IMAGE). Creates its own containers and
removes them."""

import json
import os
import random
import re
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tierbench import bench
from tierbench.kinds.web import engines, load, wrk
from tierbench.kinds.web.load import LoadSpec
from workloads import filesets, traces

pytestmark = pytest.mark.stack

NETWORK, SUBNET = "tbe-net", "198.19.250.0/24"
WEB_IP = "198.19.250.11"
TARGET = f"http://{WEB_IP}"
TAG = os.environ.get("TIERBENCH_TAG", "0.1.0")
WEB_IMAGE = os.environ.get("TBE_WEB_IMAGE", f"tierbench-web:{TAG}")
LOADGEN_IMAGE = os.environ.get("TBE_LOADGEN_IMAGE", f"tierbench-loadgen:{TAG}")
FILESET = {"kind": "uniform-log", "files": 40, "min_size": 1024, "max_size": 16384, "seed": 3}
LOG_LINE = re.compile(r'"GET (\S+) HTTP/1\.1" (\d{3}) ')


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=120,
                          check=check)


@pytest.fixture(scope="module")
def testbed(tmp_path_factory: pytest.TempPathFactory):
    """A web container (access log on) and a loadgen container on tbe-net; removed at the end."""
    root = tmp_path_factory.mktemp("tbe")
    docroot, results = root / "docroot", root / "results"
    filesets.write([FILESET, {"kind": "single", "size": 4096}], docroot)
    results.mkdir()
    for path in [root, docroot, results, *docroot.rglob("*")]:
        path.chmod(0o777 if path.is_dir() else 0o644)
    made_net = docker("network", "inspect", NETWORK, check=False).returncode != 0
    if made_net:
        docker("network", "create", "--subnet", SUBNET, NETWORK)
    tag = uuid.uuid4().hex[:6]
    web, gen = f"tbe-t-web-{tag}", f"tbe-t-loadgen-{tag}"
    try:
        docker("run", "-d", "--name", web, "--network", NETWORK, "--ip", WEB_IP,
               "--cpuset-cpus", "1", "-e", "ACCESS_LOG=on", "-v", f"{docroot}:/srv/docroot:ro",
               WEB_IMAGE)
        docker("run", "-d", "--name", gen, "--network", NETWORK, "--cpuset-cpus", "0",
               "-v", f"{Path(__file__).resolve().parent.parent / 'workloads'}:/app/workloads:ro",
               "-v", f"{results}:/results", LOADGEN_IMAGE)
        for _ in range(60):
            if docker("inspect", "-f", "{{.State.Health.Status}}", web).stdout.strip() == "healthy":
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"{web} did not become healthy in 30 s")
        yield {"web": web, "gen": bench.container(gen), "results": results}
    finally:
        docker("rm", "-f", web, gen, check=False)
        if made_net:
            docker("network", "rm", NETWORK, check=False)


def access_log(web: str) -> list[tuple[str, int]]:
    """(path, status) of every trace request the web server logged (health checks left out)."""
    text = docker("exec", web, "cat", "/var/log/apache2/access.log").stdout
    return [(m.group(1), int(m.group(2))) for m in LOG_LINE.finditer(text)
            if m.group(1) != "/healthz"]


def truncate_log(web: str) -> None:
    docker("exec", web, "sh", "-c", ": > /var/log/apache2/access.log")


def point_dir(testbed: dict, name: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TIERBENCH_RESULTS", str(testbed["results"]))
    path = testbed["results"] / name
    path.mkdir()
    path.chmod(0o777)
    return path


def test_wrk_replay_sends_the_trace_paths_in_their_proportions(testbed, monkeypatch) -> None:
    pdir = point_dir(testbed, "wrk-zipf", monkeypatch)
    spec = {"name": "z", "kind": "zipf", "alpha": 0.9, "per_client": 2000, "subsets": 8,
            "fileset": FILESET}
    paths = traces.build(spec, seed=4)
    trace = pdir / "trace.txt"
    traces.write(trace, paths, "zipf for the wrk test", subset=traces.subset_size(spec))
    truncate_log(testbed["web"])
    result = engines.run(LoadSpec("wrk", 8, 1, 3, processes=2, target=TARGET), testbed["gen"],
                         pdir, trace)
    logged = access_log(testbed["web"])
    agg = result.aggregate
    assert result.engine == "wrk" and result.requests is None
    assert agg["requests"] > 500 and agg["errors"] == 0
    assert result.allowance_cores == 1.0  # 2 threads, but a cpuset of one core
    assert 2.5 <= result.window[1] - result.window[0] <= 4.0
    assert sum(s["requests"] for s in agg["per_second"]) >= agg["requests"]
    # every request the server saw was answered 200 and is a trace path
    assert logged and all(status == 200 for _, status in logged)
    assert {p for p, _ in logged} <= set(paths)
    # everything wrk sent in its one run of warm-up and measured time (its own count, which
    # includes the requests its earlier threads sent before its clock started), up to one
    # request per connection in flight at the end
    total = json.loads((pdir / "wrk-measure.json").read_text())["requests"]
    assert agg["requests"] <= total
    assert total <= len(logged) <= total + 16
    # the proportions: total variation distance between the log and the trace < 0.05
    seen, want = Counter(p for p, _ in logged), Counter(paths)
    tvd = 0.5 * sum(abs(seen[p] / len(logged) - want[p] / len(paths)) for p in want)
    assert tvd < 0.05, tvd


@pytest.mark.parametrize("length", [20, 150])
def test_wrk_clients_walk_their_own_subsets_in_order(testbed, monkeypatch, length: int) -> None:
    # two subsets, each of its own 20 files: in file order (a sequence that fits in a client's
    # ring of traces.AHEAD requests, read once), or 150 requests in a seeded order (longer than
    # the ring: read a block at a time, wrapping in the middle of a block)
    assert (length <= traces.AHEAD) == (length == 20)
    pdir = point_dir(testbed, f"wrk-order-{length}", monkeypatch)
    files = [p for p, _ in filesets.files(FILESET)]
    rng = random.Random(length)
    seqs = [[files[k * 20 + (i if length == 20 else rng.randrange(20))] for i in range(length)]
            for k in range(2)]
    trace = pdir / "trace.txt"
    traces.write(trace, seqs[0] + seqs[1], f"two subsets of {length}", subset=length)
    truncate_log(testbed["web"])
    # 2 connections on 2 threads: one client per thread, so each client's order is exact
    engines.run(LoadSpec("wrk", 2, 0, 2, processes=2, target=TARGET), testbed["gen"], pdir, trace)
    logged = [p for p, _ in access_log(testbed["web"])]
    for k in range(2):
        mine = [p for p in logged if p in files[k * 20:(k + 1) * 20]]
        assert len(mine) > 2 * length + 100  # past the sequence's end twice
        assert mine == [seqs[k][i % length] for i in range(len(mine))]


def replay_single_4k(testbed, monkeypatch, name: str, warmup_s: float) -> tuple[Path, Any]:
    """4 wrk connections replay a single-file 4 KB trace for warmup_s + 2 s, from an empty
    access log: the point's folder and the engine's result."""
    pdir = point_dir(testbed, name, monkeypatch)
    trace = pdir / "trace.txt"
    traces.write(trace, traces.build({"kind": "single", "size": 4096}, seed=1), "single")
    truncate_log(testbed["web"])
    return pdir, engines.run(LoadSpec("wrk", 4, warmup_s, 2, processes=2, target=TARGET),
                             testbed["gen"], pdir, trace)


def test_wrk_replays_a_single_file_trace(testbed, monkeypatch) -> None:
    pdir, result = replay_single_4k(testbed, monkeypatch, "wrk-single", 0)
    logged = access_log(testbed["web"])
    assert not (pdir / "wrk-warmup.json").exists()  # no warm-up asked for, none run
    assert {p for p, _ in logged} == {"/single-4096/file.bin"}
    assert result.aggregate["requests"] <= len(logged) <= result.aggregate["requests"] + 4
    assert result.aggregate["bytes"] >= 4096 * result.aggregate["requests"]


def trace_files_open_in_wrk(testbed, pdir: Path, trace: Path, users: int) -> int:
    """How many files wrk holds open on `trace` one second into a 2 s run of `users` clients."""
    spec = LoadSpec("wrk", users, 0, 2, processes=2, target=TARGET)
    runner = threading.Thread(target=engines.run, args=(spec, testbed["gen"], pdir, trace))
    runner.start()
    time.sleep(1.0)
    # wrk's open files, read from this host (its /proc shows the container's processes)
    top = docker("top", testbed["gen"].id, "-eo", "pid,comm").stdout.split("\n")[1:]
    pid = next(line.split()[0] for line in top if line.split()[1:] == ["wrk"])
    fds = Path(f"/proc/{pid}/fd")
    listing = [os.readlink(fd) for fd in fds.iterdir()]
    runner.join(timeout=60)
    assert any(t.startswith("socket:") for t in listing), listing  # wrk's files, in its run
    return listing.count(load.container_path(trace))


def test_wrk_reads_a_sequence_that_fits_its_ring_once(testbed, monkeypatch) -> None:
    # a single-file trace: each client read its one line at the start and closed the file
    # (a line per request cost an lseek per request); a 150-request sequence, longer than the
    # ring, stays open, one file per client, read a block at a time
    pdir = point_dir(testbed, "wrk-once", monkeypatch)
    single = pdir / "single.txt"
    traces.write(single, traces.build({"kind": "single", "size": 4096}, seed=1), "single")
    assert trace_files_open_in_wrk(testbed, pdir, single, 4) == 0
    files = [p for p, _ in filesets.files(FILESET)]
    long = pdir / "long.txt"
    traces.write(long, [files[i % 40] for i in range(300)], "two subsets of 150", subset=150)
    assert trace_files_open_in_wrk(testbed, pdir, long, 4) == 4


def test_wrk_timed_run_measures_after_its_warm_up_in_the_same_run(testbed, monkeypatch) -> None:
    pdir, result = replay_single_4k(testbed, monkeypatch, "wrk-warm", 1)
    measure = json.loads((pdir / "wrk-measure.json").read_text())
    # one wrk run of warm-up + measured time (3 s), no separate warm-up run: the server saw
    # that run's requests only (up to one per connection in flight at its end)
    assert not (pdir / "wrk-warmup.json").exists() and result.extra["runs"] == 1
    assert measure["duration_s"] == pytest.approx(3.0, abs=0.5)
    logged = access_log(testbed["web"])
    assert measure["requests"] <= len(logged) <= measure["requests"] + 4
    # the window is the run's last 2 s, its requests the replay's count there
    last = measure["started_last"]
    assert result.window == (last + 1.0, last + measure["duration_s"])
    assert 0.4 * measure["requests"] < result.aggregate["requests"] < 0.9 * measure["requests"]


def test_locust_engine_through_run(testbed, monkeypatch) -> None:
    pdir = point_dir(testbed, "locust", monkeypatch)
    paths = traces.build({"name": "z", "kind": "zipf", "alpha": 0.9, "requests": 500,
                          "fileset": FILESET}, seed=2)
    trace = pdir / "trace.txt"
    traces.write(trace, paths, "zipf for the Locust test")
    truncate_log(testbed["web"])
    result = engines.run(LoadSpec("locust", 4, 1, 3, target=TARGET), testbed["gen"], pdir, trace)
    logged = access_log(testbed["web"])
    assert result.engine == "locust" and result.aggregate is None
    assert result.window[1] - result.window[0] == pytest.approx(3.0)
    assert result.allowance_cores == 1.0
    status = np.concatenate([a["status"] for a in result.requests.arrays(("status",))])
    assert len(status) > 100 and ((status >= 200) & (status < 400)).all()
    assert len(status) == len(logged)  # every request logged by both ends
    assert {p for p, _ in logged} <= set(paths)
    assert (pdir / "locust_stats_history.csv").exists()  # per-second statistics kept


def four_subsets_of_ten(pdir: Path) -> tuple[Path, list[str]]:
    files = [p for p, _ in filesets.files(FILESET)]
    trace = pdir / "trace.txt"
    traces.write(trace, files, "four subsets of 10 files in file order", subset=10)
    return trace, files


def test_wrk_request_count_run_stops_every_client_after_its_requests(testbed,
                                                                     monkeypatch) -> None:
    """20 requests a client, far too few for the 4 s a request-count window aims at: the
    warm-up's rate raises the count (wrk.counted_enough), and every client then stops after
    exactly the raised count."""
    pdir = point_dir(testbed, "wrk-count", monkeypatch)
    trace, files = four_subsets_of_ten(pdir)
    truncate_log(testbed["web"])
    spec = LoadSpec("wrk", 8, 1, 30, processes=2, target=TARGET, requests_per_client=20)
    began = time.monotonic()
    result = engines.run(spec, testbed["gen"], pdir, trace)
    took = time.monotonic() - began
    logged = [p for p, _ in access_log(testbed["web"])]
    warmup = json.loads((pdir / "wrk-warmup.json").read_text())
    measure = json.loads((pdir / "wrk-measure.json").read_text())
    n = result.extra["requests_per_client"]
    assert result.extra["requests_per_client_asked"] == 20
    assert n == wrk.counted_enough(20, warmup, 8) > 20 and measure["requests_per_client"] == n
    # the measured run: 8 clients x n requests, all sent and answered, both threads finished
    assert (measure["sent"], measure["requests"], measure["threads_finished"]) == \
        (8 * n, 8 * n, 2)
    # every request counted in its own second: the per-second counts add up to exactly those sent
    assert sum(s["requests"] for s in measure["per_second"]) == 8 * n
    assert took < 25  # it ended when the clients were done, not at the 30 s limit
    # the server saw the warm-up (a timed run; up to one request per connection still in
    # flight when it ended) and exactly the counted requests: clients g and g + 4 replay subset
    # g mod 4, so each subset's files were asked for 2 x n times in the measured run
    assert warmup["requests"] + 8 * n <= len(logged) <= warmup["requests"] + 8 * n + 8
    counted = logged[-8 * n:]
    for k in range(4):
        assert sum(p in files[k * 10:(k + 1) * 10] for p in counted) == 2 * n
    # one window, from the last thread's start to the last client's last answer
    assert result.window == (measure["started_last"], measure["finished_last"])
    agg = result.aggregate
    assert agg["counts"]["engine_requests"] == 8 * n
    if agg["threads_apart_s"]:  # the first thread sent a little before the window opened
        assert 0.9 * 8 * n <= agg["requests"] < 8 * n
    else:
        assert agg["requests"] == 8 * n


def test_locust_request_count_run_raises_a_count_too_small_to_measure(testbed,
                                                                     monkeypatch) -> None:
    """The Locust engine as the wrk one: 20 requests a client, far too few for the 4 s a
    request-count window aims at, raised by the warm-up's rate (dc-hybrid's shortened points
    were answered in 1.4-1.8 s and failed); the row says both counts, the window is long enough
    to measure, holding the clients' raised counts (and at most one warm-up request a client
    still in flight when its warm-up ended)."""
    pdir = point_dir(testbed, "locust-count", monkeypatch)
    trace, _ = four_subsets_of_ten(pdir)
    truncate_log(testbed["web"])
    spec = LoadSpec("locust", 8, 1, 60, processes=1, target=TARGET, requests_per_client=20)
    result = engines.run(spec, testbed["gen"], pdir, trace)
    n = result.extra["requests_per_client"]
    assert result.extra["requests_per_client_asked"] == 20 and n > 20
    assert load.sent_per_client(pdir) == n
    load.check_counted_window(spec, result.window, n)  # long enough to measure
    assert result.window[1] - result.window[0] > load.MIN_COUNTED_S
    ends = np.concatenate([a["end_s"] for a in result.requests.arrays(("end_s",))])
    in_window = int(((ends > result.window[0]) & (ends <= result.window[1])).sum())
    assert 8 * n - 8 <= in_window <= 8 * n + 8, (in_window, n)
    assert len(access_log(testbed["web"])) == len(ends)  # every request logged by both ends


def test_wrk_request_count_run_over_its_time_limit_fails_in_one_sentence(testbed,
                                                                         monkeypatch) -> None:
    pdir = point_dir(testbed, "wrk-limit", monkeypatch)
    trace, _ = four_subsets_of_ten(pdir)
    spec = LoadSpec("wrk", 4, 0, 2, processes=2, target=TARGET, requests_per_client=10_000_000)
    with pytest.raises(load.LoadgenError) as err:
        engines.run(spec, testbed["gen"], pdir, trace)
    assert str(err.value).startswith("wrk: 2 of 2 threads had not had their clients' "
                                     "10,000,000 requests each answered (")
    assert str(err.value).endswith("of 40,000,000 sent) within load.measure_s = 2 s, the time "
                                   "limit of a request-count run: raise load.measure_s or lower "
                                   "load.requests_per_client")
