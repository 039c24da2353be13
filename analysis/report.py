"""One run directory (summary.csv + manifest.json + points/) as a self-contained report.html.

What the report shows comes from the run's report spec (analysis/spec.py): manifest.json's
"report", else the spec given to write_report, else a generic spec built from summary.csv's
columns. Top to bottom: header, warnings, the family figure with the paper's numbers beside it,
the paper-vs-measured table, mode comparisons with 95 % CIs, one section per group (a table of
every metric, a chart, CPU cost), the per-second samples behind each point, every row of
summary.csv and the provenance.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd
from markupsafe import Markup

from analysis import figures, flamegraph, kernelview, load, loadcurve, markup, stats, tables
from analysis import precision_card as card
from analysis import spec as specs
from analysis.markup import MISSING, fmt, number, text
from tierbench.stats import precision

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
        self.baseline = precision.baseline_mode(self.modes, self.experiment, spec)
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
                                  spent, self.spread_from,
                                  self.target.get("decision_pct") if self.target else None)

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


def point_ref(row: Row, cols: list[str]) -> dict[str, str]:
    """A point as the warnings name it: its id and 'single-4k / offloads-on, rep 1'."""
    bits = [tables.label(row.get(c)) for c in cols] + [text(row.get("mode"))]
    rep = number(row.get("repetition"))
    where = " / ".join(b for b in bits if b) + (f", rep {int(rep)}" if rep is not None else "")
    return {"point": text(row.get("point")), "where": where}


def header(ctx: Context) -> dict[str, Any]:
    """Title, run id, times, status, counts, seed, git, description and the spec's settings."""
    m = ctx.manifest
    git = got if isinstance(got := m.get("git"), dict) else {}
    sub: list[dict[str, Any]] = [{"kind": "run", "value": text(m.get("run_id"))}]
    if m.get("started") or m.get("finished"):
        sub.append({"kind": "times", "started": text(m.get("started")),
                    "finished": text(m.get("finished"))})
    if m.get("status"):
        sub.append({"kind": "status", "value": text(m.get("status"))})
    npoints = len(ctx.rows)
    groups = len(tables.groups(ctx.points, [c for c in ctx.group_cols if c != "phase"])) \
        if len(ctx.points) and ctx.group_cols else 0
    first = next((c for c in ctx.spec["factors"] if c in ctx.points), None)
    count = (f" · {len(tables.order_of(ctx.points, first))} {first}"
             f"{'' if first.endswith('s') else 's'}" if first else "")
    sub.append({"kind": "counts", "value":
                f"{npoints} point{'' if npoints == 1 else 's'}{count} · {len(ctx.modes)} "
                f"mode{'' if len(ctx.modes) == 1 else 's'}"
                + (f" · {groups} conditions" if groups and ctx.group_cols != [first] else "")})
    if ctx.experiment.get("seed") is not None:
        sub.append({"kind": "seed", "value": text(ctx.experiment.get("seed"))})
    if ctx.experiment.get("scale") not in (None, 1):
        sub.append({"kind": "text", "value": f"scaled by {ctx.experiment['scale']:g} (--scale)"})
    load_ = got if isinstance(got := ctx.experiment.get("load"), dict) else {}
    if load_.get("requests_per_client"):
        users = got if isinstance(got := load_.get("users"), list) else [got]
        sub.append({"kind": "text", "value": "request-count run: "
                    f"{load_['requests_per_client']:,} requests per client ("
                    + ", ".join(f"{u} client{'' if u == 1 else 's'}: "
                                f"{int(u) * int(load_['requests_per_client']):,}"
                                for u in users if isinstance(u, int)) + " a point)"})
    if git.get("revision"):
        sub.append({"kind": "git", "value": str(git["revision"])[:12],
                    "dirty": bool(git.get("dirty"))})
    settings = []
    for path in ctx.spec["header"]:
        value: Any = m
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is not None:
            shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            settings.append((text(path.split(".")[-1]), text(shown.replace("\n", ", "))))
    return {"name": ctx.name, "sub": sub, "settings": settings,
            "description": text(ctx.experiment.get("description"))}


