"""The net tier for real: compose/net.yml up (2 receivers, 1 sender), a 3-second iperf 2 run, a
sockperf ping-pong and a 50-stream connection count, each checked against what the kernel
counted: the bytes the host side of the receiver's veth transmitted into it, and `ss`.

Needs root, Docker with Compose v2 and the image tierbench-net:0.1.0 (`make images`). Run it under
the Docker lock: `flock /tmp/tierbench-docker.lock .venv/bin/pytest tests/test_net_stack.py`.
It starts only the net services of the Compose project and removes only them and their network.
"""

import os
import subprocess
import time
from pathlib import Path

import pytest

from tierbench.kinds.net import tools
from tierbench.placement import model

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ["docker", "compose", "-p", model.PROJECT, "-f", "docker-compose.yml", "-f",
           "compose/net.yml"]
IMAGE = f"tierbench-net:{os.environ.get('TIERBENCH_TAG', '0.1.0')}"
CLIENT, SERVER = f"{model.PROJECT}-net-client-1", f"{model.PROJECT}-net-server-1"
# Payload bytes reach the receiver's veth with their Ethernet, IP and TCP headers (66 bytes per
# 1448-byte segment at MTU 1500: 4.6 %, less when GSO sends one header for several segments),
# plus connection setup: the veth must count at least the payload and at most 5 % + 64 KiB more.
HEADER_SHARE, SLACK = 0.05, 64 * 1024
# Per sockperf request: one data segment's headers and at most one pure ACK for the reply.
PER_MESSAGE_OVERHEAD = 2 * 66


def run(*args: str, timeout: float = 180, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return done


def host_veth(container: str) -> Path:
    """The host side of the container's eth0: the host interface whose ifindex is eth0's iflink."""
    iflink = run("docker", "exec", container, "cat", "/sys/class/net/eth0/iflink").stdout.strip()
    for dev in Path("/sys/class/net").iterdir():
        if (dev / "ifindex").read_text().strip() == iflink:
            return dev
    raise AssertionError(f"no host interface has ifindex {iflink} ({container}'s veth peer)")


def tx_bytes(dev: Path) -> int:
    return int((dev / "statistics" / "tx_bytes").read_text())


@pytest.fixture(scope="module")
def tier():
    if os.geteuid() != 0:
        pytest.fail("the stack tests need root: run `make test` as root")
    if run("docker", "compose", "version", check=False).returncode != 0:
        pytest.fail("docker compose v2 is missing: run `make setup`")
    if run("docker", "image", "inspect", IMAGE, check=False).returncode != 0:
        pytest.fail(f"the image {IMAGE} is missing: run `make images`")
    try:
        run(*COMPOSE, "up", "-d", "--wait", "--scale", "net-server=2", "--scale", "net-client=1",
            "net-server", "net-client", timeout=300)
        address = run("docker", "inspect", "-f",
                      "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", SERVER).stdout
        yield {"server": address.strip(), "veth": host_veth(SERVER)}
    finally:
        # once more after a pause: under heavy load a first removal has been seen to fail
        for _ in range(2):
            if run(*COMPOSE, "rm", "-s", "-f", "net-server", "net-client",
                   check=False).returncode == 0:
                break
            time.sleep(2)
        run("docker", "network", "rm", f"{model.PROJECT}_net", check=False)


def test_limits_inside_the_containers(tier):
    for name in (CLIENT, SERVER):
        out = run("docker", "exec", name, "sh", "-c",
                  "ulimit -n; cat /proc/sys/net/ipv4/ip_local_port_range; id -u").stdout.split()
        assert out == ["16384", "10000", "65535", "1000"], f"{name}: {out}"
    assert tier["server"].startswith("198.18.4.")


def test_iperf2_throughput_matches_the_veth(tier):
    cmd = tools.iperf2_command(tier["server"], streams=2, duration_s=3, interval_s=1)
    before = tx_bytes(tier["veth"])
    out = run("docker", "exec", CLIENT, *cmd, timeout=60).stdout
    time.sleep(0.5)  # the last segments written before close
    delta = tx_bytes(tier["veth"]) - before
    r = tools.parse_iperf2_csv(out)
    payload = sum(t["bytes"] for t in r["stream_totals"])
    print(f"iperf 2: {payload} payload bytes, veth {delta} bytes ({delta / payload - 1:+.2%}), "
          f"{r['bits_per_second'] / 1e9:.2f} Gb/s")
    assert payload > 10 * 1024 * 1024, f"iperf 2 moved only {payload} bytes: {out}"
    assert payload <= delta <= payload * (1 + HEADER_SHARE) + SLACK, (
        f"iperf 2 reported {payload} bytes, the receiver's veth transmitted {delta}")
    d = r["directions"][tools.CLIENT_TO_SERVER]
    assert d["window"] == [0.0, 3.0] and d["streams"] == 2
    # the measured window's rate, over its 3 s, is the run's bytes less the tail after 3.0 s
    assert d["bytes_per_second"] * 3 == pytest.approx(d["bytes"])
    assert d["bytes"] <= payload and d["bytes"] >= 0.9 * payload
    assert d["bits_per_second"] == pytest.approx(d["bytes"] * 8 / 3)


def test_sockperf_messages_match_the_veth(tier):
    size = 1024
    cmd = tools.sockperf_command(tier["server"], message_size=size, duration_s=2)
    before = tx_bytes(tier["veth"])
    out = run("docker", "exec", CLIENT, *cmd, timeout=60).stdout
    time.sleep(0.2)
    delta = tx_bytes(tier["veth"]) - before
    r = tools.parse_sockperf(out)
    assert r["metric"] == "latency" and r["observations"] > 100
    p = r["percentiles"]
    assert r["min"] <= p["25"] <= p["50"] <= p["99"] <= r["max"]
    assert r["observations"] == r["received_messages"] <= r["sent_messages"]
    low = r["sent_messages"] * size
    print(f"sockperf: {r['sent_messages']}/{r['total_sent_messages']} messages, veth {delta} "
          f"bytes, p50 {p['50']} us, p99 {p['99']} us")
    high = r["total_sent_messages"] * (size + PER_MESSAGE_OVERHEAD) + SLACK
    assert low <= delta <= high, (f"sockperf sent {r['sent_messages']} (valid) / "
                                  f"{r['total_sent_messages']} (all) messages of {size} bytes; "
                                  f"the receiver's veth transmitted {delta} bytes")


def test_ss_counts_the_streams_of_a_run(tier):
    streams = 50
    cmd = tools.iperf2_command(tier["server"], streams=streams, duration_s=4, write_size=1024)
    run("docker", "exec", "-d", CLIENT, *cmd)
    counted = []
    for _ in range(20):
        time.sleep(0.25)
        out = run("docker", "exec", CLIENT, "ss", "-Htn", "state", "established").stdout
        counted.append(tools.count_established(out))
        if counted[-1] == streams:
            break
    assert counted[-1] == streams, f"established connections seen: {counted}"
    assert tools.established_by_peer(out) == {f"{tier['server']}:5001": streams}
    time.sleep(4)
