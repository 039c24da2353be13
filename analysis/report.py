"""Render one run directory (summary.csv + manifest.json) as a self-contained HTML report."""

from __future__ import annotations

import html
import json
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import figures, load, references, stats, tables

TIER_PREFIX = "cpu_s_"
TEXT_COLUMNS = frozenset({"point", "trace", "mode", "engine", "error"})
BOOL_COLUMNS = frozenset({"client_bound"})
CLIENT_BOUND_ADVICE = (
    "the load generator used ≥85 % of its CPU allowance: TPS is the generator's limit, "
    "not the servers'; give it more cores/processes or use a native engine"
)
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
MISSING = "—"

Row = dict[str, Any]


# --------------------------------------------------------------------------- loading


def _convert(column: str, raw: str | None) -> Any:
    text = (raw or "").strip()
    if column in TEXT_COLUMNS:
        return text
    if not text:
        return None
    if column in BOOL_COLUMNS:
        return _as_bool(text)
    try:
        return int(text)
    except ValueError:
        pass
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else None


def load_summary(path: Path) -> list[Row]:
    """Parse summary.csv into dicts: numbers as int/float, client_bound as bool, blanks as None."""
    return [{name: _convert(name, value) for name, value in raw.items()}
            for raw in load.read_summary_rows(path)]


# --------------------------------------------------------------------------- values


def _as_bool(value: Any) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return bool(value)
    text = str(value or "").strip().lower()
    if text in ("true", "yes", "1"):
        return True
    if text in ("false", "no", "0"):
        return False
    return None


def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    else:
        try:
            number = float(str(value).strip())
        except ValueError:
            return None
    return number if math.isfinite(number) else None


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _present(column: str, value: Any) -> bool:
    if column in TEXT_COLUMNS:
        return bool(_text(value))
    if column in BOOL_COLUMNS:
        return _as_bool(value) is not None
    if isinstance(value, float):
        return math.isfinite(value)
    return bool(_text(value))


def _columns(rows: Iterable[Row]) -> list[str]:
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            if isinstance(key, str):
                seen.setdefault(key, None)
    return list(seen)


def _first_seen(rows: Iterable[Row], column: str) -> list[str]:
    return list(dict.fromkeys(_text(row.get(column)) for row in rows))


def _tiers(columns: Iterable[str]) -> list[str]:
    return [c for c in columns if c.startswith(TIER_PREFIX) and len(c) > len(TIER_PREFIX)]


# --------------------------------------------------------------------------- aggregation


@dataclass
class Group:
    """The repetitions of one trace × mode; failed points are kept but excluded from numbers."""

    trace: str
    mode: str
    rows: list[Row] = field(default_factory=list)

    @property
    def repetitions(self) -> int:
        """Number of points in the group, failed ones included."""
        return len(self.rows)

    @property
    def failed(self) -> int:
        """Number of points that carry an error message."""
        return sum(1 for row in self.rows if _text(row.get("error")))

    @property
    def client_bound(self) -> int:
        """Number of points whose load generator was the bottleneck."""
        return sum(1 for row in self.rows if _as_bool(row.get("client_bound")))

    def values(self, column: str) -> list[float]:
        """Present numeric values of a column over the non-failed repetitions."""
        good = (row for row in self.rows if not _text(row.get("error")))
        return [v for v in (_num(row.get(column)) for row in good) if v is not None]

    def mean(self, column: str) -> float | None:
        """Mean of a column over repetitions, None when no value is present."""
        values = self.values(column)
        return sum(values) / len(values) if values else None

    def low_high(self, column: str) -> tuple[float, float] | None:
        """Minimum and maximum of a column over repetitions."""
        values = self.values(column)
        return (min(values), max(values)) if values else None

    def ci(self, column: str) -> stats.Estimate:
        """Mean and 95 % confidence interval (t, df = n - 1) of a column over repetitions."""
        return stats.mean_ci(self.values(column))

    def half_range(self, column: str) -> float | None:
        """Half the min–max range of a column, (max − min) / 2."""
        span = self.low_high(column)
        return (span[1] - span[0]) / 2 if span else None


def aggregate(rows: list[Row]) -> dict[tuple[str, str], Group]:
    """Group rows by (trace, mode): traces and modes in order of first appearance."""
    groups: dict[tuple[str, str], Group] = {}
    for row in rows:
        key = (_text(row.get("trace")), _text(row.get("mode")))
        groups.setdefault(key, Group(*key)).rows.append(row)
    traces, modes = _first_seen(rows, "trace"), _first_seen(rows, "mode")
    return {(t, m): groups[(t, m)] for t in traces for m in modes if (t, m) in groups}


# --------------------------------------------------------------------------- formatting


def _esc(value: Any) -> str:
    return html.escape(_text(value))


def _fixed(digits: int) -> Callable[[float], str]:
    return lambda v: f"{v:,.{digits}f}"


def _formatter(column: str) -> Callable[[float], str]:
    if column == "tps" or "_us_" in column or column.endswith("_pct"):
        return _fixed(1)
    if column.endswith("_ms") or column.startswith(TIER_PREFIX) or column == "mb_per_s":
        return _fixed(2)
    return lambda v: f"{int(v):,}" if float(v).is_integer() else f"{v:,.3f}".rstrip("0")


def _fmt(column: str, value: float | None) -> str:
    return MISSING if value is None else _formatter(column)(value)


def _cell(column: str, value: Any) -> str:
    """One per-point table cell: escaped, numbers formatted and right-aligned."""
    if column in BOOL_COLUMNS:
        flag = _as_bool(value)
        if flag is None:
            return f'<td class="missing">{MISSING}</td>'
        return '<td class="flag">yes</td>' if flag else "<td>no</td>"
    if column in TEXT_COLUMNS:
        text = _text(value)
        if not text:
            return "<td></td>" if column == "error" else f'<td class="missing">{MISSING}</td>'
        css = ' class="err"' if column == "error" else ""
        return f"<td{css}>{_esc(text)}</td>"
    number = _num(value)
    if number is None:
        text = _esc(value)
        return f"<td>{text}</td>" if text else f'<td class="missing">{MISSING}</td>'
    return f'<td class="num">{_fmt(column, number)}</td>'