# What `ok` in a check column (the spec's `checks`) says about a point.
CHECKS = {"integrity": "data read back and matched its checksum",
          "connections_check": "every connection asked for was established from the start of "
                               "the measured window to its middle"}


def without_phases_not_run(missing: dict[str, list[str]], rows: list[dict[str, Any]],
                           phases: list[str]) -> dict[str, list[str]]:
    """Missing values less the columns of a phase a point did not run: every column of that
    phase empty in a point without an error (pfs-basic's send phases at the native library's
    points). A failed point keeps them."""
    out = {}
    for row in rows:
        point = str(row.get("point") or "?")
        if point not in missing:
            continue
        idle = [] if not tables.is_empty(row.get("error")) else [
            p for p in phases if all(tables.is_empty(v) for k, v in row.items()
                                     if isinstance(k, str) and k.startswith(f"{p}_"))]
        gone = [c for c in missing[point] if not any(c.startswith(f"{p}_") for p in idle)]
        if gone:
            out[point] = gone
    return out


def warnings(ctx: Context, samples: pd.DataFrame | None, notes: list[str]) -> dict[str, Any]:
    """Client-bound points, points with one CPU saturated by interrupt work, failed points / errors / missing values, count mismatches, checks,
    unstable results and layout notes; or that there is nothing to warn about."""
    cols = [c for c in ctx.group_cols if c != "phase"]
    missing = without_phases_not_run(tables.missing_values(ctx.rows, optional_for(ctx.spec)),
                                     ctx.rows, ctx.spec.get("phases") or [])
    bound, problems, counts, saturated = [], [], [], []
    checks = [c for c in ctx.spec["checks"] if any(c in r for r in ctx.rows)]
    for row in ctx.rows:
        if load.as_bool(row.get("client_bound")) is True:
            bound.append({**point_ref(row, cols), "generator": number(row.get("generator_cpu_pct")),
                          "advice": text(row.get("client_bound_advice"))})
        if load.as_bool(row.get("softirq_bound")) is True:
            saturated.append({**point_ref(row, cols), "cpu": text(row.get("softirq_bound_cpu")),
                              "pct": number(row.get("cpu_max_irq_softirq_pct"))})
        if load.as_bool(row.get("count_mismatch")) is True:
            tidy = {k: number(row.get(k)) for k in ("requests", "engine_requests",
                                                     "records_requests")}
            counts.append({**point_ref(row, cols), "text": tables.count_mismatch_text(tidy)})
        issues: list[dict[str, Any]] = []
        if text(row.get("error")):
            issues.append({"kind": "text", "text": f"failed: {text(row.get('error'))}"})
        if load.as_bool(row.get("rate_short")) is True:
            issues.append({"kind": "text", "text": (
                f"offered {number(row.get('target_rate')) or 0:,.0f} requests/s, achieved "
                f"{number(row.get('achieved_rate')) or 0:,.0f}: the generator or the stack could not "
                "keep up, so its latencies are not those of the offered load")})
        errors = number(row.get("errors"))
        if errors:
            issues.append({"kind": "text", "text": f"{errors:,.0f} request errors"})
        if load.as_bool(row.get("cold_cache")) is True:
            issues.append({"kind": "text", "text": (
                f"{100 * (number(row.get('cache_miss_share')) or 0):.0f} % of the window missed "
                "the caches (proxy misses, or bytes read from storage over bytes served): "
                "first touches of a cold cache, or a working set above it; not the warm regime")})
        if load.as_bool(row.get("unsteady")) is True:
            issues.append({"kind": "text", "text": "window not shown steady: "
                           f"{text(row.get('unsteady_why'))}"})
        for c in checks:
            if text(row.get(c)) and text(row.get(c)) != "ok":
                issues.append({"kind": "text", "text": f"{c}: {text(row.get(c))}"})
        gone = missing.get(str(row.get("point") or "?"), [])
        if gone and text(row.get("error")):
            issues.append({"kind": "text", "text": f"{len(gone)} values missing"})
        elif gone:
            issues.append({"kind": "missing", "columns": gone})
        if issues:
            problems.append({**point_ref(row, cols), "issues": issues})
    unstable = []
    if len(ctx.points):
        unstable = [{"where": w.where, "message": w.message}
                    for w in tables.warnings_for(ctx.points, samples, ctx.group_cols + ["mode"],
                                                 ctx.primary)
                    if w.kind in ("unstable", "unstable-point")]
    out: dict[str, Any] = {
        "bound": bound, "saturated": saturated, "problems": problems, "counts": counts, "unstable": unstable,
        "notes": notes, "no_rows": not ctx.rows, "rows": len(ctx.rows), "checks": checks,
        "bound_advice": CLIENT_BOUND_ADVICE[0].upper() + CLIENT_BOUND_ADVICE[1:],
        "count_mismatch_pct": f"{100 * stats.COUNT_MISMATCH:.0f}", "checks_ok": None}
    if checks and ctx.rows and not problems:
        out["checks_ok"] = sum(all(text(r.get(c)) == "ok" for c in checks) for r in ctx.rows)
        out["checks_means"] = "; ".join(CHECKS.get(c, c) for c in checks)
    out["nothing"] = not (bound or saturated or problems or counts or not ctx.rows or unstable
                          or notes)
    return out


