"""Summary numbers against values computed by hand for small fixed inputs."""

import math

import numpy as np
import pytest

from tierbench.kinds.web import results
from tierbench.kinds.web import webmetrics as metrics
from tierbench.measure.sampler import CLK_TCK


def sample(t: float, loadgen: float, proxy: float, web: float, ticks: dict, tx: int) -> dict:
    host = {k: 0 for k in ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")}
    host.update(ticks)
    cpu = {name: {"usage_s": v, "user_s": v / 2, "system_s": v / 2}
           for name, v in (("loadgen", loadgen), ("proxy", proxy), ("web", web))}
    return {"t": t, "host": host, "cpu": cpu, "net": {"host:vethA": {"tx_bytes": tx, "rx_bytes": 0}}}


def make_samples() -> list[dict]:
    # 100 s ... 110 s; the window [102, 106] brackets samples at 102 and 106 (4 s).
    out = []
    for i in range(11):
        t = 100.0 + i
        ticks = {"user": 60 * i, "system": 30 * i, "softirq": 10 * i, "idle": 100 * i}
        out.append(sample(t, loadgen=0.5 * i, proxy=0.25 * i, web=0.125 * i, ticks=ticks,
                          tx=1_024_000 * i))
    return out


def make_requests() -> list[metrics.Request]:
    reqs = []
    for k in range(1, 41):  # 40 requests, 10 per second, ending in (102, 106]
        reqs.append(metrics.Request(end_s=102 + k / 10, latency_ms=float(k), bytes=1000, status=200))
    reqs.append(metrics.Request(end_s=103.05, latency_ms=5.0, bytes=0, status=503))
    reqs.append(metrics.Request(end_s=101.5, latency_ms=1.0, bytes=1000, status=200))  # warm-up
    reqs.append(metrics.Request(end_s=107.5, latency_ms=1.0, bytes=1000, status=200))  # after
    return reqs


def test_summary_by_hand() -> None:
    row = metrics.summarize(make_samples(), make_requests(), start=101.5, end=106.4,
                            generator="loadgen", generator_allowance=1.0,
                            bytes_label="host:vethA")
    assert row["window_s"] == 4.0
    assert row["requests"] == 40 and row["errors"] == 1
    assert row["tps"] == pytest.approx(10.0)
    assert row["p50_ms"] == 20.0 and row["p99_ms"] == 40.0  # nearest rank of 1..40
    assert row["cpu_s_loadgen"] == pytest.approx(2.0)
    assert row["cpu_s_proxy"] == pytest.approx(1.0)
    assert row["cpu_s_web"] == pytest.approx(0.5)
    assert row["cpu_s_servers"] == pytest.approx(1.5)
    # host: 4 s x (60 usr + 30 sys + 10 softirq + 100 idle) ticks/s
    assert row["host_usr_pct"] == pytest.approx(30.0)
    assert row["host_sys_pct"] == pytest.approx(15.0)
    assert row["host_softirq_pct"] == pytest.approx(5.0)
    assert row["host_idle_pct"] == pytest.approx(50.0)
    assert row["generator_cpu_pct"] == pytest.approx(50.0)  # 2 s over 4 s of one core
    assert row["bytes_moved"] == 4 * 1_024_000
    assert row["mb_per_s"] == pytest.approx(1.024)
    assert row["server_cpu_us_per_req"] == pytest.approx(1.5e6 / 40)
    assert row["server_cpu_us_per_kb"] == pytest.approx(1.5e6 / 4000)
    host_busy_s = 4 * (60 + 30 + 10) / CLK_TCK
    assert row["host_cpu_us_per_kb"] == pytest.approx(host_busy_s * 1e6 / 4000)
    assert row["host_unattributed_cpu_s"] == pytest.approx(max(0.0, host_busy_s - 3.5))
    assert row["client_bound"] is False


def test_client_bound_at_85_percent_of_the_allowance() -> None:
    kwargs = dict(start=101.5, end=106.4, generator="loadgen", bytes_label="host:vethA")
    row = metrics.summarize(make_samples(), make_requests(), generator_allowance=0.58, **kwargs)
    assert row["generator_cpu_pct"] == pytest.approx(50 / 0.58)
    assert row["client_bound"] is True
    row = metrics.summarize(make_samples(), make_requests(), generator_allowance=0.6, **kwargs)
    assert row["client_bound"] is False


def test_bytes_fall_back_to_response_sizes_without_counters() -> None:
    samples = make_samples()
    for s in samples:
        s["net"] = {}
    row = metrics.summarize(samples, make_requests(), start=101.5, end=106.4, generator="loadgen",
                            generator_allowance=1.0, bytes_label="host:vethA")
    assert row["bytes_moved"] == 40 * 1000


def test_too_few_samples_or_no_success_is_an_error() -> None:
    with pytest.raises(metrics.MetricsError, match="sample"):
        metrics.summarize(make_samples(), make_requests(), start=103.5, end=103.9,
                          generator="loadgen", generator_allowance=1, bytes_label="x")
    failed = [metrics.Request(103.0, 1.0, 0, 500)]
    with pytest.raises(metrics.MetricsError, match="no successful request"):
        metrics.summarize(make_samples(), failed, start=101.5, end=106.4, generator="loadgen",
                          generator_allowance=1, bytes_label="x")


def latencies(*chunks: list[float]) -> metrics.Latencies:
    counted = metrics.Latencies()
    for chunk in chunks:
        counted.add(np.array(chunk, dtype=float))
    return counted


def test_percentile_nearest_rank_over_chunks() -> None:
    assert latencies([5, 1, 3, 2, 4]).percentile(50) == 3
    assert latencies([1, 2], [3, 4]).percentile(99) == 4
    assert latencies([7]).percentile(50) == 7
    assert math.isnan(latencies([]).percentile(50))
    # counted in chunks with repeats, the same as sorting every value
    rng = np.random.default_rng(3)
    values = np.round(rng.exponential(2.0, 20000), 3)
    counted = latencies(*np.array_split(values, 7))
    ordered = np.sort(values)
    for q in (1, 50, 90, 99, 99.9, 100):
        assert counted.percentile(q) == ordered[max(1, math.ceil(q / 100 * len(values))) - 1]


def test_per_second_rates() -> None:
    rows = metrics.per_second(make_samples()[:3], make_requests())
    assert len(rows) == 2
    assert rows[0]["cpu_loadgen"] == pytest.approx(0.5)
    assert rows[1]["tps"] == pytest.approx(1.0)  # only the warm-up request ended in (101, 102]
    assert rows[0]["host_busy_pct"] == pytest.approx(50.0)


def test_page_cache_hit_ratio_from_the_web_tiers_disk_reads() -> None:
    first = {"cpu": {"web": {"usage_s": 1.0, "read_bytes": 1_000_000}}}
    last = {"cpu": {"web": {"usage_s": 2.0, "read_bytes": 1_000_000 + 200 * 4096}}}
    trace = {"kind": "hit-ratio", "size": 4096, "hit_ratio": 0.5, "requests": 1000}
    # 400 files of 4 KiB served between the two samples, 200 of them read from disk
    figures = metrics.page_cache_figures(first, last, 400, trace)
    assert figures["page_cache_hit_ratio"] == pytest.approx(0.5)
    assert figures["web_disk_read_mb"] == pytest.approx(200 * 4096 / 1e6)
    # other traces: only the MB read; no counter: nothing
    assert set(metrics.page_cache_figures(first, last, 400, {"kind": "single"})) == \
        {"web_disk_read_mb"}
    assert metrics.page_cache_figures({"cpu": {"web": {}}}, last, 400, trace) == {}


def test_a_window_mostly_missing_the_caches_is_flagged_cold() -> None:
    """Issue 44: the larger of the proxies' miss share and the storage's reads over the bytes
    served; flagged above COLD_CACHE_SHARE, never where the point asks for misses."""
    rule = metrics.miss_figures
    assert rule({"bytes_moved": 1e9}, False) == {}  # nothing counted
    proxy = {"proxy_cache_hits": 30, "proxy_cache_misses": 70, "bytes_moved": 1e9}
    assert rule(proxy, False) == {"cache_miss_share": 0.7, "cold_cache": True}
    warm = {"proxy_cache_hits": 90, "proxy_cache_misses": 10, "bytes_moved": 100e6,
            "web_disk_read_mb": 20.0}
    assert rule(warm, False) == {"cache_miss_share": pytest.approx(0.2), "cold_cache": False}
    # the storage's reads count when they are the larger share (a capped page cache)
    disk = {**warm, "storage_read_mb": 60.0}
    assert rule(disk, False) == {"cache_miss_share": pytest.approx(0.6), "cold_cache": True}
    assert rule({"web_disk_read_mb": 500.0, "bytes_moved": 100e6}, False)[
        "cache_miss_share"] == 1.0  # read-ahead: never above 1
    at = {"web_disk_read_mb": 50.0, "bytes_moved": 100e6}  # exactly the threshold: not above
    assert rule(at, False)["cold_cache"] is False
    assert rule(disk, True) == {"cache_miss_share": pytest.approx(0.6), "cold_cache": False}
    note = results.end_note([{"cold_cache": True}, {"cold_cache": False}]) or ""
    assert "1 of 2 points missed the caches for more than 50 % of their window" in note
    assert results.end_note([{"cold_cache": False}]) is None


def test_memory_figures_say_whether_the_cap_held_and_what_storage_read() -> None:
    def at(t: float, cache: int, storage: int | None) -> dict:
        sample = {"t": t, "cpu": {"web": {"usage_s": t, "file_bytes": cache,
                                          "mem_limit_bytes": 512_000_000}}}
        if storage is not None:
            sample["probes"] = {"storage": {"read_bytes": storage}}
        return sample

    samples = [at(0, 900_000_000, 0), at(1, 100_000_000, 1_000_000),
               at(2, 300_000_000, 4_000_000), at(3, 200_000_000, 9_000_000),
               at(4, 800_000_000, 20_000_000)]
    got = metrics.memory_figures(samples, samples[1], samples[3])
    # the largest cache inside the window (not the 900 MB before it, nor the 800 MB after)
    assert got == {"web_cache_mb": 300.0, "web_memory_mb": 512.0, "storage_read_mb": 8.0}
    bare = [{"t": t, "cpu": {"web": {"usage_s": t}}} for t in (0, 1)]
    assert metrics.memory_figures(bare, bare[0], bare[1]) == {}


def test_under_a_memory_cap_the_files_the_bring_up_wrote_leave_the_page_cache(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from tierbench.kinds.web import stack
    from tierbench.kinds.web.settings import StackSettings
    from tierbench.tiers import diskbuild

    built = diskbuild.Built(key={}, servers=[])
    monkeypatch.setattr(diskbuild, "evict", lambda b: 7 if b is built else -1)
    evicted: list = []

    class Where:
        def evict_volume(self, c: SimpleNamespace, volume: str) -> int:
            assert volume == "docroot"
            evicted.append(c.name)
            return 3

    # three web servers on one host share the docroot volume: dropped once
    webs = [SimpleNamespace(node=None, name=n) for n in ("web", "web2", "web3")]
    dep = SimpleNamespace(tiers={"web": SimpleNamespace(containers=webs)}, placer=Where())

    def dropped(record: dict, on: diskbuild.Built | None = None) -> int | None:
        return stack.drop_written_files(dep, StackSettings(record), on)  # type: ignore[arg-type]

    assert dropped({"docroot": "disk"}) is None  # no cap: left as the bring-up wrote them
    assert dropped({"docroot": "ide", "web_memory": "512m"}, built) == 7  # the disk system's
    assert dropped({"docroot": "orangefs", "pvfs_storage": "ide", "pvfs_memory": "512m"},
                   built) == 7  # the I/O servers' disks
    assert dropped({"docroot": "disk+hot-tmpfs", "web_memory": "512m"}) == 3
    assert evicted == ["web3"]
    assert dropped({"docroot": "tmpfs", "web_memory": "1g"}) is None  # memory: nothing to drop
    assert dropped({"docroot": "orangefs", "pvfs_memory": "512m"}) is None  # on tmpfs


def test_every_point_has_the_memory_figures_and_says_what_the_bring_up_dropped() -> None:
    from types import SimpleNamespace

    from tierbench.kinds import registry
    from tierbench.kinds.web import steps
    from tierbench.kinds.web.settings import StackSettings

    s = registry.load_experiment("dc-single").settings
    capped = StackSettings({"docroot": "disk", "web_memory": "512m"})
    chosen = steps.chosen(capped, s, None, None, 12)
    names = [type(st).__name__ for st in chosen]
    assert names[:4] == ["FreshProxyConnections", "PageCacheFigures", "MemoryFigures",
                         "DroppedAfterBringUp"]
    assert "DroppedAfterBringUp" not in [type(st).__name__ for st in steps.chosen(
        StackSettings({"docroot": "disk"}), s, None, None)]
    chosen = chosen[1:]
    ctx = SimpleNamespace(record={})
    chosen[2].before(ctx)  # type: ignore[arg-type]
    assert ctx.record["dropped_after_bring_up"].startswith(
        "12 docroot files dropped from the page cache after the bring-up")
    samples = [{"t": t, "cpu": {"web": {"usage_s": t, "file_bytes": int(t * 1e6),
                                        "mem_limit_bytes": 512_000_000}}} for t in (0, 1, 2, 3)]
    measured = steps.Measured(None, samples[1], samples[2], samples)  # type: ignore[arg-type]
    assert chosen[1].after(ctx, measured) == {  # type: ignore[arg-type]
        "web_cache_mb": 2.0, "web_memory_mb": 512.0}


def test_the_proxys_own_connections_are_its_established_ones_from_ephemeral_ports() -> None:
    from tierbench.kinds.web import steps

    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
        # listening on :80, and a client's connection to it (local port 80): not the proxy's
        "   0: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000 0\n"
        "   1: 0C00C6C6:0050 0A00C6C6:D431 01 00000000:00000000 00:00000000 00000000 0\n"
        # the proxy's connections to the web tier (ports 40000 and 50001), one closing
        "   2: 0C00C6C6:9C40 0B00C6C6:0050 01 00000000:00000000 00:00000000 00000000 0\n"
        "   3: 0C00C6C6:C351 0B00C6C6:0050 01 00000000:00000000 00:00000000 00000000 0\n"
        "   4: 0C00C6C6:C352 0B00C6C6:0050 06 00000000:00000000 00:00000000 00000000 0\n")
    assert steps.outbound(table) == {("0C00C6C6:9C40", "0B00C6C6:0050"),
                                     ("0C00C6C6:C351", "0B00C6C6:0050")}


# --- latency histograms: per generator process, merged, and open-loop correction -------------


def records(worker: int, latencies: list[float], late: list[float] | None = None,
            end: float = 103.0) -> dict:
    n = len(latencies)
    return {"end_s": np.full(n, end), "latency_ms": np.array(latencies, float),
            "bytes": np.full(n, 10), "status": np.full(n, 200),
            "late_ms": np.array(late if late is not None else [0.0] * n, float),
            "worker": np.full(n, worker)}


class Batches(metrics.RequestLog):
    """A request log of given column arrays (one batch per worker), as the Parquet file gives."""

    def __init__(self, *parts: dict) -> None:
        super().__init__()
        self.parts = parts

    def arrays(self, columns=("end_s", "latency_ms", "bytes", "status")):
        for p in self.parts:
            yield {c: p[c] for c in columns}


def test_two_processes_histograms_merge_to_the_percentiles_of_one_doing_all() -> None:
    rng = np.random.default_rng(7)
    lat = np.round(rng.lognormal(1.0, 0.8, 4000), 3)
    whole, split = metrics.Histograms(), metrics.Histograms()
    metrics.count_window(Batches(records(-1, list(lat))), 102, 106, False, whole)
    metrics.count_window(Batches(records(0, list(lat[::2])), records(1, list(lat[1::2]))),
                         102, 106, False, split)
    assert sorted(k for k in split.each) == [("sent", 0), ("sent", 1)]
    for q in (50, 90, 99, 99.9):
        # nothing is lost in the merge: exactly the percentile of all the records
        assert split.merged("sent").percentile(q) == whole.merged("sent").percentile(q) \
            == float(np.sort(lat)[math.ceil(q / 100 * len(lat)) - 1])


def test_histograms_round_trip_through_their_file(tmp_path) -> None:
    hist = metrics.Histograms()
    metrics.count_window(Batches(records(0, [1.5, 1.5, 3.0], [0, 0, 2]),
                                 records(1, [7.25])), 102, 106, True, hist)
    hist.write(tmp_path / metrics.HISTOGRAMS)
    back = metrics.Histograms.read(tmp_path / metrics.HISTOGRAMS)
    assert back.merged("sent").values.tolist() == [1.5, 3.0, 7.25]
    assert back.merged("sent").counts.tolist() == [2, 1, 1]
    assert back.merged("intended").values.tolist() == [1.5, 5.0, 7.25]


def test_open_loop_percentiles_count_from_the_intended_send_time() -> None:
    # 100 requests answered in 1 ms, 10 of which left 500 ms late (the generator stalled):
    # from the intended send time those took 501 ms
    late = [500.0] * 10 + [0.0] * 90
    log = Batches(records(-1, [1.0] * 100, late))
    hist = metrics.Histograms()
    metrics.count_window(log, 102, 106, True, hist)
    fig = metrics.latency_figures(hist, open_loop=True)
    assert fig["p50_ms"] == 1.0 and fig["p90_ms"] == 1.0 and fig["p99_ms"] == 501.0
    assert fig["p99_ms_sent"] == 1.0  # the uncorrected view hides the stall
    closed = metrics.Histograms()
    metrics.count_window(log, 102, 106, False, closed)
    assert metrics.latency_figures(closed, open_loop=False)["p99_ms"] == 1.0
    assert "p99_ms_sent" not in metrics.latency_figures(closed, open_loop=False)


def test_summary_states_p90_and_p999() -> None:
    row = metrics.summarize(make_samples(), make_requests(), start=101.5, end=106.4,
                            generator="loadgen", generator_allowance=1.0,
                            bytes_label="host:vethA")
    assert row["p90_ms"] == 36.0 and row["p999_ms"] == 40.0  # nearest rank of 1..40
