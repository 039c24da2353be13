"""Provenance of a run: source revision, host (kernel, CPU model, count and clock, TCP settings),
software versions, the images, cpusets and TCP settings of the containers that ran, and the
Debian packages installed in each image (the list its build wrote, with the base image and Debian
snapshot it was built from)."""

from __future__ import annotations

import io
import json
import os
import platform
import tarfile
from pathlib import Path
from typing import Any

from tierbench.config.files import ROOT
from tierbench.placement import compose, model
from tierbench.placement.placer import Placer
from tierbench.transport import TransportError, run_argv


def _out(argv: list[str], cwd: Path = ROOT) -> str:
    try:
        done = run_argv(argv, cwd=cwd, timeout=60)
    except TransportError:
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
        done = run_argv(["perf", "stat", "-x,", "-e", "cycles", "true"], timeout=30)
    except TransportError:
        return False
    return done.returncode == 0 and "<not supported>" not in done.stderr \
        and "<not counted>" not in done.stderr


# The TCP settings that change what a transfer costs and how fast it starts, read in each
# network namespace: the congestion control (BBR paces every connection with timers when no
# fq qdisc does, CUBIC and Reno send as the window allows) and whether an idle connection
# starts slowly again; the host's default qdisc too (a namespace has none of its own).
TCP_SYSCTLS = {"congestion_control": "net/ipv4/tcp_congestion_control",
               "slow_start_after_idle": "net/ipv4/tcp_slow_start_after_idle"}
HOST_SYSCTLS = {**TCP_SYSCTLS, "default_qdisc": "net/core/default_qdisc"}


def host_tcp() -> dict[str, str | None]:
    """This host's TCP settings (:data:`HOST_SYSCTLS`); None for one this kernel lacks."""
    out: dict[str, str | None] = {}
    for key, path in HOST_SYSCTLS.items():
        try:
            out[key] = (Path("/proc/sys") / path).read_text().strip()
        except OSError:
            out[key] = None
    return out


def container_tcp(where: Placer, containers: dict[str, model.Container]
                  ) -> dict[str, dict[str, str | None]]:
    """Each container's TCP settings as its own network namespace has them (a container with
    host networking: its node's); {} for one that cannot be read."""
    out: dict[str, dict[str, str | None]] = {}
    paths = [f"/proc/sys/{p}" for p in TCP_SYSCTLS.values()]
    for name, c in containers.items():
        text = _out(where.transport(c).docker("exec", c.id, "cat", *paths))
        values = text.split("\n") if text else []
        out[name] = dict(zip(TCP_SYSCTLS, values)) if len(values) == len(paths) else {}
    return out


def host() -> dict:
    """Kernel, OS, CPU model, count and clock, whether hardware cycle counters work, and the
    TCP settings new network namespaces start from."""
    mhz, source = cpu_mhz()
    return {"kernel": platform.release(), "os": platform.platform(), "cpu_model": cpu_model(),
            "cpus": os.cpu_count(), "cpu_mhz": mhz, "cpu_mhz_source": source,
            "hardware_counters": hardware_counters(), "hostname": platform.node(),
            "tcp": host_tcp()}


def tool_versions() -> dict[str, str]:
    """Docker, Compose, ethtool, iproute2 and Python versions of the controller."""
    versions = compose.versions()
    versions["ethtool"] = _out(["ethtool", "--version"])
    versions["iproute2"] = _out(["ip", "-V"])
    versions["python"] = platform.python_version()
    return versions


# Written by every image's build (images/*/Dockerfile): `dpkg-query -W` as NAME=VERSION lines.
PACKAGES_FILE = "/usr/share/tierbench/debian-packages.txt"


def parse_packages(text: str) -> dict[str, str]:
    """NAME=VERSION lines (the image's package list) as {name: version}."""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def image_file(where: Placer, container: model.Container, path: str) -> str | None:
    """The text of a file in the container's image (read from a created, never started,
    container; on a cluster node through its Docker context); None when there is none."""
    docker = where.transport(container).docker()
    created = _out([*docker, "create", container.image_id])
    if not created:
        return None
    try:
        done = run_argv([*docker, "cp", f"{created}:{path}", "-"], timeout=60, text=False)
        if done.returncode != 0:
            return None
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
            member = tar.next()
            handle = tar.extractfile(member) if member else None
            return handle.read().decode() if handle else None
    except (OSError, TransportError, tarfile.TarError):
        return None
    finally:
        _out([*docker, "rm", created])


def image_packages(where: Placer, containers: dict[str, model.Container]
                   ) -> dict[str, dict[str, Any]]:
    """Per image ID of the containers: its name, the base image and Debian snapshot it was built
    from (its labels) and the Debian packages installed in it ({name: version})."""
    out: dict[str, dict[str, Any]] = {}
    for c in containers.values():
        if c.image_id in out:
            continue
        labels = _out(where.transport(c).docker("image", "inspect", "-f",
                                                "{{json .Config.Labels}}", c.image_id))
        try:
            labels_of = (json.loads(labels) if labels else None) or {}
        except ValueError:
            labels_of = {}
        text = image_file(where, c, PACKAGES_FILE)
        out[c.image_id] = {
            "image": c.image, "base": labels_of.get("org.tierbench.base"),
            "debian_snapshot": labels_of.get("org.tierbench.debian-snapshot") or None,
            "debian_packages": parse_packages(text) if text is not None else None}
        if text is None:
            out[c.image_id]["note"] = (f"no {PACKAGES_FILE} in the image: it was built before "
                                       "tierbench recorded its packages (make images)")
    return out


def collect(containers: dict[str, model.Container], where: Placer) -> dict[str, Any]:
    """Everything the manifest records about the software and hardware of a run (its
    containers' images read where they run)."""
    return {
        "git": git(),
        "host": host(),
        "versions": tool_versions(),
        "images": {name: {"image": c.image, "id": c.image_id} for name, c in containers.items()},
        "image_packages": image_packages(where, containers),
        "cpusets": {name: c.cpuset for name, c in containers.items()},
        "tcp": container_tcp(where, containers),
    }
