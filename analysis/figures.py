"""Figures drawn from the tidy per-point table as the report spec's panels say, with matplotlib.

Every figure is rendered with the Agg backend to SVG and embedded inline, so the report stays
one self-contained HTML file: the root <svg> gets `class="chart ..."` (and `data-family` for the
family figure), every id inside is prefixed so several figures can share a page, and each bar
or line carries an id (`<figure>-p<panel>-bar-s<series>-c<category>`,
`<figure>-p<panel>-line-s<series>`) that tests and scripts can find. Panels (spec `figures`): bars, lines (means with 95 % CI whiskers) and tables;
beside them, one panel per quantity of the paper's numbers (spec `reference`), in grey.
"""

from __future__ import annotations

import html
import io
import math
import re
from dataclasses import dataclass, field
from typing import Any

import matplotlib
import pandas as pd
from matplotlib.figure import Figure as MplFigure
from matplotlib.ticker import FuncFormatter

from analysis import spec as specs
from analysis import stats, tables

matplotlib.use("Agg")

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")
REF_COLORS = ("#8a96a3", "#c5ccd3")
CI_NOTE = "Bars/points: mean over repetitions; whiskers: 95 % confidence interval (t, df = n − 1)."
RANGE_NOTE = "Bars: mean over repetitions; whiskers: min–max over repetitions."
PANEL_SIZE = (5.0, 3.5)  # inches per panel
RC: dict[Any, Any] = {"svg.fonttype": "none", "font.size": 8.5, "axes.titlesize": 9.5, "axes.labelsize": 8.5,
      "xtick.labelsize": 8, "ytick.labelsize": 8, "legend.fontsize": 7.5,
      "axes.spines.top": False, "axes.spines.right": False, "axes.edgecolor": "#9aa5b1",
      "axes.grid": True, "axes.grid.axis": "y", "grid.color": "#e6eaef",
      "axes.axisbelow": True, "font.family": "sans-serif"}


@dataclass
class Series:
    """The values of one line or set of bars: (x, mean, low, high) per x category or value."""

    name: str
    color: str
    points: list[tuple[Any, float | None, float | None, float | None]]
    dashed: bool = False  # outline the bars dashed (a client-bound repetition)


@dataclass
class Panel:
    """One axes: bars over ordered categories or lines over numeric x, one series per mode."""

    kind: str  # bars | lines
    title: str
    xlabel: str
    ylabel: str
    categories: list[Any]
    series: list[Series]
    logx: bool = False
    reference: bool = False  # the paper's numbers

    def has_data(self) -> bool:
        """At least one mean to draw."""
        return any(m is not None for s in self.series for _, m, _, _ in s.points)


@dataclass
class Figure:
    """A rendered figure: title, HTML body (inline SVG and tables), caption and its panels."""

    family: str
    title: str
    body: str
    caption: str
    panels: list[Panel] = field(default_factory=list)


def colors(names: list[str]) -> dict[str, str]:
    """One palette colour per name, in order."""
    return {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}


def fmt_value(v: float) -> str:
    """A value label: 9,754 / 12.3 / 0.42."""
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:,.1f}"
    return f"{v:,.2f}"


def plain(text: Any) -> str:
    """Text for matplotlib with '$' escaped (no mathtext from trace names)."""
    return str(text).replace("$", r"\$")


# --------------------------------------------------------------------------- data


def series_columns(points: pd.DataFrame, panel: dict[str, Any]) -> list[str]:
    """The panel's series columns, plus `mode` when modes vary and no other key holds it (so
    that modes are never pooled). An x column that follows from the mode (dc-cpus: the CPUs a
    mode gives) holds it: each of its values has one mode within a series."""
    cols = [c for c in panel["series"] if c in points]
    used = set(cols) | {panel.get("x"), panel.get("facet"), panel.get("rows"),
                        panel.get("columns")}
    if "mode" not in used and "mode" in points and points["mode"].nunique() > 1:
        keys = [c for c in (panel.get("x"), panel.get("facet"), *cols) if c and c in points]
        if not keys or points.groupby(keys, dropna=False)["mode"].nunique().max() > 1:
            cols.append("mode")
    return cols