# --------------------------------------------------------------------------- figure, reference


def reference(ctx: Context) -> dict[str, Any] | None:
    """The paper's numbers beside the measured ones (with/without = a mode vs the baseline, or
    the factor values the row's `sides` names), labelled as 2004-2008 hardware."""
    ref = ctx.spec.get("reference")
    if not ref:
        return None
    ok = tables.good(ctx.points) if len(ctx.points) else ctx.points
    other = next((m for m in ctx.modes if m != ctx.baseline), None)
    rows = []
    for r in ref["rows"]:
        measured: str | Markup = MISSING
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
                        parts.append(f"{mode} {e.mean:,.0f}{half}")
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
                    measured = Markup("{} {} vs {} {}: {} {}").format(
                        tables.label(sides["with"]), figures.fmt_value(ea.mean),
                        tables.label(sides["without"]), figures.fmt_value(eb.mean), what,
                        Markup(span))
                    bound = int((sub["client_bound"] == True).sum()) if "client_bound" in sub \
                        else 0  # noqa: E712
                    if bound:
                        measured += Markup(' <span class="flag">({} of {} points client-bound: '
                                           "partly the generator's limit)</span>").format(
                            bound, len(sub))
        w = MISSING if r["with"] is None else f"{r['with']:,.0f}"
        wo = MISSING if r["without"] is None else f"{r['without']:,.0f}"
        if r["with"] is not None and r["without"]:
            chg = f"{100.0 * (r['with'] / r['without'] - 1.0):+.0f} %"
        else:
            chg = text(r.get("change")) or MISSING
        rows.append({"x": text(r["x"]), "quantity": text(r["quantity"]), "unit": text(r["unit"]),
                     "with": w, "without": wo, "change": chg, "measured": measured})
    return {"figure": text(ref["figure"]), "labels": [text(x) for x in ref["labels"]],
            "rows": rows, "note": text(ref["note"])}


def figure_card(ctx: Context) -> dict[str, Any] | None:
    """The family figure (measured panels and the paper's numbers) and the reference table."""
    if not len(ctx.points):
        return None
    fig = figures.family_figure(ctx.points, ctx.spec, ctx.experiment)
    source = {"manifest.json": "from manifest.json", "given": "given to the report",
              "generic": "generic, built from summary.csv's columns (the manifest has none)"}
    return {"title": text(fig.title), "family": text(fig.family), "kind": text(ctx.spec["kind"]),
            "source": source.get(ctx.spec_source, ""), "body": Markup(fig.body),
            "caption": Markup(fig.caption), "reference": reference(ctx)}


