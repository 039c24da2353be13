"""A file-server point's figures over the samples that bracket a timed part: CPU per side
(client, server, hog) and of the host, the server's network MB/s, CPU µs per KB moved; and the
throughput, operations and latency of a fio report; the server's memory cap, page cache and
storage reads."""

from __future__ import annotations

from typing import Any

from tierbench.kinds.fs.stack import CLIENT_TIER, HOG, SERVER_TIER
from tierbench.measure import counters


def cpu_figures(first: dict, last: dict, nbytes: float, prefix: str = "",
                server_net: list[str] | None = None) -> dict[str, Any]:
    """CPU per side (client, server, hog) and of the host over two samples, the server's
    network MB/s from its interfaces (the sampled interfaces ``server_net`` names, else those
    whose label starts with the server tier), and CPU µs per KB moved (`nbytes` over the same
    span)."""
    dt = last["t"] - first["t"]
    cpu = counters.cpu_seconds(first, last)
    host = counters.host_breakdown(first["host"], last["host"])
    client, server, hog = (cpu.get(CLIENT_TIER, 0.0), cpu.get(SERVER_TIER, 0.0),
                           cpu.get(HOG))
    ours = (lambda k: k in server_net) if server_net is not None else \
        (lambda k: k.startswith(SERVER_TIER))
    net = sum(last["net"][k][d] - first["net"][k][d] for k in last["net"]
              if ours(k) and k in first["net"]
              for d in ("rx_bytes", "tx_bytes"))
    out: dict[str, Any] = {
        "window_s": dt, f"cpu_s_{CLIENT_TIER}": client, f"cpu_s_{SERVER_TIER}": server,
        "client_cpu_pct": 100 * client / dt if dt else None,
        "server_cpu_pct": 100 * server / dt if dt else None,
        "hog_cpu_pct": 100 * hog / dt if dt and hog is not None else None,
        "server_net_mb_per_s": net / 1e6 / dt if dt else None,
        "host_usr_pct": host["usr_pct"], "host_sys_pct": host["sys_pct"],
        "host_softirq_pct": host["softirq_pct"], "host_idle_pct": host["idle_pct"]}
    if hog is not None:
        out[f"cpu_s_{HOG}"] = hog
    if nbytes > 0:
        kb = nbytes / 1024
        out.update({"client_cpu_us_per_kb": client * 1e6 / kb,
                    "server_cpu_us_per_kb": server * 1e6 / kb,
                    "host_cpu_us_per_kb": host["busy_s"] * 1e6 / kb})
    return {f"{prefix}{k}": v for k, v in out.items()}


def fio_figures(report: dict[str, Any], direction: str, prefix: str = "") -> dict[str, Any]:
    """Throughput, operations and latency of one direction of a (summed) fio report."""
    d = report[direction]
    return {f"{prefix}mb_per_s": d["bytes_per_s"] / 1e6, f"{prefix}iops": d["iops"],
            f"{prefix}latency_ms": d["clat_mean_ms"], f"{prefix}p99_ms": d["clat_p99_ms"],
            f"{prefix}bytes": d["bytes"]}


def memory_figures(samples: list[dict], first: dict, last: dict) -> dict[str, float]:
    """Whether the file server's memory cap held over a window and what its brick's storage
    read: `server_memory_mb` (the limit read back from its cgroup; left out without one),
    `server_cache_mb` (its page cache, memory.stat's file, the largest of the window's samples)
    and `server_disk_read_mb` (bytes its processes caused to be read from storage between the
    two samples: page-cache misses and read-ahead), each left out where it was not counted."""
    inside = [s for s in samples if first["t"] <= s["t"] <= last["t"]] or [first, last]
    a, b = (s.get("cpu", {}).get(SERVER_TIER, {}) for s in (first, last))
    out: dict[str, float] = {}
    caches = [s["cpu"][SERVER_TIER]["file_bytes"] for s in inside
              if "file_bytes" in s.get("cpu", {}).get(SERVER_TIER, {})]
    if caches:
        out["server_cache_mb"] = max(caches) / 1e6
    if "mem_limit_bytes" in b:
        out["server_memory_mb"] = b["mem_limit_bytes"] / 1e6
    if "read_bytes" in a and "read_bytes" in b:
        out["server_disk_read_mb"] = (b["read_bytes"] - a["read_bytes"]) / 1e6
    return out