def series_keys(points: pd.DataFrame, cols: list[str], spec: dict[str, Any],
                experiment: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Distinct combinations of the series columns, in the experiment's order."""
    if not cols:
        return [()]
    ordered = tables.sort_points(points, cols, spec, experiment)
    return list(dict.fromkeys(tuple(r) for r in ordered[cols].itertuples(index=False)))


def aggregate(values: list[float], whiskers: str = "ci") -> tuple[float | None, float | None,
                                                                   float | None]:
    """(mean, low, high): 95 % CI whiskers, or min-max with whiskers='range'."""
    e = stats.mean_ci(values)
    if e.mean is None:
        return None, None, None
    if whiskers == "range":
        finite = [v for v in values if v is not None and math.isfinite(v)]
        return e.mean, min(finite), max(finite)
    return e.mean, e.low, e.high


def panels_for(points: pd.DataFrame, panel: dict[str, Any], spec: dict[str, Any],
               experiment: dict[str, Any]) -> tuple[list[Panel], list[str]]:
    """The measured panels of one `figures` entry (one per facet value) and notes on what
    could not be drawn."""
    ok = tables.good(points)
    ok = ok[tables.matches(ok, panel.get("where"))] if panel.get("where") else ok
    x, y = panel["x"], panel["y"]
    missing = [c for c in (x, y, panel.get("facet")) if c and c not in ok]
    title = panel.get("title") or f"{specs.label(y)} by {specs.label(x)}"
    if missing:
        return [], [f"{title}: no column {', '.join(missing)} in this run"]
    facet = panel.get("facet")
    facets = tables.order_of(ok, facet, spec, experiment) if facet else [None]
    cols = series_columns(ok, panel)
    keys = series_keys(ok, cols, spec, experiment)
    names = [tables.describe(cols, k) or specs.label(y) for k in keys]
    palette = colors(names)
    out = []
    for fv in facets:
        sub = ok[ok[facet].map(lambda v, f=fv: tables.same(v, f))] if facet else ok
        if panel["type"] == "lines":
            xs = pd.to_numeric(sub[x], errors="coerce")
            sub = sub.assign(**{x: xs})[xs.notna()]
            cats = sorted(dict.fromkeys(sub[x].tolist()))
        else:
            cats = tables.order_of(sub, x, spec, experiment)
        series = []
        for key, name in zip(keys, names):
            rows = sub
            for c, v in zip(cols, key):
                # a boolean mask even when no row is left: pandas takes an empty object-typed
                # Series as a list of columns and would return a frame without any
                rows = rows[rows[c].map(lambda a, b=v: tables.same(a, b)).astype(bool)]
            if rows.empty:  # a series with no value on this x axis (a Zipf mix by size)
                continue
            pts = []
            for cat in cats:
                vals = rows[rows[x].map(lambda a, b=cat: tables.same(a, b))][y]
                mean, lo, hi = aggregate([v * panel["scale"] for v in vals.tolist()
                                          if v is not None])
                pts.append((cat, mean, lo, hi))
            series.append(Series(name, palette[name], pts))
        logx = panel["logx"]
        if logx == "auto":
            nums = [c for c in cats if isinstance(c, int | float)]
            logx = bool(nums) and min(nums) > 0 and max(nums) / min(nums) >= 8
        ftitle = title if fv is None else f"{title} — {specs.label(str(facet))} {tables.label(fv)}"
        unit = spec["primary"]["unit"] if y == spec["primary"]["column"] else ""
        ylabel = panel.get("ylabel") or (f"{specs.label(y)} ({unit})" if unit
                                         else specs.label(y))
        p = Panel(panel["type"], ftitle, panel.get("xlabel") or specs.label(x), ylabel,
                  cats, series, bool(logx))
        if p.has_data():
            out.append(p)
    if not out:
        return [], [f"{title}: no values to draw"]
    return out, []


def reference_panels(spec: dict[str, Any]) -> list[Panel]:
    """One grey bar panel per quantity of the paper's numbers (rows with at least one number)."""
    ref = spec.get("reference")
    if not ref:
        return []
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in ref["rows"]:
        if row["with"] is None and row["without"] is None:
            continue
        groups.setdefault((row["quantity"], row["unit"]), []).append(row)
    out = []
    for (quantity, unit), rows in groups.items():
        series = [Series(f"{ref['labels'][0]} (paper)", REF_COLORS[0],
                         [(r["x"], r["with"], None, None) for r in rows])]
        if any(r["without"] is not None for r in rows):
            series.append(Series(f"{ref['labels'][1]} (paper)", REF_COLORS[1],
                                 [(r["x"], r["without"], None, None) for r in rows]))
        out.append(Panel("bars", f"Paper: {ref['figure']} ({specs.HARDWARE})", "",
                         f"{quantity} ({unit})" if unit else quantity,
                         [r["x"] for r in rows], series, reference=True))
    return out


# --------------------------------------------------------------------------- drawing


def draw_bars(ax: Any, p: Panel, values: bool, n: int = 0) -> None:
    """Grouped bars: categories on x, one bar per series, whiskers low-high."""
    k = max(len(p.series), 1)
    where = {tables.label(c): n for n, c in enumerate(p.categories)}
    single = k > 1 and len(p.categories) == k and all(
        sum(m is not None for _, m, _, _ in s.points) <= 1 for s in p.series)
    width = 0.62 if single else min(0.8 / k, 0.42)
    for j, s in enumerate(p.series):
        labelled = False
        for cat, mean, lo, hi in s.points:
            if mean is None:
                continue
            i = where[tables.label(cat)]
            pos = i if single else i + (j - (k - 1) / 2) * width
            bar = ax.bar(pos, mean, width * 0.92, color=s.color,
                         label=None if labelled else s.name,
                         edgecolor="#333333" if s.dashed else s.color,
                         linestyle="--" if s.dashed else "-", linewidth=1.1 if s.dashed else 0)
            labelled = True
            bar.patches[0].set_gid(f"p{n}-{'ref' if p.reference else 'bar'}-s{j}-c{i}")
            if lo is not None and hi is not None and hi > lo:
                ax.errorbar(pos, mean, yerr=[[mean - lo], [hi - mean]], fmt="none",
                            ecolor="#1f2933", elinewidth=1, capsize=3)
            if values:
                ax.annotate(fmt_value(mean), (pos, hi if hi is not None else mean),
                            xytext=(0, 2), textcoords="offset points", ha="center",
                            va="bottom", fontsize=6.5, color="#1f2933")
    ax.set_xticks(range(len(p.categories)), [plain(tables.label(c)) for c in p.categories])
    if sum(len(tables.label(c)) for c in p.categories) > 48:
        ax.tick_params(axis="x", labelrotation=25)
        for t in ax.get_xticklabels():
            t.set_horizontalalignment("right")
    ax.set_xlim(-0.6, len(p.categories) - 0.4)


def draw_lines(ax: Any, p: Panel, n: int = 0) -> None:
    """Lines over numeric x with markers and whiskers (log2 x when the panel says so)."""
    for j, s in enumerate(p.series):
        pts = [(float(x), m, lo, hi) for x, m, lo, hi in s.points if m is not None]
        if not pts:
            continue
        (line,) = ax.plot([q[0] for q in pts], [q[1] for q in pts], marker="o", markersize=4,
                          color=s.color, linewidth=1.8, label=s.name)
        line.set_gid(f"p{n}-line-s{j}")
        for x, m, lo, hi in pts:
            if lo is not None and hi is not None and hi > lo:
                ax.errorbar(x, m, yerr=[[m - lo], [hi - m]], fmt="none", ecolor=s.color,
                            elinewidth=1, capsize=3)
    xs = [float(c) for c in p.categories]
    if p.logx:
        ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{int(v):,}" if v.is_integer() else f"{v:g}" for v in xs])
    ax.minorticks_off()


def thousands(v: float, _pos: Any) -> str:
    """Y tick label with thousands separators."""
    return f"{v:,.0f}" if abs(v) >= 10 or float(v).is_integer() else f"{v:,.2f}".rstrip("0")


def render_svg(panels: list[Panel], ident: str, css_class: str, attrs: dict[str, str],
               ncols: int = 3, size: tuple[float, float] = PANEL_SIZE) -> str:
    """Draw panels side by side (ncols per row) and return the inline <svg> element."""
    ncols = max(1, min(ncols, len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    with matplotlib.rc_context({**RC, "svg.hashsalt": ident}):
        fig = MplFigure(figsize=(size[0] * ncols, size[1] * nrows), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False)
        for n, ax in enumerate(axes.flat):
            if n >= len(panels):
                ax.set_visible(False)
                continue
            p = panels[n]
            bars = sum(1 for s in p.series for _, m, _, _ in s.points if m is not None)
            if p.kind == "lines":
                draw_lines(ax, p, n)
            else:
                draw_bars(ax, p, values=bars <= 24, n=n)
            ax.set_title(plain(p.title), loc="left", fontweight="bold")
            ax.set_xlabel(plain(p.xlabel + (" (log scale)" if p.logx else "")))
            ax.set_ylabel(plain(p.ylabel))
            ax.yaxis.set_major_formatter(FuncFormatter(thousands))
            top = max([hi if hi is not None else m for s in p.series
                       for _, m, _, hi in s.points if m is not None] + [0.0])
            inside = len(p.series) <= 3 and max(len(s.name) for s in p.series) <= 18
            ax.set_ylim(0, top * (1.3 if inside else 1.12) or 1.0)
            if inside:
                ax.legend(loc="upper left", ncol=len(p.series), frameon=True, framealpha=0.85,
                          edgecolor="none")
            else:
                ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Creator": None, "Date": None,
                                                  "Format": None, "Type": None})
    return inline(buf.getvalue(), ident, css_class, attrs)


def inline(svg: str, ident: str, css_class: str, attrs: dict[str, str]) -> str:
    """matplotlib's SVG file as an element for an HTML page: no XML prolog, namespaces,
    metadata or global style; ids prefixed with `ident`; size in px; class and attributes."""
    svg = svg[svg.index("<svg"):]
    svg = re.sub(r"<metadata>.*?</metadata>", "", svg, flags=re.S)
    svg = re.sub(r'<style type="text/css">.*?</style>', "", svg, flags=re.S)
    svg = svg.replace(' xmlns:xlink="http://www.w3.org/1999/xlink"', "")
    svg = svg.replace(' xmlns="http://www.w3.org/2000/svg"', "").replace("xlink:href", "href")
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{ident}-{m.group(1)}"', svg)
    svg = re.sub(r"url\(#([^)]+)\)", lambda m: f"url(#{ident}-{m.group(1)})", svg)
    svg = re.sub(r'href="#([^"]+)"', lambda m: f'href="#{ident}-{m.group(1)}"', svg)

    def px(m: re.Match[str]) -> str:
        return f'{m.group(1)}="{float(m.group(2)) * 4 / 3:.0f}"'

    head, rest = svg.split(">", 1)
    head = re.sub(r'\b(width|height)="([0-9.]+)pt"', px, head)
    extra = "".join(f' {k}="{html.escape(v)}"' for k, v in attrs.items())
    head = head.replace("<svg", f'<svg class="{css_class}" role="img"{extra}', 1)
    return head + ">" + rest


def block_figure(series: list[tuple[str, list[float], int]], ident: str) -> str:
    """The per-block diagnostic of a precision run: for each comparison (title, its blocks'
    effects in % in run order, the first blocks that planned the run), the effect of every
    block against its number, the first blocks hollow, the mean dashed; the title carries what
    the caller says (lag-1 autocorrelation, drift)."""
    ncols = max(1, min(3, len(series)))
    nrows = math.ceil(len(series) / ncols)
    with matplotlib.rc_context({**RC, "svg.hashsalt": ident}):
        fig = MplFigure(figsize=(4.2 * ncols, 2.6 * nrows), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False)
        for n, ax in enumerate(axes.flat):
            if n >= len(series):
                ax.set_visible(False)
                continue
            title, effects, first = series[n]
            xs = list(range(1, len(effects) + 1))
            ax.plot(xs, effects, color="#9aa5b1", linewidth=0.8, gid=f"blocks-{n}-line")
            ax.scatter(xs[:first], effects[:first], facecolors="none", edgecolors=PALETTE[0],
                       s=18, label="first blocks (plan)")
            ax.scatter(xs[first:], effects[first:], color=PALETTE[1], s=18,
                       label="later blocks (spread)")
            if effects:
                ax.axhline(sum(effects) / len(effects), color="#555", linestyle="--",
                           linewidth=0.8)
            ax.set_title(plain(title), loc="left", fontsize=8.5)
            ax.set_xlabel("block (run order)")
            ax.set_ylabel("effect in the block, %")
            if n == 0:
                ax.legend(loc="best", frameon=False)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Creator": None, "Date": None,
                                                  "Format": None, "Type": None})
    return inline(buf.getvalue(), ident, "chart blocks", {"data-figure": "blocks"})