# --------------------------------------------------------------------------- comparison


def comparison_card(ctx: Context) -> dict[str, Any] | None:
    """Each mode against the baseline per condition: primary change and relative CPU benefit."""
    if ctx.baseline is None or len(ctx.modes) < 2 or not len(ctx.points):
        return None
    benefit = [b for b in ctx.spec["benefit"] if b["column"] in ctx.points]
    cmp = tables.compare_modes(ctx.points, ctx.baseline, ctx.group_cols, ctx.primary, benefit,
                               ctx.modes, paired=ctx.paired, spread_from=ctx.spread_from)
    if cmp.empty:
        return None
    keys = tables.benefit_keys(benefit)
    rows = []
    for _, r in cmp.iterrows():
        spans = []
        for key in keys:
            value = r.get(key)
            spans.append(Markup(markup.ci_span(None if pd.isna(value) else value,
                                               r.get(key + "_low"), r.get(key + "_high"),
                                               scale=100.0, unit=" %")))
        rows.append({
            "where": tables.describe(ctx.group_cols, tuple(r[c] for c in ctx.group_cols))
            or "all", "mode": text(r["mode"]), "n": r["n"], "n_baseline": r["n_baseline"],
            "value": fmt(ctx.primary, r[ctx.primary]),
            "value_baseline": fmt(ctx.primary, r[ctx.primary + "_baseline"]),
            "change": Markup(markup.ci_span(r["change_pct"], r["change_low"], r["change_high"],
                                            unit=" %")),
            "benefits": spans})
    return {"baseline": text(ctx.baseline), "label": text(ctx.spec["primary"]["label"]),
            "paired": ctx.paired,
            "method": precision.METHODS[precision.TWO_STAGE if ctx.paired else precision.WELCH],
            "benefits": [{"label": text(b["label"]),
                          "where": ", ".join(f"{k}={tables.label(v)}"
                                             for k, v in b["where"].items())
                          if b.get("where") else ""} for b in benefit],
            "rows": rows}


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


def mode_table(ctx: Context, entries: list[tuple[str, str, pd.DataFrame]]) -> dict[str, Any]:
    """Every metric's mean ± 95 % CI half-width per mode (and rest-factor combination)."""
    pts = ctx.points
    metrics = [c for c in ctx.spec["columns"] if c["column"] in pts
               and c["column"] != ctx.primary]
    tiers = [c for c in pts.columns if c.startswith(load.TIER_PREFIX)]
    gen, bound_col = "generator_cpu_pct" in pts, "client_bound" in pts
    rows = []
    for mode, name, group in entries:
        ok = tables.good(group)
        e = tables.estimate(ok, ctx.primary)
        row = {"color": ctx.colors[mode], "name": name, "reps": len(group),
               "failed": int(group["failed"].sum()),
               "primary": Markup(markup.mean_pm(ctx.primary, e.mean, e.half, br=False)),
               "metrics": [Markup(markup.mean_pm(c["column"], *_mean_half(ok, c["column"])))
                           for c in metrics],
               "tiers": [fmt(t, tables.estimate(ok, t).mean) for t in tiers],
               "generator": fmt("generator_cpu_pct",
                                tables.estimate(ok, "generator_cpu_pct").mean) if gen else "",
               "bound": int((group["client_bound"] == True).sum()) if bound_col else 0}  # noqa: E712
        rows.append(row)
    return {"primary": ctx.primary, "label": text(ctx.spec["primary"]["label"]),
            "metrics": [{"column": c["column"], "label": text(c["label"])} for c in metrics],
            "tiers": [{"column": t, "name": t[len(load.TIER_PREFIX):]} for t in tiers],
            "generator": gen, "bound": bound_col, "rows": rows}


def _mean_half(points: pd.DataFrame, column: str) -> tuple[float | None, float | None]:
    e = tables.estimate(points, column)
    return e.mean, e.half


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


