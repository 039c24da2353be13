"""Tidy statistics tables: factor order, means and 95 % CIs per group, comparisons between modes,
warnings and missing values."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis import stats
from tierbench.stats import precision

ID_COLUMNS = frozenset({"point", "trace", "mode", "repetition", "engine", "error", "failed",
                        "order", "trace_kind", "cycles_source", "client_bound", "docroot",
                        "class", "phase", "test", "filesystem", "access", "integrity",
                        "count_mismatch", "client_bound_advice", "generator_cpu_scope",
                        "unsteady", "unsteady_why", "deployment"})
MISSING = "—"


def metric_columns(points: pd.DataFrame) -> list[str]:
    """The numeric columns of a per-point table that are measurements (not identifiers)."""
    return [c for c in points.columns
            if c not in ID_COLUMNS and pd.api.types.is_numeric_dtype(points[c])]


def good(points: pd.DataFrame) -> pd.DataFrame:
    """The points that did not fail."""
    return points[~points["failed"].astype(bool)] if "failed" in points else points


# --------------------------------------------------------------------------- values and order


def is_empty(value: Any) -> bool:
    """None, NaN, pd.NA or blank text."""
    if value is None or value is pd.NA:
        return True
    if isinstance(value, float):
        return math.isnan(value)
    return isinstance(value, str) and not value.strip()


def label(value: Any) -> str:
    """A factor value as text: 16.0 -> '16', '256' -> '256', None -> ''."""
    if is_empty(value):
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        f = float(value)
        return str(int(f)) if f.is_integer() else f"{f:g}"
    text = str(value).strip()
    try:
        f = float(text)
    except ValueError:
        return text
    return label(f) if math.isfinite(f) else text


def same(a: Any, b: Any) -> bool:
    """Two factor values are the same (256 == 256.0 == '256')."""
    return label(a) == label(b)


def matches(points: pd.DataFrame, where: dict[str, Any] | None) -> pd.Series:
    """Rows that satisfy a filter {column: value or [values]}; a missing column matches none."""
    keep = pd.Series(True, index=points.index)
    for col, want in (where or {}).items():
        if col not in points:
            return pd.Series(False, index=points.index)
        wanted = {label(w) for w in (want if isinstance(want, list) else [want])}
        keep &= points[col].map(lambda v, w=wanted: label(v) in w)
    return keep


def modes_in_order(run_modes: list[str], experiment: dict[str, Any]) -> list[str]:
    """Modes in the experiment's order (then any others in order of appearance)."""
    listed = []
    for m in experiment.get("modes") or []:
        listed.append(str(m.get("name")) if isinstance(m, dict) else str(m))
    return [m for m in listed if m in run_modes] + [m for m in run_modes if m not in listed]


def given_order(column: str, spec: dict[str, Any] | None,
                experiment: dict[str, Any] | None) -> list[Any] | None:
    """The order a column's values should follow: the spec's `order`, else the experiment's
    own list (traces, docroots, modes, phases), else None."""
    spec, experiment = spec or {}, experiment or {}
    if column in (spec.get("order") or {}):
        return list(spec["order"][column])
    if column == "trace" and experiment.get("traces"):
        return [t.get("name") if isinstance(t, dict) else t for t in experiment["traces"]]
    if column == "mode" and experiment.get("modes"):
        return [m.get("name") if isinstance(m, dict) else m for m in experiment["modes"]]
    if column == "phase" and spec.get("phases"):
        return list(spec["phases"])
    stack = got if isinstance(got := experiment.get("stack"), dict) else {}
    if column in stack and isinstance(stack[column], list):
        return list(stack[column])
    return None


