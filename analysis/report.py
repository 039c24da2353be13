"""One run directory (summary.csv + manifest.json + points/) as a self-contained report.html.

What the report shows comes from the run's report spec (analysis/spec.py): manifest.json's
"report", else the spec given to write_report, else a generic spec built from summary.csv's
columns. Top to bottom: header, warnings, the family figure with the paper's numbers beside it,
the paper-vs-measured table, mode comparisons with 95 % CIs, one section per group (a table of
every metric, a chart, CPU cost), the per-second samples behind each point, every row of
summary.csv and the provenance.
"""

from __future__ import annotations

import html
import json
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import figures, load, markup, precision, stats, tables
from analysis import spec as specs
from analysis.markup import MISSING, esc, fmt, number, text

CLIENT_BOUND_ADVICE = (
    "the load generator used ≥85 % of its CPU allowance: TPS is the generator's limit, "
    "not the servers'; give it more cores/processes or use a native engine"
)
BOOL_COLUMNS = frozenset(load.BOOLS)
TEXT_COLUMNS = frozenset(load.TEXT)

Row = dict[str, Any]


# --------------------------------------------------------------------------- context


class Context:
    """Everything the sections need: spec, tidy points (sorted), modes, colours, groups."""

    def __init__(self, rows: list[Row], manifest: dict[str, Any], spec: dict[str, Any],
                 spec_source: str) -> None:
        self.rows = rows
        self.manifest = manifest
        exp = manifest.get("experiment")
        self.experiment: dict[str, Any] = exp if isinstance(exp, dict) else {}
        self.spec = spec
        self.spec_source = spec_source
        points = load.points_frame(rows, manifest, spec) if rows else pd.DataFrame()
        self.group_cols = tables.group_columns(points, spec) if len(points) else []
        self.points = tables.sort_points(points, self.group_cols, spec, self.experiment) \
            if len(points) else points
        self.modes = [str(m) for m in tables.order_of(self.points, "mode", spec,
                                                       self.experiment)]
        self.colors = figures.colors(self.modes)
        self.baseline = tables.baseline_mode(self.modes, self.experiment, spec)
        self.primary = spec["primary"]["column"]
        # a precision run measured every mode once per block: its comparisons are paired
        target = self.experiment.get("precision")
        self.target: dict[str, Any] | None = target if isinstance(target, dict) else None
        self.paired = self.target is not None
        self.spread_from: int | None = int(self.target["min_repetitions"]) \
            if self.target and self.target.get("min_repetitions") else None

    def comparisons(self) -> pd.DataFrame:
        """comparisons.csv's rows: the primary column and the precision target's metric."""
        if self.baseline is None or len(self.modes) < 2 or not len(self.points):
            return pd.DataFrame(columns=tables.COMPARISON_COLUMNS)
        metrics = [self.primary]
        if self.target and self.target.get("metric") not in metrics:
            metrics.append(str(self.target.get("metric")))
        record = self.manifest.get("precision")
        spent = isinstance(record, dict) and record.get("stopped") == "budget"
        return tables.comparisons(self.points, self.baseline, self.group_cols, metrics,
                                  self.modes, self.paired,
                                  self.target.get("half_width_pct") if self.target else None,
                                  spent, self.spread_from)

    @property
    def name(self) -> str:
        """The experiment's name."""
        return text(self.experiment.get("name")) or "tierbench run"


def optional_for(spec: dict[str, Any]) -> Any:
    """The predicate: may this column be empty in a point's row (never the primary column)?"""
    primary = spec["primary"]["column"]
    phases = spec.get("phases") or []

    def optional(column: str) -> bool:
        bare = column
        for p in phases:
            if column.startswith(f"{p}_"):
                bare = column[len(p) + 1:]
        return bare != primary and specs.is_optional(bare, spec)

    return optional


# --------------------------------------------------------------------------- header, warnings


def point_ref(row: Row, cols: list[str]) -> str:
    """'<b>p001</b> (single-4k / offloads-on, rep 1)'."""
    bits = [tables.label(row.get(c)) for c in cols] + [text(row.get("mode"))]
    rep = number(row.get("repetition"))
    where = " / ".join(b for b in bits if b) + (f", rep {int(rep)}" if rep is not None else "")
    return f'<b>{esc(row.get("point")) or "?"}</b> <span class="muted">({html.escape(where)})</span>'


def header(ctx: Context) -> str:
    """Title, run id, times, status, counts, seed, git, description and the spec's settings."""
    m = ctx.manifest
    git = m.get("git") if isinstance(m.get("git"), dict) else {}
    sub = [f"run <code>{esc(m.get('run_id')) or MISSING}</code>"]
    if m.get("started") or m.get("finished"):
        sub.append(f"{esc(m.get('started'))} → {esc(m.get('finished'))}")
    if m.get("status"):
        sub.append(f"status <b>{esc(m.get('status'))}</b>")
    npoints = len(ctx.rows)
    groups = len(tables.groups(ctx.points, [c for c in ctx.group_cols if c != "phase"])) \
        if len(ctx.points) and ctx.group_cols else 0
    first = next((c for c in ctx.spec["factors"] if c in ctx.points), None)
    count = (f" · {len(tables.order_of(ctx.points, first))} {first}"
             f"{'' if first.endswith('s') else 's'}" if first else "")
    sub.append(f"{npoints} point{'' if npoints == 1 else 's'}{count} · {len(ctx.modes)} "
               f"mode{'' if len(ctx.modes) == 1 else 's'}"
               + (f" · {groups} conditions" if groups and ctx.group_cols != [first] else ""))
    if ctx.experiment.get("seed") is not None:
        sub.append(f"run order shuffled with seed {esc(ctx.experiment.get('seed'))}")
    if git.get("revision"):
        sub.append(f"git {esc(str(git['revision'])[:12])}" + (" (dirty)" if git.get("dirty")
                                                               else ""))
    settings = []
    for path in ctx.spec["header"]:
        value: Any = m
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            settings.append(f"{esc(path.split('.')[-1])} <b>{esc(shown.replace(chr(10), ', '))}"
                            "</b>")
    desc = text(ctx.experiment.get("description"))
    return (f'<header><h1>{html.escape(ctx.name)}</h1><p class="sub">{" · ".join(sub)}</p>'
            + (f'<p class="sub">{" · ".join(settings)}</p>' if settings else "")
            + (f'<p class="desc">{html.escape(desc)}</p>' if desc else "") + "</header>")


