"""The kernel's counters beside cgroups (issue 43): the parsers of /proc/stat's CPU lines,
/proc/softirqs, /proc/net/snmp, netstat and dev and `ethtool -S` on captured files
(tests/data/kernel), the per-CPU view and its softirq_bound flag, and the counters' deltas and
offload figures, on synthetic samples whose truth is known."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from tierbench.measure import agent, kernel, kernelview
from tierbench.measure.sampler import CgroupCpu, Sampler, kernel_counters

DATA = Path(__file__).parent / "data" / "kernel"


def text(name: str) -> str:
    return (DATA / name).read_text()


# ------------------------------------------------------------------------------------ parsers


def test_per_cpu_lines_of_proc_stat_without_the_aggregate() -> None:
    cpus = kernel.parse_cpu_lines(text("proc-stat.txt"))
    assert cpus == {"cpu0": [18991, 0, 5970, 14394, 209, 0, 23, 44],
                    "cpu1": [23728, 0, 6671, 8443, 517, 0, 301, 37]}


def test_net_softirqs_per_cpu() -> None:
    got = kernel.parse_softirqs(text("softirqs.txt"))
    assert got == {"NET_TX": [42, 43], "NET_RX": [16197, 23646], "cpus": [0, 1]}


def test_softirqs_follow_the_header_of_online_cpus() -> None:
    got = kernel.parse_softirqs("    CPU0  CPU3\n  NET_RX:  5  7\n  TIMER:  1  1\n")
    assert got == {"NET_RX": [5, 7], "cpus": [0, 3]}


def test_snmp_and_netstat_keep_the_chosen_counters() -> None:
    snmp = kernel.parse_snmp(text("snmp.txt"))
    assert snmp["Tcp.InSegs"] == 16140 and snmp["Tcp.OutSegs"] == 11178
    assert snmp["Tcp.RetransSegs"] == 0 and "Tcp.MaxConn" not in snmp  # not kept
    netstat = kernel.parse_snmp(text("netstat.txt"))
    assert netstat["TcpExt.TCPRcvCoalesce"] == 10547 and netstat["TcpExt.TCPOFOQueue"] == 4
    assert all(k in kernel.STACK_COUNTERS for k in {**snmp, **netstat})
    assert kernel.parse_snmp(text("snmp.txt"), keep=None)["Tcp.MaxConn"] == -1


def test_net_dev_sums_every_interface_but_loopback() -> None:
    dev = kernel.parse_net_dev(text("net-dev.txt"))
    assert dev["dev.rx_packets"] == 27072 + 6783 + 0
    assert dev["dev.tx_bytes"] == 1373296 + 639503340 + 1086
    assert dev["dev.tx_drop"] == 2


def test_ethtool_statistics_of_veth_and_virtio() -> None:
    veth = kernel.parse_ethtool_stats(text("ethtool-S-veth.txt"))
    assert veth["peer_ifindex"] == 42 and len(veth) == 10
    virtio = kernel.parse_ethtool_stats(text("ethtool-S-virtio.txt"))
    assert virtio["rx_kicks"] > 0 and "NIC statistics" not in virtio


def test_a_sample_carries_the_kernels_counters(tmp_path: Path) -> None:
    s = Sampler(tmp_path / "s.jsonl", {"me": CgroupCpu(os.getpid())}, {"lo": "lo"})
    got = s.sample()
    assert set(got["cpus"]) == {f"cpu{n}" for n in got["softirqs"]["cpus"]}
    assert "Tcp.InSegs" in got["stack"]["host"] and "dev.rx_packets" in got["stack"]["host"]
    assert "me" not in got["stack"]  # this process is in the host's namespace: the host's
    assert set(kernel_counters({})) >= {"cpus", "softirqs", "stack"}


# ------------------------------------------------------------------------------------ per CPU

FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_sample(t: float, shares: list[dict[str, int]], net_rx: list[int]) -> dict:
    """A sample whose CPUs have spent the given ticks per state since zero."""
    return {"t": t, "cpus": {f"cpu{i}": [s.get(f, 0) for f in FIELDS]
                             for i, s in enumerate(shares)},
            "softirqs": {"NET_RX": net_rx, "NET_TX": [0] * len(net_rx),
                         "cpus": list(range(len(net_rx)))}}


def zero(n: int) -> dict:
    return cpu_sample(0.0, [{}] * n, [0] * n)


def test_one_cpu_saturated_by_softirq_while_the_host_idles_is_flagged() -> None:
    last = cpu_sample(10.0, [{"softirq": 950, "system": 50}, {"idle": 900, "user": 100},
                             {"idle": 1000}, {"idle": 1000}], [90000, 100, 0, 0])
    rows = kernelview.cpu_rows(zero(4), last)
    assert rows[0]["softirq_pct"] == pytest.approx(95.0) and rows[0]["busy_pct"] == 100.0
    assert rows[0]["net_rx_per_s"] == pytest.approx(9000.0)
    got = kernelview.cpu_summary(rows)
    assert got["softirq_bound"] is True and got["cpu_max_irq_softirq_cpu"] == 0
    assert got["cpu_max_irq_softirq_pct"] == pytest.approx(95.0)
    assert got["net_rx_softirq_per_s"] == pytest.approx(9010.0)
    assert got["net_rx_softirq_top_cpu_pct"] == pytest.approx(100 * 9000 / 9010)


@pytest.mark.parametrize("shares, why", [
    ([{"softirq": 800, "idle": 200}, {"idle": 1000}], "80 % is not saturated"),
    ([{"irq": 500, "softirq": 450, "user": 50}, {"user": 1000}], "the host is busy anyway"),
    ([{"user": 1000}, {"idle": 1000}], "busy in user space, not interrupts"),
])
def test_no_flag_without_a_cpu_saturated_by_interrupts_or_with_a_busy_host(
        shares: list[dict[str, int]], why: str) -> None:
    got = kernelview.cpu_summary(kernelview.cpu_rows(zero(2), cpu_sample(10.0, shares, [0, 0])))
    assert got["softirq_bound"] is False, why


def test_irq_and_softirq_together_saturate_a_cpu() -> None:
    last = cpu_sample(10.0, [{"irq": 500, "softirq": 450, "idle": 50}, {"idle": 1000},
                             {"idle": 1000}], [0, 0, 0])
    got = kernelview.cpu_summary(kernelview.cpu_rows(zero(3), last))
    assert got["softirq_bound"] is True and got["cpu_max_irq_softirq_pct"] == pytest.approx(95)


# ------------------------------------------------------------------------------------ counters


def test_offload_figures_from_known_deltas() -> None:
    """A sender whose device got 64 KB TSO packets of 45 segments each, and a receiver whose
    device delivered 10 packets per skb TCP took in, 1 % retransmitted."""
    got = kernelview.offload_figures({
        "Tcp.OutSegs": 45000, "Tcp.RetransSegs": 450, "Tcp.InSegs": 1000,
        "dev.tx_packets": 1000, "dev.tx_bytes": 65160 * 1000, "dev.rx_packets": 10000,
        "TcpExt.TCPBacklogDrop": 3, "dev.rx_drop": 2})
    assert got == {"bytes_per_tx_packet": 65160.0, "segs_per_tx_packet": 45.0,
                   "rx_packets_per_skb": 10.0, "retrans_pct": 1.0, "drops": 5.0}
    assert kernelview.offload_figures({})["retrans_pct"] is None  # no segment sent


def test_deltas_leave_out_resets_and_read_absent_driver_counters_as_zero() -> None:
    assert kernelview.deltas({"a": 5, "b": 9}, {"a": 7, "b": 1, "c": 4}) == {"a": 2}
    assert kernelview.deltas({"a": 5}, {"c": 4}, absent_zero=True) == {"c": 4}


def stack_sample(t: float, web_out: int, web_tx: int, ethtool: int) -> dict:
    return {**cpu_sample(t, [{"idle": int(t * 100)}], [0]),
            "stack": {"host": {"Tcp.OutSegs": 0, "dev.tx_packets": 0},
                      "web": {"Tcp.OutSegs": web_out, "dev.tx_packets": web_tx,
                              "dev.tx_bytes": web_tx * 9000}},
            "ethtool": {"web": {"rx_queue_0_drops": ethtool}} if ethtool else {}}


def test_point_view_writes_the_per_cpu_and_counter_files(tmp_path: Path) -> None:
    samples = [stack_sample(0.0, 100, 100, 0), stack_sample(1.0, 150, 110, 0),
               stack_sample(2.0, 500, 150, 7)]
    got = kernelview.point_view(samples, (0.0, 2.0), tmp_path)
    assert got["stack_web_segs_per_tx_packet"] == pytest.approx(400 / 50)
    assert got["stack_web_bytes_per_tx_packet"] == pytest.approx(9000)
    assert not any(k.startswith("stack_host_") for k in got)  # the tiers' namespaces say it
    assert got["softirq_bound"] is False
    with (tmp_path / kernelview.CPUS_FILE).open() as fh:
        cpus = list(csv.DictReader(fh))
    assert [r["cpu"] for r in cpus] == ["0"] and float(cpus[0]["idle_pct"]) == 100
    with (tmp_path / kernelview.COUNTERS_FILE).open() as fh:
        counters = {(r["scope"], r["counter"]): float(r["delta"]) for r in csv.DictReader(fh)}
    assert counters[("web", "Tcp.OutSegs")] == 400
    assert counters[("ethtool:web", "rx_queue_0_drops")] == 7


def test_point_view_of_a_cluster_is_per_node(tmp_path: Path) -> None:
    idle = cpu_sample(10.0, [{"idle": 1000}, {"idle": 1000}], [0, 0])
    hot = cpu_sample(10.0, [{"softirq": 990, "idle": 10}, {"idle": 1000}], [50000, 0])

    def merged(t: float, a: dict, b: dict) -> dict:
        return {"t": t, "nodes": {"n1": {**a, "t": t}, "n2": {**b, "t": t}}}

    got = kernelview.point_view([merged(0.0, zero(2), zero(2)), merged(10.0, idle, hot)],
                                (0.0, 10.0), tmp_path)
    assert got["node_n1_softirq_bound"] is False and got["node_n2_softirq_bound"] is True
    assert got["softirq_bound"] is True and got["softirq_bound_cpu"] == "n2 cpu0"
    assert got["node_n2_net_rx_softirq_per_s"] == pytest.approx(5000)
    with (tmp_path / kernelview.CPUS_FILE).open() as fh:
        assert {(r["node"], r["cpu"]) for r in csv.DictReader(fh)} == {
            ("n1", "0"), ("n1", "1"), ("n2", "0"), ("n2", "1")}


def test_no_view_from_samples_without_the_kernels_counters(tmp_path: Path) -> None:
    """An older run's samples (no "cpus"): nothing added, nothing written."""
    old = [{"t": 0.0, "host": {}}, {"t": 1.0, "host": {}}]
    assert kernelview.point_view(old, (0.0, 1.0), tmp_path) == {}
    assert not (tmp_path / kernelview.CPUS_FILE).exists()