def _header(column: str) -> str:
    return f'<th title="{_esc(column)}">{_esc(column).replace("_", "_<wbr>")}</th>'


# --------------------------------------------------------------------------- charts


@dataclass
class Bar:
    """One bar of a panel: mean value, min–max whisker, colour, and optional emphasis."""

    label: str
    value: float | None
    low: float | None = None
    high: float | None = None
    color: str = PALETTE[0]
    dashed: bool = False


def _nice_step(span: float, ticks: int = 5) -> float:
    raw = span / ticks
    magnitude = 10 ** math.floor(math.log10(raw))
    for mult in (1, 2, 2.5, 5, 10):
        if raw <= mult * magnitude:
            return mult * magnitude
    return 10 * magnitude


def _tick_label(value: float, step: float) -> str:
    digits = next((d for d in range(7) if abs(round(step, d) - step) < 1e-9 * step), 6)
    return f"{value:,.{digits}f}"


def _wrap(label: str, fits: int) -> list[str]:
    """Split an axis label into at most two lines at a separator, truncating the rest."""
    fits = max(fits, 4)
    if len(label) <= fits:
        return [label]
    cut = max((label.rfind(sep, 0, fits) for sep in "-+_ /"), default=-1)
    first, rest = (label[: cut + 1], label[cut + 1 :]) if cut > 0 else (label[:fits], label[fits:])
    return [first, rest if len(rest) <= fits else rest[: fits - 1] + "…"]


def bar_panel(
    title: str,
    axis_label: str,
    bars: list[Bar],
    fmt: Callable[[float], str],
    width: int = 430,
    height: int = 270,
) -> str:
    """Draw one labelled bar panel (own y axis, min–max whiskers, values on bars) as an SVG <g>."""
    left, right, top, bottom = 66, 14, 30, 40
    plot_w, plot_h = width - left - right, height - top - bottom
    tallest = max([b.high if b.high is not None else b.value or 0 for b in bars] + [0])
    step = _nice_step(tallest * 1.15 if tallest > 0 else 1)
    y_max = math.ceil((tallest * 1.15 if tallest > 0 else 1) / step) * step

    def y(v: float) -> float:
        """Map a data value to a pixel row."""
        return top + plot_h * (1 - v / y_max)

    out = [f'<text class="ptitle" x="{left}" y="16">{html.escape(title)}</text>']
    ticks = int(round(y_max / step))
    for i in range(ticks + 1):
        ty = y(i * step)
        out.append(
            f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{ty:.1f}" ' f'y2="{ty:.1f}"/>'
        )
        out.append(
            f'<text class="tick" x="{left - 6}" y="{ty + 3.5:.1f}" text-anchor="end">'
            f"{_tick_label(i * step, step)}</text>"
        )
    mid = top + plot_h / 2
    out.append(
        f'<text class="axis" transform="translate(14 {mid:.1f}) rotate(-90)" '
        f'text-anchor="middle">{html.escape(axis_label)}</text>'
    )
    slot = plot_w / max(len(bars), 1)
    bar_w = min(64.0, slot * 0.62)
    for i, bar in enumerate(bars):
        cx = left + slot * (i + 0.5)
        lines = "".join(
            f'<tspan x="{cx:.1f}" dy="{13 if n else 0}">{html.escape(part)}</tspan>'
            for n, part in enumerate(_wrap(bar.label, int(slot / 6.5)))
        )
        out.append(
            f'<text class="xlab" x="{cx:.1f}" y="{top + plot_h + 16}" text-anchor="middle">'
            f"<title>{html.escape(bar.label)}</title>{lines}</text>"
        )
        if bar.value is None:
            out.append(
                f'<text class="tick" x="{cx:.1f}" y="{y(0) - 6:.1f}" '
                f'text-anchor="middle">n/a</text>'
            )
            continue
        by = y(max(bar.value, 0))
        dash = ' stroke="#333" stroke-dasharray="4 3" stroke-width="1.2"' if bar.dashed else ""
        out.append(
            f'<rect x="{cx - bar_w / 2:.1f}" y="{by:.1f}" width="{bar_w:.1f}" '
            f'height="{y(0) - by:.1f}" fill="{bar.color}" rx="2"{dash}>'
            f"<title>{html.escape(bar.label)}: {fmt(bar.value)}</title></rect>"
        )
        label_y = by
        if bar.low is not None and bar.high is not None and bar.high > bar.low:
            y_lo, y_hi = y(bar.low), y(bar.high)
            label_y = min(by, y_hi)
            out.append(
                f'<path class="whisker" d="M{cx:.1f} {y_lo:.1f}V{y_hi:.1f}'
                f'M{cx - 7:.1f} {y_lo:.1f}h14M{cx - 7:.1f} {y_hi:.1f}h14"/>'
            )
        out.append(
            f'<text class="val" x="{cx:.1f}" y="{label_y - 5:.1f}" '
            f'text-anchor="middle">{fmt(bar.value)}</text>'
        )
    out.append(
        f'<line class="base" x1="{left}" x2="{left + plot_w}" y1="{y(0):.1f}" ' f'y2="{y(0):.1f}"/>'
    )
    return "<g>" + "".join(out) + "</g>"