# --------------------------------------------------------------------------- tables


def ci_text(e: stats.Estimate) -> str:
    """'812 ± 50.8' (mean ± 95 % CI half-width) or '—'."""
    if e.mean is None:
        return "—"
    return fmt_value(e.mean) + (f" ± {fmt_value(e.half)}" if e.half is not None else "")


def table_panel(points: pd.DataFrame, panel: dict[str, Any], spec: dict[str, Any],
                experiment: dict[str, Any]) -> tuple[str, list[str]]:
    """A `table` panel as HTML: per series value, rows x columns, each cell the values' means
    ± 95 % CI half-widths (e.g. Mb/s · cycles/KB by connections x write size, per mode)."""
    ok = tables.good(points)
    ok = ok[tables.matches(ok, panel.get("where"))] if panel.get("where") else ok
    rcol, ccol = panel["rows"], panel["columns"]
    missing = [c for c in (rcol, ccol) if c not in ok]
    title = panel.get("title") or f"{specs.label(rcol)} x {specs.label(ccol)}"
    if missing:
        return "", [f"{title}: no column {', '.join(missing)} in this run"]
    cols = series_columns(ok, panel)
    unit = " · ".join(html.escape(v["label"]) for v in panel["values"])
    parts = [f"<h4>{html.escape(title)}</h4>"]
    for key in series_keys(ok, cols, spec, experiment):
        sub = ok
        for c, v in zip(cols, key):
            sub = sub[sub[c].map(lambda a, b=v: tables.same(a, b)).astype(bool)]
        if sub.empty:
            continue
        heads = tables.order_of(sub, ccol, spec, experiment)
        head = "".join(f'<th>{html.escape(tables.label(c))}<br><span class="unit">{unit}'
                       "</span></th>" for c in heads)
        body = []
        for rv in tables.order_of(sub, rcol, spec, experiment):
            cells = []
            for cv in heads:
                g = sub[sub[rcol].map(lambda a, b=rv: tables.same(a, b))
                        & sub[ccol].map(lambda a, b=cv: tables.same(a, b))]
                vals = []
                for v in panel["values"]:
                    scale = v.get("scale") or 1.0
                    vals.append(ci_text(stats.mean_ci((g[v["column"]] * scale).tolist()))
                                if v["column"] in g else "—")
                cells.append(f'<td class="num">{" · ".join(vals)}</td>')
            body.append(f'<tr><td class="l">{html.escape(tables.label(rv))}</td>'
                        f"{''.join(cells)}</tr>")
        name = tables.describe(cols, key)
        parts.append((f'<p class="meta"><b>{html.escape(name)}</b></p>' if name else "")
                     + '<div class="scroll"><table class="modes"><thead><tr>'
                     f'<th class="l">{html.escape(specs.label(rcol))}</th>{head}</tr></thead>'
                     f"<tbody>{''.join(body)}</tbody></table></div>")
    if len(parts) == 1:  # no series had a row: say so, as the charts do
        return "", [f"{title}: no values to draw"]
    return "".join(parts), []