def order_of(points: pd.DataFrame, column: str, spec: dict[str, Any] | None = None,
             experiment: dict[str, Any] | None = None) -> list[Any]:
    """A column's distinct values in the experiment's order (spec `order`, the experiment's own
    lists); values it does not list follow, numbers ascending, others as first seen."""
    if column not in points:
        return []
    values = [v for v in dict.fromkeys(points[column].tolist()) if not is_empty(v)]
    ranked: list[Any] = []
    for want in given_order(column, spec, experiment) or []:
        for v in values:
            if same(v, want) and v not in ranked:
                ranked.append(v)
    rest = [v for v in values if v not in ranked]
    numeric = [v for v in rest if isinstance(v, int | float) and not isinstance(v, bool)]
    if rest and len(numeric) == len(rest):
        rest = sorted(rest)
    return ranked + rest


def present(points: pd.DataFrame, columns: Iterable[str]) -> list[str]:
    """The columns among `columns` that the table has (order kept, duplicates dropped)."""
    return [c for c in dict.fromkeys(columns) if c in points]


def group_columns(points: pd.DataFrame, spec: dict[str, Any]) -> list[str]:
    """The columns that identify a condition besides mode and repetition: phase + factors."""
    return present(points, (["phase"] if spec.get("phases") else []) + list(spec["factors"]))


def sort_points(points: pd.DataFrame, columns: list[str], spec: dict[str, Any] | None = None,
                experiment: dict[str, Any] | None = None) -> pd.DataFrame:
    """Rows sorted by each column's experiment order (then run order)."""
    if points.empty:
        return points
    keys = {}
    for c in present(points, columns):
        rank = {label(v): i for i, v in enumerate(order_of(points, c, spec, experiment))}
        keys[f"__rank_{c}"] = points[c].map(lambda v, r=rank: r.get(label(v), len(r)))
    if not keys:
        return points
    by = list(keys) + (["order"] if "order" in points else [])
    return points.assign(**keys).sort_values(by, kind="stable").drop(columns=list(keys))


def groups(points: pd.DataFrame, by: list[str]) -> list[tuple[tuple[Any, ...], pd.DataFrame]]:
    """(key, rows) per distinct combination of `by`, in the rows' order; one group when empty."""
    if not by:
        return [((), points)]
    out = []
    for key, grp in points.groupby(list(by), sort=False, dropna=False):
        out.append((key if isinstance(key, tuple) else (key,), grp))
    return out


FORMATS = {"io_servers": "N={}", "users": "{} users", "clients": "{} clients",
           "threads": "{} threads", "connections": "{} connections", "streams": "{} streams",
           "case": "case {}", "buffer": "{} B buffer", "write_size": "{} B writes"}


def describe(columns: list[str], key: tuple[Any, ...]) -> str:
    """A group's key as text: 'single-4k · 16 users', 'read · N=6 · 4 clients'."""
    bits = [FORMATS.get(c, "{}").format(label(v)) for c, v in zip(columns, key) if label(v)]
    return " · ".join(bits)


# --------------------------------------------------------------------------- statistics


def group_stats(points: pd.DataFrame, by: tuple[str, ...] | list[str] = ("trace", "mode"),
                metrics: list[str] | None = None) -> pd.DataFrame:
    """Long table: one row per group x metric with n, mean, sd, 95 % CI (t, df = n - 1) and CV."""
    by = [c for c in by if c in points]
    cols = list(by) + ["metric", "n", "mean", "sd", "ci_half", "ci_low", "ci_high", "cv"]
    ok = good(points)
    metrics = metrics or metric_columns(points)
    rows = []
    if ok.empty:
        return pd.DataFrame(columns=cols)
    for key, grp in groups(ok, by):
        for m in metrics:
            if m not in grp:
                continue
            e = stats.mean_ci(grp[m].tolist())
            rows.append({**dict(zip(by, key)), "metric": m, "n": e.n, "mean": e.mean,
                         "sd": e.sd, "ci_half": e.half, "ci_low": e.low, "ci_high": e.high,
                         "cv": e.cv})
    return pd.DataFrame(rows, columns=cols)


def estimate(points: pd.DataFrame, column: str) -> stats.Estimate:
    """Mean and CI of one column over the non-failed rows given."""
    ok = good(points)
    return stats.mean_ci(ok[column].tolist() if column in ok else [])


