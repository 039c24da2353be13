"""Compare two runs of the same experiment (before/after a kernel upgrade, a new NIC, ...)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from analysis import load, markup, stats, tables
from analysis.markup import MISSING

LATENCY = ("p99_ms", "p99 ms")


class CompareError(Exception):
    """The two runs cannot be compared (the message says why)."""


def metrics(run: load.Run) -> list[tuple[str, str, str]]:
    """(column, label, change | benefit) compared between runs: the spec's primary column, its
    CPU costs (relative CPU benefit), server CPU per request and p99 latency where present."""
    spec = run.spec
    out = [(spec["primary"]["column"], spec["primary"]["label"], "change")]
    for item in spec["costs"] + [{"column": "server_cpu_us_per_req",
                                  "label": "server CPU µs/req"}]:
        if item["column"] not in [c for c, _, _ in out]:
            out.append((item["column"], item["label"], "benefit"))
    out.append((*LATENCY, "change"))
    return [m for m in out if m[0] in run.points]


def compare_runs(a: load.Run, b: load.Run) -> pd.DataFrame:
    """Per condition (phase, factors) x mode: run B against run A, change (%) and relative CPU
    benefit with 95 % CIs; the conditions and metrics come from run A's report spec."""
    if a.name != b.name:
        raise CompareError(f"{a.dir} is a run of '{a.name}' and {b.dir} of '{b.name}': compare "
                           "two runs of the same experiment")
    pa, pb = tables.good(a.points), tables.good(b.points)
    by = [c for c in tables.group_columns(pa, a.spec) if c in pb] + ["mode"]
    pa = tables.sort_points(pa, by, a.spec, a.experiment)
    keys = [k for k, _ in tables.groups(pa, by)]
    keys += [k for k, _ in tables.groups(pb, by) if k not in keys]
    rows = []
    for key in keys:
        sel_a = pd.Series(True, index=pa.index)
        sel_b = pd.Series(True, index=pb.index)
        for c, v in zip(by, key):
            sel_a &= pa[c].map(lambda x, w=v: tables.same(x, w))
            sel_b &= pb[c].map(lambda x, w=v: tables.same(x, w))
        ga, gb = pa[sel_a], pb[sel_b]
        row: dict[str, Any] = {**dict(zip(by, key)), "n_a": len(ga), "n_b": len(gb)}
        for col, _, kind in metrics(a):
            va = ga[col].tolist() if col in ga else []
            vb = gb[col].tolist() if col in gb else []
            row[f"{col}_a"] = stats.mean_ci(va).mean
            row[f"{col}_b"] = stats.mean_ci(vb).mean
            r = (stats.tps_change_pct(vb, va) if kind == "change"
                 else stats.relative_cpu_benefit(vb, va))
            row[f"{col}_{kind}"], row[f"{col}_low"], row[f"{col}_high"] = r.value, r.low, r.high
        rows.append(row)
    return pd.DataFrame(rows)


def flat(value: Any, prefix: str = "") -> dict[str, str]:
    """A nested manifest as dotted keys -> JSON text."""
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: json.dumps(value) if not isinstance(value, str) else value}


def provenance_diff(a: load.Run, b: load.Run) -> list[tuple[str, str, str]]:
    """Manifest entries that differ between the runs (points, times and run ids left out)."""
    skip = ("points", "started", "finished", "run_id", "trimmed")
    fa = flat({k: v for k, v in a.manifest.items() if k not in skip})
    fb = flat({k: v for k, v in b.manifest.items() if k not in skip})
    return [(k, fa.get(k, MISSING), fb.get(k, MISSING)) for k in sorted(set(fa) | set(fb))
            if fa.get(k) != fb.get(k)]


def render_compare(a: load.Run, b: load.Run) -> str:
    """The comparison page: per condition x mode table with CIs and the provenance differences
    (analysis/templates/compare.html.j2)."""
    table = compare_runs(a, b)
    by = [c for c in table.columns if c not in ("n_a", "n_b") and not c.endswith(
        ("_a", "_b", "_change", "_benefit", "_low", "_high"))]
    cols = metrics(a)
    rows = []
    for _, r in table.iterrows():
        cells = []
        for col, _, kind in cols:
            va, vb = r[f"{col}_a"], r[f"{col}_b"]
            pair = " / ".join(MISSING if v is None or pd.isna(v) else f"{v:,.2f}" for v in (va, vb))
            scale = 1.0 if kind == "change" else 100.0
            cells.append((pair, Markup(markup.ci_span(r[f"{col}_{kind}"], r[f"{col}_low"],
                                                      r[f"{col}_high"], scale=scale,
                                                      unit=" %"))))
        rows.append({"by": [tables.label(r[c]) for c in by], "n_a": r["n_a"], "n_b": r["n_b"],
                     "cells": cells})
    view = {"name": a.name, "run_a": a.run_id, "run_b": b.run_id, "by": by,
            "metrics": [(label, kind) for _, label, kind in cols], "rows": rows,
            "diff": provenance_diff(a, b)}
    return markup.render("compare.html.j2", title=f"{a.name}: {a.run_id} vs {b.run_id}", c=view)


def write_compare(run_a: Path, run_b: Path, out: Path | None = None) -> Path:
    """Write the comparison page (default RUN_B/compare-<run A id>.html); return its path."""
    a, b = load.load_run(run_a), load.load_run(run_b)
    target = Path(out) if out else Path(run_b) / f"compare-{a.run_id}.html"
    target.write_text(render_compare(a, b), encoding="utf-8")
    return target
