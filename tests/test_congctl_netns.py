"""A congestion control per route, on the kernel (needs root; marker ``netns``): a network
namespace stands for a cluster node (its transport is ``ip netns exec NS sh -c``, where ssh would
reach a node), and tierbench's cluster path (tierbench/modes/sysctls.py, congctl.py) sets the
mode tcp-cubic on its routes to the peers, reads it back with `ip route show`, and restores it
(as the controller does, and with the script a node runs by itself).
A TCP connection over such a route uses CUBIC (`ss -ti`) while one to an address that is no peer
keeps the namespace's own default (reno here), and a host route that existed before (with its
MTU) is given the algorithm and put back as it was.

Layout, created and removed here: netns ``tbc-a`` holds ``tbc-a0`` (198.19.251.1/29), netns
``tbc-b`` its peer ``tbc-b0`` (198.19.251.2, .3 and .4/29). Nothing outside the two namespaces
changes. These tests FAIL (never skip) when the machine cannot run them.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from netns_lab import require_environment, sh, ss_algorithms, veth_between

from tierbench.interfaces.netif import Endpoint
from tierbench.modes import congctl, sysctls
from tierbench.modes.model import load_mode
from tierbench.transport import Transport

pytestmark = pytest.mark.netns

NS_A, NS_B = "tbc-a", "tbc-b"
A_IF, B_IF = "tbc-a0", "tbc-b0"
A_IP, PEER, OLD, OTHER = "198.19.251.1", "198.19.251.2", "198.19.251.3", "198.19.251.4"
PORT = 5231

SERVER = f"""
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {PORT})); s.listen(8); print("ready", flush=True)
held = [s.accept()[0] for _ in range(3)]
time.sleep(5)
"""

CLIENT = f"""
import socket, subprocess
held = [socket.create_connection((ip, {PORT}), timeout=5) for ip in
        ("{PEER}", "{OLD}", "{OTHER}")]
print(subprocess.run(["ss", "-tinH", "state", "established"], capture_output=True,
                     text=True, check=True).stdout)
"""


def cleanup() -> None:
    for ns in (NS_A, NS_B):
        if Path(f"/run/netns/{ns}").exists():
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def node():
    require_environment("test_congctl_netns", ("ip", "ss", "python3"), "tbc-")
    cleanup()
    try:
        veth_between(NS_A, A_IF, NS_B, B_IF)
        sh("ip", "-n", NS_A, "addr", "add", f"{A_IP}/29", "dev", A_IF)
        for ip in (PEER, OLD, OTHER):
            sh("ip", "-n", NS_B, "addr", "add", f"{ip}/29", "dev", B_IF)
        # the node's own default (reno is always allowed), and a host route someone set
        sh("ip", "netns", "exec", NS_A, "sysctl", "-q", "-w", "net.ipv4.tcp_congestion_control=reno")
        sh("ip", "-n", NS_A, "route", "add", f"{OLD}/32", "dev", A_IF, "proto", "static",
           "mtu", "1400")
        yield Transport(NS_A, ("ip", "netns", "exec", NS_A, "sh", "-c"))
    finally:
        cleanup()


def routes() -> str:
    return sh("ip", "-n", NS_A, "route", "show", "table", "main").stdout


def algorithms() -> dict[str, str]:
    """The congestion control of each connection node A opens to B, by B's address (`ss -ti`)."""
    server = subprocess.Popen(["ip", "netns", "exec", NS_B, sys.executable, "-c", SERVER],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        out = sh("ip", "netns", "exec", NS_A, sys.executable, "-c", CLIENT).stdout
    finally:
        server.kill()
        server.wait(timeout=10)
    return {peer.rsplit(":", 1)[0]: algo for _local, peer, algo in ss_algorithms(out)}


def test_a_mode_sets_congctl_on_the_routes_to_the_peers_and_tcp_uses_it(node) -> None:
    mode = load_mode("tcp-cubic")
    eps = [Endpoint(NS_A, A_IF, None, node, (PEER, OLD))]
    before = routes()
    started = time.monotonic()
    state = {"sysctls": sysctls.snapshot(mode, eps)}
    assert state["sysctls"][f"node:{NS_A}"]["routes"] == {
        PEER: None, OLD: f"{OLD} dev {A_IF} proto static scope link mtu 1400"}
    sysctls.change(mode, state)
    shown = routes()
    assert f"{PEER} dev {A_IF} proto 250 scope link src {A_IP} congctl cubic" in shown, shown
    assert f"{OLD} dev {A_IF} proto static scope link mtu 1400 congctl cubic" in shown, shown
    assert sysctls.mismatches(mode, eps, state) == []
    # the kernel honours it: CUBIC with the peers only; the node's default stays reno
    assert algorithms() == {PEER: "cubic", OLD: "cubic", OTHER: "reno"}
    assert sh("ip", "netns", "exec", NS_A, "sysctl", "-n",
              "net.ipv4.tcp_congestion_control").stdout.strip() == "reno"
    target, info = next(iter(state["sysctls"].items()))
    assert sysctls.restore(target, info) == []
    assert routes() == before
    assert congctl.congctl_of(routes()) is None
    assert algorithms() == {PEER: "reno", OLD: "reno", OTHER: "reno"}
    # the script a node runs by itself (no reading first) puts them back the same way
    sysctls.change(mode, state)
    assert routes() != before
    assert node.run(congctl.restore_script(info["routes"])).returncode == 0
    assert routes() == before
    assert time.monotonic() - started < 30
