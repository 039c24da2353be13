"""What a network point runs, without Docker: how connections are spread over sender processes,
server ports and senders (iperf 2 and iperf3), 001's window rule, the containers' limits checked
before a run, the socket-buffer memory of the largest point, the cases layered under the modes,
and refusals of experiments the tools cannot run."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tierbench.config.errors import ConfigError
from tierbench.kinds import registry
from tierbench.kinds.net import dmacopy, flows, settings, tools
from tierbench.modes.model import load_layered, load_mode

ROOT = Path(__file__).resolve().parent.parent
ADDRS = ["198.18.4.11", "198.18.4.12", "198.18.4.13", "198.18.4.14"]


def net_block(**keys: object) -> settings.Net:
    return settings.Net.model_validate({"test": "stream", **keys})


def test_iperf2_spreads_connections_over_every_receivers_ports() -> None:
    n = net_block(connections=[100], receivers=4)
    plan = flows.flows(n, ADDRS, 100, 1)
    assert len(plan) == 16 and sum(f.streams for f in plan) == 100
    assert {f.streams for f in plan} == {6, 7}
    assert len({(f.address, f.port) for f in plan}) == 16
    assert {f.port for f in plan} == {5001, 5002, 5003, 5004}
    # fewer connections than ports: one process per connection, receivers first
    few = flows.flows(n, ADDRS, 3, 1)
    assert [(f.address, f.port, f.streams) for f in few] == [(a, 5001, 1) for a in ADDRS[:3]]
    # two senders use the same iperf 2 servers (an iperf 2 server takes many clients)
    two = flows.flows(n, ADDRS, 8, 2)
    assert Counter(f.client for f in two) == {0: 8, 1: 8}
    assert {(f.address, f.port) for f in two if f.client == 0} == \
        {(f.address, f.port) for f in two if f.client == 1}


def test_iperf3_runs_125_connections_a_process_each_on_its_own_port() -> None:
    n = net_block(tool="iperf3", receivers=4, connections=[1, 100, 6000])
    plan = flows.flows(n, ADDRS, 6000, 1)
    assert len(plan) == 48 and {f.streams for f in plan} == {125}
    assert len({(f.address, f.port) for f in plan}) == 48  # one test per iperf3 server
    assert Counter(f.address for f in plan) == {a: 12 for a in ADDRS}
    assert {f.port for f in plan} == set(range(5201, 5213))
    assert flows.iperf3_servers(n, 4) == 12
    # one connection: one process; 100 over 4 receivers: one process per receiver
    assert [(f.address, f.streams) for f in flows.flows(n, ADDRS, 1, 1)] == [(ADDRS[0], 1)]
    assert [f.streams for f in flows.flows(n, ADDRS, 100, 1)] == [25] * 4
    # 2000 connections: 16 processes, the busiest exactly at the limit
    assert sorted({f.streams for f in flows.flows(n, ADDRS, 2000, 1)}) == [125]
    assert sorted({f.streams for f in flows.flows(n, ADDRS, 1001, 1)}) == [111, 112]
    # every sender has its own block of server ports
    two = flows.flows(n, ADDRS, 6000, 2)
    ports = [{(f.address, f.port) for f in two if f.client == c} for c in (0, 1)]
    assert len(ports[0]) == len(ports[1]) == 48 and not ports[0] & ports[1]
    assert flows.iperf3_servers(n, 4, 2) == 24


def test_commands_follow_the_tool_and_the_window_rule() -> None:
    n = net_block(tool="iperf3", receivers=4, connections=[100, 400], window=262144,
                  window_above={"connections": 100, "window": 32768}, warmup_s=2, measure_s=5)
    assert settings.window_for(n, 100) == 262144 and settings.window_for(n, 101) == 32768
    argv = flows.commands(n, flows.flows(n, ADDRS, 400, 1), 8192, "uni",
                            settings.window_for(n, 400))
    assert len(argv) == 4
    for a in argv:
        assert a[0] == "iperf3" and a[a.index("-P") + 1] == "100"
        assert a[a.index("-w") + 1] == "32K" and a[a.index("-l") + 1] == "8K"
        assert a[a.index("-t") + 1] == "5" and a[a.index("-O") + 1] == "2"
    plain = net_block(receivers=1, connections=[2])
    assert settings.window_for(plain, 2) is None
    # 2 connections to one receiver: one iperf 2 process per server port
    both = flows.commands(plain, flows.flows(plain, ADDRS[:1], 2, 1), 65536, "bi", None)
    assert [a[a.index("-p") + 1] for a in both] == ["5001", "5002"]
    for iperf in both:
        assert iperf[0] == "iperf" and "-w" not in iperf and "--full-duplex" in iperf


def test_limits_are_checked_before_a_run() -> None:
    n = net_block(tool="iperf3", receivers=4, connections=[6000])
    ok = flows.limit_problems(n, 4, 1, 16384, (10000, 65535), 20000)
    assert ok == []
    (fd,) = flows.limit_problems(n, 4, 1, 100, (10000, 65535), 20000)
    assert fd.startswith("a iperf3 process would hold 125 connections") and "NET_NOFILE" in fd
    (daemon,) = flows.limit_problems(n, 4, 1, 30000, (10000, 65535), 20000)
    assert "Docker daemon's own open-file limit (20000)" in daemon
    (ports,) = flows.limit_problems(n, 4, 1, 16384, (60000, 61000), None)
    assert "1001 ephemeral ports" in ports and "NET_PORT_RANGE" in ports
    assert flows.parse_range("10000 65535") == (10000, 65535)
    with pytest.raises(ConfigError, match="NET_PORT_RANGE='65535 10000' is not two port"):
        flows.parse_range("65535 10000")


def test_the_largest_points_socket_buffers_are_counted() -> None:
    n = net_block(tool="iperf3", receivers=4, connections=[100, 6000], window=262144,
                  window_above={"connections": 100, "window": 32768})
    # 6000 connections x 32 KiB, doubled by the kernel, on both sides
    assert flows.buffer_bytes(n, 4, 1) == 6000 * 4 * 32768
    assert flows.buffer_bytes(n, 4, 3) == 3 * 6000 * 4 * 32768
    assert flows.buffer_bytes(settings.Net.model_validate({"test": "latency"}), 1, 1) == 0


@pytest.mark.parametrize("keys, message", [
    ({"connections": [2000]}, "net.connections: 2000 connections at once are more than iperf 2 "
                              "holds here (1000"),
    ({"connections": [300], "receivers": 4, "per_receiver": True},
     "net.connections: 1200 connections at once"),
    ({"connections": [600], "clients": [2]}, "net.connections: 1200 connections at once"),
    ({"test": "latency", "profile": True}, "net.profile: profiles the senders of a stream test"),
    ({"cases": ["sockopt-1-default", "sockopt-1-default"]}, "net.cases: lists a mode twice"),
    ({"clients": [9]}, "net.clients"),
])
def test_experiments_the_tools_cannot_run_are_refused(tmp_path: Path, keys: dict,
                                                       message: str) -> None:
    import yaml

    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump({"kind": "net", "modes": ["offloads-on"],
                                    "net": {"test": "stream", **keys}}))
    with pytest.raises(ConfigError) as exc:
        registry.load_experiment(str(path))
    assert str(exc.value).startswith(f"{path}: {message}")
    assert "\n" not in str(exc.value)


def test_cases_layer_every_mode_over_each_case() -> None:
    exp = registry.load_experiment("net-sockopt")
    kind = registry.kind("net")
    modes = kind.modes(exp)
    assert [m.name for m in modes] == [f"{c}+{m}" for c in exp.settings.net.cases
                                       for m in ("gro-on", "gro-off")]
    layered = load_layered(["sockopt-4-jumbo", "gro-off"])
    assert layered.nic.features == {"tso": True, "sg": True, "tx": True, "gro": False}
    assert layered.nic.mtu == 2048
    assert layered.knobs.sysctls == load_mode("sockopt-4-jumbo").knobs.sysctls
    assert "sockopt-2-socket-buffers" in layered.extends and "gro-off" in layered.extends
    point = next(p for p in kind.points(exp, exp.seed) if p.factors["case"] == "sockopt-3-tso")
    applied = kind.point_mode(exp, point)
    assert applied.name == f"sockopt-3-tso+{point.mode}"
    assert applied.nic.features["gro"] is (point.mode == "gro-on")
    # the summary's mode is the compared one; the case is its own column
    ident = kind.identity(exp, point)
    assert ident["mode"] == point.mode and ident["case"] == "sockopt-3-tso"
    # a case that is not a mode is refused naming the file and key
    bad = ROOT / "experiments" / "net-sockopt.yml"
    text = bad.read_text().replace("sockopt-4-jumbo]", "sockopt-9-nothing]")
    other = ROOT / "tests" / "data" / "experiments" / "tmp-bad-cases.yml"
    other.write_text(text)
    try:
        with pytest.raises(ConfigError, match=r"net.cases: no mode named 'sockopt-9-nothing'"):
            registry.load_experiment(str(other))
    finally:
        other.unlink()


def test_start_at_waits_for_the_instant_in_a_posix_shell() -> None:
    target = time.time() + 0.6
    t0 = time.time()
    subprocess.run(["sh", "-c", tools.start_at(target)], check=True, timeout=10)
    assert target - 0.05 <= time.time() <= target + 0.5
    assert time.time() - t0 >= 0.5
    # a time in the past does not wait
    t1 = time.time()
    subprocess.run(["sh", "-c", tools.start_at(t1 - 5)], check=True, timeout=10)
    assert time.time() - t1 < 0.5


def fake_dma_class(tmp_path: Path, driver: str | None) -> Path:
    """A /sys/class/dma with one channel of `driver` (None: no channel)."""
    root = tmp_path / "dma"
    root.mkdir(parents=True)
    if driver:
        (tmp_path / "drivers" / driver).mkdir(parents=True)
        (root / "dma0chan0" / "device").mkdir(parents=True)
        (root / "dma0chan0" / "device" / "driver").symlink_to(tmp_path / "drivers" / driver)
    return root


def test_the_dma_half_runs_on_an_engine_and_is_left_out_elsewhere_in_one_sentence(
        tmp_path: Path) -> None:
    """No engine (this VM): the CPU half runs alone and one sentence says why; on a cluster
    too; an ioatdma channel is the one the DMA half copies on."""
    none = fake_dma_class(tmp_path / "a", None)
    assert dmacopy.dma_channels(none) == []
    channel, said = dmacopy.dma_engine(False, none)
    assert channel is None
    assert said == (f"this host has no DMA copy engine (no ioatdma or idxd channel in {none}), "
                    "so the DMA half of NET-dmacopy is not run; the CPU copies are")
    engine = fake_dma_class(tmp_path / "b", "ioatdma")
    assert dmacopy.dma_channels(engine) == [("dma0chan0", "ioatdma")]
    channel, said = dmacopy.dma_engine(False, engine)
    assert channel == "dma0chan0" and said.startswith("DMA copies on dma0chan0 (ioatdma)")
    channel, said = dmacopy.dma_engine(True, engine)
    assert channel is None and "on a cluster" in said and said.count(". ") == 0


def test_the_cold_copies_pools_outgrow_the_last_level_cache_and_fit_in_memory(
        tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for index, size in (("index0", "48K"), ("index2", "1024K"), ("index3", "32768K")):
        (cache / index).mkdir(parents=True)
        (cache / index / "size").write_text(f"{size}\n")
    assert dmacopy.llc_bytes(cache) == 32 << 20
    assert dmacopy.pool_bytes(32 << 20) == 128 << 20
    assert dmacopy.pool_bytes(dmacopy.llc_bytes(tmp_path / "none")) == 64 << 20  # at least
    [need] = dmacopy.needs(128 << 20, 65536)
    assert need.bytes == 2 * (128 << 20) + 2 * 65536 and need.role == "net_client"
    kind = registry.kind("net")
    exp = registry.load_experiment("net-dmacopy")
    [planned] = kind.needs(exp, kind.points(exp, exp.seed))
    assert planned.bytes == 2 * dmacopy.pool_bytes(dmacopy.llc_bytes()) + 2 * 65536


def test_copybench_output_gives_time_rate_and_estimated_cycles_per_copy() -> None:
    out = (ROOT / "tests" / "data" / "net" / "copybench-4096.json").read_text()
    cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu MHz\t\t: 2596.128\n"
    mhz = dmacopy.cpu_mhz(cpuinfo)
    assert mhz == 2596.128 and dmacopy.cpu_mhz("processor : 0\n") is None
    got = dmacopy.copy_figures(out, mhz)
    raw = json.loads(out)
    hot_us = raw["hot_s"] / raw["hot_copies"] * 1e6
    assert got["memcpy_hot_us"] == pytest.approx(hot_us)
    assert got["memcpy_hot_mb_per_s"] == pytest.approx(4096 / hot_us)
    assert got["memcpy_cold_cycles_est"] == pytest.approx(got["memcpy_cold_us"] * mhz)
    # out of the cache a copy takes longer than in it (captured on the development VM)
    assert got["memcpy_cold_us"] > got["memcpy_hot_us"]
    assert "memcpy_hot_cycles_est" not in dmacopy.copy_figures(out, None)
    with pytest.raises(ValueError, match="^copybench printed no summary: 'copybench: cannot"):
        dmacopy.copy_figures("copybench: cannot allocate 1 bytes", mhz)


# dmatest's summary line, as its pr_info format writes it (drivers/dma/dmatest.c):
# "%s: summary %u tests, %u failures %llu.%02llu iops %llu KB/s (%d)", prefixed "dmatest: "
DMATEST_LOG = """\
[  10.000000] dmatest: Added 1 threads using dma0chan0
[  12.000000] dmatest: dma0chan0-copy0: summary 10000 tests, 0 failures 250000.00 iops 1000000 KB/s (0)
[  13.000000] dmatest: dma1chan0-copy0: summary 10000 tests, 2 failures 9.50 iops 38 KB/s (0)
"""


def test_dmatest_summaries_are_read_per_channel() -> None:
    [first] = dmacopy.dma_summaries(DMATEST_LOG, "dma0chan0")
    assert first == {"dma_copies": 10000, "dma_failures": 0, "dma_us_per_copy": 4.0,
                     "dma_mb_per_s": 1024.0, "dma_status": 0}
    [other] = dmacopy.dma_summaries(DMATEST_LOG, "dma1chan0")
    assert other["dma_failures"] == 2
    assert dmacopy.dma_summaries(DMATEST_LOG, "dma0chan1") == []


def test_a_dma_run_sets_dmatest_waits_for_it_and_takes_its_new_summary(tmp_path: Path) -> None:
    """Against a stand-in for /sys/module/dmatest/parameters: the point's size, no random
    lengths, no verification, one thread on the channel; `run` read until it turns N; the
    summary that was not in the log before; one sentence when none comes or it hangs."""
    params = tmp_path / "parameters"
    params.mkdir()
    logs = [DMATEST_LOG]

    def run_finishing(new_lines: str) -> dict:
        """run_dma while the stand-in kernel finishes 0.3 s later, adding new_lines to its log."""
        def finish() -> None:
            time.sleep(0.3)
            logs.append(logs[-1] + new_lines)
            (params / "run").write_text("N\n")

        worker = threading.Thread(target=finish)
        worker.start()
        try:
            return dmacopy.run_dma("dma0chan0", 4096, params, log=lambda: logs[-1],
                                   timeout_s=10)
        finally:
            worker.join()

    got = run_finishing(DMATEST_LOG.splitlines()[1].replace("250000.00", "125000.00") + "\n")
    assert got["dma_us_per_copy"] == 8.0  # the new summary, not the older one
    written = {f.name: f.read_text().strip() for f in params.iterdir()}
    assert written == {"iterations": "10000", "test_buf_size": "4096", "transfer_size": "4096",
                       "norandom": "Y", "noverify": "Y", "threads_per_chan": "1",
                       "max_channels": "1", "channel": "dma0chan0", "run": "N"}
    assert run_finishing("[  20.000000] dmatest: Added 1 threads using dma0chan0\n") == {
        "dma": "dmatest on dma0chan0 wrote no summary to the kernel log"}
    t0 = time.monotonic()  # nothing turns `run` back to N: the run hangs
    hung = dmacopy.run_dma("dma0chan0", 4096, params, log=lambda: DMATEST_LOG, timeout_s=0.5)
    assert hung == {"dma": "dmatest on dma0chan0 did not finish within 0.5 s"}
    assert time.monotonic() - t0 < 3
