"""HTML building blocks shared by the report, the comparison page and the study report: the
stylesheet, escaping, number formats, confidence-interval spans, and the template environment
(analysis/templates/: the pages' structure and words live there, not in Python strings)."""

from __future__ import annotations

import html
import json
import math
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

MISSING = "—"

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
.na{color:#9aa5b1;text-align:center!important}
tr.cb{background:#fffbeb}tr.bad{background:#fef3f2}
.note{color:#7b8794;font-size:12px;margin:6px 0 0}
figure{margin:14px 0 0}
figcaption{color:#7b8794;font-size:12px;margin-top:2px}
svg.chart{max-width:100%;height:auto;display:block}
svg.spark text{font-family:inherit;fill:#3e4c59}
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
svg.chart *{stroke-linejoin:round;stroke-linecap:butt}
div.family{margin:0}div.family svg.chart{margin:0 0 8px}
h4{margin:12px 0 4px;font-size:13px}
"""

def text(value: Any) -> str:
    """A value as stripped text ('' for None)."""
    return "" if value is None else str(value).strip()


def esc(value: Any) -> str:
    """A value as escaped HTML text."""
    return html.escape(text(value))


def number(value: Any) -> float | None:
    """A finite float, or None (booleans, blanks and NaN included)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def fmt(column: str, value: Any) -> str:
    """A number formatted for its column (TPS and µs 1 decimal, ms/s/MB 2, counts with commas)."""
    v = number(value)
    if v is None:
        return MISSING
    if column in ("tps", "tps_foreground") or "_us_" in column or column.endswith("_pct") \
            or column.startswith("tps_"):
        return f"{v:,.1f}"
    if column.endswith("_ms") or column.startswith("cpu_s_") or column.endswith("_cpu_s") \
            or column == "mb_per_s" or column.endswith("_util"):
        return f"{v:,.2f}"
    if "cycles" in column:
        return f"{v:,.0f}"
    return f"{int(v):,}" if v.is_integer() else f"{v:,.3f}".rstrip("0")


def mean_pm(column: str, mean: float | None, half: float | None, br: bool = True) -> str:
    """'mean<br>± half' (or just the mean with one repetition)."""
    if mean is None:
        return MISSING
    if half is None:
        return fmt(column, mean)
    sep = "<br>" if br else " "
    return f'{fmt(column, mean)}{sep}<span class="pm">± {fmt(column, half)}</span>'


def ci_span(value: float | None, low: float | None, high: float | None, digits: int = 1,
            scale: float = 1.0, unit: str = "") -> str:
    """'+12.3 % [+1.0, +20.0]' for a ratio-derived value with its CI ('no CI' with one rep)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    out = f"{value * scale:+,.{digits}f}{unit}"
    if low is None or high is None or (isinstance(low, float) and math.isnan(low)):
        return out + ' <span class="pm">(no CI: one repetition)</span>'
    return (f'{out} <span class="pm">[{low * scale:+,.{digits}f}, '
            f"{high * scale:+,.{digits}f}]</span>")


def _all_scalars(values: list[Any]) -> bool:
    return all(isinstance(v, str | int | float | bool) or v is None for v in values)


def provenance_items(manifest: dict[str, Any]) -> dict[str, Any]:
    """manifest.json without the per-point entries and, of each image's Debian packages, only
    their number (the list is in manifest.json)."""
    items = {k: v for k, v in manifest.items() if k != "points"}
    if isinstance(items.get("image_packages"), dict):
        items["image_packages"] = {
            image_id: {**entry, "debian_packages": (
                f"{len(entry['debian_packages'])} packages (listed in manifest.json)"
                if isinstance(entry.get("debian_packages"), dict) else None)}
            if isinstance(entry, dict) else entry
            for image_id, entry in items["image_packages"].items()}
    return items


TEMPLATES = Environment(loader=PackageLoader("analysis", "templates"),
                        autoescape=select_autoescape(default=True), trim_blocks=True,
                        lstrip_blocks=True)
TEMPLATES.globals.update(MISSING=MISSING, css=Markup(CSS))
TEMPLATES.filters.update(
    wbr=lambda name: Markup("_<wbr>").join(str(name).split("_")),
    tojson_plain=lambda v: json.dumps(v),
    tojson_indent=lambda v: json.dumps(v, indent=2, default=str),
    all_scalars=_all_scalars)


def render(template: str, **values: Any) -> str:
    """A page of analysis/templates/ rendered; values are HTML-escaped unless marked safe
    (markupsafe.Markup: figures' SVG, intervals built by ci_span and mean_pm)."""
    return TEMPLATES.get_template(template).render(**values)
