"""What the kernel's own counters say about a point's window: each CPU's usr/sys/irq/softirq
and the NET_RX/NET_TX softirqs it ran, whether one CPU was saturated by interrupt work while the
host's average looked low (``softirq_bound``, flagged as client-bound points are), and the
protocol, interface and driver counters' deltas with what offloads did (bytes and segments per
packet handed to the device, packets per skb TCP received, retransmission rate).

On a cluster each node's counters give the same figures, prefixed ``node_<name>_``.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from tierbench.measure.counters import MeasureError, window
from tierbench.measure.sampler import PROC_STAT_FIELDS

SATURATED_PCT = 90.0  # one CPU's irq + softirq share of its time that saturates it
HOST_LOW_PCT = 75.0  # a host average busy share below which one saturated CPU hides in it
CPU_COLUMNS = ("node", "cpu", "usr_pct", "sys_pct", "irq_pct", "softirq_pct", "iowait_pct",
               "steal_pct", "idle_pct", "busy_pct", "net_rx_per_s", "net_tx_per_s")
CPUS_FILE, COUNTERS_FILE = "cpus.csv", "counters.csv"
# counters that say a packet was dropped somewhere in the stack
DROPS = ("Ip.InDiscards", "Ip.OutDiscards", "TcpExt.TCPBacklogDrop", "TcpExt.TCPRcvQDrop",
         "TcpExt.ListenDrops", "TcpExt.TCPZeroWindowDrop", "TcpExt.TCPOFODrop",
         "Udp.RcvbufErrors", "Udp.SndbufErrors", "dev.rx_drop", "dev.tx_drop")


# the summary columns point_view adds (on a cluster also per node: node_<name>_<column>)
VIEW_COLUMNS = ("cpu_max_busy_pct", "cpu_max_irq_softirq_pct", "cpu_max_irq_softirq_cpu",
                "softirq_bound", "softirq_bound_cpu", "net_rx_softirq_per_s",
                "net_tx_softirq_per_s", "net_rx_softirq_top_cpu_pct")


def is_view_column(column: str) -> bool:
    """Whether a summary column is one point_view adds."""
    if column in VIEW_COLUMNS or column.startswith("stack_"):
        return True
    return column.startswith("node_") and (
        "_stack_" in column or any(column.endswith(f"_{c}") for c in VIEW_COLUMNS))


def ratio(a: float, b: float) -> float | None:
    """a / b, None when b is zero (nothing to divide: the figure does not apply)."""
    return a / b if b else None


def cpu_rows(first: dict, last: dict) -> list[dict[str, Any]]:
    """Each CPU's share of its time per state between two samples (their "cpus" and
    "softirqs"), and the NET_RX/NET_TX softirqs it ran per second."""
    dt = last["t"] - first["t"]
    before, now = first.get("cpus") or {}, last.get("cpus") or {}
    soft_a, soft_b = first.get("softirqs") or {}, last.get("softirqs") or {}
    columns = {n: i for i, n in enumerate(soft_b.get("cpus") or [])}
    rows = []
    for name in sorted(now, key=lambda c: int(c[3:])):
        if name not in before:
            continue
        ticks = dict(zip(PROC_STAT_FIELDS, (b - a for a, b in zip(before[name], now[name]))))
        total = sum(ticks.values()) or 1
        pct = {k: 100.0 * v / total for k, v in ticks.items()}
        cpu = int(name[3:])
        row: dict[str, Any] = {
            "cpu": cpu, "usr_pct": pct["user"] + pct["nice"], "sys_pct": pct["system"],
            "irq_pct": pct["irq"], "softirq_pct": pct["softirq"], "iowait_pct": pct["iowait"],
            "steal_pct": pct["steal"], "idle_pct": pct["idle"],
            "busy_pct": 100.0 - pct["idle"] - pct["iowait"], "ticks": total}
        i = columns.get(cpu)
        for key, label in (("NET_RX", "net_rx_per_s"), ("NET_TX", "net_tx_per_s")):
            if i is not None and key in soft_a and key in soft_b and dt > 0 \
                    and soft_a.get("cpus") == soft_b.get("cpus"):
                row[label] = (soft_b[key][i] - soft_a[key][i]) / dt
        rows.append(row)
    return rows


def cpu_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-CPU view's summary columns: the busiest CPU, the one with the most irq +
    softirq work and its share, the softirqs per second, the share of NET_RX that ran on the
    CPU that ran most of it, and ``softirq_bound``: one CPU at SATURATED_PCT or more of irq +
    softirq while the host's average busy share (over the same ticks) stayed under
    HOST_LOW_PCT."""
    if not rows:
        return {}
    total = sum(r["ticks"] for r in rows) or 1
    host_busy = sum(r["busy_pct"] * r["ticks"] for r in rows) / total
    hot = max(rows, key=lambda r: r["irq_pct"] + r["softirq_pct"])
    hot_pct = hot["irq_pct"] + hot["softirq_pct"]
    out: dict[str, Any] = {
        "cpu_max_busy_pct": max(r["busy_pct"] for r in rows),
        "cpu_max_irq_softirq_pct": hot_pct, "cpu_max_irq_softirq_cpu": hot["cpu"],
        "softirq_bound": hot_pct >= SATURATED_PCT and host_busy < HOST_LOW_PCT}
    for label in ("net_rx_per_s", "net_tx_per_s"):
        if all(label in r for r in rows):
            per_s = sum(r[label] for r in rows)
            out[label.replace("_per_s", "_softirq_per_s")] = per_s
            if label == "net_rx_per_s":
                out["net_rx_softirq_top_cpu_pct"] = \
                    100.0 * max(r[label] for r in rows) / per_s if per_s else 0.0
    return out


