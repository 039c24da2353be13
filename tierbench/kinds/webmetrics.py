"""The web kind's numbers: from a point's 1 Hz counter samples and per-request records to its
summary row (TPS, latency, CPU per tier, per request and per KB, client-bound flag).

The measured window is bracketed by samples: from the first sample at or after the end of the
warm-up to the last sample at or before the end of the measured period. Requests, CPU and bytes
are all counted over that same interval, so per-request and per-KB figures are consistent.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from tierbench.measure.counters import MeasureError, cpu_seconds, host_breakdown, percentile, window

CLIENT_BOUND_PCT = 85.0
SUMMARY_COLUMNS = [
    "point", "trace", "mode", "repetition", "engine", "users", "window_s", "requests", "tps",
    "p50_ms", "p99_ms", "mean_ms", "errors", "cpu_s_loadgen", "cpu_s_proxy", "cpu_s_web", "cpu_s_servers",
    "host_usr_pct", "host_sys_pct", "host_irq_pct", "host_softirq_pct", "host_iowait_pct",
    "host_steal_pct", "host_idle_pct", "host_unattributed_cpu_s", "generator_cpu_pct", "bytes_moved", "mb_per_s",
    "server_cpu_us_per_req", "server_cpu_us_per_kb", "host_cpu_us_per_kb", "client_bound",
]


MetricsError = MeasureError  # the name the web kind's callers use


@dataclass(frozen=True)
class Request:
    """One request as logged by the load generator."""

    end_s: float
    latency_ms: float
    bytes: int
    status: int

    @property
    def ok(self) -> bool:
        """A 2xx or 3xx answer."""
        return 200 <= self.status < 400


def read_requests(path: Path) -> list[Request]:
    """Parse the load generator's request log (end_s,latency_ms,bytes,path,status)."""
    with path.open(newline="") as fh:
        return [Request(float(r["end_s"]), float(r["latency_ms"]), int(r["bytes"]), int(r["status"]))
                for r in csv.DictReader(fh)]


def page_cache_figures(first: dict, last: dict, row: dict, trace: dict) -> dict[str, float]:
    """What the web tier read from its disk over the window (MB), and for a hit-ratio trace the
    page-cache hit ratio that made real: 1 - bytes read from disk / bytes of the files served
    (requests x the trace's file size). {} where the kernel does not count the tier's reads."""
    a, b = first["cpu"].get("web", {}), last["cpu"].get("web", {})
    if "read_bytes" not in a or "read_bytes" not in b:
        return {}
    read = b["read_bytes"] - a["read_bytes"]
    out = {"web_disk_read_mb": read / 1e6}
    if trace.get("kind") == "hit-ratio" and row.get("tps"):
        served = row["tps"] * row["window_s"] * int(trace["size"])
        out["page_cache_hit_ratio"] = max(0.0, 1.0 - read / served) if served else 0.0
    return out


def site_figures(path: Path, sites: dict[str, str], start: float, end: float) -> dict[str, float]:
    """Per site of a mix trace (name -> URL prefix): TPS (successful requests ending in
    (start, end] per second) and median latency, from the request log; `tps_<site>`, `p50_ms_<site>`."""
    latencies: dict[str, list[float]] = {site: [] for site in sites}
    with path.open(newline="") as fh:
        for r in csv.DictReader(fh):
            if not (start < float(r["end_s"]) <= end and 200 <= int(r["status"]) < 400):
                continue
            for site, prefix in sites.items():
                if r["path"].startswith(prefix):
                    latencies[site].append(float(r["latency_ms"]))
    span = end - start
    out: dict[str, float] = {}
    for site, values in latencies.items():
        out[f"tps_{site}"] = len(values) / span if span > 0 else 0.0
        out[f"p50_ms_{site}"] = percentile(values, 50) if values else float("nan")
    return out






def summarize(samples: list[dict], requests: list[Request], *, start: float, end: float,
              generator: str, generator_allowance: float, bytes_label: str | list[str]) -> dict:
    """The measured numbers of one point (see SUMMARY_COLUMNS); bytes moved are the tx bytes of
    the interface(s) `bytes_label` names (the host ends of the generator's veths), summed."""
    first, last = window(samples, start, end)
    dt = last["t"] - first["t"]
    counted = [r for r in requests if first["t"] < r.end_s <= last["t"]]
    good = [r for r in counted if r.ok]
    if not good:
        raise MetricsError("no successful request completed in the measured window")
    cpu = cpu_seconds(first, last)
    servers = sum(v for tier, v in cpu.items() if tier != generator)
    host = host_breakdown(first["host"], last["host"])
    busy_s = host["busy_s"]
    labels = [bytes_label] if isinstance(bytes_label, str) else list(bytes_label)
    if labels and all(lb in first["net"] and lb in last["net"] for lb in labels):
        moved = sum(last["net"][lb]["tx_bytes"] - first["net"][lb]["tx_bytes"] for lb in labels)
    else:
        moved = sum(r.bytes for r in good)
    kbytes = moved / 1024 or float("nan")
    gen_pct = 100.0 * cpu.get(generator, 0.0) / dt / generator_allowance
    row = {
        "window_s": round(dt, 3),
        "requests": len(good),
        "tps": len(good) / dt,
        "p50_ms": percentile([r.latency_ms for r in good], 50),
        "p99_ms": percentile([r.latency_ms for r in good], 99),
        "mean_ms": sum(r.latency_ms for r in good) / len(good),
        "errors": len(counted) - len(good),
        **{f"cpu_s_{tier}": v for tier, v in sorted(cpu.items())},
        "cpu_s_servers": servers,
        **{f"host_{k}": v for k, v in host.items() if k != "busy_s"},
        # Busy host CPU no tier's cgroup was charged for: other processes on the host and
        # interrupt work the kernel did not account to a container. High values mean interference.
        "host_unattributed_cpu_s": max(0.0, busy_s - sum(cpu.values())),
        "generator_cpu_pct": gen_pct,
        "bytes_moved": moved,
        "mb_per_s": moved / dt / 1e6,
        "server_cpu_us_per_req": servers * 1e6 / len(good),
        "server_cpu_us_per_kb": servers * 1e6 / kbytes,
        "host_cpu_us_per_kb": busy_s * 1e6 / kbytes,
        "client_bound": gen_pct >= CLIENT_BOUND_PCT,
    }
    return row


def per_second(samples: list[dict], requests: list[Request]) -> list[dict]:
    """Per-second rates between consecutive samples: requests, CPU per tier, host busy %."""
    rows = []
    for a, b in zip(samples, samples[1:]):
        dt = b["t"] - a["t"]
        if dt <= 0:
            continue
        n = sum(1 for r in requests if a["t"] < r.end_s <= b["t"] and r.ok)
        ticks = {k: b["host"][k] - a["host"][k] for k in b["host"]}
        total = sum(ticks.values()) or 1
        rows.append({
            "t": b["t"],
            "tps": n / dt,
            **{f"cpu_{tier}": (b["cpu"][tier]["usage_s"] - a["cpu"][tier]["usage_s"]) / dt
               for tier in b["cpu"]},
            "host_busy_pct": 100.0 * (total - ticks["idle"] - ticks["iowait"]) / total,
        })
    return rows