# What `ok` in a check column (the spec's `checks`) says about a point.
CHECKS = {"integrity": "data read back and matched its checksum",
          "connections_check": "every connection asked for was established from the start of "
                               "the measured window to its middle"}


def warnings(ctx: Context, samples: pd.DataFrame | None, notes: list[str]) -> str:
    """Client-bound points, failed points / errors / missing values, count mismatches, checks,
    unstable results and layout notes; or one line saying there is nothing to warn about."""
    cols = [c for c in ctx.group_cols if c != "phase"]
    missing = tables.missing_values(ctx.rows, optional_for(ctx.spec))
    bound, problems, counts = [], [], []
    checks = [c for c in ctx.spec["checks"] if any(c in r for r in ctx.rows)]
    for row in ctx.rows:
        if load.as_bool(row.get("client_bound")) is True:
            gen = number(row.get("generator_cpu_pct"))
            extra = f" — generator CPU {gen:.1f} %" if gen is not None else ""
            advice = text(row.get("client_bound_advice"))
            extra += f'<br><span class="muted">{html.escape(advice)}</span>' if advice else ""
            bound.append(f"<li>{point_ref(row, cols)}{extra}</li>")
        if load.as_bool(row.get("count_mismatch")) is True:
            tidy = {k: number(row.get(k)) for k in ("requests", "engine_requests",
                                                     "records_requests")}
            counts.append(f"<li>{point_ref(row, cols)}: "
                          f"{html.escape(tables.count_mismatch_text(tidy))}</li>")
        issues = []
        if text(row.get("error")):
            issues.append(f"failed: {esc(row.get('error'))}")
        errors = number(row.get("errors"))
        if errors:
            issues.append(f"{errors:,.0f} request errors")
        for c in checks:
            if text(row.get(c)) and text(row.get(c)) != "ok":
                issues.append(f"{esc(c)}: {esc(row.get(c))}")
        gone = missing.get(str(row.get("point") or "?"), [])
        if gone and text(row.get("error")):
            issues.append(f"{len(gone)} values missing")
        elif gone:
            issues.append("missing " + ", ".join(f"<code>{esc(c)}</code>" for c in gone))
        if issues:
            problems.append(f"<li>{point_ref(row, cols)}: {'; '.join(issues)}</li>")
    parts = []
    if bound:
        parts.append(f'<div class="warn"><h3>Client-bound points ({len(bound)})</h3>'
                     f"<p>{html.escape(CLIENT_BOUND_ADVICE[0].upper() + CLIENT_BOUND_ADVICE[1:])}."
                     f"</p><ul>{''.join(bound)}</ul></div>")
    if problems:
        parts.append('<div class="warn bad"><h3>Points with errors or missing values '
                     f"({len(problems)})</h3><ul>{''.join(problems)}</ul></div>")
    if counts:
        parts.append(f'<div class="warn"><h3>Request counts that disagree ({len(counts)})</h3>'
                     "<p>The engine's own count and its per-request records differ by more "
                     f"than {100 * stats.COUNT_MISMATCH:.0f} % (summary.csv "
                     "<code>count_mismatch</code>, <code>records_requests</code>).</p>"
                     f"<ul>{''.join(counts)}</ul></div>")
    if not ctx.rows:
        parts.append('<div class="warn bad"><h3>No points</h3><p>summary.csv has no rows.</p>'
                     "</div>")
    if len(ctx.points):
        found = [w for w in tables.warnings_for(ctx.points, samples, ctx.group_cols + ["mode"],
                                                ctx.primary)
                 if w.kind in ("unstable", "unstable-point")]
        if found:
            items = "".join(f"<li><b>{esc(w.where)}</b>: {esc(w.message)}</li>" for w in found)
            parts.append(f'<div class="warn"><h3>Unstable results ({len(found)})</h3><p>The '
                         "spread is large: treat these means with care, or run more "
                         f"repetitions / longer windows.</p><ul>{items}</ul></div>")
    if notes:
        items = "".join(f"<li>{esc(n)}</li>" for n in notes)
        parts.append(f'<div class="warn"><h3>Older or partial layout</h3><ul>{items}</ul></div>')
    if checks and ctx.rows and not problems:
        ok = sum(all(text(r.get(c)) == "ok" for c in checks) for r in ctx.rows)
        means = "; ".join(CHECKS.get(c, c) for c in checks)
        parts.append(f'<div class="ok">Every point completed; {ok} of {len(ctx.rows)} points '
                     f"read <code>ok</code> in {', '.join(checks)} ({esc(means)}).</div>")
    elif not parts:
        parts.append('<div class="ok">No warnings: no client-bound points, failed points, request '
                     "errors or missing values.</div>")
    return "".join(parts)


