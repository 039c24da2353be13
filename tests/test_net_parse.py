"""The network kind's pure functions against tool output captured between two net containers
(tests/data/net/, made with the commands in its README). Expected numbers were read off the files
by hand (sums of the CSV rows, the JSON end sums), not from the parser."""

import gzip
from pathlib import Path

import pytest

from tierbench.kinds.net import tools
from tierbench.kinds.net.tools import CLIENT_TO_SERVER as C2S
from tierbench.kinds.net.tools import SERVER_TO_CLIENT as S2C
from tierbench.kinds.net.tools import NetParseError

DATA = Path(__file__).resolve().parent / "data" / "net"


def text(name: str) -> str:
    path = DATA / name
    if name.endswith(".gz"):
        return gzip.open(path, "rt").read()
    return path.read_text()


# --- iperf 2 ---------------------------------------------------------------------------------


def test_iperf2_four_streams_drop_the_first_second():
    r = tools.parse_iperf2_csv(text("iperf2-P4-csv.txt"), warmup_s=1)
    d = r["directions"]
    assert list(d) == [C2S]
    # rows 1.0-2.0, 2.0-3.0, 3.0-4.0 of the four streams
    assert d[C2S]["bytes"] == 7041449984
    assert d[C2S]["window"] == [1.0, 4.0]
    assert d[C2S]["seconds"] == pytest.approx(3.0)
    assert d[C2S]["bytes_per_second"] == pytest.approx(7041449984 / 3)
    assert d[C2S]["bits_per_second"] == pytest.approx(7041449984 * 8 / 3)
    assert d[C2S]["streams"] == 4
    assert r["bits_per_second"] == d[C2S]["bits_per_second"]
    assert r["retransmits"] is None
    # per-interval sums over the streams (iperf 2.1.8's CSV has no SUM rows)
    first = r["intervals"][0]
    assert (first["start"], first["end"], first["streams"], first["bytes"]) == (0.0, 1.0, 4,
                                                                                2518155504)
    assert len(r["intervals"]) == 4
    # each stream's own total row
    assert sorted(t["stream"] for t in r["stream_totals"]) == [1, 2, 3, 4]
    assert sum(t["bytes"] for t in r["stream_totals"]) == 9560129776
    assert {t["bits_per_second"] for t in r["stream_totals"]} >= {4689280467}


def test_iperf2_without_warmup_counts_every_interval():
    r = tools.parse_iperf2_csv(text("iperf2-P4-csv.txt"))
    assert r["directions"][C2S]["bytes"] == 7041449984 + 2518155504
    assert r["directions"][C2S]["window"] == [0.0, 4.0]


def test_iperf2_full_duplex_has_both_directions():
    r = tools.parse_iperf2_csv(text("iperf2-P2-fullduplex-csv.txt"), warmup_s=1)
    d = r["directions"]
    assert d[C2S]["bytes"] == 3185704960 and d[C2S]["streams"] == 2
    assert d[S2C]["bytes"] == 3378798080 and d[S2C]["streams"] == 2
    assert d[S2C]["seconds"] == pytest.approx(2.0)
    assert r["bytes"] == 3185704960 + 3378798080
    assert r["bits_per_second"] == pytest.approx((3185704960 + 3378798080) * 8 / 2)


def test_iperf2_reverse_is_server_to_client():
    r = tools.parse_iperf2_csv(text("iperf2-P3-reverse-csv.txt"))
    assert list(r["directions"]) == [S2C]
    assert r["directions"][S2C]["bytes"] == 6895825984
    assert sum(t["bytes"] for t in r["stream_totals"]) == 6918897664


def test_iperf2_partial_last_interval():
    r = tools.parse_iperf2_csv(text("iperf2-P1-l8K-w256K-csv.txt"), warmup_s=1)
    d = r["directions"][C2S]
    assert d["bytes"] == 267116544 + 127229952
    assert d["window"] == [1.0, 2.5]
    assert d["bits_per_second"] == pytest.approx((267116544 + 127229952) * 8 / 1.5)
    assert r["stream_totals"][0]["bytes"] == 650068028