def _trace_chart(groups: list[Group], colors: dict[str, str]) -> str:
    panels = [
        ("Throughput", "TPS (requests / s)", "tps"),
        ("Host CPU cost per data moved", "host CPU (µs / KB)", "host_cpu_us_per_kb"),
    ]
    width, height, gap = 430, 270, 30
    parts = []
    for i, (title, axis, column) in enumerate(panels):
        bars = []
        for g in groups:
            span = g.low_high(column)
            bars.append(
                Bar(
                    g.mode,
                    g.mean(column),
                    *(span or (None, None)),
                    color=colors.get(g.mode, PALETTE[0]),
                    dashed=g.client_bound > 0,
                )
            )
        panel = bar_panel(title, axis, bars, _formatter(column), width, height)
        parts.append(f'<g transform="translate({i * (width + gap)} 0)">{panel}</g>')
    total = len(panels) * width + (len(panels) - 1) * gap
    return (
        f'<svg class="chart" role="img" width="{total}" height="{height}" '
        f'viewBox="0 0 {total} {height}">{"".join(parts)}</svg>'
    )


# --------------------------------------------------------------------------- sections


def _point_ref(row: Row) -> str:
    bits = [_text(row.get(c)) for c in ("trace", "mode")]
    rep = _num(row.get("repetition"))
    where = " / ".join(b for b in bits if b) + (f", rep {int(rep)}" if rep is not None else "")
    point = _esc(row.get("point")) or "?"
    return f'<b>{point}</b> <span class="muted">({html.escape(where)})</span>'


def _warnings(rows: list[Row], columns: list[str]) -> str:
    bound, problems = [], []
    for row in rows:
        if _as_bool(row.get("client_bound")):
            gen = _num(row.get("generator_cpu_pct"))
            extra = f" — generator CPU {gen:.1f} %" if gen is not None else ""
            bound.append(f"<li>{_point_ref(row)}{extra}</li>")
        issues = []
        if _text(row.get("error")):
            issues.append(f"failed: {_esc(row.get('error'))}")
        errors = _num(row.get("errors"))
        if errors:
            issues.append(f"{errors:,.0f} request errors")
        missing = [c for c in columns if c != "error" and not _present(c, row.get(c))]
        if missing and _text(row.get("error")):
            issues.append(f"{len(missing)} values missing")
        elif missing:
            issues.append("missing " + ", ".join(f"<code>{_esc(c)}</code>" for c in missing))
        if issues:
            problems.append(f"<li>{_point_ref(row)}: {'; '.join(issues)}</li>")
    parts = []
    if bound:
        parts.append(
            f'<div class="warn"><h3>Client-bound points ({len(bound)})</h3>'
            f"<p>{html.escape(CLIENT_BOUND_ADVICE[0].upper() + CLIENT_BOUND_ADVICE[1:])}."
            f"</p><ul>{''.join(bound)}</ul></div>"
        )
    if problems:
        parts.append(
            f'<div class="warn bad"><h3>Points with errors or missing values '
            f"({len(problems)})</h3><ul>{''.join(problems)}</ul></div>"
        )
    if not rows:
        parts.append(
            '<div class="warn bad"><h3>No points</h3>' "<p>summary.csv has no rows.</p></div>"
        )
    if not parts:
        parts.append(
            '<div class="ok">No warnings: no client-bound points, failed points, request '
            "errors or missing values.</div>"
        )
    return "".join(parts)


MODE_METRICS = [
    ("p50_ms", "p50 ms"),
    ("p99_ms", "p99 ms"),
    ("server_cpu_us_per_req", "server CPU µs/req"),
    ("server_cpu_us_per_kb", "server CPU µs/KB"),
    ("host_cpu_us_per_kb", "host CPU µs/KB"),
    ("mb_per_s", "MB/s"),
]


def _mode_table(groups: list[Group], tiers: list[str], colors: dict[str, str]) -> str:
    head = [
        '<th class="l">mode</th>',
        '<th title="repetitions">reps</th>',
        '<th title="tps">TPS<br><span class="unit">mean ± 95 % CI</span></th>',
    ]
    head += [f'<th title="{c}">{html.escape(label)}</th>' for c, label in MODE_METRICS]
    head += [
        f'<th title="{_esc(t)}"><span class="nw">CPU s</span><br>'
        f'<span class="unit">{_esc(t[len(TIER_PREFIX):])}</span></th>'
        for t in tiers
    ]
    head += [
        '<th title="generator_cpu_pct">generator CPU %</th>',
        '<th title="client_bound">client-bound</th>',
    ]
    body = []
    for g in groups:
        tps, half = g.mean("tps"), g.ci("tps").half
        spread = f' <span class="pm">± {half:,.1f}</span>' if half is not None else ""
        tps_text = MISSING if tps is None else f"{tps:,.1f}{spread}"
        reps = str(g.repetitions) + (
            f' <span class="errtxt">({g.failed} failed)</span>' if g.failed else ""
        )
        cells = [
            f'<td class="l"><span class="sw" style="background:{colors[g.mode]}"></span>'
            f"{_esc(g.mode)}</td>",
            f'<td class="num">{reps}</td>',
            f'<td class="num">{tps_text}</td>',
        ]
        cells += [f'<td class="num">{_mean_ci(c, g)}</td>' for c, _ in MODE_METRICS]
        cells += [f'<td class="num">{_fmt(t, g.mean(t))}</td>' for t in tiers]
        gen = _fmt("generator_cpu_pct", g.mean("generator_cpu_pct"))
        cells.append(f'<td class="num">{gen}</td>')
        bound = f"{g.client_bound} / {g.repetitions}"
        cells.append(
            f'<td class="num flag">{bound}</td>'
            if g.client_bound
            else f'<td class="num">{bound}</td>'
        )
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (
        f'<div class="scroll"><table class="modes"><thead><tr>{"".join(head)}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
        '<p class="note">Means over repetitions (failed points excluded); ± is the half-width '
        "of the 95 % confidence interval (Student t, df = n − 1); none with one repetition.</p>"
    )


def _mean_ci(column: str, g: Group) -> str:
    e = g.ci(column)
    if e.mean is None:
        return MISSING
    half = f'<br><span class="pm">± {_fmt(column, e.half)}</span>' if e.half is not None else ""
    return _fmt(column, e.mean) + half


def _distinct(rows: list[Row], column: str) -> str:
    values = [v for v in _first_seen(rows, column) if v]
    return ", ".join(values) if values else MISSING


