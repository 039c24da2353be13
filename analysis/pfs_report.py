"""report.html of a parallel file system run (pfs-concurrent, pfs-streams, pfs-basic).

Per phase (read, write) and factor value (clients, streams, or file system x buffer): aggregate
MB/s and CPU per side for each mode, mean and 95 % t confidence interval over repetitions; the
change of every mode against the first one (MB/s change and relative CPU benefit, delta-method
CIs); one line figure per phase; the paper's reference numbers for pfs-concurrent; the points
that failed or whose data did not check out; and the run's provenance.
"""

from __future__ import annotations

import csv
import html
import json
from pathlib import Path
from typing import Any

from analysis import figures, references, report, stats

PHASES = ("read", "write")
# The side whose CPU the paper reports per phase (000 §6.2.1): clients for reads, servers for
# writes (the receiving side).
RECEIVER = {"read": "client", "write": "server"}


def _num(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except ValueError:
        return None


def load_rows(run_dir: Path) -> list[dict[str, Any]]:
    """summary.csv of a PFS run as dicts, numbers converted."""
    with (run_dir / "summary.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    text = {"point", "test", "mode", "filesystem", "access", "integrity", "error"}
    return [{k: (v if k in text else _num(v)) for k, v in r.items()} for r in rows]


def factor_of(row: dict[str, Any]) -> tuple[str, Any]:
    """(x label, x value) of a point: clients, streams, or buffer (basic)."""
    test = row.get("test")
    if test == "basic":
        return "buffer (bytes)", row.get("buffer")
    if test == "streams":
        return "concurrent streams", row.get("streams")
    return "clients", row.get("clients")


def series_key(row: dict[str, Any], several_n: bool = False) -> str:
    """What one line of a figure is: the mode; the file system too (basic) and the number of
    I/O servers when the run has several."""
    key = str(row.get("mode"))
    if row.get("test") == "basic":
        key = f"{row.get('filesystem')} / {key}"
    if several_n:
        key = f"N={_fmt(row.get('io_servers'), 0)} {key}"
    return key


def group_of(row: dict[str, Any]) -> tuple[float, str]:
    """The part of a point's factors that a table row shows before its x value: (N, fs)."""
    return (row.get("io_servers") or 0, row.get("filesystem") or "")


def _fmt(v: float | None, digits: int = 1) -> str:
    return "–" if v is None else f"{v:,.{digits}f}"


def _est(e: stats.Estimate, digits: int = 1) -> str:
    if e.mean is None:
        return "–"
    if e.half is None:
        return f"{_fmt(e.mean, digits)} <small>(n=1)</small>"
    return f"{_fmt(e.mean, digits)} <small>± {_fmt(e.half, digits)}</small>"


def _ratio(r: stats.Ratio, scale: float = 1.0) -> str:
    """A change in % with its CI; ``scale`` 100 turns a fraction into %."""
    if r.value is None:
        return "–"
    ci = "" if r.low is None or r.high is None else \
        f" <small>[{scale * r.low:+.1f}, {scale * r.high:+.1f}]</small>"
    return f"{scale * r.value:+.1f} %{ci}"


def phase_table(rows: list[dict[str, Any]], phase: str, modes: list[str]) -> str:
    """MB/s and CPU per side, per factor value and mode, with the change against modes[0]."""
    good = [r for r in rows if not r.get("error") and r.get(f"{phase}_mb_per_s") is not None]
    if not good:
        return ""
    xlabel = factor_of(good[0])[0]
    keys = sorted({(*group_of(r), factor_of(r)[1]) for r in good},
                  key=lambda k: (k[0], k[1], k[2] or 0))
    side = RECEIVER[phase]
    head = (f"<tr><th>I/O servers</th><th>{'file system / ' if good[0].get('test') == 'basic' else ''}"
            f"{html.escape(xlabel)}</th><th>mode</th><th>n</th><th>MB/s</th>"
            "<th>client CPU %</th><th>server CPU %</th>"
            f"<th>{side} CPU µs/KB</th><th>MB/s vs {html.escape(modes[0])}</th>"
            f"<th>relative {side} CPU benefit vs {html.escape(modes[0])}</th></tr>")
    body = []
    for n_io, fs, x in keys:
        sel = {m: [r for r in good if group_of(r) == (n_io, fs)
                   and factor_of(r)[1] == x and r["mode"] == m] for m in modes}
        base = sel[modes[0]]
        for m in modes:
            rs = sel[m]
            if not rs:
                continue
            col = lambda c: [r.get(f"{phase}_{c}") for r in rs]  # noqa: E731
            change = benefit = "–"
            if m != modes[0] and base:
                change = _ratio(stats.tps_change_pct(col("mb_per_s"),
                                                     [r.get(f"{phase}_mb_per_s") for r in base]))
                benefit = _ratio(stats.relative_cpu_benefit(
                    col(f"{side}_cpu_us_per_kb"),
                    [r.get(f"{phase}_{side}_cpu_us_per_kb") for r in base]), scale=100)
            where = f"{html.escape(fs)} / " if fs else ""
            body.append(f"<tr><td>{_fmt(n_io, 0)}</td><td>{where}{_fmt(x, 0)}</td>"
                        f"<td>{html.escape(m)}</td>"
                        f"<td>{len(rs)}</td><td>{_est(stats.mean_ci(col('mb_per_s')))}</td>"
                        f"<td>{_est(stats.mean_ci(col('client_cpu_pct')))}</td>"
                        f"<td>{_est(stats.mean_ci(col('server_cpu_pct')))}</td>"
                        f"<td>{_est(stats.mean_ci(col(f'{side}_cpu_us_per_kb')), 2)}</td>"
                        f"<td>{change}</td><td>{benefit}</td></tr>")
    return (f"<h2>{phase.capitalize()}s</h2><table>{head}{''.join(body)}</table>"
            "<p class=note>Mean <small>± 95 % CI half-width</small> over repetitions. "
            "Relative CPU benefit is computed on CPU per KB of the receiving side "
            f"({side}s for {phase}s, as 000 §6.2.1 reports it); a positive value means the mode "
            "costs less CPU than the first mode.</p>")


def phase_figure(rows: list[dict[str, Any]], phase: str) -> str:
    """Aggregate MB/s against the factor, one line per mode (and file system)."""
    good = [r for r in rows if not r.get("error") and r.get(f"{phase}_mb_per_s") is not None]
    if not good:
        return ""
    xlabel = factor_of(good[0])[0]
    several = len({r.get("io_servers") for r in good}) > 1
    names = list(dict.fromkeys(series_key(r, several) for r in good))
    colors = figures._colors(names)
    series = []
    for name in names:
        pts = []
        for x in sorted({factor_of(r)[1] for r in good if series_key(r, several) == name}):
            e = stats.mean_ci(r[f"{phase}_mb_per_s"] for r in good
                              if series_key(r, several) == name and factor_of(r)[1] == x)
            pts.append((x, e.mean, e.low, e.high))
        series.append(figures.Series(name, colors[name], pts))
    panel = figures.line_panel(f"{phase}s: aggregate MB/s", xlabel, "MB/s", series)
    return f'<svg class=fig viewBox="0 0 560 300" width="560" height="300">{panel}</svg>'


def reference_block(test: str) -> str:
    """The paper's numbers for pfs-concurrent (000 Fig. 10-11), labelled with their hardware."""
    ref = references.reference("pfs")
    if test != "concurrent" or ref is None:
        return ""
    rows = "".join(f"<tr><td>{html.escape(str(r.x))}</td><td>{_fmt(r.with_offload, 0)}</td>"
                   f"<td>{_fmt(r.without_offload, 0)}</td></tr>" for r in ref.rows)
    return (f"<h2>Paper: {html.escape(ref.figure)}</h2><table><tr><th></th>"
            f"<th>{html.escape(ref.labels[0])}</th><th>{html.escape(ref.labels[1])}</th></tr>"
            f"{rows}</table><p class=note>{html.escape(ref.note)} ({references.HARDWARE}): "
            "compare directions and sizes of effects, not absolute values.</p>")


def problems_block(rows: list[dict[str, Any]]) -> str:
    """Failed points and data that did not check out."""
    bad = [r for r in rows if r.get("error") or r.get("integrity") not in ("ok", None)]
    if not bad:
        checked = sum(r.get("integrity") == "ok" for r in rows)
        return (f"<p class=ok>Every point completed; the data of {checked} of {len(rows)} points "
                "was read back and matched its checksum.</p>")
    items = "".join(f"<li><b>{html.escape(str(r['point']))}</b> ({html.escape(str(r['mode']))}): "
                    f"{html.escape(str(r.get('error') or r.get('integrity')))}</li>" for r in bad)
    return f"<h2>Problems</h2><ul class=warn>{items}</ul>"


def render(rows: list[dict[str, Any]], manifest: dict[str, Any]) -> str:
    """The whole page."""
    exp = manifest.get("experiment") or {}
    pfs = exp.get("pfs") or {}
    modes = [m["name"] for m in exp.get("modes", [])] or list(dict.fromkeys(r["mode"]
                                                                             for r in rows))
    title = f"{exp.get('name', 'pfs run')} — {manifest.get('run_id', '')}"
    parts = [f"<h1>{html.escape(title)}</h1>",
             f"<p>{html.escape(str(exp.get('description', '')))}</p>",
             f"<p class=note>Test <b>{html.escape(str(pfs.get('test')))}</b>; I/O servers "
             f"{html.escape(str(pfs.get('io_servers')))}, strip {pfs.get('strip_size')} B, "
             f"storage {html.escape(str(pfs.get('storage')))}; status "
             f"<b>{html.escape(str(manifest.get('status')))}</b>. OrangeFS: "
             f"{html.escape(str(manifest.get('orangefs', '')).replace(chr(10), ', '))}.</p>",
             problems_block(rows)]
    for phase in PHASES:
        parts += [phase_figure(rows, phase), phase_table(rows, phase, modes)]
    parts.append(reference_block(str(pfs.get("test"))))
    parts.append(report._provenance(manifest))
    return ("<!doctype html><html><head><meta charset=utf-8>"
            f"<title>{html.escape(title)}</title><style>{report.CSS}</style></head><body>"
            + "".join(p for p in parts if p) + "</body></html>")


def write_report(run_dir: Path) -> Path:
    """Write RUN/report.html of a PFS run."""
    run_dir = Path(run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    out = run_dir / "report.html"
    out.write_text(render(load_rows(run_dir), manifest), encoding="utf-8")
    return out