def benefit_keys(benefit: list[dict[str, Any]]) -> list[str]:
    """The compare_modes column of each benefit entry: benefit_<column> (+ _<n> if repeated)."""
    keys: list[str] = []
    for i, item in enumerate(benefit):
        key = f"benefit_{item['column']}"
        keys.append(key if key not in keys else f"{key}_{i}")
    return keys


def change_of(sub: pd.DataFrame, base: pd.DataFrame, column: str,
              paired: bool, spread_from: int | None = None) -> precision.Change:
    """A mode's change over the baseline on one column: paired by repetition (the block) in a
    run measured in blocks (the spread from its first ``spread_from`` blocks, as the run
    decided when to stop; blocks nested in the deployments of a ``deployment`` column), else
    Welch (tierbench.stats.precision)."""
    if paired and "repetition" in sub and "repetition" in base:
        where = None
        if "deployment" in base and base["deployment"].notna().any():
            where = {r: d for r, d in zip(base["repetition"], base["deployment"])
                     if not pd.isna(d)}
        return precision.paired_change(dict(zip(sub["repetition"], sub[column])),
                                       dict(zip(base["repetition"], base[column])),
                                       spread_from, where)
    return precision.welch_change(sub[column].tolist(), base[column].tolist())


def compare_modes(points: pd.DataFrame, baseline: str, by: tuple[str, ...] | list[str] = (),
                  primary: str = "tps", benefit: list[dict[str, Any]] | None = None,
                  modes: list[str] | None = None, paired: bool = False,
                  spread_from: int | None = None) -> pd.DataFrame:
    """Per group (by) and mode: change of the primary column (%) and relative CPU benefit over
    the baseline, with 95 % CIs.

    Columns: the `by` columns, mode, baseline, n, n_baseline, <primary>, <primary>_baseline,
    change_pct, change_low, change_high, method (paired within blocks when ``paired``, the run
    having measured its modes in blocks; else Welch: tierbench.stats.precision) and, per
    benefit entry ({column, where}), benefit_<column> with _low and _high: (b - a) / b with a the mode's and b
    the baseline's mean (delta method), positive when the mode uses less CPU; None where the
    entry's `where` does not hold for the group."""
    by = [c for c in by if c in points]
    benefit = benefit or []
    keys = benefit_keys(benefit)
    ok = good(points)
    rows = []
    for key, grp in groups(ok, by):
        base = grp[grp["mode"] == baseline]
        if base.empty:
            continue
        names = [m for m in (modes or list(dict.fromkeys(grp["mode"]))) if m != baseline]
        for mode in names:
            sub = grp[grp["mode"] == mode]
            if sub.empty:
                continue
            row: dict[str, Any] = {**dict(zip(by, key)), "mode": mode, "baseline": baseline,
                                   "n": len(sub), "n_baseline": len(base),
                                   primary: sub[primary].mean(),
                                   f"{primary}_baseline": base[primary].mean()}
            c = change_of(sub, base, primary, paired, spread_from)
            row.update(change_pct=c.effect_pct, change_low=c.low_pct, change_high=c.high_pct,
                       method=c.method)
            for item, bkey in zip(benefit, keys):
                col, applies = item["column"], matches(grp, item.get("where")).all()
                b = stats.Ratio(None)
                if applies and col in sub:
                    b = stats.relative_cpu_benefit(sub[col].tolist(), base[col].tolist())
                row.update({bkey: b.value, f"{bkey}_low": b.low, f"{bkey}_high": b.high})
            rows.append(row)
    return pd.DataFrame(rows)


COMPARISON_COLUMNS = ["condition", "mode", "baseline", "metric", "effect_pct", "low_pct",
                      "high_pct", "half_width_pct", "method", "repetitions", "resolved",
                      "target_half_width_pct", "repetitions_needed", "mde_pct", "met",
                      "lag1", "deployments", "deployment_share", "statement"]