# --------------------------------------------------------------------------- figure, reference


def reference_table(ctx: Context) -> str:
    """The paper's numbers beside the measured ones (with/without = a mode vs the baseline, or
    the factor values the row's `sides` names), labelled as 2004-2008 hardware."""
    ref = ctx.spec.get("reference")
    if not ref:
        return ""
    ok = tables.good(ctx.points) if len(ctx.points) else ctx.points
    other = next((m for m in ctx.modes if m != ctx.baseline), None)
    body = []
    for r in ref["rows"]:
        measured = MISSING
        column, scale = r.get("column") or ctx.primary, r["scale"]
        sub = ok[tables.matches(ok, r["match"])] if r["match"] and len(ok) else ok.iloc[0:0]
        sides = r.get("sides") or ({"column": "mode", "with": other, "without": ctx.baseline}
                                   if other else None)
        if not sub.empty and column in sub:
            def side(value: Any, s: pd.DataFrame = sub, c: str = column,
                     col: str = (sides or {}).get("column", "mode")) -> list[float]:
                if col not in s:
                    return []
                return (s[s[col].map(lambda v: tables.same(v, value))][c] * scale).tolist()

            if r["without"] is None and r["with"] is not None and not r.get("sides"):
                parts = []
                for mode in ctx.modes:
                    e = stats.mean_ci((sub[sub["mode"] == mode][column] * scale).tolist())
                    if e.mean is not None:
                        half = f" ± {e.half:,.0f}" if e.half is not None else ""
                        parts.append(f"{esc(mode)} {e.mean:,.0f}{half}")
                measured = "; ".join(parts) or MISSING
            elif sides:
                a, b = side(sides["with"]), side(sides["without"])
                ea, eb = stats.mean_ci(a), stats.mean_ci(b)
                if ea.mean is not None and eb.mean is not None:  # not an unmeasured side
                    if r["measure"] == "benefit":
                        ch = stats.relative_cpu_benefit(a, b)
                        span = markup.ci_span(ch.value, ch.low, ch.high, scale=100.0, unit=" %")
                        what = "relative CPU benefit"
                    else:
                        ch = stats.tps_change_pct(a, b)
                        span = markup.ci_span(ch.value, ch.low, ch.high, unit=" %")
                        what = "change"
                    measured = (f"{esc(tables.label(sides['with']))} {figures.fmt_value(ea.mean)}"
                                f" vs {esc(tables.label(sides['without']))} "
                                f"{figures.fmt_value(eb.mean)}: {what} {span}")
                    bound = int((sub["client_bound"] == True).sum()) if "client_bound" in sub \
                        else 0  # noqa: E712
                    if bound:
                        measured += (f' <span class="flag">({bound} of {len(sub)} points '
                                     "client-bound: partly the generator's limit)</span>")
        w = MISSING if r["with"] is None else f"{r['with']:,.0f}"
        wo = MISSING if r["without"] is None else f"{r['without']:,.0f}"
        if r["with"] is not None and r["without"]:
            chg = f"{100.0 * (r['with'] / r['without'] - 1.0):+.0f} %"
        else:
            chg = esc(r.get("change")) or MISSING
        body.append(f'<tr><td class="l">{esc(r["x"])}</td><td class="l">{esc(r["quantity"])} '
                    f'<span class="unit">{esc(r["unit"])}</span></td><td class="num">{w}</td>'
                    f'<td class="num">{wo}</td><td class="num">{chg}</td>'
                    f'<td class="l">{measured}</td></tr>')
    rows = "".join(body) or f'<tr><td class="l" colspan="6">{esc(ref["note"])}</td></tr>'
    return (
        f'<h3 class="refh">Paper reference: {esc(ref["figure"])} '
        f'<span class="hw">{specs.HARDWARE}</span></h3>'
        '<div class="scroll"><table class="modes ref"><thead><tr><th class="l">where</th>'
        f'<th class="l">quantity</th><th>{esc(ref["labels"][0])}</th>'
        f'<th>{esc(ref["labels"][1])}</th><th>change</th><th class="l">measured here (this '
        "hardware) [95 % CI]</th></tr>"
        f"</thead><tbody>{rows}</tbody></table></div>"
        + (f'<p class="note">Paper: {esc(ref["note"])}. The paper\'s absolute values are from '
           f"{specs.HARDWARE}; compare the direction and size of the effect, not the "
           "values.</p>" if ref["note"] else ""))


def figure_card(ctx: Context) -> str:
    """The family figure (measured panels and the paper's numbers) and the reference table."""
    if not len(ctx.points):
        return ""
    fig = figures.family_figure(ctx.points, ctx.spec, ctx.experiment)
    source = {"manifest.json": "from manifest.json", "given": "given to the report",
              "generic": "generic, built from summary.csv's columns (the manifest has none)"}
    return (f'<div class="card" id="figure"><h2>{esc(fig.title)}</h2>'
            f'<p class="meta">Experiment family <b>{esc(fig.family)}</b>, kind '
            f'<b>{esc(ctx.spec["kind"])}</b>; report spec {source.get(ctx.spec_source, "")}.'
            f'</p><figure class="famfig">{fig.body}<figcaption>{fig.caption}</figcaption>'
            f"</figure>{reference_table(ctx)}</div>")


