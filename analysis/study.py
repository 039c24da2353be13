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

from markupsafe import Markup

from analysis import claims, load, markup, report
from analysis.claimspec import Claim
from analysis import spec as specs


def run_of(entry: dict[str, Any], folder: Path) -> Path | None:
    """An experiment's run folder in a study record: its path, relative ones (a study record
    shipped in examples/studies/) from the study's folder; None when it has none."""
    if not entry.get("run"):
        return None
    run = Path(entry["run"])
    return run if run.is_absolute() else folder / run


def experiment_view(entry: dict[str, Any], folder: Path) -> dict[str, Any]:
    """One experiment of a row: its figure, the paper's numbers, its comparisons, a link."""
    view: dict[str, Any] = {"name": str(entry.get("name")), "status": str(entry.get("status")),
                            "note": entry.get("note") or "", "figure": None}
    run = run_of(entry, folder)
    if run is None or not (run / "summary.csv").is_file():
        return view
    rows, manifest, spec, source = load.read_run_files(run)
    ctx = report.Context(rows, manifest, spec, source)
    figure = report.figure_card(ctx)
    table = ctx.comparisons()
    table = table[table["metric"] == ctx.primary] if not table.empty else table
    view.update(
        points=len(rows), run_id=manifest.get("run_id"),
        link=os.path.relpath(run / "report.html", folder),
        # the report's figure card, as the report draws it (its template's block)
        figure=Markup(markup.render("figure.html.j2", f=figure, hardware=specs.HARDWARE))
        if figure else Markup(""),
        label=ctx.spec["primary"]["label"], baseline=ctx.baseline,
        comparisons=[{"condition": r["condition"], "mode": r["mode"], "baseline": r["baseline"],
                      "statement": r["statement"],
                      "mde": "" if pd.isna(r["mde_pct"]) else f"{r['mde_pct']:.1f} %"}
                     for _, r in table.iterrows()])
    return view


def scoreboard(record: dict[str, Any], folder: Path,
               row_claims: dict[str, list[dict[str, Any]]] | None = None) -> list[dict[str, Any]]:
    """Every claim of the study in ``folder`` evaluated on its experiment's run in this study
    (``row_claims``: row id -> claims, else those the record holds), with the row's fidelity
    differences."""
    todo, different = [], {}
    for r in record.get("rows") or []:
        fid = r.get("fidelity") if isinstance(r.get("fidelity"), dict) else {}
        different[r["id"]] = str(fid.get("different") or "")
        runs = {e.get("name"): run_of(e, folder) for e in r.get("experiments") or []
                if e.get("run")}
        raw = (row_claims or {}).get(r["id"], r.get("claims") or []) if row_claims is not None \
            else r.get("claims") or []
        for c in raw:
            claim = Claim.model_validate(c)
            todo.append((str(record.get("study") or ""), r["id"], claim,
                         runs.get(claim.experiment)))
    lines = claims.score(todo)
    for line in lines:
        line["different"] = different.get(line["row"], "")
    return lines


def write_study_report(folder: Path,
                       row_claims: dict[str, list[dict[str, Any]]] | None = None) -> Path:
    """Write FOLDER/study.html (analysis/templates/study.html.j2) and FOLDER/claims.csv from
    FOLDER/study.json; ``row_claims``: the study file's claims by row (else the record's)."""
    folder = Path(folder)
    record = json.loads((folder / "study.json").read_text(encoding="utf-8"))
    rows = record.get("rows") or []
    counts: dict[str, int] = {}
    for r in rows:
        for e in r.get("experiments") or []:
            counts[str(e.get("status"))] = counts.get(str(e.get("status")), 0) + 1
    board = scoreboard(record, folder, row_claims)
    claims.write_csv(board, folder / "claims.csv")
    view = {"study": record.get("study"), "title": record.get("title"),
            "started": record.get("started"), "finished": record.get("finished"),
            "status": record.get("status"),
            "summary": ", ".join(f"{n} {s}" for s, n in sorted(counts.items())),
            "scale": record.get("scale") or 1,
            "claims": [{**line, "measured": claims.interval_text(line),
                        "first": i == 0 or board[i - 1]["row"] != line["row"]}
                       for i, line in enumerate(board)],
            "claim_counts": claims.counts_text(claims.counts(board)),
            "rows": [{"id": r["id"], "figures": r.get("figures"),
                      "fidelity": [(k.replace("_", " "), (r["fidelity"] or {}).get(k))
                                   for k in ("same", "different", "why", "to_close")]
                      if isinstance(r.get("fidelity"), dict) else None,
                      "experiments": [experiment_view(e, folder)
                                      for e in r.get("experiments") or []]} for r in rows]}
    out = folder / "study.html"
    out.write_text(markup.render("study.html.j2", title=f"study {record.get('study')}", s=view),
                   encoding="utf-8")
    return out