def comparisons(points: pd.DataFrame, baseline: str, by: list[str], metrics: list[str],
                modes: list[str], paired: bool, target_pct: float | None = None,
                budget_spent: bool = False, spread_from: int | None = None,
                decision_pct: float | None = None) -> pd.DataFrame:
    """comparisons.csv: one row per condition x mode x metric, each mode against the baseline:
    effect %, 95 % interval, method, repetitions (blocks when paired), resolved (interval at
    most ``target_pct`` wide on each side; empty without a target), the repetitions the target
    needs at the observed spread, the minimum detectable effect (95 %, 80 % power), and the
    report's sentence (``budget_spent``: the run stopped because its budget ran out). In a
    precision run (``spread_from``: its first blocks) resolved and the sentence come from
    tierbench.stats.precision.assess, as the runner decided: ``met`` names the target met (precision
    or a decision on ``decision_pct``); ``lag1`` is the blocks' lag-1 autocorrelation."""
    by = [c for c in by if c in points]
    ok = good(points)
    rows = []
    for key, grp in groups(ok, by):
        base = grp[grp["mode"] == baseline]
        for mode in [m for m in modes if m != baseline]:
            sub = grp[grp["mode"] == mode]
            if sub.empty or base.empty:
                continue
            for metric in [m for m in metrics if m in grp]:
                c = change_of(sub, base, metric, paired, spread_from)
                outcome = None
                if target_pct is not None and spread_from and paired:
                    first = change_of(sub[sub["repetition"] <= spread_from],
                                      base[base["repetition"] <= spread_from], metric, True)
                    outcome = precision.assess(
                        c, first if first.n >= spread_from else None,
                        precision.Target(metric, target_pct, spread_from,
                                         decision_pct=decision_pct))
                rows.append({
                    "condition": describe(by, key) or "all", "mode": mode, "baseline": baseline,
                    "metric": metric, "effect_pct": c.effect_pct, "low_pct": c.low_pct,
                    "high_pct": c.high_pct, "half_width_pct": c.half_width_pct,
                    "method": c.method, "repetitions": c.n,
                    "resolved": None if target_pct is None else
                    outcome.resolved if outcome is not None else c.resolved(target_pct),
                    "target_half_width_pct": target_pct,
                    "repetitions_needed": None if target_pct is None else
                    outcome.planned if outcome is not None and outcome.resolved else
                    precision.blocks_needed(c, target_pct, decision_pct),
                    "mde_pct": c.mde_pct(), "met": outcome.met if outcome else None,
                    "lag1": c.lag1, "deployments": c.deployments,
                    "deployment_share": c.deployment_share,
                    "statement": precision.statement(c, target_pct, not budget_spent,
                                                     outcome, decision_pct)})
    return pd.DataFrame(rows, columns=COMPARISON_COLUMNS)


# --------------------------------------------------------------------------- warnings


@dataclass(frozen=True)
class Warning:
    """One warning shown at the top of a report."""

    kind: str  # client-bound | failed | errors | count-mismatch | check | unstable | ...
    where: str
    message: str


def where_of(row: pd.Series, by: list[str]) -> str:
    """'p001 (single-4k / offloads-on)'."""
    bits = [label(row.get(c)) for c in by if c != "mode"] + [label(row.get("mode"))]
    return f"{row['point']} ({' / '.join(b for b in bits if b)})"


