"""Load curves of an open-loop run with several offered rates (`load.rate: [...]`, the summary's
`target_rate`): latency percentiles against the achieved load per mode, each curve's knee by a
stated rule, and the modes compared at equal offered load.

The knee (`knee`): walking up from the lowest offered load, the highest load up to which every
load's mean p99 stays within KNEE_FACTOR (2x) of the mean p99 at the lowest load and no
repetition fell short of the offered rate (`rate_short`). A curve whose every load holds has
no knee within the loads measured (it lies beyond the highest); a curve whose lowest load fell
short has none either (nothing to measure the rise from). A rate_short point is never the knee.

Equal offered load (`equal_load`): at each offered rate, each mode's mean p99 over the
baseline's, with the delta-method interval with Welch-Satterthwaite degrees of freedom over the
repetitions (stats.ratio_of_means, as the report's other comparisons without blocks). Rates
given as fractions of each mode's measured maximum (`load.rate_of_max`, the summary's
`rate_of_max`) differ between modes: the modes are then compared at equal fractions.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import matplotlib
import pandas as pd
from markupsafe import Markup
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import FuncFormatter

from analysis import figures, load, markup, stats, tables

KNEE_FACTOR = 2.0  # a load whose p99 exceeds this multiple of the lowest load's is past the knee
RATE = "target_rate"
FRACTION = "rate_of_max"  # rates as fractions of each mode's maximum: the modes meet at these
RULE = (f"the knee is the highest offered load up to which every load's mean p99 stays within "
        f"{KNEE_FACTOR:g}x of the mean p99 at the lowest offered load and no repetition fell "
        "short of the offered rate (rate_short: answered below 95 % of the requests offered, "
        "less a Poisson count's 3 sd)")


@dataclass(frozen=True)
class LoadPoint:
    """One offered rate of one curve: the achieved rate and percentiles over repetitions."""

    offered: float
    achieved: stats.Estimate
    p50: stats.Estimate
    p99: stats.Estimate
    short: bool  # a repetition was rate_short (fell short of the offered rate)


@dataclass(frozen=True)
class Knee:
    """A curve's knee: its offered and achieved load, or None with the reason in `text`."""

    offered: float | None
    achieved: float | None
    text: str


def has_curves(rows: list[dict[str, Any]]) -> bool:
    """Do the rows hold more than one offered rate (a load curve)?"""
    rates = {markup.number(r.get(RATE)) for r in rows}
    return len(rates - {None}) > 1


def curve(points: pd.DataFrame) -> list[LoadPoint]:
    """The points of one condition and mode (rows without errors) by offered rate, ascending."""
    out = []
    ok = tables.good(points)
    for rate in sorted({float(v) for v in ok[RATE].dropna()}):
        at = ok[ok[RATE].astype(float) == rate]

        def col(name: str, at: pd.DataFrame = at) -> list[Any]:
            return at[name].tolist() if name in at else []

        short = any(load.as_bool(v) is True for v in col("rate_short"))
        out.append(LoadPoint(rate, stats.mean_ci(col("achieved_rate")), stats.mean_ci(col("p50_ms")),
                             stats.mean_ci(col("p99_ms")), short))
    return out


def knee(points: list[LoadPoint], factor: float = KNEE_FACTOR) -> Knee:
    """The curve's knee by the rule above (points ascending by offered rate)."""
    usable = [p for p in points if p.p99.mean is not None]
    if not usable:
        return Knee(None, None, "no knee: no p99 measured")
    first = usable[0]
    if first.short:
        return Knee(None, None, f"no knee: the lowest offered load ({first.offered:,.0f}/s) "
                                "already fell short of its rate")
    limit = factor * float(first.p99.mean or 0.0)
    held = first
    for p in usable[1:]:
        if p.short or float(p.p99.mean or 0.0) > limit:
            why = ("fell short of its rate" if p.short
                   else f"p99 {p.p99.mean:,.2f} ms > {factor:g}x {first.p99.mean:,.2f} ms")
            return Knee(held.offered, held.achieved.mean,
                        f"knee at {held.offered:,.0f}/s offered "
                        f"({held.achieved.mean or 0:,.0f}/s achieved): the next load, "
                        f"{p.offered:,.0f}/s, {why}")
        held = p
    return Knee(None, None, f"no knee up to {held.offered:,.0f}/s: p99 stays within {factor:g}x "
                            f"of the lowest load's ({first.p99.mean:,.2f} ms) at every load "
                            "measured; the knee lies beyond")


@dataclass(frozen=True)
class Comparison:
    """A mode's mean p99 against the baseline's at one offered rate (or fraction of each
    mode's maximum: `level` names which)."""

    where: str
    offered: float
    mode: str
    n: int
    n_baseline: int
    p99: float | None
    p99_baseline: float | None
    ratio: stats.Ratio
    short: bool  # either side has a rate_short repetition
    level: str = RATE


def level_of(points: pd.DataFrame) -> str:
    """The column the modes meet at: the fraction of each mode's maximum when the run gave
    rates that way, else the offered rate."""
    return FRACTION if FRACTION in points and points[FRACTION].notna().any() else RATE


def conditions(points: pd.DataFrame, group_cols: list[str]) -> list[tuple[str, pd.DataFrame]]:
    """The conditions besides the offered rate (trace, users, ...): (label, rows)."""
    by = [c for c in group_cols if c not in (RATE, FRACTION, "phase")]
    if not by:
        return [("all", points)]
    return [(tables.describe(by, key) or "all", grp) for key, grp in tables.groups(points, by)]