def test_iperf2_errors_are_one_sentence():
    with pytest.raises(NetParseError, match="no CSV report.*tcp connect failed: Connection refused"):
        tools.parse_iperf2_csv(text("iperf2-error-refused.txt"))
    with pytest.raises(NetParseError, match=r"no CSV report \(was -y C given\?\)"):
        tools.parse_iperf2_csv(text("iperf2-P2-text.txt"))
    with pytest.raises(NetParseError, match="ended within the 5 s warm-up"):
        tools.parse_iperf2_csv(text("iperf2-P4-csv.txt"), warmup_s=5)
    totals_only = "\n".join(line for line in text("iperf2-P4-csv.txt").splitlines()
                            if ",0.0-4.0," in line)
    with pytest.raises(NetParseError, match="no interval rows.*run it with -i"):
        tools.parse_iperf2_csv(totals_only, warmup_s=1)
    cut = "\n".join(text("iperf2-P4-csv.txt").splitlines()[:8])
    with pytest.raises(NetParseError, match="no whole-run total row"):
        tools.parse_iperf2_csv(cut)
    with pytest.raises(NetParseError, match="cannot read"):
        tools.parse_iperf2_csv("20261122234442,198.18.4.100,1,198.18.4.11,5001,3,0.0-1.0,x,y\n")


def test_iperf2_keeps_the_tools_messages():
    out = text("iperf2-P4-csv.txt") + "tcp write failed: Broken pipe\n"
    assert tools.parse_iperf2_csv(out)["messages"] == ["tcp write failed: Broken pipe"]


# --- iperf3 ----------------------------------------------------------------------------------


def test_iperf3_streams_with_omit():
    r = tools.parse_iperf3_json(text("iperf3-P4-l64K-omit1.json"))
    d = r["directions"][C2S]
    assert d["bytes"] == 7569233136
    assert d["seconds"] == pytest.approx(3.00368)
    assert d["bits_per_second"] == pytest.approx(7569233136 * 8 / 3.00368)
    assert d["retransmits"] == 46376 and r["retransmits"] == 46376
    assert (r["streams"], r["warmup_s"], r["duration_s"], r["write_size"]) == (4, 1, 3, 65536)
    assert r["version"] == "iperf 3.12"
    assert [i["omitted"] for i in r["intervals"]] == [True, False, False, False]
    cpu = r["tool_cpu"]
    assert cpu["local_total_percent"] == pytest.approx(78.46448019100775)
    assert cpu["remote_system_percent"] == pytest.approx(48.6852835225415)
    assert "own process only" in cpu["scope"]


def test_iperf3_bidir():
    r = tools.parse_iperf3_json(text("iperf3-P2-bidir.json"))
    d = r["directions"]
    assert d[C2S]["bytes"] == 4166059864 and d[C2S]["retransmits"] == 30505
    assert d[S2C]["bytes"] == 2413362072 and d[S2C]["retransmits"] == 10777
    assert d[S2C]["seconds"] == pytest.approx(3.000081)
    assert r["bytes"] == 4166059864 + 2413362072
    assert r["retransmits"] == 30505 + 10777
    assert r["bits_per_second"] == pytest.approx(
        4166059864 * 8 / 3.000081 + 2413362072 * 8 / 3.000081)
    assert sorted({i["direction"] for i in r["intervals"]}) == [C2S, S2C]
    assert len(r["intervals"]) == 8


def test_iperf3_reverse_with_window():
    r = tools.parse_iperf3_json(text("iperf3-P1-reverse-w256K.json"))
    assert list(r["directions"]) == [S2C]
    assert r["directions"][S2C]["bytes"] == 5505547536
    assert r["directions"][S2C]["retransmits"] == 2630
    assert (r["socket_buffer"], r["sndbuf_actual"], r["rcvbuf_actual"]) == (262144, 524288, 524288)
    assert {i["direction"] for i in r["intervals"]} == {S2C}


def test_iperf3_errors_are_one_sentence():
    with pytest.raises(NetParseError, match="iperf3 reported an error: unable to connect to server"):
        tools.parse_iperf3_json(text("iperf3-error-refused.json"))
    with pytest.raises(NetParseError, match="not JSON"):
        tools.parse_iperf3_json(text("iperf2-P4-csv.txt"))
    with pytest.raises(NetParseError, match="no end sums"):
        tools.parse_iperf3_json('{"start": {}, "intervals": [], "end": {}}')


# --- sockperf --------------------------------------------------------------------------------


