"""A file-server point's figures over the samples that bracket a timed part: CPU per side
(client, server, hog) and of the host, the server's network MB/s, CPU µs per KB moved; and the
throughput, operations and latency of a fio report."""

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