def _trace_section(
    index: int,
    trace: str,
    groups: list[Group],
    tiers: list[str],
    colors: dict[str, str],
    extra: str = "",
) -> str:
    rows = [row for g in groups for row in g.rows]
    plural = "" if len(rows) == 1 else "s"
    meta = (
        f"{len(rows)} point{plural} · engine {html.escape(_distinct(rows, 'engine'))} · "
        f"users {html.escape(_distinct(rows, 'users'))} · "
        f"window {html.escape(_distinct(rows, 'window_s'))} s"
    )
    dashed = any(g.client_bound for g in groups)
    caption = (
        "Bars: mean over repetitions; whiskers: min–max over repetitions (the 95 % CIs are in "
        "the table)." + (" Dashed outline: at least one repetition was client-bound." if dashed
                         else "")
    )
    return (
        f'<section class="trace" id="trace-{index}"><h2><span class="muted">Trace</span> '
        f'{_esc(trace) or MISSING}</h2><p class="meta">{meta}</p>'
        f"{_mode_table(groups, tiers, colors)}"
        f"<figure>{_trace_chart(groups, colors)}<figcaption>{caption}</figcaption></figure>"
        f"{extra}</section>"
    )


def _points_table(rows: list[Row], columns: list[str], per_table: int = 14) -> str:
    ident = [c for c in ("point", "trace", "mode", "repetition") if c in columns]
    rest = [c for c in columns if c not in ident]
    chunks = [rest[i : i + per_table] for i in range(0, len(rest), per_table)] or [[]]
    tables = []
    for chunk in chunks:
        cols = ident + chunk
        body = []
        for row in rows:
            classes = []
            if _as_bool(row.get("client_bound")):
                classes.append("cb")
            if _text(row.get("error")) or _num(row.get("errors")):
                classes.append("bad")
            attr = f' class="{" ".join(classes)}"' if classes else ""
            body.append(f"<tr{attr}>{''.join(_cell(c, row.get(c)) for c in cols)}</tr>")
        tables.append(
            f'<div class="scroll"><table class="points"><thead><tr>'
            f"{''.join(_header(c) for c in cols)}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table></div>"
        )
    return "".join(tables)


def _value_html(value: Any, depth: int = 0) -> str:
    if isinstance(value, dict):
        if not value:
            return '<span class="muted">{}</span>'
        if depth >= 4:
            return f"<pre>{html.escape(json.dumps(value, indent=2, default=str))}</pre>"
        items = "".join(
            f"<tr><th>{_esc(k)}</th><td>{_value_html(v, depth + 1)}</td></tr>"
            for k, v in value.items()
        )
        return f'<table class="kv">{items}</table>'
    if isinstance(value, list):
        if all(isinstance(v, str | int | float | bool) or v is None for v in value):
            return (
                ", ".join(_esc(json.dumps(v) if not isinstance(v, str) else v) for v in value)
                or '<span class="muted">[]</span>'
            )
        return f"<pre>{html.escape(json.dumps(value, indent=2, default=str))}</pre>"
    if value is None or isinstance(value, bool):
        return f"<code>{json.dumps(value)}</code>"
    return _esc(value)


def _provenance(manifest: dict[str, Any]) -> str:
    items = {k: v for k, v in manifest.items() if k != "points"}
    points = manifest.get("points")
    count = len(points) if isinstance(points, dict | list) else 0
    rows = "".join(
        f"<tr><th>{_esc(k)}</th><td>{_value_html(v, 1)}</td></tr>" for k, v in items.items()
    )
    rows += f"<tr><th>points</th><td>{count} points in the manifest</td></tr>"
    return f'<table class="kv top">{rows}</table>'