def test_sockperf_ping_pong():
    r = tools.parse_sockperf(text("sockperf-pp-tcp-m64.txt"))
    assert (r["metric"], r["unit"]) == ("latency", "usec")
    assert r["avg"] == 40.527 and r["std_dev"] == 195.944
    assert r["percentiles"] == {"99.999": 21990.546, "99.99": 5895.805, "99.9": 2019.865,
                                "99": 470.934, "90": 29.954, "75": 26.248, "50": 23.572,
                                "25": 22.637}
    assert (r["min"], r["max"]) == (14.031, 21990.546)
    assert (r["observations"], r["valid_seconds"]) == (31395, 2.547)
    assert (r["sent_messages"], r["received_messages"]) == (31395, 31395)
    assert (r["total_run_seconds"], r["warmup_ms"]) == (3.0, 400)
    assert (r["total_sent_messages"], r["total_received_messages"]) == (37175, 37174)
    assert (r["dropped"], r["duplicated"], r["out_of_order"]) == (0, 0, 0)


@pytest.mark.parametrize("name,metric,p50,observations", [
    ("sockperf-pp-tcp-m14-fullrtt.txt", "rtt", 68.930, 19912),
    ("sockperf-pp-tcp-m1024.txt", "latency", 27.888, 14326),
    ("sockperf-pp-tcp-m16384.txt", "latency", 33.994, 5103),
    ("sockperf-pp-tcp-m65507.txt", "latency", 49.663, 7356),
    ("sockperf-ul-tcp-m64-mps10000.txt", "latency", 158.643, 215),
    ("sockperf-ul-tcp-m16384-mps2000-fullrtt.txt", "rtt", 119.262, 54),
])
def test_sockperf_sizes_and_modes(name, metric, p50, observations):
    r = tools.parse_sockperf(text(name))
    assert r["metric"] == metric
    assert r["percentiles"]["50"] == p50
    assert r["observations"] == observations


def test_sockperf_under_load_samples_one_reply_in_a_hundred():
    r = tools.parse_sockperf(text("sockperf-ul-tcp-m64-mps10000.txt"))
    assert (r["sent_messages"], r["received_messages"]) == (21401, 215)


def test_sockperf_errors_are_one_sentence():
    with pytest.raises(NetParseError, match=r"sockperf failed: Can`t connect socket \(errno=113"):
        tools.parse_sockperf(text("sockperf-error-noroute.txt"))
    with pytest.raises(NetParseError, match="sockperf failed: A connection was forcibly closed"):
        tools.parse_sockperf(text("sockperf-error-m65536.txt"))
    with pytest.raises(NetParseError, match="refused its arguments: '-m' Invalid message size"):
        tools.parse_sockperf("sockperf: '-m' Invalid message size: 4 (min: 14)\n")
    with pytest.raises(NetParseError, match="no latency summary"):
        tools.parse_sockperf("sockperf: Starting test...\n")


# --- ss --------------------------------------------------------------------------------------


def test_ss_counts_6048_established_from_one_client():
    out = text("ss-Htn-established-6048.txt.gz")
    assert tools.count_established(out) == 6048
    peers = tools.established_by_peer(out)
    # 4 servers x 12 iperf3 ports, each 125 data connections + 1 control connection
    assert len(peers) == 48
    assert set(peers.values()) == {126}
    assert peers["198.18.4.14:5212"] == 126


def test_ss_with_state_column_and_header():
    out = ("State  Recv-Q Send-Q Local Address:Port Peer Address:Port Process\n"
           "ESTAB  0      0      198.18.4.100:40000 198.18.4.11:5001\n"
           "TIME-WAIT 0   0      198.18.4.100:40002 198.18.4.11:5001\n"
           "ESTAB  0      1448   198.18.4.100:40004 198.18.4.12:5001\n")
    assert tools.count_established(out) == 2
    assert tools.established_by_peer(out) == {"198.18.4.11:5001": 1, "198.18.4.12:5001": 1}
    assert tools.count_established("") == 0
    with pytest.raises(NetParseError, match="not a line of `ss -tn` output"):
        tools.count_established("Cannot open netlink socket: Permission denied\n")


# --- combining runs --------------------------------------------------------------------------