def warnings_for(points: pd.DataFrame, samples: pd.DataFrame | None = None,
                 by: tuple[str, ...] | list[str] = ("trace", "mode"), primary: str = "tps",
                 checks: Iterable[str] = ()) -> list[Warning]:
    """Failed and client-bound points, request errors, engine counts that disagree with the
    per-request records, checks that did not read "ok", and unstable groups or points."""
    out: list[Warning] = []
    by = [c for c in by if c in points]
    per_point = points.drop_duplicates("point") if "point" in points else points
    for _, r in per_point.iterrows():
        where = where_of(r, by)
        if r.get("failed"):
            out.append(Warning("failed", where, f"failed: {r['error']}"))
        if r.get("client_bound") is True:
            gen = r.get("generator_cpu_pct")
            extra = f" (generator CPU {gen:.1f} %)" if isinstance(gen, float) and not \
                math.isnan(gen) else ""
            out.append(Warning("client-bound", where, "load generator saturated" + extra))
        errs = r.get("errors")
        if isinstance(errs, float) and errs > 0:
            out.append(Warning("errors", where, f"{errs:,.0f} request errors"))
        if r.get("count_mismatch") is True:
            out.append(Warning("count-mismatch", where, count_mismatch_text(r)))
        for col in checks:
            val = r.get(col)
            if col in per_point and not is_empty(val) and str(val).strip() != "ok":
                out.append(Warning("check", where, f"{col}: {val}"))
    for key, grp in groups(good(points), by):
        if primary not in grp:
            continue
        e = stats.mean_ci(grp[primary].tolist())
        if e.cv is not None and e.cv > stats.CV_UNSTABLE:
            name = " / ".join(label(k) for k in key if label(k))
            out.append(Warning("unstable", name,
                               f"{primary} varies {100 * e.cv:.0f} % (sd/mean) over {e.n} "
                               f"repetitions, above {100 * stats.CV_UNSTABLE:.0f} %"))
    if samples is not None and not samples.empty:
        measured = samples[samples["phase"] == "measured"]
        for pid, grp in measured.groupby("point", sort=False):
            tps = grp["tps"].dropna()
            if len(tps) < 2 or not tps.mean():
                continue
            cv = tps.std(ddof=1) / tps.mean()
            if cv > stats.CV_UNSTABLE_SECONDS:
                out.append(Warning("unstable-point", str(pid),
                                   f"per-second TPS varies {100 * cv:.0f} % (sd/mean) inside the "
                                   f"measured window, above "
                                   f"{100 * stats.CV_UNSTABLE_SECONDS:.0f} %"))
    return out


def count_mismatch_text(row: pd.Series | dict[str, Any]) -> str:
    """'the engine counted 1,000 requests, its per-request records hold 950 (5.0 % apart)'.

    The engine's own count is `engine_requests` where the row has it (whole run), else
    `requests`."""
    n, rec = row.get("engine_requests"), row.get("records_requests")
    if not isinstance(n, float) or math.isnan(n):
        n = row.get("requests")
    if isinstance(n, float) and isinstance(rec, float) and not math.isnan(n) and \
            not math.isnan(rec):
        apart = abs(n - rec) / max(n, rec, 1.0)
        return (f"the engine counted {n:,.0f} requests, its per-request records hold "
                f"{rec:,.0f} ({100 * apart:.1f} % apart, more than "
                f"{100 * stats.COUNT_MISMATCH:.0f} %): TPS and latency come from different "
                "request sets")
    return ("the engine's request count and its per-request records disagree by more than "
            f"{100 * stats.COUNT_MISMATCH:.0f} %")


def missing_values(rows: list[dict[str, Any]], optional: Callable[[str], bool]
                   ) -> dict[str, list[str]]:
    """Point -> the columns of its summary row that are empty although they apply.

    Not counted: `error`, columns `optional(column)` says may be empty (the advice of a point
    that was not client-bound, per-site numbers of a trace that is not a mix, ...), and columns
    empty in every row (they do not apply to this run, e.g. write_* columns of a read-only
    test)."""
    columns = list(dict.fromkeys(c for r in rows for c in r if isinstance(c, str)))
    used = [c for c in columns if c != "error" and not optional(c)
            and any(not is_empty(r.get(c)) for r in rows)]
    out = {}
    for r in rows:
        gone = [c for c in used if is_empty(r.get(c))]
        if gone:
            out[str(r.get("point") or "?")] = gone
    return out
