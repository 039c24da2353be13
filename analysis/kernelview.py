"""The report's per-CPU view and counters table (issue 43): per mode, the busiest CPU, the CPU
with the most interrupt work and its share, the NET_RX softirqs and how concentrated they were,
the points where one CPU was saturated by interrupt work (softirq_bound), and per tier what the
offloads did (summary.csv's stack_<tier>_<figure>: segments and bytes per packet handed to the
device, packets per skb TCP took in, retransmission rate, drops). Read from summary.csv's
columns only (docs/measurement.md says how the runner computes them)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
from markupsafe import Markup

from analysis import stats, tables
from analysis.markup import MISSING
from tierbench.stats import quantiles

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
    order; idle left out (the shares are of busy samples), and perf's own CPU and the tiers'
    shares, which are not categories of the busy samples."""
    return [c[len("cat_"):-len("_pct")] for c in points.columns
            if c.startswith("cat_") and c.endswith("_pct")
            and c not in ("cat_idle_pct", "cat_perf_cpu_pct") and not c.startswith("cat_tiers_")]


def why_table(points: pd.DataFrame, entries: list[tuple[str, str, pd.DataFrame]],
              colors: dict[str, str], baseline: str | None = None) -> dict[str, Any] | None:
    """Per mode, where the CPU went: each category's CPU µs per KB (with_why) where the run
    has bytes or CPU per KB, else its share in %, and what moved from the ``baseline`` mode
    to each other one (moved_lines); None without a profile."""
    cats = categories(points)
    if not cats:
        return None
    how = basis(points)
    rows = []
    for mode, name, group in entries:
        ok = with_why(tables.good(group), cats, how)
        cells = [value(ok, f"why_{c}", 1 if how == SHARE else 2) for c in cats]
        rows.append({"color": colors[mode], "name": name, "cells": cells})
    return {"columns": [(f"cat_{c}_pct", c.replace("_", " ")) for c in cats], "rows": rows,
            "unit": unit(how), "moved": moved_lines(entries, baseline)}


def moved_lines(entries: list[tuple[str, str, pd.DataFrame]], baseline: str | None
                ) -> list[tuple[str, str]]:
    """(row, line) per entry of a mode other than ``baseline`` that has a baseline entry
    with the same other factors: what moved from it (what_moved)."""
    base = {name[len(mode):]: group for mode, name, group in entries if mode == baseline}
    out = []
    for mode, name, group in entries:
        ref = base.get(name[len(mode):])
        if mode != baseline and ref is not None:
            line = what_moved(ref, group)
            if line:
                out.append((f"{name} against {baseline}", line))
    return out


TIERS, HOST, SHARE = "tiers", "host", "share"
UNITS = {TIERS: "the tiers' CPU µs per KB", HOST: "host CPU µs per KB",
         SHARE: "% of busy samples"}


def has(points: pd.DataFrame, column: str) -> bool:
    """Whether the points have values in ``column``."""
    return column in points and bool(points[column].notna().any())


def basis(points: pd.DataFrame) -> str:
    """What the why_<category> columns measure: the tiers' own CPU per KB where the run has
    the tiers' samples and its bytes (a shared host's other processes left out), else the
    host's CPU per KB, else the shares of the busy samples."""
    if has(points, "cat_tiers_cpu_s") and has(points, "bytes_moved"):
        return TIERS
    return HOST if has(points, "host_cpu_us_per_kb") else SHARE


def unit(how: str) -> str:
    """The unit of the why_<category> columns."""
    return UNITS[how]


def with_why(points: pd.DataFrame, cats: list[str], how: str) -> pd.DataFrame:
    """The points with a why_<category> column each, point by point: TIERS, the category's
    share of the tiers' samples times the CPU seconds they stand for, in µs per KB moved;
    HOST, its share of the busy samples times host_cpu_us_per_kb; SHARE, its share in %."""
    out = points.copy()

    def num(column: str) -> pd.Series:
        return pd.to_numeric(out[column], errors="coerce")

    for c in cats:
        if how == TIERS:
            out[f"why_{c}"] = (num(f"cat_tiers_{c}_pct") / 100 * num("cat_tiers_cpu_s") * 1e6
                               / (num("bytes_moved") / 1024))
        elif how == HOST:
            out[f"why_{c}"] = num(f"cat_{c}_pct") / 100 * num("host_cpu_us_per_kb")
        else:
            out[f"why_{c}"] = num(f"cat_{c}_pct")
    return out


@dataclass(frozen=True)
class Moved:
    """How one category moved from a baseline mode to another: the means over repetitions in
    each (``unit``), the difference mode - baseline and its 95 % Welch half-width (None with
    under two repetitions in a mode)."""

    category: str
    baseline: float | None
    mode: float | None
    diff: float | None
    half: float | None

    @property
    def direction(self) -> int:
        """+1: up (the interval above zero), -1: down (below), 0: not told apart."""
        if self.diff is None or self.half is None:
            return 0
        return 1 if self.diff - self.half > 0 else -1 if self.diff + self.half < 0 else 0


def moved(base: pd.DataFrame, other: pd.DataFrame) -> tuple[str, list[Moved]]:
    """Per category, how the CPU moved from the points ``base`` (a baseline mode's
    repetitions) to ``other`` (another mode's, same condition): the unit and the moves, the
    largest difference first. Failed points are left out."""
    both = pd.concat([base, other])
    cats = categories(both)
    how = basis(both)
    a = with_why(tables.good(base), cats, how)
    b = with_why(tables.good(other), cats, how)
    out = []
    for c in cats:
        ea, eb = stats.mean_ci(a[f"why_{c}"]), stats.mean_ci(b[f"why_{c}"])
        diff = half = None
        if ea.mean is not None and eb.mean is not None:
            diff = eb.mean - ea.mean
        if ea.sd is not None and eb.sd is not None:
            ua, ub = ea.sd ** 2 / ea.n, eb.sd ** 2 / eb.n
            df = ((ua + ub) ** 2 / (ua * ua / (ea.n - 1) + ub * ub / (eb.n - 1))
                  if ua + ub > 0 else float(ea.n + eb.n - 2))
            half = quantiles.t_quantile(0.975, df) * math.sqrt(ua + ub)
        out.append(Moved(c.replace("_", " "), ea.mean, eb.mean, diff, half))
    out.sort(key=lambda m: -abs(m.diff or 0.0))
    return unit(how), out


def what_moved(base: pd.DataFrame, other: pd.DataFrame, top: int = 3) -> str:
    """One line for a recommendation: the ``top`` categories that moved most with their
    interval ('checksum +0.12 µs/KB [0.08, 0.16]'), then the largest ones not told apart
    ('unchanged: data copy'); '' without a profile."""
    if not categories(pd.concat([base, other])):
        return ""
    u, moves = moved(base, other)
    short = "% of busy" if u == UNITS[SHARE] else "µs/KB"
    told = [m for m in moves if m.direction != 0 and m.category != "uncategorized"]
    same = sorted((m for m in moves if m.direction == 0 and m.baseline
                   and m.category not in ("uncategorized", "other")),
                  key=lambda m: -(m.baseline or 0.0))
    bits = [f"{m.category} {m.diff:+.3g} {short} [{m.diff - m.half:.3g}, "
            f"{m.diff + m.half:.3g}]" for m in told[:top]
            if m.diff is not None and m.half is not None]
    if same:
        bits.append("unchanged: " + ", ".join(m.category for m in same[:2]))
    return "; ".join(bits) or "no category told apart"