def test_sum_throughput_of_concurrent_runs():
    a = tools.parse_iperf3_json(text("iperf3-P2-bidir.json"))
    b = tools.parse_iperf3_json(text("iperf3-P4-l64K-omit1.json"))
    s = tools.sum_throughput([a, b])
    assert s["runs"] == 2
    assert s["directions"][C2S]["runs"] == 2 and s["directions"][S2C]["runs"] == 1
    assert s["directions"][C2S]["bytes"] == 4166059864 + 7569233136
    assert s["bits_per_second"] == pytest.approx(a["bits_per_second"] + b["bits_per_second"])
    with pytest.raises(ValueError, match="no runs"):
        tools.sum_throughput([])


def test_established_connections_from_proc_net_tcp() -> None:
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
        "timeout inode\n"
        "   0: 00000000:1389 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000"
        "        0 12345 1 0000000000000000 100 0 0 10 0\n"
        "   1: 0604120C:9A3E 0404120C:1389 01 00000000:00000000 00:00000000 00000000  1000"
        "        0 12346 1 0000000000000000 20 4 30 10 -1\n"
        "   2: 0604120C:9A40 0404120C:1389 01 00000000:00000000 00:00000000 00000000  1000"
        "        0 12347 1 0000000000000000 20 4 30 10 -1\n"
        "   3: 0604120C:9A42 0404120C:1389 06 00000000:00000000 03:00000F4B 00000000     0"
        "        0 0 3 0000000000000000\n")
    assert tools.count_established_proc(table) == 2
    assert tools.count_established_proc(table.splitlines()[0]) == 0
    with pytest.raises(tools.NetParseError, match="not a line of /proc/net/tcp"):
        tools.count_established_proc(table + "garbage here\n")


def test_sessions_at_once_combine_into_one_figure():
    """Three sockperf sessions (64 B, 1 KB, 16 KB files): the mean over every reply, the median
    of the sessions' medians, the worst 99th percentile, messages per second summed."""
    runs = [tools.parse_sockperf(text(f"sockperf-pp-tcp-m{m}.txt")) for m in (64, 1024, 16384)]
    r = tools.combine_latency(runs)
    assert r["sessions"] == 3 and r["messages"] == 31395 + 14326 + 5103
    assert r["latency_avg_us"] == pytest.approx(
        (40.527 * 31395 + 88.979 * 14326 + 242.585 * 5103) / (31395 + 14326 + 5103))
    assert r["p50_us"] == 27.888  # medians 23.572, 27.888, 33.994
    assert r["p99_us"] == max(470.934, runs[1]["percentiles"]["99"],
                              runs[2]["percentiles"]["99"])
    assert r["messages_per_s"] == pytest.approx(31395 / 2.547 + 14326 / 2.551 + 5103 / 2.477)
    # an even number of sessions: the mean of the middle two medians
    assert tools.combine_latency(runs[:2])["p50_us"] == pytest.approx((23.572 + 27.888) / 2)
    with pytest.raises(ValueError, match="no latency sessions"):
        tools.combine_latency([])


def test_perf_script_of_the_senders_cpu_into_001s_categories():
    """400 samples of `perf script -F comm,pid,cpu,ip,sym` on the sender's CPU at 4000
    connections x 8 KB writes (a shared host: an MPEG encoder of another job ran there too).
    Counted by hand with awk over the blank-line separated samples: ksys_write in 22 stacks
    (21 of them iperf3's), tcp_write_xmit in 15, dev_hard_start_xmit in 1, tcp_ack in 3; 99
    samples of iperf3 and 1 of ksoftirqd."""
    with gzip.open(DATA / "perf-script-4000x8K.txt.gz", "rt") as fh:
        r = tools.parse_perf_script(fh.read(), ("iperf3",))
    assert (r["samples"], r["sender_samples"]) == (400, 100)
    assert (r["write_pct"], r["tcp_output_pct"], r["driver_tx_pct"], r["ack_pct"]) == \
        (5.5, 3.75, 0.25, 0.75)
    assert (r["write_sender_pct"], r["tcp_output_sender_pct"], r["driver_tx_sender_pct"],
            r["ack_sender_pct"]) == (21.0, 15.0, 1.0, 3.0)
    assert (r["tool_pct"], r["idle_pct"], r["other_pct"]) == (24.75, 0.0, 75.25)
    assert r["top"][0] == {"command": "mpeg2enc", "pct": 61.75}
    with pytest.raises(tools.NetParseError, match="not a sample line of `perf script`"):
        tools.parse_perf_script("\tffff tcp_ack\n")
    with pytest.raises(tools.NetParseError, match="perf recorded no samples"):
        tools.parse_perf_script("\n\n")