# --------------------------------------------------------------------------- comparison


def comparison_card(ctx: Context) -> str:
    """Each mode against the baseline per condition: primary change and relative CPU benefit."""
    if ctx.baseline is None or len(ctx.modes) < 2 or not len(ctx.points):
        return ""
    benefit = [b for b in ctx.spec["benefit"] if b["column"] in ctx.points]
    cmp = tables.compare_modes(ctx.points, ctx.baseline, ctx.group_cols, ctx.primary, benefit,
                               ctx.modes, paired=ctx.paired, spread_from=ctx.spread_from)
    if cmp.empty:
        return ""
    keys = tables.benefit_keys(benefit)
    plabel = ctx.spec["primary"]["label"]
    body = []
    for _, r in cmp.iterrows():
        where = tables.describe(ctx.group_cols, tuple(r[c] for c in ctx.group_cols)) or "all"
        change = markup.ci_span(r["change_pct"], r["change_low"], r["change_high"], unit=" %")
        cells = [f'<td class="l">{esc(where)}</td>',
                 f'<td class="l">{esc(r["mode"])} <span class="muted">vs</span> '
                 f"{esc(ctx.baseline)}</td>",
                 f'<td class="num">{r["n"]} / {r["n_baseline"]}</td>',
                 f'<td class="num">{fmt(ctx.primary, r[ctx.primary])} / '
                 f'{fmt(ctx.primary, r[ctx.primary + "_baseline"])}</td>',
                 f'<td class="num">{change}</td>']
        for key in keys:
            value = r.get(key)
            span = markup.ci_span(None if pd.isna(value) else value, r.get(key + "_low"),
                                  r.get(key + "_high"), scale=100.0, unit=" %")
            cells.append(f'<td class="num">{span}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    head = ('<th class="l">condition</th><th class="l">modes</th><th>reps</th>'
            f'<th>{esc(plabel)}<br><span class="unit">mode / baseline</span></th>'
            f'<th>{esc(plabel)} change<br><span class="unit">% [95 % CI]</span></th>'
            + "".join(f'<th>relative CPU benefit<br><span class="unit">{esc(b["label"])}'
                      + (f" ({esc(', '.join(f'{k}={tables.label(v)}' for k, v in b['where'].items()))})"
                         if b.get("where") else "")
                      + ", (b − a) / b [95 % CI]</span></th>" for b in benefit))
    return (
        '<div class="card" id="comparison"><h2>Comparison between modes</h2>'
        f'<p class="meta">Each mode against the baseline <b>{esc(ctx.baseline)}</b>, per '
        f"condition. {esc(plabel)} change = 100 (mean<sub>mode</sub> / mean<sub>baseline</sub> "
        "− 1). Relative CPU benefit (000 §4) = (b − a) / b with a the mode's and b the "
        "baseline's mean CPU (utilisation in cores, or CPU per KB, as the column says); "
        "positive = the mode uses less CPU. "
        + (f"{esc(plabel)} change intervals: {esc(precision.METHODS[precision.STEIN])} (the run "
           "measured every mode once per block). " if ctx.paired else
           f"{esc(plabel)} change intervals: {esc(precision.METHODS[precision.WELCH])}. ")
        + "Benefit intervals by the delta method with Welch–Satterthwaite degrees of freedom "
        "(see analysis/README.md); — where a benefit does not apply.</p>"
        f'<div class="scroll"><table class="modes"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div></div>")


def precision_card(ctx: Context) -> str:
    """What a precision run resolved: per condition and mode, the stated interval or what it
    would take, and the smallest effect the run could have detected."""
    if ctx.target is None:
        return ""
    cmp = ctx.comparisons()
    metric = str(ctx.target.get("metric"))
    cmp = cmp[cmp["metric"] == metric]
    if cmp.empty:
        return ""
    target = float(ctx.target.get("half_width_pct") or 0)
    record = ctx.manifest.get("precision") if isinstance(ctx.manifest.get("precision"),
                                                         dict) else {}
    rows = []
    for _, r in cmp.iterrows():
        mde = r["mde_pct"]
        rows.append(f'<tr><td class="l">{esc(r["condition"])}</td><td class="l">'
                    f'{esc(r["mode"])} <span class="muted">vs</span> {esc(r["baseline"])}</td>'
                    f'<td class="num">{int(r["repetitions"])}</td>'
                    f'<td class="l">{esc(r["statement"])}</td><td class="num">'
                    f'{MISSING if pd.isna(mde) else f"{mde:.1f} %"}</td></tr>')
    why = {"budget": "the budget was spent before every comparison was resolved",
           "done": "every condition stopped (resolved, or at the maximum of "
                   f"{ctx.target.get('max_repetitions')} blocks)"}.get(
        str(record.get("stopped")), "the run did not finish")
    return (
        '<div class="card" id="precision"><h2>Precision: what this run resolved</h2>'
        f'<p class="meta">Target: every mode against <b>{esc(ctx.baseline)}</b> on '
        f"<b>{esc(metric)}</b> within ±{target:g} % (95 % interval), "
        f"{ctx.target.get('min_repetitions')} to {ctx.target.get('max_repetitions')} blocks"
        + (f", budget {ctx.target.get('budget_min'):g} min" if ctx.target.get("budget_min")
           else "")
        + f"; {esc(why)}. Intervals: {esc(precision.METHODS[precision.STEIN])}. The last "
        "column is the smallest effect these repetitions could tell from none (95 % "
        "confidence, 80 % power). Also in comparisons.csv.</p>"
        '<div class="scroll"><table class="modes"><thead><tr><th class="l">condition</th>'
        '<th class="l">modes</th><th>blocks</th><th class="l">effect [95 % interval]</th>'
        "<th>detectable</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div></div>")


# --------------------------------------------------------------------------- per group


def mode_rows(ctx: Context, section: pd.DataFrame, rest: list[str]
              ) -> list[tuple[str, str, pd.DataFrame]]:
    """(mode, label, rows incl. failed) per rest-factor combination x mode, in order."""
    out = []
    for key, grp in tables.groups(section, rest):
        for mode in ctx.modes:
            sub = grp[grp["mode"] == mode]
            if not sub.empty:
                what = tables.describe(rest, key)
                out.append((mode, mode + (f" · {what}" if what else ""), sub))
    return out


def mode_table(ctx: Context, entries: list[tuple[str, str, pd.DataFrame]]) -> str:
    """Every metric's mean ± 95 % CI half-width per mode (and rest-factor combination)."""
    pts = ctx.points
    metrics = [c for c in ctx.spec["columns"] if c["column"] in pts
               and c["column"] != ctx.primary]
    tiers = [c for c in pts.columns if c.startswith(load.TIER_PREFIX)]
    plabel = ctx.spec["primary"]["label"]
    head = ['<th class="l">mode</th>', '<th title="repetitions">reps</th>',
            f'<th title="{esc(ctx.primary)}">{esc(plabel)}<br><span class="unit">mean ± 95 % CI'
            "</span></th>"]
    head += [f'<th title="{esc(c["column"])}">{esc(c["label"])}</th>' for c in metrics]
    head += [f'<th title="{esc(t)}"><span class="nw">CPU s</span><br>'
             f'<span class="unit">{esc(t[len(load.TIER_PREFIX):])}</span></th>' for t in tiers]
    gen = "generator_cpu_pct" in pts
    bound_col = "client_bound" in pts
    if gen:
        head.append('<th title="generator_cpu_pct">generator CPU %</th>')
    if bound_col:
        head.append('<th title="client_bound">client-bound</th>')
    body = []
    for mode, name, rows in entries:
        ok = tables.good(rows)
        failed = int(rows["failed"].sum())
        reps = str(len(rows)) + (f' <span class="errtxt">({failed} failed)</span>' if failed
                                 else "")
        e = tables.estimate(ok, ctx.primary)
        cells = [f'<td class="l"><span class="sw" style="background:{ctx.colors[mode]}"></span>'
                 f"{esc(name)}</td>", f'<td class="num">{reps}</td>',
                 f'<td class="num">{markup.mean_pm(ctx.primary, e.mean, e.half, br=False)}</td>']
        for c in metrics:
            e = tables.estimate(ok, c["column"])
            cells.append(f'<td class="num">{markup.mean_pm(c["column"], e.mean, e.half)}</td>')
        for t in tiers:
            cells.append(f'<td class="num">{fmt(t, tables.estimate(ok, t).mean)}</td>')
        if gen:
            cells.append(f'<td class="num">'
                         f'{fmt("generator_cpu_pct", tables.estimate(ok, "generator_cpu_pct").mean)}'
                         "</td>")
        if bound_col:
            n = int((rows["client_bound"] == True).sum())  # noqa: E712
            cells.append(f'<td class="num{" flag" if n else ""}">{n} / {len(rows)}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    return (f'<div class="scroll"><table class="modes"><thead><tr>{"".join(head)}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table></div>"
            '<p class="note">Means over repetitions (failed points excluded); ± is the half-width '
            "of the 95 % confidence interval (Student t, df = n − 1); none with one repetition."
            "</p>")


def cost_columns(points: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(group, column, label) of the CPU cost columns the table has, per request / KB / cycles."""
    tiers = [c[len(load.TIER_PREFIX):] for c in points.columns
             if c.startswith(load.TIER_PREFIX) and c != "cpu_s_servers"]
    req, kb, cyc = "CPU µs per request", "CPU µs per KB (service demand)", "cycles per KB"
    cols = [(req, f"cpu_us_per_req_{t}", t) for t in tiers]
    cols += [(req, "server_cpu_us_per_req", "servers"), (req, "host_cpu_us_per_req", "host")]
    cols += [(kb, f"cpu_us_per_kb_{t}", t) for t in tiers]
    cols += [(kb, "client_cpu_us_per_kb", "clients"), (kb, "server_cpu_us_per_kb", "servers"),
             (kb, "host_cpu_us_per_kb", "host")]
    cols += [(cyc, "client_cycles_per_kb", "clients"), (cyc, "server_cycles_per_kb", "servers"),
             (cyc, "host_cycles_per_kb", "host")]
    cols += [(cyc, c, c[len("cycles_per_kb_"):]) for c in points.columns
             if c.startswith("cycles_per_kb_")]
    return [c for c in cols if c[1] in points and points[c[1]].notna().any()]


def cost_table(ctx: Context, entries: list[tuple[str, str, pd.DataFrame]]) -> str:
    """CPU µs per request and per KB (service demand) per tier and for the host, cycles per KB."""
    cols = cost_columns(ctx.points)
    if not cols:
        return ""
    groups = list(dict.fromkeys(g for g, _, _ in cols))
    top = "".join(f'<th colspan="{sum(1 for x in cols if x[0] == g)}">{html.escape(g)}</th>'
                  for g in groups)
    head = "".join(f'<th title="{esc(c)}">{html.escape(lab)}</th>' for _, c, lab in cols)
    body = []
    for mode, name, rows in entries:
        ok = tables.good(rows)
        cells = []
        for _, c, _ in cols:
            e = tables.estimate(ok, c)
            txt = MISSING if e.mean is None else (
                f"{e.mean:,.0f}" if "cycles" in c else f"{e.mean:,.1f}") + (
                f'<br><span class="pm">± {e.half:,.1f}</span>' if e.half is not None else "")
            cells.append(f'<td class="num">{txt}</td>')
        body.append(f'<tr><td class="l"><span class="sw" style="background:{ctx.colors[mode]}">'
                    f'</span>{esc(name)}</td>{"".join(cells)}</tr>')
    src = ctx.points["cycles_source"].dropna() if "cycles_source" in ctx.points else []
    source = src.iloc[0] if len(src) else \
        "no clock known (host.cpu_mhz or a clock in the CPU model): cycles not computed"
    return (
        '<h3 class="costh">CPU cost per request and per KB, per tier and for the host</h3>'
        f'<div class="scroll"><table class="modes cost"><thead><tr><th class="l" rowspan="2">'
        f"mode</th>{top}</tr><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        "</div>"
        '<p class="note">Mean ± 95 % CI half-width. CPU µs per KB is the service demand '
        "(netperf's name): CPU time over the measured window per KB moved. Tier CPU = the "
        "container cgroup's CPU time; host = busy ticks of /proc/stat (user, nice, system, "
        "irq, softirq). KB = 1024 bytes delivered to the client (for a file system phase: "
        f"moved in that phase). Cycles per KB: <b>{esc(source)}</b>.</p>")


NODE_FIGURES = (("busy_s", "busy CPU s"), ("usr_pct", "usr %"), ("sys_pct", "sys %"),
                ("softirq_pct", "softirq %"), ("idle_pct", "idle %"))


def node_table(ctx: Context, entries: list[tuple[str, str, pd.DataFrame]]) -> str:
    """A cluster run's CPU per node (node_<name>_<figure> columns) per mode; '' on one host."""
    pts = ctx.points
    names = sorted({c[len("node_"):-len("_busy_s")] for c in pts.columns
                    if c.startswith("node_") and c.endswith("_busy_s")})
    if not names:
        return ""
    top = "".join(f'<th colspan="{len(NODE_FIGURES)}">{esc(n)}</th>' for n in names)
    head = "".join(f'<th title="node_{esc(n)}_{k}">{esc(label)}</th>'
                   for n in names for k, label in NODE_FIGURES)
    body = []
    for mode, name, rows in entries:
        ok = tables.good(rows)
        cells = []
        for n in names:
            for k, _ in NODE_FIGURES:
                e = tables.estimate(ok, f"node_{n}_{k}")
                cells.append(f'<td class="num">{MISSING if e.mean is None else f"{e.mean:,.1f}"}'
                             "</td>")
        body.append(f'<tr><td class="l"><span class="sw" style="background:{ctx.colors[mode]}">'
                    f'</span>{esc(name)}</td>{"".join(cells)}</tr>')
    return ('<h3 class="costh">CPU per node (cluster)</h3>'
            f'<div class="scroll"><table class="modes cost"><thead><tr><th class="l" '
            f'rowspan="2">mode</th>{top}</tr><tr>{head}</tr></thead><tbody>{"".join(body)}'
            "</tbody></table></div>"
            '<p class="note">Means over repetitions: each node\'s /proc/stat over the measured '
            "window, sampled on the node at 1 Hz and merged on the controller's clock. Nodes "
            "that share one kernel (the lab's containers) each show the whole machine.</p>")


def sections(ctx: Context) -> tuple[str, str]:
    """One section per value of the spec's `sections` columns (and a table of contents)."""
    if not len(ctx.points):
        return "", ""
    by = [c for c in ctx.spec["sections"] if c in ctx.points]
    rest = [c for c in ctx.group_cols if c not in by]
    out, toc = [], []
    for i, (key, section) in enumerate(tables.groups(ctx.points, by), 1):
        title = " ".join(f'<span class="muted">{esc(specs.label(c)[:1].upper() + specs.label(c)[1:])}</span> '
                         f"{esc(tables.label(v)) or MISSING}" for c, v in zip(by, key)) \
            or '<span class="muted">All points</span>'
        toc.append(f'<a href="#group-{i}">{esc(tables.describe(by, key)) or "all"}</a>')
        entries = mode_rows(ctx, section, rest)
        meta = [f"{section['point'].nunique()} point{'s' if section['point'].nunique() != 1 else ''}"]
        for c, unit in (("engine", ""), ("users", ""), ("window_s", " s")):
            if c in section and c not in by + rest:
                vals = [tables.label(v) for v in dict.fromkeys(section[c]) if tables.label(v)]
                meta.append(f"{c.replace('_s', '')} {', '.join(vals) or MISSING}{unit}")
        chart = figures.group_chart(section, ctx.spec, ctx.experiment, rest,
                                    [m for m in ctx.modes if m in set(section["mode"])],
                                    f"g{i}")
        dashed = "client_bound" in section and bool((section["client_bound"] == True).any())  # noqa: E712
        caption = figures.RANGE_NOTE + " The 95 % CIs are in the table." + (
            " Dashed outline: at least one repetition was client-bound." if dashed else "")
        out.append(f'<section class="group" id="group-{i}"><h2>{title}</h2>'
                   f'<p class="meta">{html.escape(" · ".join(meta))}</p>'
                   f"{mode_table(ctx, entries)}"
                   + (f"<figure>{chart}<figcaption>{caption}</figcaption></figure>" if chart
                      else "")
                   + f"{cost_table(ctx, entries)}{node_table(ctx, entries)}</section>")
    return "".join(out), " · ".join(toc)


# --------------------------------------------------------------------------- samples card


def sparkline(grp: pd.DataFrame) -> str:
    """Per-second TPS as a 160x28 polyline, the measured window shaded."""
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


def check(recomputed: float | None, summary: Any, rel: float, abs_tol: float = 0.0,
          digits: int = 2) -> str:
    """'12.34 = summary' (green) or '≠ summary' (red), '—' without a recomputed value."""
    value = number(summary)
    if recomputed is None or value is None:
        return MISSING
    same = math.isclose(recomputed, value, rel_tol=rel, abs_tol=abs_tol)
    return (f'{recomputed:,.{digits}f} <span class="{"okt" if same else "errtxt"}">'
            f'{"= summary" if same else "≠ summary"}</span>')


def samples_card(ctx: Context, samples: pd.DataFrame | None,
                 recomputed: dict[str, dict[str, Any]] | None) -> str:
    """Per point, in run order: window, warm-up, per-second TPS and the recomputed numbers."""
    if samples is None or samples.empty or not len(ctx.points):
        return ""
    by_point = dict(tuple(samples.groupby("point", sort=False)))
    cols = [c for c in ctx.group_cols if c != "phase"]
    body = []
    for _, r in ctx.points.drop_duplicates("point").sort_values("order").iterrows():
        pid = r["point"]
        grp = by_point.get(pid)
        if grp is None:
            continue
        rec = (recomputed or {}).get(pid, {})
        meas = grp[grp["phase"] == "measured"]
        cv = meas["tps"].std(ddof=1) / meas["tps"].mean() if len(meas) > 1 and \
            meas["tps"].mean() else None
        ltps = rec.get("locust_window_tps")
        locust = MISSING if ltps is None else (
            f'{ltps:,.0f} <span class="pm">over {rec.get("locust_window_s", 0):.0f} s</span>')
        where = tables.describe(cols, tuple(r[c] for c in cols))
        body.append(
            f'<tr><td class="l">{esc(pid)}</td><td class="num">{int(r["order"])}</td>'
            f'<td class="l">{esc(where)}</td><td class="l">{esc(r["mode"])}</td>'
            f'<td class="l">{esc(rec.get("window_source", grp["window_source"].iloc[0]))}</td>'
            f'<td class="num">{(grp["phase"] == "warm-up").sum()}</td>'
            f'<td class="num">{len(meas)}</td>'
            f'<td class="num">{MISSING if cv is None else f"{100 * cv:.1f} %"}</td>'
            f"<td>{sparkline(grp)}</td>"
            f'<td class="num">{check(rec.get("tps"), r.get("tps"), 1e-4)}</td>'
            f'<td class="num">{check(rec.get("cpu_s_servers"), r.get("cpu_s_servers"), 1e-3, 1e-4, 3)}'
            f'</td><td class="num">{locust}</td></tr>')
    head = ", ".join(specs.label(c) for c in cols) or "condition"
    return (
        '<div class="card" id="traceability"><h2>From samples to numbers</h2>'
        '<p class="meta">Per point, in run order: the measured window (recorded by the runner, '
        "or the sample pair after the warm-up that reproduces summary.csv), the 1 Hz intervals "
        "excluded as warm-up and counted as measured, the variation of per-second TPS inside "
        "the window, per-second TPS (shaded: measured window) and the numbers recomputed from "
        "points/&lt;id&gt;/samples.jsonl and the request log, requests.parquet or an older run's "
        "requests.csv (— where the point has none). The "
        "last column is the load generator's own count (locust_stats_history.csv, cumulative "
        "totals stamped to the second, so ± a second's worth of requests).</p>"
        '<div class="scroll"><table class="modes trace-tbl"><thead><tr><th class="l">point</th>'
        f'<th>run order</th><th class="l">{esc(head)}</th><th class="l">mode</th>'
        '<th class="l">window</th><th>warm-up s</th><th>measured s</th>'
        "<th>per-second TPS CV</th><th>per-second TPS</th><th>TPS from the request log</th>"
        "<th>server CPU s from samples</th><th>Locust's own TPS in the window</th></tr></thead>"
        f"<tbody>{''.join(body)}</tbody></table></div></div>")


# --------------------------------------------------------------------------- all points


def cell(column: str, value: Any, optional: bool) -> str:
    """One cell of the all-points table: escaped, numbers formatted and right-aligned; an
    empty value shown as — (red unless the column may be empty)."""
    gone = f'<td class="{"na" if optional else "missing"}">{MISSING}</td>'
    if column in BOOL_COLUMNS:
        flag = load.as_bool(value)
        if flag is pd.NA:
            return gone
        return '<td class="flag">yes</td>' if flag else "<td>no</td>"
    if column in TEXT_COLUMNS:
        t = text(value)
        if not t:
            return "<td></td>" if column == "error" else gone
        return f'<td{" class=err" if column == "error" else ""}>{esc(t)}</td>'
    n = number(value)
    if n is None:
        t = esc(value) if not tables.is_empty(value) else ""
        return f"<td>{t}</td>" if t else gone
    return f'<td class="num">{fmt(column, n)}</td>'


def points_table(ctx: Context, per_table: int = 14) -> str:
    """Every row of summary.csv, in run order, columns split into tables of `per_table`."""
    columns = list(dict.fromkeys(c for r in ctx.rows for c in r if isinstance(c, str)))
    ident = [c for c in ("point", *ctx.spec["factors"], "mode", "repetition") if c in columns]
    rest = [c for c in columns if c not in ident]
    optional = optional_for(ctx.spec)
    chunks = [rest[i: i + per_table] for i in range(0, len(rest), per_table)] or [[]]
    out = []
    for chunk in chunks:
        cols = ident + chunk
        body = []
        for row in ctx.rows:
            classes = []
            if load.as_bool(row.get("client_bound")) is True:
                classes.append("cb")
            if text(row.get("error")) or number(row.get("errors")):
                classes.append("bad")
            attr = f' class="{" ".join(classes)}"' if classes else ""
            body.append(f"<tr{attr}>{''.join(cell(c, row.get(c), optional(c)) for c in cols)}"
                        "</tr>")
        head = "".join(f'<th title="{esc(c)}">{esc(c).replace("_", "_<wbr>")}</th>'
                       for c in cols)
        out.append(f'<div class="scroll"><table class="points"><thead><tr>{head}</tr></thead>'
                   f"<tbody>{''.join(body)}</tbody></table></div>")
    return "".join(out)


# --------------------------------------------------------------------------- page


def render_report(rows: list[Row], manifest: dict[str, Any],
                  samples: pd.DataFrame | None = None,
                  recomputed: dict[str, dict[str, Any]] | None = None,
                  notes: list[str] | None = None, spec: dict[str, Any] | None = None) -> str:
    """Summary rows (dicts, as read from summary.csv) + manifest (+ per-second samples) as one
    self-contained HTML page. The spec: manifest "report", else `spec`, else generic."""
    manifest = manifest if isinstance(manifest, dict) else {}
    rows = [dict(r) for r in rows]
    header_cols = list(dict.fromkeys(c for r in rows for c in r))
    resolved, source, spec_notes = load.resolve_spec(manifest, spec, rows, header_cols)
    ctx = Context(rows, manifest, resolved, source)
    notes = list(notes or []) + [n for n in spec_notes if n not in (notes or [])]
    body, toc = sections(ctx)
    return markup.page(
        f"{ctx.name} — {text(manifest.get('run_id'))}",
        header(ctx) + warnings(ctx, samples, notes) + figure_card(ctx) + precision_card(ctx)
        + comparison_card(ctx)
        + (f'<p class="sub">Sections: {toc}</p>' if toc else "") + body
        + samples_card(ctx, samples, recomputed)
        + '<div class="card" id="points"><h2>All points</h2><p class="meta">Every row of '
          "summary.csv in run order (columns split into groups to fit); client-bound rows are "
          "shaded amber, failed rows red; a grey — is a value that does not apply to that "
          "point, a red — one that is missing.</p>" + points_table(ctx)
        + '</div><div class="card"><h2>Provenance</h2><p class="meta">manifest.json, without '
          "the per-point entries.</p>" + markup.provenance(manifest) + "</div>")


def write_report(run_dir: Path, progress: load.Progress | None = None,
                 spec: dict[str, Any] | None = None) -> Path:
    """Write RUN/report.html from summary.csv, manifest.json and the points' samples.

    The report spec is manifest.json's "report"; `spec` is used only when the manifest has
    none; with neither, a generic spec is built from summary.csv's columns. A damaged or
    missing sample file, or an unusable spec, never stops the report: it says what it could
    not use."""
    run_dir = Path(run_dir)
    summary, manifest_path = run_dir / "summary.csv", run_dir / "manifest.json"
    manifest: dict[str, Any] = {}
    notes: list[str] = []
    if manifest_path.exists():
        try:
            loaded = json.loads(manifest_path.read_text(encoding="utf-8"))
            manifest = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError) as exc:
            notes.append(f"manifest.json could not be read ({exc}): no provenance")
    rows = load.read_summary_rows(summary) if summary.exists() else []
    samples, recomputed = None, {}
    if rows:
        try:
            run = load.load_run(run_dir, spec)
            notes += [n for n in run.notes if n not in notes]
            if run.spec["samples"]:
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
    out.write_text(render_report(rows, manifest, samples, recomputed, notes, spec),
                   encoding="utf-8")
    write_comparisons(run_dir, rows, manifest, spec)
    return out


def write_comparisons(run_dir: Path, rows: list[Row], manifest: dict[str, Any],
                      spec: dict[str, Any] | None = None) -> Path:
    """comparisons.csv beside summary.csv: one row per condition x mode x metric."""
    header_cols = list(dict.fromkeys(c for r in rows for c in r))
    resolved, source, _ = load.resolve_spec(manifest, spec, rows, header_cols)
    table = Context(rows, manifest, resolved, source).comparisons()
    out = Path(run_dir) / "comparisons.csv"
    table.to_csv(out, index=False, float_format="%.6g")
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