def deltas(before: dict[str, int], now: dict[str, int], *, absent_zero: bool = False
           ) -> dict[str, int]:
    """Counter changes between two readings (a counter that went back, a reset, is left out;
    with ``absent_zero`` a counter missing from a reading reads as zero: ethtool's, kept only
    when not zero)."""
    keys = set(now) | set(before) if absent_zero else set(now) & set(before)
    out = {k: now.get(k, 0) - before.get(k, 0) for k in sorted(keys)}
    return {k: v for k, v in out.items() if v >= 0}


def offload_figures(d: dict[str, int]) -> dict[str, float | None]:
    """What the offloads did in one namespace, from its counters' deltas: bytes and TCP
    segments per packet handed to its devices (above one MSS, above one segment: the device got
    TSO/GSO packets), packets its devices received per skb TCP took in (above one: receive
    aggregation, GRO, merged them), the retransmission rate (% of segments sent) and drops."""
    out_segs, in_segs = d.get("Tcp.OutSegs", 0), d.get("Tcp.InSegs", 0)
    tx_packets, rx_packets = d.get("dev.tx_packets", 0), d.get("dev.rx_packets", 0)
    retrans = ratio(d.get("Tcp.RetransSegs", 0), out_segs)
    return {"bytes_per_tx_packet": ratio(d.get("dev.tx_bytes", 0), tx_packets),
            "segs_per_tx_packet": ratio(out_segs, tx_packets),
            "rx_packets_per_skb": ratio(rx_packets, in_segs),
            "retrans_pct": None if retrans is None else 100.0 * retrans,
            "drops": float(sum(d.get(k, 0) for k in DROPS))}


def stack_columns(first: dict, last: dict, prefix: str = "") -> tuple[dict[str, Any],
                                                                      list[dict[str, Any]]]:
    """Summary columns ``stack_<scope>_<figure>`` of every namespace sampled (each tier's; the
    host's where it is the only one: a cluster node's, tiers on host networking) and the rows of counters.csv (scope, counter, delta, per second), the driver
    statistics' under scope ``ethtool:<interface label>``."""
    dt = last["t"] - first["t"]
    columns: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    before = first.get("stack") or {}
    stacks = {k: v for k, v in (last.get("stack") or {}).items() if k in before}
    for scope, now in stacks.items():
        d = deltas(before[scope], now)
        # the host's namespace with the tiers' veths and bridge in it counts their packets
        # twice: its figures are the tiers' (its counters stay in counters.csv)
        if scope != "host" or len(stacks) == 1:
            for figure, value in offload_figures(d).items():
                columns[f"{prefix}stack_{scope}_{figure}"] = value
        rows += [{"scope": scope, "counter": k, "delta": v,
                  "per_s": v / dt if dt > 0 else None} for k, v in d.items()]
    drivers = first.get("ethtool") or {}
    for label, now in (last.get("ethtool") or {}).items():
        d = deltas(drivers.get(label, {}), now, absent_zero=True)
        rows += [{"scope": f"ethtool:{label}", "counter": k, "delta": v,
                  "per_s": v / dt if dt > 0 else None} for k, v in d.items() if v]
    return columns, rows


def scopes(first: dict, last: dict) -> list[tuple[str, dict, dict]]:
    """(node name, its first, its last sample): the nodes of a merged cluster sample, else this
    host's (name '')."""
    nodes = last.get("nodes")
    if not nodes:
        return [("", first, last)]
    return [(name, (first.get("nodes") or {})[name], now) for name, now in nodes.items()
            if name in (first.get("nodes") or {})]


def point_view(samples: list[dict], span: tuple[float, float] | None, folder: Path | None
               ) -> dict[str, Any]:
    """The summary columns of the per-CPU view and the counters over a point's window, with
    cpus.csv and counters.csv written to ``folder``; {} without a window or samples that carry
    the kernel's counters (an older run's)."""
    if span is None or not samples:
        return {}
    try:
        first, last = window(samples, *span)
    except MeasureError:
        return {}
    out: dict[str, Any] = {}
    cpus: list[dict[str, Any]] = []
    counters: list[dict[str, Any]] = []
    where: list[str] = []
    for node, a, b in scopes(first, last):
        prefix = f"node_{node}_" if node else ""
        rows = cpu_rows(a, b)
        summary = cpu_summary(rows)
        out.update({prefix + k: v for k, v in summary.items()})
        if summary.get("softirq_bound"):
            where.append(f"{node + ' ' if node else ''}cpu{summary['cpu_max_irq_softirq_cpu']}")
        cpus += [{"node": node, **r} for r in rows]
        columns, rows = stack_columns(a, b, prefix)
        out.update(columns)
        counters += [{"node": node, **r} for r in rows]
    if not cpus:
        return {}
    if any(n for n, _, _ in scopes(first, last)):
        out["softirq_bound"] = bool(where)
    if where:
        out["softirq_bound_cpu"] = ", ".join(where)
    if folder is not None:
        write_csv(folder / CPUS_FILE, cpus, CPU_COLUMNS)
        write_csv(folder / COUNTERS_FILE, counters, ("node", "scope", "counter", "delta", "per_s"))
    return out


def write_csv(path: Path, rows: list[dict[str, Any]], columns: tuple[str, ...]) -> None:
    """Rows under the given columns (others left out); floats to 6 significant digits."""
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for r in rows:
            writer.writerow({k: f"{v:.6g}" if isinstance(v, float) else v for k, v in r.items()})

