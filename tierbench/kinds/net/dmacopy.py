"""NET-dmacopy (000 §4.4 Fig. 6): one buffer copy of 1-64 KB by the CPU and by a DMA copy engine.

The CPU half runs everywhere: `copybench` (images/net/copybench.c) in the sender container
copies with the C library's memcpy, the same buffers again and again (in the cache: 000's
copy-cache) and a new pair each copy from two pools of several times the last-level cache
(not in the cache: copy-nocache); time per copy, MB/s and cycles per copy (time x the CPU's
clock from /proc/cpuinfo: an estimate, since a VM has no cycle counter).

The DMA half runs where this host has a DMA copy engine (an ioatdma or idxd channel in
/sys/class/dma), through the kernel's dmatest module: `iterations` copies of the point's size
on the first channel, verification off, its summary line read from the kernel log (copies per
second and KB/s, hence time per copy). dmatest times whole copies: 000's start-up cost and
overlap are not measured. Where the host has no engine, or the run is on a cluster (dmatest
would have to run on the sender's node), the DMA half is left out with one sentence in the
manifest and the report.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierbench.kinds.contract import PointContext, PointResult
from tierbench import space
from tierbench.transport import LOCAL, DidNotFinish

DMA_CLASS = Path("/sys/class/dma")
DMATEST = Path("/sys/module/dmatest/parameters")
CACHE = Path("/sys/devices/system/cpu/cpu0/cache")
POOL_MIN_BYTES = 64 << 20
POOL_CACHE_FACTOR = 4  # each pool holds this many last-level caches
DMA_ITERATIONS = 10000
COPY_COLUMNS = ["memcpy_hot_us", "memcpy_cold_us", "memcpy_hot_mb_per_s", "memcpy_cold_mb_per_s",
                "memcpy_hot_cycles_est", "memcpy_cold_cycles_est", "cpu_mhz", "hot_copies",
                "cold_copies", "pool_bytes", "dma_us_per_copy", "dma_mb_per_s", "dma_copies",
                "dma_failures", "dma_channel"]


@dataclass
class CopyPlan:
    """What a NET-dmacopy run copies with: the size of each buffer pool, and the DMA copy
    engine's channel (dmatest loaded for it by this run, or not) or the sentence saying why the
    DMA half is left out."""

    pool: int
    dma_channel: str | None
    dma_engine: str
    loaded_dmatest: bool = False


SUMMARY = re.compile(r"dmatest: (?P<thread>\S+): summary (?P<tests>\d+) tests, (?P<failures>\d+) "
                     r"failures (?P<iops>\d+(?:\.\d+)?) iops (?P<kbs>\d+) KB/s \((?P<ret>-?\d+)\)")


def dma_channels(root: Path = DMA_CLASS) -> list[tuple[str, str]]:
    """The host's dmaengine channels and their drivers (ioatdma, idxd, ...), e.g.
    [('dma0chan0', 'ioatdma')]."""
    out = []
    for chan in sorted(root.glob("dma*chan*")):
        driver = chan / "device" / "driver"
        out.append((chan.name, driver.resolve().name if driver.exists() else "unknown driver"))
    return out


def dma_engine(on_cluster: bool, root: Path = DMA_CLASS) -> tuple[str | None, str]:
    """The channel the DMA half copies on (None: it is left out) and the sentence the manifest
    and the report show about it."""
    if on_cluster:
        return None, ("the DMA half of NET-dmacopy is not run on a cluster (dmatest would have "
                      "to run on the sender's node); the CPU copies are")
    found = dma_channels(root)
    if not found:
        return None, (f"this host has no DMA copy engine (no ioatdma or idxd channel in {root}), "
                      "so the DMA half of NET-dmacopy is not run; the CPU copies are")
    channel, driver = found[0]
    return channel, (f"DMA copies on {channel} ({driver}) through the kernel's dmatest module, "
                     f"{DMA_ITERATIONS:,} a point")


def llc_bytes(cache: Path = CACHE) -> int:
    """The largest cache of CPU 0 (its last level), in bytes; 0 when sysfs does not say."""
    sizes = []
    for index in cache.glob("index*"):
        try:
            text = (index / "size").read_text().strip()
        except OSError:
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        if text and text[-1] in units and text[:-1].isdigit():
            sizes.append(int(text[:-1]) * units[text[-1]])
        elif text.isdigit():
            sizes.append(int(text))
    return max(sizes, default=0)


def pool_bytes(llc: int) -> int:
    """Each cold-copy pool: several last-level caches, at least POOL_MIN_BYTES."""
    return max(POOL_MIN_BYTES, POOL_CACHE_FACTOR * llc)


def needs(pool: int, largest: int) -> list[space.Need]:
    """copybench's two pools and its hot pair, in the sender's memory."""
    return [space.in_memory(f"NET-dmacopy's copy buffers (2 x {pool >> 20} MiB for copies "
                            "out of the cache)", 2 * pool + 2 * largest,
                            "run it where more memory is free", role="net_client")]


def copybench_argv(size: int, seconds: int, pool: int) -> list[str]:
    """copybench's command line: copy size, seconds (half hot, half cold), pool bytes."""
    return ["copybench", str(size), str(seconds), str(pool)]


def cpu_mhz(cpuinfo: str) -> float | None:
    """The first `cpu MHz` of /proc/cpuinfo (None where it has none, e.g. on arm64)."""
    m = re.search(r"^cpu MHz\s*:\s*([\d.]+)", cpuinfo, re.M)
    return float(m.group(1)) if m else None