# --------------------------------------------------------------------------- figures


def family_figure(points: pd.DataFrame, spec: dict[str, Any],
                  experiment: dict[str, Any] | None = None) -> Figure:
    """The spec's figure: its panels measured here, and the paper's numbers beside them."""
    experiment = experiment or {}
    fam = spec["family"]
    drawn: list[Panel] = []
    notes: list[str] = []
    htmls: list[str] = []
    for panel in spec["figures"]:
        if panel["type"] == "table":
            body, why = table_panel(points, panel, spec, experiment)
            htmls.append(body)
        else:
            found, why = panels_for(points, panel, spec, experiment)
            drawn += found
        notes += why
    refs = reference_panels(spec)
    svg = ""
    if drawn or refs:
        svg = render_svg(drawn + refs, f"fig-{re.sub(r'[^a-z0-9]+', '-', fam.lower())}",
                         "chart family", {"data-family": fam, "aria-label": spec["title"]})
    if not (svg or any(htmls)):
        htmls.append('<p class="note">Nothing to draw.</p>')
    body = (f'<div class="family" data-family="{html.escape(fam)}">{svg}{"".join(htmls)}'
            "</div>")
    caption = " ".join(
        [CI_NOTE if drawn else "Cells: mean ± 95 % CI half-width over repetitions."]
        + ([html.escape(spec["description"])] if spec["description"] else [])
        + ([f"Grey bars: the paper's numbers ({html.escape(spec['reference']['figure'])}), "
            f"{specs.HARDWARE}: compare the direction and size of effects, not values."]
           if refs else [])
        + [f"Not drawn: {html.escape(n)}." for n in notes])
    return Figure(fam, spec["title"], body, caption, drawn + refs)


