"""Command lines of the network kind: every parameter lands on the right option, and parameters
a tool cannot honour are refused with one sentence before anything runs."""

import pytest

from tierbench.kinds.net import tools


def test_size_arg():
    assert tools.size_arg(1024) == "1K"
    assert tools.size_arg(8192) == "8K"
    assert tools.size_arg(65536) == "64K"
    assert tools.size_arg(1 << 20) == "1M"
    assert tools.size_arg(100 * (1 << 20)) == "100M"
    assert tools.size_arg(1500) == "1500"
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="positive number of bytes"):
            tools.size_arg(bad)


def test_iperf2_command():
    assert tools.iperf2_command("198.18.4.11") == [
        "iperf", "-c", "198.18.4.11", "-p", "5001", "-t", "10", "-i", "1", "-P", "1", "-y", "C"]
    cmd = tools.iperf2_command("198.18.4.12", port=5003, streams=375, duration_s=20, warmup_s=2,
                             write_size=8192, window=32768, nodelay=True)
    assert cmd == ["iperf", "-c", "198.18.4.12", "-p", "5003", "-t", "22", "-i", "1", "-P", "375",
                   "-y", "C", "-l", "8K", "-w", "32K", "-N"]
    assert tools.iperf2_command("h", direction="reverse")[-1] == "-R"
    assert tools.iperf2_command("h", direction="bi")[-1] == "--full-duplex"
    half = tools.iperf2_command("h", duration_s=3, warmup_s=1, interval_s=0.5)
    assert half[half.index("-t") + 1] == "4" and half[half.index("-i") + 1] == "0.5"


def test_iperf3_command():
    assert tools.iperf3_command("198.18.4.11") == [
        "iperf3", "-c", "198.18.4.11", "-p", "5201", "-t", "10", "-i", "1", "-P", "1", "-J"]
    cmd = tools.iperf3_command("198.18.4.13", port=5207, streams=128, duration_s=30, warmup_s=3,
                             write_size=1024, window=256 * 1024, direction="bi", zerocopy=True)
    assert cmd == ["iperf3", "-c", "198.18.4.13", "-p", "5207", "-t", "30", "-i", "1", "-P", "128",
                   "-J", "-O", "3", "-l", "1K", "-w", "256K", "-Z", "--bidir"]
    assert tools.iperf3_command("h", direction="reverse")[-1] == "-R"


def test_sockperf_command():
    assert tools.sockperf_command("198.18.4.11") == [
        "sockperf", "ping-pong", "--tcp", "-i", "198.18.4.11", "-p", "11111", "-m", "64", "-t", "10"]
    cmd = tools.sockperf_command("198.18.4.12", mode="under-load", message_size=16384, mps=2000,
                               duration_s=5, full_rtt=True)
    assert cmd == ["sockperf", "under-load", "--tcp", "-i", "198.18.4.12", "-p", "11111", "-m",
                   "16384", "-t", "5", "--mps=2000", "--full-rtt"]


@pytest.mark.parametrize("call,message", [
    (lambda: tools.iperf2_command("h", streams=0), "streams must be a whole number >= 1"),
    (lambda: tools.iperf2_command("h", duration_s=0), "measured duration must be > 0"),
    (lambda: tools.iperf2_command("h", warmup_s=-1), "warm-up must be >= 0"),
    (lambda: tools.iperf2_command("h", warmup_s=1.5, interval_s=1),
     "whole number of report intervals"),
    (lambda: tools.iperf2_command("h", direction="both"), "direction must be one of uni, reverse, bi"),
    (lambda: tools.iperf2_command("a b"), "one address or host name"),
    (lambda: tools.iperf2_command("h", port=70000), "port must be 1-65535"),
    (lambda: tools.iperf2_command("h", interval_s=0), "report interval must be > 0"),
    (lambda: tools.iperf3_command("h", streams=129), "at most 128 streams per process"),
    (lambda: tools.iperf3_command("h", warmup_s=0.5), "warm-up must be whole"),
    (lambda: tools.sockperf_command("h", message_size=4), "at least 14 bytes"),
    (lambda: tools.sockperf_command("h", mode="throughput"), "ping-pong or under-load"),
    (lambda: tools.sockperf_command("h", mode="under-load"), "needs a rate"),
    (lambda: tools.sockperf_command("h", mps=0), "messages per second"),
])
def test_refusals_are_one_sentence(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_module_imports_nothing_from_tierbench():
    source = tools.__file__
    text = open(source).read()
    assert "import tierbench" not in text and "from tierbench" not in text
    assert "from ." not in text
