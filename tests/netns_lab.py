"""Helpers shared by the namespace tests: prerequisites, a shell, and a process parked inside a
network namespace (its PID is what tierbench's nsenter path needs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import pytest


def sh(*argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Run a command, capturing its output as text."""
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=timeout)


def require_environment(test: str, tools: tuple[str, ...], prefix: str) -> None:
    """FAIL (never skip) when not root, a tool is missing, or `ip netns` does not work."""
    if os.geteuid() != 0:
        pytest.fail(f"{test} needs root (it creates {prefix}* netns and veths); run as root")
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.fail(f"{test} needs `{tool}` on PATH "
                        "(apt-get install -y ethtool iproute2 procps util-linux)")
    probe = sh("ip", "netns", "list", check=False)
    if probe.returncode != 0:
        pytest.fail(f"`ip netns` is unavailable here: {probe.stderr.strip()}")


def start_sleep(ns: str) -> subprocess.Popen[bytes]:
    """Start `sleep 600` inside netns `ns` and wait until it has really entered it."""
    want = os.stat(f"/run/netns/{ns}").st_ino
    proc = subprocess.Popen(["ip", "netns", "exec", ns, "sleep", "600"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if os.stat(f"/proc/{proc.pid}/ns/net").st_ino == want:
                return proc
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    stop(proc)
    pytest.fail(f"`ip netns exec {ns} sleep 600` did not enter the namespace")


def stop(proc: subprocess.Popen) -> None:
    """End a process this test started."""
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


# what `ss -ti` prints before the congestion control's name when the connection has them
_SS_OPTIONS = {"ts", "sack", "ecn", "ecnseen", "fastopen"}


def ss_algorithms(text: str) -> list[tuple[str, str, str]]:
    """`ss -tinH state established` (no State column) as (local ADDRESS:PORT, peer
    ADDRESS:PORT, congestion control) per connection."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    found = []
    for head, info in zip(lines[::2], lines[1::2]):
        local, peer = head.split()[2:4]
        algo = next(w for w in info.split() if w not in _SS_OPTIONS)
        found.append((local, peer, algo))
    return found


def veth_between(ns_a: str, if_a: str, ns_b: str, if_b: str) -> None:
    """Two new network namespaces joined by a veth pair, both ends and loopbacks up."""
    sh("ip", "netns", "add", ns_a)
    sh("ip", "netns", "add", ns_b)
    sh("ip", "link", "add", if_a, "netns", ns_a, "type", "veth", "peer", "name", if_b,
       "netns", ns_b)
    for ns, ifname in ((ns_a, if_a), (ns_b, if_b), (ns_a, "lo"), (ns_b, "lo")):
        sh("ip", "-n", ns, "link", "set", ifname, "up")