def cost_table(ctx: Context, entries: list[tuple[str, str, pd.DataFrame]]
               ) -> dict[str, Any] | None:
    """CPU µs per request and per KB (service demand) per tier and for the host, cycles per KB."""
    cols = cost_columns(ctx.points)
    if not cols:
        return None
    groups = list(dict.fromkeys(g for g, _, _ in cols))
    rows = []
    for mode, name, group in entries:
        ok = tables.good(group)
        values = []
        for _, c, _ in cols:
            e = tables.estimate(ok, c)
            if e.mean is None:
                values.append(MISSING)
                continue
            mean = f"{e.mean:,.0f}" if "cycles" in c else f"{e.mean:,.1f}"
            values.append(mean if e.half is None else
                          Markup('{}<br><span class="pm">± {}</span>').format(mean,
                                                                             f"{e.half:,.1f}"))
        rows.append({"color": ctx.colors[mode], "name": name, "cells": values})
    src: Any = ctx.points["cycles_source"].dropna() if "cycles_source" in ctx.points else []
    source = src.iloc[0] if len(src) else \
        "no clock known (host.cpu_mhz or a clock in the CPU model): cycles not computed"
    return {"groups": [(g, sum(1 for x in cols if x[0] == g)) for g in groups],
            "columns": [(c, lab) for _, c, lab in cols], "rows": rows, "source": text(source)}


NODE_FIGURES = (("busy_s", "busy CPU s"), ("usr_pct", "usr %"), ("sys_pct", "sys %"),
                ("softirq_pct", "softirq %"), ("idle_pct", "idle %"))


def node_table(ctx: Context, entries: list[tuple[str, str, pd.DataFrame]]
               ) -> dict[str, Any] | None:
    """A cluster run's CPU per node (node_<name>_<figure> columns) per mode; None on one host."""
    pts = ctx.points
    names = sorted({c[len("node_"):-len("_busy_s")] for c in pts.columns
                    if c.startswith("node_") and c.endswith("_busy_s")})
    if not names:
        return None
    rows = []
    for mode, name, group in entries:
        ok = tables.good(group)
        values = []
        for n in names:
            for k, _ in NODE_FIGURES:
                e = tables.estimate(ok, f"node_{n}_{k}")
                values.append(MISSING if e.mean is None else f"{e.mean:,.1f}")
        rows.append({"color": ctx.colors[mode], "name": name, "cells": values})
    return {"names": names, "figures": NODE_FIGURES, "rows": rows}


def sections(ctx: Context) -> tuple[list[dict[str, Any]], list[tuple[int, str]]]:
    """One section per value of the spec's `sections` columns (and a table of contents)."""
    if not len(ctx.points):
        return [], []
    by = [c for c in ctx.spec["sections"] if c in ctx.points]
    rest = [c for c in ctx.group_cols if c not in by]
    out, toc = [], []
    for i, (key, section) in enumerate(tables.groups(ctx.points, by), 1):
        title = [(specs.label(c)[:1].upper() + specs.label(c)[1:], tables.label(v))
                 for c, v in zip(by, key)]
        toc.append((i, tables.describe(by, key) or "all"))
        entries = mode_rows(ctx, section, rest)
        n = section["point"].nunique()
        meta = [f"{n} point{'s' if n != 1 else ''}"]
        for c, unit in (("engine", ""), ("users", ""), ("window_s", " s")):
            if c in section and c not in by + rest:
                vals = [tables.label(v) for v in dict.fromkeys(section[c]) if tables.label(v)]
                meta.append(f"{c.replace('_s', '')} {', '.join(vals) or MISSING}{unit}")
        chart = figures.group_chart(section, ctx.spec, ctx.experiment, rest,
                                    [m for m in ctx.modes if m in set(section["mode"])],
                                    f"g{i}")
        dashed = "client_bound" in section and bool((section["client_bound"] == True).any())  # noqa: E712
        out.append({"i": i, "title": title, "meta": " · ".join(meta),
                    "modes": mode_table(ctx, entries),
                    "chart": Markup(chart) if chart else None,
                    "caption": figures.RANGE_NOTE + " The 95 % CIs are in the table." + (
                        " Dashed outline: at least one repetition was client-bound."
                        if dashed else ""),
                    "costs": cost_table(ctx, entries), "nodes": node_table(ctx, entries),
                    "kernel": kernelview.table(ctx.points, entries, ctx.colors),
                    "why": kernelview.why_table(ctx.points, entries, ctx.colors,
                                               ctx.baseline)})
    return out, toc


