"""What a network point runs, without Docker: how connections are spread over sender processes,
server ports and senders (iperf 2 and iperf3), 001's window rule, the containers' limits checked
before a run, the socket-buffer memory of the largest point, the cases layered under the modes,
and refusals of experiments the tools cannot run."""

from __future__ import annotations

import subprocess
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


def test_dmacopy_runs_only_on_a_dma_copy_engine(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """No engine: one sentence saying NET-dmacopy is unavailable; an engine (a fake sysfs tree
    here): named, and still refused, because the copy benchmark is not built; and `tierbench
    run net-dmacopy` on this host refuses before anything is written."""
    from tierbench import cli

    root = tmp_path / "dma"
    root.mkdir()
    assert dmacopy.dma_channels(root) == []
    with pytest.raises(ConfigError, match=r"^x.yml: NET-dmacopy is unavailable on this host: it "
                                          r"needs a DMA copy engine .* nothing was run$"):
        dmacopy.dmacopy_check("x.yml", root)
    driver = tmp_path / "drivers" / "ioatdma"
    driver.mkdir(parents=True)
    (root / "dma0chan0" / "device").mkdir(parents=True)
    (root / "dma0chan0" / "device" / "driver").symlink_to(driver)
    assert dmacopy.dma_channels(root) == [("dma0chan0", "ioatdma")]
    with pytest.raises(ConfigError, match=r"found dma0chan0 \(ioatdma\), but its copy benchmark "
                                          "is not built yet"):
        dmacopy.dmacopy_check("x.yml", root)
    results = tmp_path / "results"
    import os
    os.environ["TIERBENCH_RESULTS"] = str(results)
    try:
        assert cli.main(["run", "net-dmacopy"]) == 2
    finally:
        del os.environ["TIERBENCH_RESULTS"]
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "NET-dmacopy " in err and err.endswith("nothing was run")
    assert not results.exists()
