"""One figure per experiment family, drawn from the tidy per-point table as inline SVG.

Family from the experiment's name prefix (dc-single, dc-zipf, dc-clients, dc-classes, pfs-*,
net-conns; `quick` is a DC-single run), else from the trace structure. Every figure shows means
over repetitions with 95 % CI whiskers and, where the seed has numbers, a separate panel with the
paper's values labelled as 2004-2008 hardware.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis import references, stats, tables

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
REF_COLORS = ("#8a96a3", "#c5ccd3")
FAMILIES = ("dc-single", "dc-zipf", "dc-clients", "dc-classes", "dc-hybrid", "pfs", "net-conns")


@dataclass
class Figure:
    """A rendered figure: title, SVG (or HTML tables) and caption."""

    family: str
    title: str
    body: str
    caption: str


def family_of(name: str, points: pd.DataFrame | None = None) -> str:
    """The experiment family from the experiment name, else from the trace structure."""
    low = (name or "").lower()
    for fam in ("dc-single", "dc-zipf", "dc-clients", "dc-classes", "dc-hybrid", "net-conns"):
        if low.startswith(fam):
            return fam
    if low.startswith("pfs"):
        return "pfs"
    if low.startswith("quick"):
        return "dc-single"
    if points is not None and not points.empty:
        if "alpha" in points and points["alpha"].dropna().nunique() > 1:
            return "dc-zipf"
        if "users" in points and points["users"].dropna().nunique() > 1:
            return "dc-clients"
    return "dc-single"


# --------------------------------------------------------------------------- SVG helpers



def _whisker(x: float, y_lo: float, y_hi: float) -> str:
    """A vertical error whisker with caps at x, from y_lo to y_hi (SVG coordinates)."""
    return (f'<path class="whisker" d="M{x:.1f} {y_lo:.1f}V{y_hi:.1f}'
            f'M{x - 4:.1f} {y_lo:.1f}h8M{x - 4:.1f} {y_hi:.1f}h8"/>')

def _esc(v: Any) -> str:
    return html.escape("" if v is None else str(v))


def _nice(span: float, ticks: int = 5) -> float:
    raw = span / ticks if span > 0 else 1.0
    mag = 10 ** math.floor(math.log10(raw))
    return next((m * mag for m in (1, 2, 2.5, 5, 10) if raw <= m * mag), 10 * mag)


def _fmt(v: float) -> str:
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:,.1f}"
    return f"{v:,.2f}"


def _tick(v: float, step: float) -> str:
    return f"{v:,.0f}" if step >= 1 else f"{v:,.{max(0, -math.floor(math.log10(step)) + 1)}f}"


def _yaxis(out: list[str], top_value: float, left: int, top: int, w: int, h: int,
           label: str) -> Callable[[float], float]:
    step = _nice(top_value * 1.15 if top_value > 0 else 1.0)
    y_max = math.ceil((top_value * 1.15 if top_value > 0 else 1.0) / step) * step

    def y(v: float) -> float:
        return top + h * (1 - max(v, 0.0) / y_max)

    for i in range(int(round(y_max / step)) + 1):
        ty = y(i * step)
        out.append(f'<line class="grid" x1="{left}" x2="{left + w}" y1="{ty:.1f}" '
                   f'y2="{ty:.1f}"/><text class="tick" x="{left - 6}" y="{ty + 3.5:.1f}" '
                   f'text-anchor="end">{_tick(i * step, step)}</text>')
    out.append(f'<text class="axis" transform="translate(13 {top + h / 2:.1f}) rotate(-90)" '
               f'text-anchor="middle">{_esc(label)}</text>')
    return y


def _legend(out: list[str], items: list[tuple[str, str]], x: float, y: float) -> None:
    for i, (name, color) in enumerate(items):
        out.append(f'<rect x="{x:.1f}" y="{y + 14 * i - 8:.1f}" width="10" height="10" '
                   f'fill="{color}" rx="2"/><text class="tick" x="{x + 14:.1f}" '
                   f'y="{y + 14 * i + 1:.1f}">{_esc(name)}</text>')


@dataclass
class Series:
    """Values of one mode (or docroot) across the x categories / x values of a panel."""

    name: str
    color: str
    points: list[tuple[Any, float | None, float | None, float | None]]  # x, mean, low, high


def grouped_bars(title: str, axis: str, categories: list[str], series: list[Series],
                 width: int = 560, height: int = 300) -> str:
    """A grouped bar panel: categories on x, one bar per series, 95 % CI whiskers; an SVG <g>."""
    left, right, top, bottom = 66, 14, 34 + 14 * len(series), 40
    w, h = width - left - right, height - top - bottom
    vals = [hi if hi is not None else m for s in series for _, m, _, hi in s.points
            if m is not None]
    out = [f'<text class="ptitle" x="{left}" y="16">{_esc(title)}</text>']
    y = _yaxis(out, max(vals + [0.0]), left, top, w, h, axis)
    slot = w / max(len(categories), 1)
    bar_w = min(42.0, slot * 0.8 / max(len(series), 1))
    for ci, cat in enumerate(categories):
        cx = left + slot * (ci + 0.5)
        out.append(f'<text class="xlab" x="{cx:.1f}" y="{top + h + 16}" text-anchor="middle">'
                   f"{_esc(cat)}</text>")
        for si, s in enumerate(series):
            found = [p for p in s.points if p[0] == cat]
            if not found or found[0][1] is None:
                continue
            _, m, lo, hi = found[0]
            bx = cx + (si - len(series) / 2) * bar_w
            by = y(m)
            out.append(f'<rect class="bar" x="{bx:.1f}" y="{by:.1f}" width="{bar_w - 2:.1f}" '
                       f'height="{y(0) - by:.1f}" fill="{s.color}" rx="2"><title>{_esc(s.name)}'
                       f" · {_esc(cat)}: {_fmt(m)}</title></rect>")
            mid = bx + (bar_w - 2) / 2
            if lo is not None and hi is not None and hi > lo:
                out.append(_whisker(mid, y(lo), y(hi)))
            out.append(f'<text class="val" x="{mid:.1f}" y="{min(by, y(hi or m)) - 4:.1f}" '
                       f'text-anchor="middle">{_fmt(m)}</text>')
    out.append(f'<line class="base" x1="{left}" x2="{left + w}" y1="{y(0):.1f}" '
               f'y2="{y(0):.1f}"/>')
    _legend(out, [(s.name, s.color) for s in series], left, 34)
    return "<g>" + "".join(out) + "</g>"


def line_panel(title: str, xlabel: str, axis: str, series: list[Series], width: int = 560,
               height: int = 300) -> str:
    """A line panel: numeric x (log2 when it spans 8x or more), lines with CI whiskers; an SVG <g>."""
    left, right, top, bottom = 66, 16, 34 + 14 * len(series), 44
    w, h = width - left - right, height - top - bottom
    xs = sorted({float(p[0]) for s in series for p in s.points if p[1] is not None})
    vals = [hi if hi is not None else m for s in series for _, m, _, hi in s.points
            if m is not None]
    out = [f'<text class="ptitle" x="{left}" y="16">{_esc(title)}</text>']
    y = _yaxis(out, max(vals + [0.0]), left, top, w, h, axis)
    log = bool(xs) and xs[0] > 0 and xs[-1] / xs[0] >= 8
    tx = [math.log2(v) for v in xs] if log else xs
    lo_x, hi_x = (min(tx), max(tx)) if tx else (0.0, 1.0)
    if hi_x == lo_x:
        lo_x, hi_x = lo_x - 1, hi_x + 1

    def x(v: float) -> float:
        t = math.log2(v) if log else v
        return left + 12 + (w - 24) * (t - lo_x) / (hi_x - lo_x)

    for v in xs:
        out.append(f'<text class="tick" x="{x(v):.1f}" y="{top + h + 15}" text-anchor="middle">'
                   f"{v:g}</text>")
    out.append(f'<text class="xlab" x="{left + w / 2:.1f}" y="{top + h + 34}" '
               f'text-anchor="middle">{_esc(xlabel)}{" (log scale)" if log else ""}</text>')
    for s in series:
        pts = sorted((float(p[0]), p[1], p[2], p[3]) for p in s.points if p[1] is not None)
        if not pts:
            continue
        d = " ".join(f"{'M' if i == 0 else 'L'}{x(px):.1f} {y(m):.1f}"
                     for i, (px, m, _, _) in enumerate(pts))
        out.append(f'<path class="line" d="{d}" fill="none" stroke="{s.color}" '
                   f'stroke-width="2"/>')
        for px, m, lo, hi in pts:
            out.append(f'<circle cx="{x(px):.1f}" cy="{y(m):.1f}" r="3.5" fill="{s.color}">'
                       f"<title>{_esc(s.name)} @ {px:g}: {_fmt(m)}</title></circle>")
            if lo is not None and hi is not None and hi > lo:
                out.append(_whisker(x(px), y(lo), y(hi)))
    out.append(f'<line class="base" x1="{left}" x2="{left + w}" y1="{y(0):.1f}" '
               f'y2="{y(0):.1f}"/>')
    _legend(out, [(s.name, s.color) for s in series], left, 34)
    return "<g>" + "".join(out) + "</g>"


# --------------------------------------------------------------------------- data helpers


def _series(points: pd.DataFrame, x: str, y: str, by: str, order: list[str],
            colors: dict[str, str]) -> list[Series]:
    ok = tables.good(points)
    out = []
    for name in order:
        sub = ok[ok[by] == name]
        pts = []
        for xv, grp in sub.groupby(x, sort=False, dropna=True):
            if y not in grp:
                continue
            e = stats.mean_ci(grp[y].tolist())
            pts.append((xv, e.mean, e.low, e.high))
        out.append(Series(str(name), colors.get(str(name), PALETTE[0]), pts))
    return out


def _ref_panel(ref: references.Reference | None, quantity: str = "TPS") -> str | None:
    if ref is None:
        return None
    rows = [r for r in ref.rows if r.quantity == quantity]
    if not rows or all(r.without_offload is None for r in rows):
        return None
    series = [
        Series(f"{ref.labels[0]} (paper)", REF_COLORS[0],
               [(r.x, r.with_offload, None, None) for r in rows]),
        Series(f"{ref.labels[1]} (paper)", REF_COLORS[1],
               [(r.x, r.without_offload, None, None) for r in rows]),
    ]
    unit = rows[0].unit
    return grouped_bars(f"Paper ({references.HARDWARE})", f"{quantity} ({unit})",
                        [r.x for r in rows], series, width=360)


def _modes(points: pd.DataFrame, experiment: dict[str, Any]) -> list[str]:
    return tables.modes_in_order(list(dict.fromkeys(points["mode"])), experiment)


def _colors(modes: list[str]) -> dict[str, str]:
    return {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(modes)}


def _layout(panels: list[str | None], family: str, widths: list[int]) -> str:
    kept = [(p, w) for p, w in zip(panels, widths) if p]
    gap, height = 24, 300
    total = sum(w for _, w in kept) + gap * (len(kept) - 1)
    body, at = [], 0
    for p, w in kept:
        body.append(f'<g transform="translate({at} 0)">{p}</g>')
        at += w + gap
    return (f'<svg class="chart family" data-family="{_esc(family)}" role="img" width="{total}" '
            f'height="{height}" viewBox="0 0 {total} {height}">{"".join(body)}</svg>')


CI_NOTE = "Bars/points: mean over repetitions; whiskers: 95 % confidence interval (t, df = n − 1)."


# --------------------------------------------------------------------------- family figures


def fig_dc_single(points: pd.DataFrame, experiment: dict[str, Any]) -> Figure:
    """000 Fig. 8a: TPS per trace, one bar per mode."""
    modes = _modes(points, experiment)
    traces = list(dict.fromkeys(points["trace"]))
    series = _series(points, "trace", "tps", "mode", modes, _colors(modes))
    main = grouped_bars("Measured here: TPS per trace by mode", "TPS (requests / s)", traces,
                        series)
    ref = references.reference("dc-single")
    body = _layout([main, _ref_panel(ref)], "dc-single", [560, 360])
    return Figure("dc-single", "TPS per trace by mode (000 Fig. 8a)", body,
                  CI_NOTE + " Grey panel: the paper's numbers, " + references.HARDWARE + ".")


def fig_dc_zipf(points: pd.DataFrame, experiment: dict[str, Any]) -> Figure:
    """000 Fig. 8b: TPS against the Zipf alpha of the trace, one line per mode."""
    modes = _modes(points, experiment)
    zipf = points[points["alpha"].notna()] if "alpha" in points else points.iloc[0:0]
    main = line_panel("Measured here: TPS vs Zipf alpha", "Zipf alpha", "TPS (requests / s)",
                      _series(zipf, "alpha", "tps", "mode", modes, _colors(modes)))
    body = _layout([main, _ref_panel(references.reference("dc-zipf"))], "dc-zipf", [560, 360])
    return Figure("dc-zipf", "TPS vs Zipf alpha (000 Fig. 8b)", body,
                  CI_NOTE + f" Alpha from the trace spec in the manifest. Grey panel: the "
                  f"paper, {references.HARDWARE}.")


def _users_column(points: pd.DataFrame) -> str:
    for col in ("threads", "clients", "users"):
        if col in points and points[col].notna().any():
            return col
    return "users"


def fig_dc_clients(points: pd.DataFrame, experiment: dict[str, Any]) -> Figure:
    """000 Fig. 9: TPS and client CPU against the number of client threads, per mode."""
    modes, col = _modes(points, experiment), _users_column(points)
    colors = _colors(modes)
    tps = line_panel("Measured here: TPS vs client threads", f"client threads ({col})",
                     "TPS (requests / s)", _series(points, col, "tps", "mode", modes, colors))
    cpu_col = "generator_cpu_pct" if "generator_cpu_pct" in points else "host_usr_pct"
    cpu = line_panel("Client CPU vs client threads", f"client threads ({col})",
                     "client CPU (% of allowance)",
                     _series(points, col, cpu_col, "mode", modes, colors))
    body = _layout([tps, cpu, _ref_panel(references.reference("dc-clients"))], "dc-clients",
                   [560, 560, 360])
    return Figure("dc-clients", "TPS and client CPU vs client threads (000 Fig. 9)", body,
                  CI_NOTE + " Where client CPU reaches 100 % the client saturates. "
                  f"Grey panel: the paper, {references.HARDWARE}.")


def fig_dc_classes(points: pd.DataFrame, experiment: dict[str, Any]) -> Figure:
    """004 Fig. 6: TPS per workload class, one bar per docroot file system (or mode)."""
    by = "docroot" if "docroot" in points and points["docroot"].notna().any() else "mode"
    order = list(dict.fromkeys(points[by].dropna().astype(str)))
    sub = points.assign(**{by: points[by].astype(str)})
    classes = list(dict.fromkeys(points["trace"]))
    main = grouped_bars(f"Measured here: TPS by workload class and {by}", "TPS (requests / s)",
                        classes, _series(sub, "trace", "tps", by, order, _colors(order)),
                        width=max(560, 90 * len(classes) * max(len(order), 1) // 2))
    ref = references.reference("dc-classes")
    return Figure("dc-classes", "TPS by workload class and docroot (004 Fig. 6)",
                  _layout([main], "dc-classes", [max(560, 90 * len(classes) * max(len(order), 1)
                                                     // 2)]),
                  CI_NOTE + f" Paper ({references.HARDWARE}), {ref.figure}: {ref.note}."
                  if ref else CI_NOTE)


def fig_dc_hybrid(points: pd.DataFrame, experiment: dict[str, Any]) -> Figure:
    """004 Fig. 7: the foreground site's TPS per workload mix, one bar per placement (docroot)."""
    col = "tps_foreground" if "tps_foreground" in points else "tps"
    by = "docroot" if "docroot" in points and points["docroot"].notna().any() else "mode"
    order = list(dict.fromkeys(points[by].dropna().astype(str)))
    sub = points.assign(**{by: points[by].astype(str)})
    mixes = list(dict.fromkeys(points["trace"]))
    width = max(560, 90 * len(mixes) * max(len(order), 1) // 2)
    main = grouped_bars(f"Measured here: foreground TPS by workload mix and {by}",
                        "foreground TPS (requests / s)", mixes,
                        _series(sub, "trace", col, by, order, _colors(order)), width=width)
    ref = references.reference("dc-hybrid")
    return Figure("dc-hybrid", "Foreground TPS by placement of its small files (004 Fig. 7)",
                  _layout([main], "dc-hybrid", [width]),
                  CI_NOTE + f" Paper ({references.HARDWARE}), {ref.figure}: {ref.note}."
                  if ref else CI_NOTE)


def fig_pfs(points: pd.DataFrame, experiment: dict[str, Any]) -> Figure:
    """000 Fig. 10-12: aggregate MB/s against the number of clients, one line per mode."""
    modes, col = _modes(points, experiment), _users_column(points)
    colors = _colors(modes)
    panels, widths = [], []
    for trace in dict.fromkeys(points["trace"]):
        sub = points[points["trace"] == trace]
        panels.append(line_panel(f"Measured here: {trace}", f"clients ({col})",
                                 "aggregate MB/s", _series(sub, col, "mb_per_s", "mode", modes,
                                                           colors)))
        widths.append(560)
    ref = references.reference("pfs")
    if ref:
        series = [Series(f"{ref.labels[0]} (paper)", REF_COLORS[0],
                         [(r.x, r.with_offload, None, None) for r in ref.rows]),
                  Series(f"{ref.labels[1]} (paper)", REF_COLORS[1],
                         [(r.x, r.without_offload, None, None) for r in ref.rows])]
        panels.append(grouped_bars(f"Paper: {ref.figure} ({references.HARDWARE})",
                                   "aggregate MB/s", [r.x for r in ref.rows], series,
                                   width=560))
        widths.append(560)
    return Figure("pfs", "Aggregate MB/s vs clients (000 Fig. 10-12)",
                  _layout(panels, "pfs", widths),
                  CI_NOTE + f" Grey panel: the paper, {references.HARDWARE}.")


def fig_net_conns(points: pd.DataFrame, experiment: dict[str, Any]) -> Figure:
    """001: throughput (Mb/s) and cycles per KB by connections x write size, per mode (tables)."""
    col = "connections" if "connections" in points and points["connections"].notna().any() \
        else _users_column(points)
    size = "write_size" if "write_size" in points and points["write_size"].notna().any() \
        else "trace"
    ok = tables.good(points)
    parts = []
    source = ok["cycles_source"].dropna().iloc[0] if "cycles_source" in ok and \
        ok["cycles_source"].notna().any() else "not available"
    for mode in _modes(points, experiment):
        sub = ok[ok["mode"] == mode]
        cols = list(dict.fromkeys(sub[size]))
        head = "".join(f"<th>{_esc(c)}<br><span class=\"unit\">Mb/s · cycles/KB</span></th>"
                       for c in cols)
        body = []
        for conns, grp in sub.groupby(col, sort=True):
            cells = []
            for c in cols:
                g = grp[grp[size] == c]
                mbps = stats.mean_ci((g["mb_per_s"] * 8).tolist()) if "mb_per_s" in g \
                    else stats.Estimate(0, None)
                cyc = stats.mean_ci(g["server_cycles_per_kb"].tolist()) \
                    if "server_cycles_per_kb" in g else stats.Estimate(0, None)
                cells.append(f'<td class="num">{_ci_text(mbps)} · {_ci_text(cyc)}</td>')
            body.append(f"<tr><td class=\"l\">{conns:g}</td>{''.join(cells)}</tr>")
        parts.append(f"<h4>{_esc(mode)}</h4><div class=\"scroll\"><table class=\"modes\">"
                     f"<thead><tr><th class=\"l\">{_esc(col)}</th>{head}</tr></thead>"
                     f"<tbody>{''.join(body)}</tbody></table></div>")
    return Figure("net-conns", "Throughput and cycles/KB by connections (001)",
                  '<div class="family" data-family="net-conns">' + "".join(parts) + "</div>",
                  "Cells: mean [± 95 % CI half-width] throughput (Mb/s, from MB/s x 8) · server "
                  f"cycles per KB ({_esc(source)}). The paper's numbers (001, "
                  f"{references.HARDWARE}) are in the table below.")


def _ci_text(e: stats.Estimate) -> str:
    if e.mean is None:
        return "—"
    return _fmt(e.mean) + (f" ± {_fmt(e.half)}" if e.half is not None else "")


BUILDERS: dict[str, Callable[[pd.DataFrame, dict[str, Any]], Figure]] = {
    "dc-single": fig_dc_single,
    "dc-zipf": fig_dc_zipf,
    "dc-clients": fig_dc_clients,
    "dc-classes": fig_dc_classes,
    "dc-hybrid": fig_dc_hybrid,
    "pfs": fig_pfs,
    "net-conns": fig_net_conns,
}


def family_figure(points: pd.DataFrame, experiment: dict[str, Any],
                  family: str | None = None) -> Figure:
    """The family figure of a run (family from the experiment name unless given)."""
    fam = family or family_of(str(experiment.get("name") or ""), points)
    return BUILDERS[fam](points, experiment)