# --------------------------------------------------------------------------- samples card


def sparkline(grp: pd.DataFrame) -> Markup:
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
    return Markup(f'<svg class="spark" width="{w}" height="{h}" viewBox="0 0 {w} {h}">{shade}'
                  f'<polyline points="{pts}" fill="none" stroke="#4e79a7" stroke-width="1.3"/>'
                  "</svg>")


def check(recomputed: float | None, summary: Any, rel: float, abs_tol: float = 0.0,
          digits: int = 2) -> str | Markup:
    """'12.34 = summary' (green) or '≠ summary' (red), '—' without a recomputed value."""
    value = number(summary)
    if recomputed is None or value is None:
        return MISSING
    same = math.isclose(recomputed, value, rel_tol=rel, abs_tol=abs_tol)
    return Markup('{} <span class="{}">{}</span>').format(
        f"{recomputed:,.{digits}f}", "okt" if same else "errtxt",
        "= summary" if same else "≠ summary")


def samples_card(ctx: Context, samples: pd.DataFrame | None,
                 recomputed: dict[str, dict[str, Any]] | None) -> dict[str, Any] | None:
    """Per point, in run order: window, warm-up, per-second TPS and the recomputed numbers."""
    if samples is None or samples.empty or not len(ctx.points):
        return None
    by_point = dict(tuple(samples.groupby("point", sort=False)))
    cols = [c for c in ctx.group_cols if c != "phase"]
    rows = []
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
        rows.append({
            "point": text(pid), "order": int(r["order"]),
            "where": tables.describe(cols, tuple(r[c] for c in cols)), "mode": text(r["mode"]),
            "window": text(rec.get("window_source", grp["window_source"].iloc[0])),
            "warmup": int((grp["phase"] == "warm-up").sum()), "measured": len(meas),
            "cv": MISSING if cv is None else f"{100 * cv:.1f} %", "spark": sparkline(grp),
            "tps": check(rec.get("tps"), r.get("tps"), 1e-4),
            "cpu": check(rec.get("cpu_s_servers"), r.get("cpu_s_servers"), 1e-3, 1e-4, 3),
            "locust": MISSING if ltps is None else Markup(
                '{} <span class="pm">over {} s</span>').format(
                f"{ltps:,.0f}", f"{rec.get('locust_window_s', 0):.0f}")})
    return {"head": ", ".join(specs.label(c) for c in cols) or "condition", "rows": rows}


# --------------------------------------------------------------------------- all points


def cell(column: str, value: Any, optional: bool) -> dict[str, str]:
    """One cell of the all-points table: its text (numbers formatted) and class; an empty
    value shown as — (red unless the column may be empty)."""
    gone = {"cls": "na" if optional else "missing", "text": MISSING}
    if column in BOOL_COLUMNS:
        flag = load.as_bool(value)
        if flag is pd.NA:
            return gone
        return {"cls": "flag", "text": "yes"} if flag else {"cls": "", "text": "no"}
    if column in TEXT_COLUMNS:
        t = text(value)
        if not t:
            return {"cls": "", "text": ""} if column == "error" else gone
        return {"cls": "err" if column == "error" else "", "text": t}
    n = number(value)
    if n is None:
        t = text(value) if not tables.is_empty(value) else ""
        return {"cls": "", "text": t} if t else gone
    return {"cls": "num", "text": fmt(column, n)}