def equal_load(points: pd.DataFrame, baseline: str, modes: list[str],
               group_cols: list[str], column: str = "p99_ms") -> list[Comparison]:
    """Every mode against the baseline at each offered rate of each condition: mean(column)
    of the mode over the baseline's, Welch delta-method 95 % interval over repetitions."""
    out = []
    ok = tables.good(points)
    level = level_of(ok)
    for where, grp in conditions(ok, group_cols):
        for rate in sorted({float(v) for v in grp[level].dropna()}):
            at = grp[grp[level].astype(float) == rate]
            base = at[at["mode"] == baseline]
            for mode in [m for m in modes if m != baseline]:
                sub = at[at["mode"] == mode]
                if sub.empty or base.empty:
                    continue
                short = any(load.as_bool(v) is True
                            for v in pd.concat([sub, base]).get("rate_short", []))
                a, b = sub[column].tolist(), base[column].tolist()
                out.append(Comparison(where, rate, mode, len(sub), len(base),
                                      stats.mean_ci(a).mean, stats.mean_ci(b).mean,
                                      stats.ratio_of_means(a, b), short, level))
    return out


def draw(panels: list[tuple[str, dict[str, list[LoadPoint]], dict[str, Knee]]],
         colors: dict[str, str], ident: str) -> str:
    """One panel per condition: p99 (solid) and p50 (dashed) against the achieved rate, a line
    per mode, each mode's knee ringed."""
    ncols = min(2, len(panels))
    nrows = -(-len(panels) // ncols)
    w, h = figures.PANEL_SIZE
    with matplotlib.rc_context({**figures.RC, "svg.hashsalt": ident}):
        fig = MplFigure(figsize=(w * 1.2 * ncols, h * 1.2 * nrows), layout="constrained")
        flat = list(fig.subplots(nrows, ncols, squeeze=False).flat)
        for spare in flat[len(panels):]:
            spare.set_visible(False)
        for n, (ax, (title, curves, knees)) in enumerate(zip(flat, panels)):
            for j, (mode, pts) in enumerate(curves.items()):
                color = colors.get(mode, figures.PALETTE[j % len(figures.PALETTE)])
                for col, style in (("p99", "-"), ("p50", "--")):
                    xy = [(p.achieved.mean, getattr(p, col).mean) for p in pts
                          if p.achieved.mean is not None and getattr(p, col).mean is not None]
                    if xy:
                        (line,) = ax.plot([x for x, _ in xy], [y for _, y in xy], style,
                                          marker="o", markersize=3.5, color=color,
                                          label=f"{mode} {col}")
                        line.set_gid(f"p{n}-{col}-s{j}")
                k = knees.get(mode)
                at = next((p for p in pts if k and p.offered == k.offered), None)
                if at is not None and at.achieved.mean is not None and at.p99.mean is not None:
                    ax.plot([at.achieved.mean], [at.p99.mean], "o", markersize=11,
                            markerfacecolor="none", markeredgecolor=color, markeredgewidth=1.6,
                            gid=f"p{n}-knee-s{j}")
            ax.set_yscale("log")
            ax.set_title(figures.plain(title), loc="left", fontweight="bold")
            ax.set_xlabel("achieved load (requests / s)")
            ax.set_ylabel("latency (ms, log scale)")
            ax.xaxis.set_major_formatter(FuncFormatter(figures.thousands))
            ax.legend(loc="upper left", frameon=True, framealpha=0.85, edgecolor="none")
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Creator": None, "Date": None,
                                                  "Format": None, "Type": None})
    return figures.inline(buf.getvalue(), ident, "chart loadcurve", {})


def card(points: pd.DataFrame, group_cols: list[str], modes: list[str], baseline: str | None,
         colors: dict[str, str]) -> dict[str, Any] | None:
    """The report's load-curve card: the figure, each curve's knee, the equal-load table."""
    if RATE not in points or points[RATE].dropna().nunique() < 2:
        return None
    panels, knees_out = [], []
    for where, grp in conditions(points, group_cols):
        curves = {m: curve(grp[grp["mode"] == m]) for m in modes if (grp["mode"] == m).any()}
        knees = {m: knee(c) for m, c in curves.items()}
        panels.append((where, curves, knees))
        knees_out += [{"where": where, "mode": m, "text": k.text,
                       "offered": markup.MISSING if k.offered is None else f"{k.offered:,.0f}"}
                      for m, k in knees.items()]
    rows = []
    for c in equal_load(points, baseline, modes, group_cols) if baseline else []:
        r = c.ratio
        offered = f"{c.offered:g}x max" if c.level == FRACTION else f"{c.offered:,.0f}"
        rows.append({"where": c.where, "offered": offered, "mode": c.mode,
                     "n": c.n, "n_baseline": c.n_baseline,
                     "p99s": f"{c.p99 or 0:,.2f} / {c.p99_baseline or 0:,.2f}",
                     "ratio": Markup(markup.ci_span(
                         None if r.value is None else r.value - 1.0,
                         None if r.low is None else r.low - 1.0,
                         None if r.high is None else r.high - 1.0, scale=100.0, unit=" %")),
                     "short": c.short})
    return {"figure": Markup(draw(panels, colors, "loadcurve")), "rule": RULE,
            "knees": knees_out, "baseline": baseline or "", "rows": rows}
