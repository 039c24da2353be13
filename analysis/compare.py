"""Compare two runs of the same experiment (before/after a kernel upgrade, a new NIC, ...)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import load, stats, tables
from analysis.report import CSS, MISSING, _ci_span

METRICS = (
    ("tps", "TPS", "change"),
    ("server_cpu_us_per_kb", "server CPU µs/KB", "benefit"),
    ("server_cpu_us_per_req", "server CPU µs/req", "benefit"),
    ("p99_ms", "p99 ms", "change"),
)


class CompareError(Exception):
    """The two runs cannot be compared (the message says why)."""


def compare_runs(a: load.Run, b: load.Run) -> pd.DataFrame:
    """Per trace x mode: run B against run A, TPS change (%) and CPU benefit with 95 % CIs."""
    if a.name != b.name:
        raise CompareError(f"{a.dir} is a run of '{a.name}' and {b.dir} of '{b.name}': compare "
                           "two runs of the same experiment")
    pa, pb = tables.good(a.points), tables.good(b.points)
    rows = []
    keys = list(dict.fromkeys(zip(pa["trace"], pa["mode"]))) + [
        k for k in dict.fromkeys(zip(pb["trace"], pb["mode"])) if k not in set(
            zip(pa["trace"], pa["mode"]))]
    for trace, mode in keys:
        ga = pa[(pa["trace"] == trace) & (pa["mode"] == mode)]
        gb = pb[(pb["trace"] == trace) & (pb["mode"] == mode)]
        row: dict[str, Any] = {"trace": trace, "mode": mode, "n_a": len(ga), "n_b": len(gb)}
        for col, _, kind in METRICS:
            va = ga[col].tolist() if col in ga else []
            vb = gb[col].tolist() if col in gb else []
            row[f"{col}_a"] = stats.mean_ci(va).mean
            row[f"{col}_b"] = stats.mean_ci(vb).mean
            r = (stats.tps_change_pct(vb, va) if kind == "change"
                 else stats.relative_cpu_benefit(vb, va))
            row[f"{col}_{kind}"], row[f"{col}_low"], row[f"{col}_high"] = r.value, r.low, r.high
        rows.append(row)
    return pd.DataFrame(rows)


def _flat(value: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: json.dumps(value) if not isinstance(value, str) else value}


def provenance_diff(a: load.Run, b: load.Run) -> list[tuple[str, str, str]]:
    """Manifest entries that differ between the runs (points, times and run ids left out)."""
    skip = ("points", "started", "finished", "run_id", "trimmed")
    fa = _flat({k: v for k, v in a.manifest.items() if k not in skip})
    fb = _flat({k: v for k, v in b.manifest.items() if k not in skip})
    return [(k, fa.get(k, MISSING), fb.get(k, MISSING)) for k in sorted(set(fa) | set(fb))
            if fa.get(k) != fb.get(k)]


def render_compare(a: load.Run, b: load.Run) -> str:
    """The comparison page: per trace x mode table with CIs and the provenance differences."""
    table = compare_runs(a, b)
    esc = html.escape
    head = '<th class="l">trace</th><th class="l">mode</th><th>reps A / B</th>' + "".join(
        f"<th>{esc(label)}<br><span class=\"unit\">A / B</span></th>"
        f"<th>{'change' if kind == 'change' else 'relative CPU benefit'}<br>"
        "<span class=\"unit\">B vs A, % [95 % CI]</span></th>" for _, label, kind in METRICS)
    body = []
    for _, r in table.iterrows():
        cells = [f'<td class="l">{esc(str(r["trace"]))}</td>',
                 f'<td class="l">{esc(str(r["mode"]))}</td>',
                 f'<td class="num">{r["n_a"]} / {r["n_b"]}</td>']
        for col, _, kind in METRICS:
            va, vb = r[f"{col}_a"], r[f"{col}_b"]
            pair = " / ".join(MISSING if v is None or pd.isna(v) else f"{v:,.2f}" for v in (va, vb))
            scale = 1.0 if kind == "change" else 100.0
            span = _ci_span(r[f"{col}_{kind}"], r[f"{col}_low"], r[f"{col}_high"], scale=scale,
                            unit=" %")
            cells += [f'<td class="num">{pair}</td>', f'<td class="num">{span}</td>']
        body.append(f"<tr>{''.join(cells)}</tr>")
    diff = "".join(f"<tr><th>{esc(k)}</th><td>{esc(va)}</td><td>{esc(vb)}</td></tr>"
                   for k, va, vb in provenance_diff(a, b))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(a.name)}: {esc(a.run_id)} vs {esc(b.run_id)}</title>"
        f"<style>{CSS}</style></head><body><main>"
        f"<header><h1>{esc(a.name)}: run B against run A</h1>"
        f'<p class="sub">A = <code>{esc(a.run_id)}</code> · B = <code>{esc(b.run_id)}</code></p>'
        "</header>"
        '<div class="card"><h2>Per trace and mode</h2><p class="meta">TPS and p99 change = 100 '
        "(mean<sub>B</sub> / mean<sub>A</sub> − 1); relative CPU benefit = (A − B) / A, positive "
        "when B uses less CPU. 95 % CIs by the delta method (analysis/README.md); failed points "
        "excluded.</p>"
        f'<div class="scroll"><table class="modes"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div></div>"
        '<div class="card"><h2>What changed between the runs</h2><p class="meta">Manifest '
        "entries that differ (the per-point entries, times and run ids left out).</p>"
        '<table class="kv"><thead><tr><th>entry</th><th>A</th><th>B</th></tr></thead>'
        f"<tbody>{diff or '<tr><td colspan=3>nothing</td></tr>'}</tbody></table></div>"
        "<footer>generated by tierbench</footer></main></body></html>\n"
    )


def write_compare(run_a: Path, run_b: Path, out: Path | None = None) -> Path:
    """Write the comparison page (default RUN_B/compare-<run A id>.html); return its path."""
    a, b = load.load_run(run_a), load.load_run(run_b)
    target = Path(out) if out else Path(run_b) / f"compare-{a.run_id}.html"
    target.write_text(render_compare(a, b), encoding="utf-8")
    return target