def copy_figures(out: str, mhz: float | None) -> dict[str, Any]:
    """copybench's JSON as the point's figures: µs and MB/s per copy, hot and cold, and the
    cycles per copy estimated from the clock."""
    try:
        r = json.loads(out.strip().splitlines()[-1])
        size = int(r["size"])
        hot_us = r["hot_s"] / r["hot_copies"] * 1e6
        cold_us = r["cold_s"] / r["cold_copies"] * 1e6
    except (ValueError, KeyError, IndexError, TypeError, ZeroDivisionError):
        raise ValueError(f"copybench printed no summary: {out.strip()[-300:]!r}") from None
    figures: dict[str, Any] = {
        "memcpy_hot_us": hot_us, "memcpy_cold_us": cold_us,
        "memcpy_hot_mb_per_s": size / hot_us, "memcpy_cold_mb_per_s": size / cold_us,
        "hot_copies": r["hot_copies"], "cold_copies": r["cold_copies"],
        "pool_bytes": r["pool_bytes"]}
    if mhz:
        figures.update({"cpu_mhz": mhz, "memcpy_hot_cycles_est": hot_us * mhz,
                        "memcpy_cold_cycles_est": cold_us * mhz})
    return figures


def dma_summaries(log: str, channel: str) -> list[dict[str, Any]]:
    """dmatest's summaries of threads on `channel` in kernel log text, oldest first: copies,
    failures, µs per copy and MB/s (dmatest's KB are KiB)."""
    out = []
    for m in SUMMARY.finditer(log):
        if not m.group("thread").startswith(f"{channel}-"):
            continue
        iops = float(m.group("iops"))
        out.append({"dma_copies": int(m.group("tests")),
                    "dma_failures": int(m.group("failures")),
                    "dma_us_per_copy": 1e6 / iops if iops > 0 else None,
                    "dma_mb_per_s": int(m.group("kbs")) * 1024 / 1e6,
                    "dma_status": int(m.group("ret"))})
    return out


def kernel_log() -> str:
    """The kernel's log (dmesg)."""
    return LOCAL.run(["dmesg"], timeout=30).stdout


def load_dmatest(modules: Path = DMATEST.parent.parent) -> tuple[bool, str | None]:
    """Load the dmatest module: (whether this call loaded it, one sentence when it could
    not)."""
    if (modules / "dmatest").exists():
        return False, None
    done = LOCAL.run(["modprobe", "dmatest"], timeout=60)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return False, f"the kernel's dmatest module could not be loaded ({why})"
    return True, None


def unload_dmatest() -> None:
    """Unload the dmatest module (loaded by load_dmatest)."""
    LOCAL.run(["modprobe", "-r", "dmatest"], timeout=60)


def run_dma(channel: str, size: int, params: Path = DMATEST,
            log: Callable[[], str] = kernel_log, timeout_s: float = 60) -> dict[str, Any]:
    """One dmatest run of DMA_ITERATIONS copies of `size` bytes on `channel` (the module
    loaded, its parameters in `params`), waited for: its summary, or {"dma": one sentence}
    saying why there is none."""
    before = len(dma_summaries(log(), channel))
    settings = {"iterations": DMA_ITERATIONS, "test_buf_size": size, "transfer_size": size,
                "norandom": "Y", "noverify": "Y", "threads_per_chan": 1, "max_channels": 1,
                "channel": channel}
    for name, value in [*settings.items(), ("run", 1)]:
        try:
            (params / name).write_text(f"{value}\n")
        except OSError as exc:
            return {"dma": f"dmatest refused {name}={value} ({exc.strerror or exc})"}
    deadline = time.monotonic() + timeout_s
    while (params / "run").read_text().strip() in ("Y", "1"):
        if time.monotonic() >= deadline:
            return {"dma": f"dmatest on {channel} did not finish within {timeout_s:g} s"}
        time.sleep(0.1)
    found = dma_summaries(log(), channel)
    if len(found) <= before:
        return {"dma": f"dmatest on {channel} wrote no summary to the kernel log"}
    return found[-1]


def run_point(ctx: PointContext[Any, Any, CopyPlan | None], seconds: int) -> PointResult:
    """copybench in the sender for the point's copy size, then the DMA half where there is an
    engine (the run's CopyPlan)."""
    plan = ctx.prepared
    if plan is None:
        raise ValueError("NET-dmacopy's points need the run's CopyPlan (NetKind.prepare)")
    size, pool = int(ctx.point.factors["message_size"]), plan.pool
    sender, where = ctx.deployment.info.senders[0], ctx.deployment.placer
    started = time.time()
    try:
        done = where.exec(sender, copybench_argv(size, seconds, pool), timeout=seconds + 120)
    except DidNotFinish:
        ctx.close_window()
        return PointResult(error=f"copybench did not finish within {seconds + 120} s and was "
                           "stopped")
    ended = time.time()
    ctx.close_window()
    (ctx.dir / "copybench.json").write_text(done.stdout)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return PointResult(error=f"copybench exited with code {done.returncode}: {why}")
    cpuinfo = where.exec(sender, ["cat", "/proc/cpuinfo"], timeout=30).stdout
    try:
        values = copy_figures(done.stdout, cpu_mhz(cpuinfo))
    except ValueError as exc:
        return PointResult(error=str(exc))
    channel = plan.dma_channel
    if channel:
        dma = run_dma(channel, size)
        if "dma" in dma:
            ctx.record["dma"] = dma["dma"]
        values.update({k: v for k, v in dma.items() if k != "dma"}, dma_channel=channel)
    ctx.record["window"] = {"start": started, "end": ended}
    return PointResult(values, None, (started, ended))
