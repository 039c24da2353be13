"""Provenance of a run: source revision, host, software versions, images."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from tierbench import loadgen, stack
from tierbench.config import ROOT


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


def host() -> dict:
    """Kernel, OS, CPU model and count."""
    return {"kernel": platform.release(), "os": platform.platform(), "cpu_model": cpu_model(),
            "cpus": os.cpu_count(), "hostname": platform.node()}


def collect(containers: dict[str, stack.Container]) -> dict:
    """Everything the manifest records about the software and hardware of a run."""
    versions = stack.versions()
    versions["ethtool"] = _out(["ethtool", "--version"])
    versions["iproute2"] = _out(["ip", "-V"])
    versions["python"] = platform.python_version()
    if "loadgen" in containers:
        versions["locust"] = loadgen.version(containers["loadgen"])
        versions["wrk"] = loadgen.wrk_version(containers["loadgen"])
    for tier in ("proxy", "web"):
        if tier in containers:
            probe = ("if command -v apache2 >/dev/null; then apache2 -v | head -n 1; "
                     "else haproxy -v | head -n 1; fi")
            done = stack.exec_in(containers[tier], ["sh", "-c", probe], timeout=60)
            versions[f"{tier}_server"] = done.stdout.strip()
    return {
        "git": git(),
        "host": host(),
        "versions": versions,
        "images": {c.service: {"image": c.image, "id": c.image_id} for c in containers.values()},
        "cpusets": {c.service: c.cpuset for c in containers.values()},
    }