CSS = """
*{box-sizing:border-box}
body{margin:0;background:#f4f6f8;color:#1f2933;font:14px/1.45 system-ui,-apple-system,"Segoe UI",
Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1240px;margin:0 auto;padding:28px 28px 48px}
header h1{margin:0 0 4px;font-size:26px;letter-spacing:-.01em}
.sub{color:#52606d;margin:0 0 8px;font-size:13px}
.desc{margin:8px 0 18px;max-width:900px}
h2{font-size:19px;margin:0 0 2px}h3{font-size:14px;margin:0 0 6px}
.muted{color:#7b8794;font-weight:400}
section,.card{background:#fff;border:1px solid #dde3ea;border-radius:8px;padding:18px 20px;
margin:0 0 20px;box-shadow:0 1px 2px rgba(16,24,40,.04)}
.meta{color:#52606d;font-size:12.5px;margin:0 0 12px}
.warn{background:#fff8e6;border:1px solid #f5d48a;border-left:5px solid #e5a50a;border-radius:6px;
padding:12px 16px;margin:0 0 14px}
.warn.bad{background:#fdf0f0;border-color:#f2b8b5;border-left-color:#c62828}
.warn p{margin:0 0 6px}.warn ul{margin:0;padding-left:20px}
.ok{background:#eef8f1;border:1px solid #b7e1c3;border-left:5px solid #2e7d32;border-radius:6px;
padding:10px 16px;margin:0 0 14px}
.scroll{overflow-x:auto}
table{border-collapse:collapse;font-variant-numeric:tabular-nums}
table.modes,table.points{width:100%;font-size:12.5px}
table.points{font-size:11.5px;margin-bottom:14px}
.modes th,.modes td,.points th,.points td{padding:5px 8px;border-bottom:1px solid #e4e8ee;
text-align:right;white-space:nowrap}
.modes thead th,.points thead th{background:#f3f5f8;color:#3e4c59;font-weight:600;
border-bottom:2px solid #cbd2d9;vertical-align:bottom;white-space:normal}
.points th,.points td{padding:4px 5px}
.modes th.l,.modes td.l{text-align:left}
.modes td.l{white-space:normal;min-width:110px;max-width:220px}
.points td:nth-child(-n+3),.points th:nth-child(-n+3){text-align:left}
tbody tr:hover{background:#f8fafc}
.unit{font-weight:400;color:#7b8794}
.pm{color:#7b8794}
.nw{white-space:nowrap}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:7px}
.flag{color:#9a6700;font-weight:600}
.errtxt,.err{color:#b42318}
.missing{color:#b42318;text-align:center!important}
tr.cb{background:#fffbeb}tr.bad{background:#fef3f2}
.note{color:#7b8794;font-size:12px;margin:6px 0 0}
figure{margin:14px 0 0}
figcaption{color:#7b8794;font-size:12px;margin-top:2px}
svg.chart{max-width:100%;height:auto;display:block}
svg text{font-family:inherit;fill:#3e4c59}
svg .ptitle{font-size:13px;font-weight:600;fill:#1f2933}
svg .tick{font-size:10.5px;fill:#7b8794}
svg .axis{font-size:11.5px}
svg .xlab{font-size:11.5px}
svg .val{font-size:11px;font-weight:600;fill:#1f2933}
svg .grid{stroke:#e6eaef;stroke-width:1}
svg .base{stroke:#9aa5b1;stroke-width:1}
svg .whisker{stroke:#1f2933;stroke-width:1.3;fill:none}
table.kv{font-size:12.5px;border-collapse:collapse}
table.kv th{text-align:left;vertical-align:top;color:#52606d;font-weight:600;padding:4px 14px 4px 0;
white-space:nowrap}
table.kv td{padding:4px 0;vertical-align:top;word-break:break-all}
table.kv table.kv{margin:-2px 0}
table.kv.top>tbody>tr>th,table.kv.top>tbody>tr>td{border-top:1px solid #e4e8ee;padding-top:7px;
padding-bottom:7px}
pre{margin:0;font-size:12px;background:#f7f9fb;border:1px solid #e4e8ee;border-radius:4px;
padding:8px;white-space:pre-wrap}
code{font-size:12px}
footer{color:#9aa5b1;font-size:12px;text-align:center}
h3.refh,h3.costh{margin:16px 0 6px}
.hw{background:#eef1f4;color:#52606d;border-radius:4px;padding:1px 7px;font-size:11.5px;
font-weight:600;margin-left:6px}
table.ref td.l{white-space:normal}
.okt{color:#2e7d32;font-size:11px}
svg.spark{display:block}svg.spark .win{fill:#e8f0fa}
svg .line{stroke-linejoin:round}
svg.family{max-width:100%;height:auto;display:block}
h4{margin:12px 0 4px;font-size:13px}
"""


