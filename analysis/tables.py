"""Tidy statistics tables: means and 95 % CIs per group, comparisons between modes, warnings."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from analysis import stats

ID_COLUMNS = frozenset({"point", "trace", "mode", "repetition", "engine", "error", "failed",
                        "order", "trace_kind", "cycles_source", "client_bound", "docroot",
                        "class"})
CPU_BENEFIT_COLUMNS = (
    ("server_cpu_util", "server CPU utilisation"),
    ("server_cpu_us_per_kb", "server CPU per KB"),
)


def metric_columns(points: pd.DataFrame) -> list[str]:
    """The numeric columns of a per-point table that are measurements (not identifiers)."""
    return [c for c in points.columns
            if c not in ID_COLUMNS and pd.api.types.is_numeric_dtype(points[c])]


def good(points: pd.DataFrame) -> pd.DataFrame:
    """The points that did not fail."""
    return points[~points["failed"]] if "failed" in points else points


def group_stats(points: pd.DataFrame, by: tuple[str, ...] = ("trace", "mode"),
                metrics: list[str] | None = None) -> pd.DataFrame:
    """Long table: one row per group x metric with n, mean, sd, 95 % CI (t, df = n - 1) and CV."""
    cols = list(by) + ["metric", "n", "mean", "sd", "ci_half", "ci_low", "ci_high", "cv"]
    ok = good(points)
    metrics = metrics or metric_columns(points)
    rows = []
    if ok.empty:
        return pd.DataFrame(columns=cols)
    for key, grp in ok.groupby(list(by), sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
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


def modes_in_order(run_modes: list[str], experiment: dict[str, Any]) -> list[str]:
    """Modes in the experiment's order (then any others in order of appearance)."""
    listed = []
    for m in experiment.get("modes") or []:
        listed.append(str(m.get("name")) if isinstance(m, dict) else str(m))
    return [m for m in listed if m in run_modes] + [m for m in run_modes if m not in listed]


def baseline_mode(modes: list[str], experiment: dict[str, Any]) -> str | None:
    """The mode others are compared against: experiment 'baseline', else a '*-off' mode, else last."""
    if not modes:
        return None
    wanted = experiment.get("baseline")
    if wanted in modes:
        return str(wanted)
    off = [m for m in modes if m.endswith("-off") or m in ("baseline", "default")]
    return off[0] if off else modes[-1]


SWEEPS = ("users", "clients", "threads", "connections", "write_size", "docroot")


def sweep_columns(points: pd.DataFrame) -> list[str]:
    """Factors besides trace and mode that vary within a run (users, docroot, ...)."""
    return [c for c in SWEEPS if c in points and points[c].dropna().nunique() > 1]


def compare_modes(points: pd.DataFrame, baseline: str,
                  by: tuple[str, ...] = ("trace",)) -> pd.DataFrame:
    """Per trace (x sweep) and mode: TPS change (%) and relative CPU benefit over the baseline."""
    ok = good(points)
    rows = []
    for key, grp in ok.groupby(list(by), sort=False):
        key = key if isinstance(key, tuple) else (key,)
        base = grp[grp["mode"] == baseline]
        if base.empty:
            continue
        for mode, sub in grp.groupby("mode", sort=False):
            if mode == baseline:
                continue
            row: dict[str, Any] = {**dict(zip(by, key)), "mode": mode, "baseline": baseline,
                                   "n": len(sub), "n_baseline": len(base),
                                   "tps": sub["tps"].mean(), "tps_baseline": base["tps"].mean()}
            r = stats.tps_change_pct(sub["tps"].tolist(), base["tps"].tolist())
            row.update(tps_change_pct=r.value, tps_change_low=r.low, tps_change_high=r.high)
            for col, _ in CPU_BENEFIT_COLUMNS:
                if col in sub:
                    b = stats.relative_cpu_benefit(sub[col].tolist(), base[col].tolist())
                    row.update({f"benefit_{col}": b.value, f"benefit_{col}_low": b.low,
                                f"benefit_{col}_high": b.high})
            rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Warning:
    """One warning shown at the top of a report."""

    kind: str  # client-bound | failed | errors | unstable | unstable-point | layout
    where: str
    message: str


def warnings_for(points: pd.DataFrame, samples: pd.DataFrame | None = None,
                 by: tuple[str, ...] = ("trace", "mode")) -> list[Warning]:
    """Client-bound points, failed points, request errors, and unstable groups or points."""
    out: list[Warning] = []
    for _, r in points.iterrows():
        where = f"{r['point']} ({r.get('trace', '')} / {r.get('mode', '')})"
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
    for key, grp in good(points).groupby(list(by), sort=False):
        e = stats.mean_ci(grp["tps"].tolist())
        if e.cv is not None and e.cv > stats.CV_UNSTABLE:
            name = " / ".join(str(k) for k in (key if isinstance(key, tuple) else (key,)))
            out.append(Warning("unstable", name,
                               f"TPS varies {100 * e.cv:.0f} % (sd/mean) over {e.n} repetitions, "
                               f"above {100 * stats.CV_UNSTABLE:.0f} %"))
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