def points_tables(ctx: Context, per_table: int = 14, flames: dict[str, str] | None = None
                  ) -> list[dict[str, Any]]:
    """Every row of summary.csv, in run order, columns split into tables of `per_table`; a
    point with a flame graph (``flames``: point -> page) links to it."""
    columns = list(dict.fromkeys(c for r in ctx.rows for c in r if isinstance(c, str)))
    ident = [c for c in ("point", *ctx.spec["factors"], "mode", "repetition") if c in columns]
    rest = [c for c in columns if c not in ident]
    optional = optional_for(ctx.spec)
    chunks = [rest[i: i + per_table] for i in range(0, len(rest), per_table)] or [[]]
    out = []
    for chunk in chunks:
        cols = ident + chunk
        rows = []
        for row in ctx.rows:
            classes = []
            if load.as_bool(row.get("client_bound")) is True:
                classes.append("cb")
            if text(row.get("error")) or number(row.get("errors")):
                classes.append("bad")
            cells = [cell(c, row.get(c), optional(c)) for c in cols]
            href = (flames or {}).get(text(row.get("point")))
            if href and cols[0] == "point":
                cells[0]["href"] = href
            rows.append({"classes": " ".join(classes), "cells": cells})
        out.append({"columns": cols, "rows": rows})
    return out


# --------------------------------------------------------------------------- page


def render_report(rows: list[Row], manifest: dict[str, Any],
                  samples: pd.DataFrame | None = None,
                  recomputed: dict[str, dict[str, Any]] | None = None,
                  notes: list[str] | None = None, spec: dict[str, Any] | None = None,
                  flames: dict[str, str] | None = None) -> str:
    """Summary rows (dicts, as read from summary.csv) + manifest (+ per-second samples) as one
    self-contained HTML page (analysis/templates/report.html.j2), linking each point's flame
    graph (``flames``: point -> page). The spec: manifest "report", else `spec`, else
    generic."""
    manifest = manifest if isinstance(manifest, dict) else {}
    rows = [dict(r) for r in rows]
    header_cols = list(dict.fromkeys(c for r in rows for c in r))
    resolved, source, spec_notes = load.resolve_spec(manifest, spec, rows, header_cols)
    ctx = Context(rows, manifest, resolved, source)
    notes = list(notes or []) + [n for n in spec_notes if n not in (notes or [])]
    groups, toc = sections(ctx)
    view = {"header": header(ctx), "warnings": warnings(ctx, samples, notes),
            "figure": figure_card(ctx), "precision": card.precision_card(ctx),
            "comparison": comparison_card(ctx), "toc": toc, "sections": groups,
            "loadcurve": loadcurve.card(ctx.points, ctx.group_cols, ctx.modes, ctx.baseline,
                                        ctx.colors) if loadcurve.has_curves(rows) else None,
            "samples": samples_card(ctx, samples, recomputed), "points": points_tables(ctx, flames=flames),
            "flames": [dict(point_ref(r, ctx.group_cols), href=(flames or {})[text(r.get("point"))])
                       for r in rows if text(r.get("point")) in (flames or {})],
            "manifest": markup.provenance_items(manifest),
            "manifest_points": len(manifest["points"])
            if isinstance(manifest.get("points"), dict | list) else 0}
    return markup.render("report.html.j2", title=f"{ctx.name} — {text(manifest.get('run_id'))}",
                         r=view, hardware=specs.HARDWARE)


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
    flames: dict[str, str] = {}
    try:
        flames = flamegraph.write_all(run_dir, {text(r.get("point")): " ".join(
            text(r.get(c)) for c in ("point", "mode", "repetition")) for r in rows})
    except (OSError, ValueError, ImportError) as exc:
        notes.append(f"flame graphs could not be written ({type(exc).__name__}: {exc})")
    out = run_dir / "report.html"
    out.write_text(render_report(rows, manifest, samples, recomputed, notes, spec, flames),
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