def _ci_span(value: float | None, low: float | None, high: float | None, digits: int = 1,
             scale: float = 1.0, unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    text = f"{value * scale:+,.{digits}f}{unit}"
    if low is None or high is None or (isinstance(low, float) and math.isnan(low)):
        return text + ' <span class="pm">(no CI: one repetition)</span>'
    return (f'{text} <span class="pm">[{low * scale:+,.{digits}f}, '
            f"{high * scale:+,.{digits}f}]</span>")


def _comparison_card(points: pd.DataFrame, experiment: dict[str, Any]) -> str:
    modes = tables.modes_in_order(list(dict.fromkeys(points["mode"])), experiment)
    base = tables.baseline_mode(modes, experiment)
    if base is None or len(modes) < 2:
        return ""
    cmp = tables.compare_modes(points, base, by=("trace", *tables.sweep_columns(points)))
    if cmp.empty:
        return ""
    body = []
    for _, r in cmp.iterrows():
        change = _ci_span(r["tps_change_pct"], r["tps_change_low"], r["tps_change_high"],
                          unit=" %")
        where = " · ".join([_text(r["trace"])] + [f"{c} {_label(r[c])}" for c in
                                                  tables.sweep_columns(points) if c in r])
        cells = [
            f'<td class="l">{_esc(where)}</td>',
            f'<td class="l">{_esc(r["mode"])} <span class="muted">vs</span> {_esc(base)}</td>',
            f'<td class="num">{r["n"]} / {r["n_baseline"]}</td>',
            f'<td class="num">{r["tps"]:,.1f} / {r["tps_baseline"]:,.1f}</td>',
            f'<td class="num">{change}</td>',
        ]
        for col, _ in tables.CPU_BENEFIT_COLUMNS:
            key = f"benefit_{col}"
            benefit = _ci_span(r.get(key), r.get(key + "_low"), r.get(key + "_high"),
                               scale=100.0, unit=" %")
            cells.append(f'<td class="num">{benefit}</td>' if key in r else f"<td>{MISSING}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    head = (
        '<th class="l">trace</th><th class="l">modes</th><th>reps</th>'
        '<th>TPS<br><span class="unit">mode / baseline</span></th>'
        '<th>TPS change<br><span class="unit">% [95 % CI]</span></th>'
        + "".join(f'<th>relative CPU benefit<br><span class="unit">{html.escape(label)}, '
                  "(b − a) / b [95 % CI]</span></th>" for _, label in tables.CPU_BENEFIT_COLUMNS)
    )
    return (
        '<div class="card" id="comparison"><h2>Comparison between modes</h2>'
        f'<p class="meta">Each mode against the baseline <b>{_esc(base)}</b>. TPS change = '
        "100 (mean TPS<sub>mode</sub> / mean TPS<sub>baseline</sub> − 1). Relative CPU benefit "
        "(000 §4) = (b − a) / b with a the mode's and b the baseline's mean server CPU "
        "(utilisation: server CPU seconds / window, in cores; and server CPU per KB). "
        "CIs by the delta method with Welch–Satterthwaite degrees of freedom (see "
        "analysis/README.md); positive benefit = the mode uses less CPU.</p>"
        f'<div class="scroll"><table class="modes"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div></div>"
    )


REF_COLUMNS = {  # reference quantity -> (tidy column, scale to the paper's unit)
    "TPS": ("tps", 1.0),
    "aggregate": ("mb_per_s", 1.0),
    "throughput": ("mb_per_s", 8.0),  # MB/s -> Mb/s
    "cycles per KB": ("server_cycles_per_kb", 1.0),
}


def _reference_table(points: pd.DataFrame, experiment: dict[str, Any], family: str) -> str:
    ref = references.reference(family)
    if ref is None:
        return ""
    modes = tables.modes_in_order(list(dict.fromkeys(points["mode"])), experiment)
    base = tables.baseline_mode(modes, experiment)
    other = next((m for m in modes if m != base), None)
    ok = tables.good(points)
    body = []
    for r in ref.rows:
        sub = ok
        for col, val in r.match.items():
            sub = sub[sub[col] == val] if col in sub else sub.iloc[0:0]
        measured = MISSING
        column, scale = REF_COLUMNS.get(r.quantity, (None, 1.0))
        if r.match and not sub.empty and column in sub and r.without_offload is None:
            parts = []
            for mode in modes:
                e = stats.mean_ci((sub[sub["mode"] == mode][column] * scale).tolist())
                if e.mean is not None:
                    half = f" ± {e.half:,.0f}" if e.half is not None else ""
                    parts.append(f"{_esc(mode)} {e.mean:,.0f}{half}")
            measured = "; ".join(parts) or MISSING
        elif r.match and not sub.empty and other and column in sub:
            a = (sub[sub["mode"] == other][column] * scale).tolist()
            b = (sub[sub["mode"] == base][column] * scale).tolist()
            ch = stats.tps_change_pct(a, b)
            if a and b:
                measured = (f"{_esc(other)} {stats.mean_ci(a).mean:,.0f} vs {_esc(base)} "
                            f"{stats.mean_ci(b).mean:,.0f}: "
                            f"{_ci_span(ch.value, ch.low, ch.high, unit=' %')}")
                bound = int((sub.get("client_bound") == True).sum())  # noqa: E712
                if bound:
                    measured += (f' <span class="flag">({bound} of {len(sub)} points '
                                 "client-bound: partly the generator's limit)</span>")
        w = MISSING if r.with_offload is None else f"{r.with_offload:,.0f}"
        wo = MISSING if r.without_offload is None else f"{r.without_offload:,.0f}"
        chg = MISSING if r.change_pct is None else f"{r.change_pct:+.0f} %"
        body.append(
            f'<tr><td class="l">{_esc(r.x)}</td><td class="l">{_esc(r.quantity)} '
            f'<span class="unit">{_esc(r.unit)}</span></td><td class="num">{w}</td>'
            f'<td class="num">{wo}</td><td class="num">{chg}</td>'
            f'<td class="l">{measured}</td></tr>'
        )
    rows = "".join(body) or (f'<tr><td class="l" colspan="6">{_esc(ref.note)}</td></tr>')
    return (
        f'<h3 class="refh">Paper reference: {_esc(ref.figure)} '
        f'<span class="hw">{references.HARDWARE}</span></h3>'
        '<div class="scroll"><table class="modes ref"><thead><tr><th class="l">where</th>'
        f'<th class="l">quantity</th><th>{_esc(ref.labels[0])}</th><th>{_esc(ref.labels[1])}'
        '</th><th>change</th><th class="l">measured here (this hardware) [95 % CI]</th></tr>'
        f"</thead><tbody>{rows}</tbody></table></div>"
        + (f'<p class="note">Paper: {_esc(ref.note)}. The paper\'s absolute values are from '
           f"{references.HARDWARE}; compare the direction and size of the effect, not the "
           "values.</p>" if ref.note else "")
    )


def _figure_card(points: pd.DataFrame, experiment: dict[str, Any]) -> str:
    if points.empty:
        return ""
    fam = figures.family_of(_text(experiment.get("name")), points)
    fig = figures.family_figure(points, experiment, fam)
    return (
        f'<div class="card" id="figure"><h2>{_esc(fig.title)}</h2>'
        f'<p class="meta">Experiment family <b>{_esc(fam)}</b> (from the experiment name '
        f'and its traces).</p><figure class="famfig">{fig.body}<figcaption>'
        f"{fig.caption}</figcaption></figure>{_reference_table(points, experiment, fam)}</div>"
    )


def _cost_table(points: pd.DataFrame, modes: list[str]) -> str:
    ok = tables.good(points)
    tiers = [c[len(TIER_PREFIX):] for c in ok.columns
             if c.startswith(TIER_PREFIX) and c != "cpu_s_servers"]
    cols = [(f"cpu_us_per_req_{t}", f"{t} µs/req") for t in tiers]
    cols += [("server_cpu_us_per_req", "servers µs/req"), ("host_cpu_us_per_req", "host µs/req")]
    cols += [(f"cpu_us_per_kb_{t}", f"{t} µs/KB") for t in tiers]
    cols += [("server_cpu_us_per_kb", "servers µs/KB"), ("host_cpu_us_per_kb", "host µs/KB"),
             ("server_cycles_per_kb", "servers cycles/KB"), ("host_cycles_per_kb",
                                                               "host cycles/KB")]
    cols = [(c, label) for c, label in cols if c in ok]
    if not cols or ok.empty:
        return ""
    body = []
    for mode in modes:
        sub = ok[ok["mode"] == mode]
        if sub.empty:
            continue
        cells = []
        for c, _ in cols:
            e = stats.mean_ci(sub[c].tolist())
            txt = MISSING if e.mean is None else f"{e.mean:,.1f}" + (
                f'<br><span class="pm">± {e.half:,.1f}</span>' if e.half is not None else "")
            cells.append(f'<td class="num">{txt}</td>')
        body.append(f'<tr><td class="l">{_esc(mode)}</td>{"".join(cells)}</tr>')
    source = ok["cycles_source"].dropna().iloc[0] if "cycles_source" in ok and \
        ok["cycles_source"].notna().any() else "no clock known: cycles not computed"
    head = "".join(f'<th title="{_esc(c)}">{html.escape(label)}</th>' for c, label in cols)
    return (
        '<h3 class="costh">CPU cost per request and per KB, per tier and for the host</h3>'
        f'<div class="scroll"><table class="modes cost"><thead><tr><th class="l">mode</th>{head}'
        f"</tr></thead><tbody>{''.join(body)}</tbody></table></div>"
        f'<p class="note">Mean ± 95 % CI half-width. Tier CPU = the container cgroup\'s CPU '
        "time over the measured window; host = busy ticks of /proc/stat (user, nice, system, irq, "
        f"softirq). KB = 1024 bytes delivered to the client. Cycles per KB: "
        f"<b>{_esc(source)}</b>.</p>"
    )


def _sparkline(grp: pd.DataFrame) -> str:
    w, h = 160, 28
    tps = grp["tps"].fillna(0).tolist()
    top = max(tps + [1e-9])
    n = max(len(tps) - 1, 1)
    pts = " ".join(f"{2 + (w - 4) * i / n:.1f},{h - 2 - (h - 4) * v / top:.1f}"
                   for i, v in enumerate(tps))
    shade = ""
    phases = grp["phase"].tolist()
    if "measured" in phases:
        i0 = phases.index("measured")
        i1 = len(phases) - 1 - phases[::-1].index("measured")
        x0, x1 = 2 + (w - 4) * max(i0 - 0.5, 0) / n, 2 + (w - 4) * min(i1 + 0.5, n) / n
        shade = (f'<rect class="win" x="{x0:.1f}" y="0" width="{x1 - x0:.1f}" height="{h}">'
                 "<title>measured window</title></rect>")
    return (f'<svg class="spark" width="{w}" height="{h}" viewBox="0 0 {w} {h}">{shade}'
            f'<polyline points="{pts}" fill="none" stroke="#4e79a7" stroke-width="1.3"/></svg>')


def _trace_card(points: pd.DataFrame, samples: pd.DataFrame | None,
                recomputed: dict[str, dict[str, Any]] | None) -> str:
    if samples is None or samples.empty:
        return ""
    by_point = dict(tuple(samples.groupby("point", sort=False)))
    body = []
    for _, r in points.iterrows():
        pid = r["point"]
        grp = by_point.get(pid)
        if grp is None:
            continue
        rec = (recomputed or {}).get(pid, {})
        meas = grp[grp["phase"] == "measured"]
        cv = meas["tps"].std(ddof=1) / meas["tps"].mean() if len(meas) > 1 and \
            meas["tps"].mean() else None
        rtps = rec.get("tps")
        check = MISSING
        if rtps is not None and isinstance(r.get("tps"), float):
            same = math.isclose(rtps, r["tps"], rel_tol=1e-4)
            check = (f'{rtps:,.2f} <span class="{"okt" if same else "errtxt"}">'
                     f'{"= summary" if same else "≠ summary"}</span>')
        rcpu = rec.get("cpu_s_servers")
        cpu_check = MISSING
        if rcpu is not None and isinstance(r.get("cpu_s_servers"), float):
            same = math.isclose(rcpu, r["cpu_s_servers"], rel_tol=1e-3, abs_tol=1e-4)
            cpu_check = (f'{rcpu:,.3f} <span class="{"okt" if same else "errtxt"}">'
                         f'{"= summary" if same else "≠ summary"}</span>')
        ltps = rec.get("locust_window_tps")
        locust = MISSING if ltps is None else (
            f'{ltps:,.0f} <span class="pm">over {rec.get("locust_window_s", 0):.0f} s</span>')
        body.append(
            f'<tr><td class="l">{_esc(pid)}</td><td class="num">{int(r["order"])}</td>'
            f'<td class="l">{_esc(r["trace"])}</td><td class="l">{_esc(r["mode"])}</td>'
            f'<td class="l">{_esc(rec.get("window_source", grp["window_source"].iloc[0]))}</td>'
            f'<td class="num">{(grp["phase"] == "warm-up").sum()}</td>'
            f'<td class="num">{len(meas)}</td>'
            f'<td class="num">{MISSING if cv is None else f"{100 * cv:.1f} %"}</td>'
            f"<td>{_sparkline(grp)}</td><td class=\"num\">{check}</td>"
            f'<td class="num">{cpu_check}</td><td class="num">{locust}</td></tr>'
        )
    return (
        '<div class="card" id="traceability"><h2>From samples to numbers</h2>'
        '<p class="meta">Per point, in run order: the measured window (recorded by the runner, '
        "or the sample pair after the warm-up that reproduces summary.csv), the 1 Hz intervals "
        "excluded as warm-up and counted as measured, the variation of per-second TPS inside "
        "the window, per-second TPS (shaded: measured window) and the numbers recomputed from "
        "points/&lt;id&gt;/samples.jsonl and requests.csv (— where requests.csv is absent). The last "
        "column is the load generator's own count (locust_stats_history.csv, cumulative totals "
        "stamped to the second, so ± a second's worth of requests).</p>"
        '<div class="scroll"><table class="modes trace-tbl"><thead><tr><th class="l">point</th>'
        '<th>run order</th><th class="l">trace</th><th class="l">mode</th>'
        '<th class="l">window</th><th>warm-up s</th><th>measured s</th>'
        "<th>per-second TPS CV</th><th>per-second TPS</th><th>TPS from requests.csv</th>"
        "<th>server CPU s from samples</th><th>Locust's own TPS in the window</th></tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div></div>"
    )


def _more_warnings(points: pd.DataFrame, samples: pd.DataFrame | None,
                   notes: list[str]) -> str:
    by = ("trace", "mode", *tables.sweep_columns(points))
    found = [w for w in tables.warnings_for(points, samples, by=by)
             if w.kind in ("unstable", "unstable-point")]
    parts = []
    if found:
        items = "".join(f"<li><b>{_esc(w.where)}</b>: {_esc(w.message)}</li>" for w in found)
        parts.append(f'<div class="warn"><h3>Unstable results ({len(found)})</h3><p>The '
                     "spread is large: treat these means with care, or run more "
                     f"repetitions / longer windows.</p><ul>{items}</ul></div>")
    if notes:
        items = "".join(f"<li>{_esc(n)}</li>" for n in notes)
        parts.append(f'<div class="warn"><h3>Older or partial layout</h3><ul>{items}</ul></div>')
    return "".join(parts)


def _label(value: Any) -> str:
    """A factor value as text: 16.0 -> '16'."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return _text(value)


def _fold_sweeps(rows: list[Row], sweeps: list[str]) -> list[Row]:
    """Per-trace sections group by trace x mode: fold swept factors (users, docroot) into mode."""
    if not sweeps:
        return rows
    out = []
    for r in rows:
        bits = [_text(r.get("mode"))] + [
            f"{_label(r.get(c))} {c}" if c in ("users", "clients", "threads", "connections")
            else _label(r.get(c)) for c in sweeps]
        out.append({**r, "mode": " · ".join(b for b in bits if b)})
    return out


def render_report(
    rows: list[Row],
    manifest: dict[str, Any],
    samples: pd.DataFrame | None = None,
    recomputed: dict[str, dict[str, Any]] | None = None,
    notes: list[str] | None = None,
) -> str:
    """Render summary rows + manifest (+ per-second samples) as one self-contained HTML page."""
    manifest = manifest if isinstance(manifest, dict) else {}
    experiment = manifest.get("experiment")
    experiment = experiment if isinstance(experiment, dict) else {}
    name = _text(experiment.get("name")) or "tierbench run"
    run_id = _text(manifest.get("run_id"))
    points = load.points_frame(rows, manifest)
    rows = _fold_sweeps(rows, tables.sweep_columns(points))
    columns = _columns(rows)
    tiers = _tiers(columns)
    modes = _first_seen(rows, "mode")
    colors = {m: PALETTE[i % len(PALETTE)] for i, m in enumerate(modes)}
    groups = aggregate(rows)
    traces = _first_seen(rows, "trace")
    sections = [
        _trace_section(
            i + 1,
            trace,
            [g for (t, _), g in groups.items() if t == trace],
            tiers,
            colors,
            _cost_table(points[points["trace"] == trace], modes) if len(points) else "",
        )
        for i, trace in enumerate(traces)
    ]
    git = manifest.get("git") if isinstance(manifest.get("git"), dict) else {}
    sub = [f"run <code>{_esc(run_id) or MISSING}</code>"]
    if manifest.get("started") or manifest.get("finished"):
        sub.append(f"{_esc(manifest.get('started'))} → {_esc(manifest.get('finished'))}")
    sub.append(f"{len(rows)} points · {len(traces)} traces · {len(modes)} modes")
    if experiment.get("seed") is not None:
        sub.append(f"run order shuffled with seed {_esc(experiment.get('seed'))}")
    if git.get("revision"):
        dirty = " (dirty)" if git.get("dirty") else ""
        sub.append(f"git {_esc(str(git['revision'])[:12])}{dirty}")
    desc = _text(experiment.get("description"))
    toc = " · ".join(
        f'<a href="#trace-{i + 1}">{_esc(t) or MISSING}</a>' for i, t in enumerate(traces)
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{html.escape(name)} — {_esc(run_id)}</title><style>{CSS}</style></head>"
        "<body><main>"
        f'<header><h1>{html.escape(name)}</h1><p class="sub">{" · ".join(sub)}</p>'
        + (f'<p class="desc">{html.escape(desc)}</p>' if desc else "")
        + "</header>"
        + _warnings(rows, columns)
        + (_more_warnings(points, samples, notes or []) if len(points) else "")
        + _figure_card(points, experiment)
        + (_comparison_card(points, experiment) if len(points) else "")
        + (f'<p class="sub">Traces: {toc}</p>' if toc else "")
        + "".join(sections)
        + (_trace_card(points, samples, recomputed) if len(points) else "")
        + '<div class="card"><h2>All points</h2><p class="meta">Every row of summary.csv '
        "(columns split into groups to fit); client-bound rows are shaded amber, "
        "failed rows red.</p>"
        + _points_table(rows, columns)
        + '</div><div class="card"><h2>Provenance</h2><p class="meta">manifest.json, without the '
        "per-point entries.</p>"
        + _provenance(manifest)
        + "</div><footer>generated by tierbench</footer></main></body></html>\n"
    )


def write_report(run_dir: Path, progress: load.Progress | None = None) -> Path:
    """Write RUN/report.html from summary.csv, manifest.json and the points' samples."""
    run_dir = Path(run_dir)
    summary, manifest_path = run_dir / "summary.csv", run_dir / "manifest.json"
    manifest = {}
    if manifest_path.exists():
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    if manifest.get("kind") == "pfs":  # a parallel file system run has its own page
        from analysis import pfs_report

        return pfs_report.write_report(run_dir)
    rows = load_summary(summary) if summary.exists() else []
    samples, recomputed, notes = None, {}, []
    if rows:
        try:
            run = load.load_run(run_dir)
            notes = run.notes
            samples = load.load_samples(run, progress)
            for pid in samples["point"].unique() if not samples.empty else []:
                recomputed[pid] = load.recompute_point(run, pid)
        except load.LayoutError as exc:
            notes.append(str(exc))
        except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
            # the runner calls this in its finally block: a damaged file must not end the run
            notes.append(f"per-second samples could not be read ({type(exc).__name__}: {exc}); "
                         "the report shows summary.csv only")
            samples, recomputed = None, {}
    out = run_dir / "report.html"
    out.write_text(render_report(rows, manifest, samples, recomputed, notes), encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line: python3 -m analysis.report RUN_DIR [RUN_DIR ...]."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python3 -m analysis.report RUN_DIR [RUN_DIR ...]", file=sys.stderr)
        return 2
    for arg in args:
        print(write_report(Path(arg)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
