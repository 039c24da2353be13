"""The report of a whole study (`tierbench study ID`): study.html beside study.json.

Each catalogue row in the paper's order: its figures, the fidelity row (what is the same as the
paper, what differs, why, what would close the gap), and per experiment the family figure with
the paper's numbers beside the measured ones, each comparison of a mode with the baseline
(resolved or not, when the run had a precision target) and a link to the experiment's own
report; an experiment that was refused or failed shows its sentence. Reads result files only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import load, markup, report
from analysis.markup import MISSING, esc


def experiment_card(entry: dict[str, Any], folder: Path) -> str:
    """One experiment of a row: its figure, the paper's numbers, its comparisons, a link."""
    name, status = str(entry.get("name")), str(entry.get("status"))
    run = Path(entry["run"]) if entry.get("run") else None
    head = f"<h3>{esc(name)} <span class=\"muted\">({esc(status)})</span></h3>"
    if run is None or not (run / "summary.csv").is_file():
        note = entry.get("note") or "not run"
        return f'<div class="warn">{head}<p>{esc(note)}</p></div>'
    rows = load.read_summary_rows(run / "summary.csv")
    try:
        manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        manifest = {}
    header = list(dict.fromkeys(c for r in rows for c in r))
    spec, source, _ = load.resolve_spec(manifest, None, rows, header)
    ctx = report.Context(rows, manifest, spec, source)
    link = os.path.relpath(run / "report.html", folder)
    figure = report.figure_card(ctx).replace('id="figure"', "")
    return (f"<div>{head}<p class=\"meta\">{len(rows)} points · run "
            f"<code>{esc(manifest.get('run_id'))}</code> · <a href=\"{esc(link)}\">its report"
            f"</a>" + (f" · {esc(entry.get('note'))}" if entry.get("note") else "") + "</p>"
            + figure + comparisons(ctx) + "</div>")


def comparisons(ctx: report.Context) -> str:
    """Each mode against the baseline on the primary column: the stated sentence."""
    table = ctx.comparisons()
    if table.empty:
        return ""
    table = table[table["metric"] == ctx.primary]
    items = "".join(
        f"<li>{esc(r['condition'])}: {esc(r['mode'])} vs {esc(r['baseline'])}: "
        f"{esc(r['statement'])}" + ("" if pd.isna(r["mde_pct"]) else
                                   f" <span class=\"muted\">(detectable: {r['mde_pct']:.1f} %)"
                                   "</span>") + "</li>" for _, r in table.iterrows())
    return (f'<p class="meta">{esc(ctx.spec["primary"]["label"])}, each mode against '
            f"<b>{esc(ctx.baseline)}</b> (95 % intervals):</p><ul>{items}</ul>")


def fidelity(row: dict[str, Any]) -> str:
    """The fidelity row: same, different, why, to close."""
    f = row.get("fidelity")
    if not isinstance(f, dict):
        return '<p class="meta">No fidelity row recorded for this row.</p>'
    cells = "".join(f"<tr><th>{esc(k.replace('_', ' '))}</th><td>{esc(f.get(k)) or MISSING}"
                    "</td></tr>" for k in ("same", "different", "why", "to_close"))
    return f'<table class="kv">{cells}</table>'


def render(record: dict[str, Any], folder: Path) -> str:
    """study.html from study.json."""
    rows = record.get("rows") or []
    counts: dict[str, int] = {}
    for r in rows:
        for e in r.get("experiments") or []:
            counts[str(e.get("status"))] = counts.get(str(e.get("status")), 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    toc = " · ".join(f'<a href="#{esc(r["id"])}">{esc(r["id"])}</a>' for r in rows)
    scale = record.get("scale") or 1
    body = [f"<h1>Study {esc(record.get('study'))}: {esc(record.get('title'))}</h1>"
            f'<p class="sub">{esc(record.get("started"))} → {esc(record.get("finished"))} · '
            f"status <b>{esc(record.get('status'))}</b> · experiments: {esc(summary)}"
            + (f" · scaled by {scale:g} (windows, counts and repetitions shortened: a quick "
               "look, not the paper's scale)" if scale != 1 else "") + "</p>"
            f'<p class="sub">Rows: {toc}</p>']
    for r in rows:
        cards = "".join(experiment_card(e, folder) for e in r.get("experiments") or []) or \
            '<p class="meta">Documented only: nothing to run.</p>'
        body.append(f'<div class="card" id="{esc(r["id"])}"><h2>{esc(r["id"])} '
                    f'<span class="muted">{esc(r.get("figures"))}</span></h2>'
                    f"{fidelity(r)}{cards}</div>")
    return markup.page(f"study {record.get('study')}", "".join(body))


def write_study_report(folder: Path) -> Path:
    """Write FOLDER/study.html from FOLDER/study.json."""
    folder = Path(folder)
    record = json.loads((folder / "study.json").read_text(encoding="utf-8"))
    out = folder / "study.html"
    out.write_text(render(record, folder), encoding="utf-8")
    return out
