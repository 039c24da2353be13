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
