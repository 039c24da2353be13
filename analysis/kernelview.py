"""The report's per-CPU view and counters table (issue 43): per mode, the busiest CPU, the CPU
with the most interrupt work and its share, the NET_RX softirqs and how concentrated they were,
the points where one CPU was saturated by interrupt work (softirq_bound), and per tier what the
offloads did (summary.csv's stack_<tier>_<figure>: segments and bytes per packet handed to the
device, packets per skb TCP took in, retransmission rate, drops). Read from summary.csv's
columns only (docs/measurement.md says how the runner computes them)."""

from __future__ import annotations

from typing import Any

import pandas as pd
from markupsafe import Markup

from analysis import tables
from analysis.markup import MISSING

CPU_FIGURES = (("cpu_max_busy_pct", "busiest CPU %"),
               ("cpu_max_irq_softirq_pct", "max irq+softirq % of one CPU"),
               ("net_rx_softirq_per_s", "NET_RX softirqs /s"),
               ("net_rx_softirq_top_cpu_pct", "NET_RX on its top CPU %"))
STACK_FIGURES = (("segs_per_tx_packet", "segments / tx packet"),
                 ("bytes_per_tx_packet", "bytes / tx packet"),
                 ("rx_packets_per_skb", "rx packets / TCP skb"),
                 ("retrans_pct", "retransmitted %"),
                 ("drops", "drops"))


def scopes(points: pd.DataFrame) -> list[str]:
    """The namespaces with stack_<scope>_<figure> columns (tiers, or a cluster's host), in
    column order."""
    suffix = "_segs_per_tx_packet"
    return [c[len("stack_"):-len(suffix)] for c in points.columns
            if c.startswith("stack_") and c.endswith(suffix)]


def value(group: pd.DataFrame, column: str, digits: int) -> Any:
    """The mean over repetitions with its 95 % half-width, or MISSING."""
    e = tables.estimate(group, column)
    if e.mean is None:
        return MISSING
    mean = f"{e.mean:,.{digits}f}"
    if e.half is None:
        return mean
    return Markup('{}<br><span class="pm">± {}</span>').format(mean, f"{e.half:,.{digits}f}")


def table(points: pd.DataFrame, entries: list[tuple[str, str, pd.DataFrame]],
          colors: dict[str, str]) -> dict[str, Any] | None:
    """Per mode (``entries``: mode, row name, its points) the per-CPU figures, the count of
    softirq-bound points and each tier's offload figures; None when summary.csv has none
    (a run from before issue 43)."""
    if "cpu_max_busy_pct" not in points:
        return None
    cpu = [(c, lab) for c, lab in CPU_FIGURES if c in points]
    tiers = scopes(points)
    groups = [("per CPU", len(cpu) + 1)] + [(f"{t}: what the offloads did", len(STACK_FIGURES))
                                           for t in tiers]
    columns = cpu + [("softirq_bound", "points softirq-bound")] + [
        (f"stack_{t}_{k}", lab) for t in tiers for k, lab in STACK_FIGURES]
    rows = []
    for mode, name, group in entries:
        ok = tables.good(group)
        cells = [value(ok, c, 1) for c, _ in cpu]
        bound = int((ok["softirq_bound"] == True).sum()) if "softirq_bound" in ok else 0  # noqa: E712
        cells.append(f"{bound} / {len(ok)}")
        for t in tiers:
            for k, _ in STACK_FIGURES:
                cells.append(value(ok, f"stack_{t}_{k}", 0 if k == "bytes_per_tx_packet" else 2))
        rows.append({"color": colors[mode], "name": name, "cells": cells,
                     "flag": bound > 0})
    return {"groups": groups, "columns": columns, "rows": rows}


def categories(points: pd.DataFrame) -> list[str]:
    """The categories of a --profile categories run (cat_<category>_pct columns), in column
    order; idle left out (the shares are of busy samples)."""
    return [c[len("cat_"):-len("_pct")] for c in points.columns
            if c.startswith("cat_") and c.endswith("_pct") and c != "cat_idle_pct"]


def why_table(points: pd.DataFrame, entries: list[tuple[str, str, pd.DataFrame]],
              colors: dict[str, str]) -> dict[str, Any] | None:
    """Per mode, where the host's CPU went: each category's host CPU µs per KB (its share of
    the busy samples times host_cpu_us_per_kb, point by point) where the run has CPU per KB,
    else its share in %; None without a profile."""
    cats = categories(points)
    if not cats:
        return None
    per_kb = "host_cpu_us_per_kb" in points and points["host_cpu_us_per_kb"].notna().any()
    rows = []
    for mode, name, group in entries:
        ok = tables.good(group).copy()
        cells = []
        for c in cats:
            column = f"cat_{c}_pct"
            if per_kb:
                ok[f"why_{c}"] = pd.to_numeric(ok[column], errors="coerce") / 100 * \
                    pd.to_numeric(ok["host_cpu_us_per_kb"], errors="coerce")
                column = f"why_{c}"
            cells.append(value(ok, column, 2 if per_kb else 1))
        rows.append({"color": colors[mode], "name": name, "cells": cells})
    return {"columns": [(f"cat_{c}_pct", c.replace("_", " ")) for c in cats], "rows": rows,
            "unit": "host CPU µs per KB" if per_kb else "% of busy samples"}
