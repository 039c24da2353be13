"""From raw cumulative counters to figures over one interval: the samples that bracket a
window, CPU seconds per counter, the host's CPU breakdown.

Every kind computes its numbers over one interval bracketed by two samples, so that requests,
bytes and CPU of a point all cover the same time.
"""

from __future__ import annotations

from tierbench.config.errors import TierbenchError
from tierbench.measure.sampler import CLK_TCK, PROC_STAT_FIELDS

BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq")


class MeasureError(TierbenchError):
    """The raw data of a point cannot give a summary (too few samples, nothing measured)."""


def window(samples: list[dict], start: float, end: float) -> tuple[dict, dict]:
    """The first and last samples inside the measured window [start, end]."""
    inside = [s for s in samples if start <= s["t"] <= end]
    if len(inside) < 2:
        raise MeasureError(f"only {len(inside)} sample(s) fell in the measured window; "
                           "the load run ended early or the sampler stalled")
    return inside[0], inside[-1]


def cpu_seconds(first: dict, last: dict) -> dict[str, float]:
    """CPU seconds each sampled cgroup (tier or container) used between two samples."""
    return {name: last["cpu"][name]["usage_s"] - first["cpu"][name]["usage_s"]
            for name in last["cpu"] if name in first["cpu"]}


def host_breakdown(first: dict[str, int], last: dict[str, int]) -> dict[str, float]:
    """The host's CPU between two /proc/stat readings: usr/sys/irq/softirq/iowait/steal/idle in
    % of all CPU time, and busy_s (user, nice, system, irq, softirq) in CPU seconds."""
    ticks = {k: last[k] - first[k] for k in PROC_STAT_FIELDS}
    total = sum(ticks.values()) or 1
    pct = {k: 100.0 * v / total for k, v in ticks.items()}
    return {"usr_pct": pct["user"] + pct["nice"], "sys_pct": pct["system"],
            "irq_pct": pct["irq"], "softirq_pct": pct["softirq"], "iowait_pct": pct["iowait"],
            "steal_pct": pct["steal"], "idle_pct": pct["idle"],
            "busy_s": sum(ticks[k] for k in BUSY_FIELDS) / CLK_TCK}


def node_breakdown(first: dict, last: dict) -> dict[str, float]:
    """Each cluster node's CPU between two merged samples (their ``nodes``): busy CPU seconds
    and usr/sys/irq/softirq/idle in % of the node's CPU time, as node_<name>_<figure>."""
    out: dict[str, float] = {}
    for node, now in (last.get("nodes") or {}).items():
        before = (first.get("nodes") or {}).get(node)
        if before is None:
            continue
        h = host_breakdown(before["host"], now["host"])
        out[f"node_{node}_busy_s"] = h["busy_s"]
        for key in ("usr_pct", "sys_pct", "irq_pct", "softirq_pct", "idle_pct"):
            out[f"node_{node}_{key}"] = h[key]
    return out


def busy_pct(first: dict[str, int], last: dict[str, int]) -> float:
    """Share of the host's CPU time that was busy (not idle, not iowait) between two readings."""
    ticks = {k: last[k] - first[k] for k in last}
    total = sum(ticks.values()) or 1
    return 100.0 * (total - ticks.get("idle", 0) - ticks.get("iowait", 0)) / total
