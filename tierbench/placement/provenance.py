"""Provenance of a run: source revision, host (kernel, CPU model, count and clock), software
versions, and the images and cpusets of the containers that ran."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from tierbench.config.files import ROOT
from tierbench.placement import compose


def _out(argv: list[str], cwd: Path = ROOT) -> str:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def git() -> dict:
    """Revision of the checkout and whether it has uncommitted changes."""
    revision = _out(["git", "rev-parse", "HEAD"]) or "unknown (not a git checkout)"
    status = _out(["git", "status", "--porcelain", "--untracked-files=no"])
    return {"revision": revision, "dirty": bool(status), "changed_files": status.splitlines()}


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo."""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def cpu_mhz() -> tuple[float | None, str]:
    """The CPU clock in MHz and where it came from: cpufreq's maximum (the nominal clock where
    the kernel knows it), else /proc/cpuinfo's current clock; (None, why) when neither says."""
    path = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    try:
        return int(path.read_text()) / 1000.0, "cpufreq cpuinfo_max_freq"
    except (OSError, ValueError):
        pass
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("cpu MHz"):
            try:
                return float(line.split(":", 1)[1]), "/proc/cpuinfo cpu MHz (current clock)"
            except ValueError:
                break
    return None, "no clock known (no cpufreq, no cpu MHz in /proc/cpuinfo)"


def hardware_counters() -> bool:
    """Whether `perf stat -e cycles` counts real cycles here (False in most VMs)."""
    try:
        done = subprocess.run(["perf", "stat", "-x,", "-e", "cycles", "true"],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and "<not supported>" not in done.stderr \
        and "<not counted>" not in done.stderr


def host() -> dict:
    """Kernel, OS, CPU model, count and clock, and whether hardware cycle counters work."""
    mhz, source = cpu_mhz()
    return {"kernel": platform.release(), "os": platform.platform(), "cpu_model": cpu_model(),
            "cpus": os.cpu_count(), "cpu_mhz": mhz, "cpu_mhz_source": source,
            "hardware_counters": hardware_counters(), "hostname": platform.node()}


def tool_versions() -> dict[str, str]:
    """Docker, Compose, ethtool, iproute2 and Python versions of the controller."""
    versions = compose.versions()
    versions["ethtool"] = _out(["ethtool", "--version"])
    versions["iproute2"] = _out(["ip", "-V"])
    versions["python"] = platform.python_version()
    return versions


def collect(containers: dict[str, compose.Container]) -> dict[str, Any]:
    """Everything the manifest records about the software and hardware of a run."""
    return {
        "git": git(),
        "host": host(),
        "versions": tool_versions(),
        "images": {name: {"image": c.image, "id": c.image_id} for name, c in containers.items()},
        "cpusets": {name: c.cpuset for name, c in containers.items()},
    }