def group_chart(points: pd.DataFrame, spec: dict[str, Any], experiment: dict[str, Any],
                rest: list[str], modes: list[str], ident: str) -> str:
    """The chart of one per-group section: the primary column and the first CPU cost, bars by
    mode (and by the factors the section does not fix), min-max whiskers, dashed outline where
    a repetition was client-bound."""
    ok = tables.good(points)
    costs = [c for c in spec["costs"] if c["column"] in ok and ok[c["column"]].notna().any()
             and tables.matches(ok, c.get("where")).all()]
    columns = [spec["primary"]] + costs[:1]
    palette = colors(modes)
    cats = list(dict.fromkeys(tables.describe(rest, k) for k, _ in
                              tables.groups(tables.sort_points(ok, rest, spec, experiment),
                                            rest))) if rest else []
    panels = []
    for item in columns:
        col = item["column"]
        series = []
        for mode in modes:
            rows = ok[ok["mode"] == mode]
            pts = []
            for cat in (cats or [mode]):
                sub = rows[[tables.describe(rest, tuple(r)) == cat
                            for r in rows[rest].itertuples(index=False)]] if rest else rows
                vals = sub[col].tolist() if col in sub else []
                pts.append((cat, *aggregate(vals, "range")))
            bound = "client_bound" in rows and bool((rows["client_bound"] == True).any())  # noqa: E712
            series.append(Series(mode, palette[mode], pts, dashed=bound))
        unit = item.get("unit") or (spec["primary"]["unit"] if item is spec["primary"] else "")
        ylabel = f"{item['label']} ({unit})" if unit else item["label"]
        title = ("Throughput" if item is spec["primary"] else "CPU cost") + f": {item['label']}"
        p = Panel("bars", title, "", ylabel, cats or modes, series)
        if p.has_data():
            panels.append(p)
    if not panels:
        return ""
    return render_svg(panels, ident, "chart group", {"aria-label": "per-group chart"}, ncols=2,
                      size=(4.6, 3.1))