def test_a_merged_cluster_sample_keeps_each_nodes_kernel_counters() -> None:
    part = {"t": 1.0, "host": {"user": 1}, "cpu": {}, "net": {}, "cpus": {"cpu0": [1] * 8},
            "softirqs": {"NET_RX": [3], "cpus": [0]}, "stack": {"host": {"Tcp.InSegs": 4}}}
    got = agent.merge({"a": part, "b": part}, {}, {"a": "k1", "b": "k2"})
    assert got["nodes"]["b"]["cpus"] == {"cpu0": [1] * 8}
    assert got["nodes"]["a"]["stack"]["host"]["Tcp.InSegs"] == 4


def test_the_views_columns_are_told_from_a_kinds() -> None:
    for column in ("softirq_bound", "stack_web_retrans_pct", "node_n1_cpu_max_busy_pct",
                   "node_n-2_stack_host_drops", "node_a_b_softirq_bound"):
        assert kernelview.is_view_column(column), column
    for column in ("host_busy_pct", "tps", "node_n1_busy_s", "cpu_s_web", "slept_s"):
        assert not kernelview.is_view_column(column), column


def test_a_nodes_agent_sends_its_kernels_counters(tmp_path: Path) -> None:
    """The agent's program (the sampler's and this module's source, run with python3 -c as on
    a node; here through `sh -c`) carries each CPU, the softirqs and the stack's counters."""
    from tierbench.transport import Transport

    s = agent.MergedSampler(tmp_path / "s.jsonl", {
        "a": {"via": Transport("a", ("sh", "-c")), "offset": 0.0,
              "containers": {"me": os.getpid()}, "ifaces": {"a:lo": "lo"}}},
        {"tier": [("a", "me")]})
    s.start()
    try:
        now = s.now()["nodes"]["a"]
    finally:
        s.stop()
    assert now["cpus"] and set(now["softirqs"]) >= {"NET_RX", "NET_TX", "cpus"}
    assert "Tcp.InSegs" in now["stack"]["host"]
