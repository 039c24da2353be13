"""The report's precision card (analysis.report): what a precision run resolved, per condition
and mode, from the manifest's precision record and the run's points (tierbench.stats.precision)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from markupsafe import Markup

from analysis import figures, tables
from tierbench.stats import precision
from analysis.markup import MISSING, text


def precision_card(ctx: Any) -> dict[str, Any] | None:
    """What a precision run resolved: per condition and mode its state (resolved, not
    resolved, out of reach, budget, maximum), the blocks used and needed (the runner's record:
    one formula, tierbench.stats.precision.blocks_needed), the target met (precision or a decision),
    the stated interval or what it would take, the smallest effect the run could have
    detected, the deployments, and per comparison its blocks' effects in run order with the
    lag-1 autocorrelation and a drift warning."""
    target = ctx.target
    if target is None:
        return None
    cmp = ctx.comparisons()
    metric = str(target.get("metric"))
    cmp = cmp[cmp["metric"] == metric]
    if cmp.empty:
        return None
    record = got if isinstance(got := ctx.manifest.get("precision"), dict) else {}
    why = {"budget": "the budget ran out, or would have, before every comparison was resolved",
           "done": "every condition stopped: resolved (its planned blocks measured, or a "
                   "decision settled); its planned blocks measured without a target met (not "
                   f"resolved); at the maximum of {target.get('max_repetitions')} blocks; or "
                   "out of reach, when the blocks its first "
                   f"{target.get('min_repetitions')} planned exceed the maximum or the budget"}.get(
        str(record.get("stopped")), "the run did not finish")
    states = {}
    for cond in record.get("conditions") or []:
        factors = cond.get("condition") or {}
        where = tables.describe(ctx.group_cols, tuple(factors.get(c) for c in ctx.group_cols))
        states[where or "all"] = cond
    budget, decision = target.get("budget_min"), target.get("decision_pct")
    rows, series, warnings = [], [], []
    for _, r in cmp.iterrows():
        cond = states.get(str(r["condition"]), {})
        need = cond.get("blocks_needed")
        lag = None if pd.isna(r["lag1"]) else float(r["lag1"])
        change = block_change(ctx, str(r["condition"]), str(r["mode"]), metric)
        trend = precision.drift(change.logs) if change is not None else None
        name = f"{r['condition']}: {r['mode']} vs {r['baseline']}"
        if trend is not None and trend[1] < 0.05:
            warnings.append(f"{name}: the effect drifted over the run ({trend[0]:+.1f} % per "
                            f"block, p = {trend[1]:.3f}): its mean averages a changing effect")
        if change is not None and change.logs:
            series.append((f"{name}" + (f" · lag-1 {lag:+.2f}" if lag is not None else "")
                           + (" · drift" if trend is not None and trend[1] < 0.05 else ""),
                           [100.0 * math.expm1(x) for x in change.logs],
                           int(target.get("min_repetitions") or 0)))
        deployments = int(r["deployments"]) if not pd.isna(r["deployments"]) else 1
        rows.append({"condition": r["condition"], "mode": r["mode"], "baseline": r["baseline"],
                     "state": cond.get("state", MISSING),
                     "repetitions": int(r["repetitions"]),
                     "needed": MISSING if need is None else
                     ("more than 100,000" if need >= precision.MAX_REPETITIONS_ESTIMATE
                      else str(need)),
                     "met": "none" if r["met"] is None or pd.isna(r["met"]) else
                     precision.MET.get(str(r["met"]), "none") + (
                         " (wider than asked)" if r["met"] == "precision" and
                         r["half_width_pct"] > float(target.get("half_width_pct") or 0)
                         else ""),
                     "lag1": MISSING if lag is None else f"{lag:+.2f}",
                     "deployments": deployments_cell(deployments, r["deployment_share"]),
                     "statement": r["statement"],
                     "mde": MISSING if pd.isna(r["mde_pct"]) else f"{r['mde_pct']:.1f} %"})
    return {"baseline": text(ctx.baseline), "metric": metric,
            "target": f"{float(target.get('half_width_pct') or 0):g}",
            "decision": f"{decision:g}" if decision is not None else "",
            "min": target.get("min_repetitions"), "max": target.get("max_repetitions"),
            "budget": f"{budget:g}" if budget else "", "why": why,
            "method": precision.METHODS[precision.TWO_STAGE], "rows": rows,
            "warnings": warnings,
            "figure": Markup(figures.block_figure(series, "blocks")) if series else ""}


def deployments_cell(deployments: int, share: Any) -> str | int:
    """The card's deployments: how many, the share of the blocks' spread between them, and
    whether the interval counts it (3 deployments or more: tierbench.stats.precision._nested)."""
    if deployments < 2:
        return deployments
    pct = f"{100 * float(0 if share is None or pd.isna(share) else share):.0f} % of the spread"
    if deployments < precision.MIN_DEPLOYMENTS:
        return (f"{deployments} ({pct}; the interval holds for these bring-ups: "
                f"{precision.MIN_DEPLOYMENTS} or more put their spread into it)")
    return f"{deployments} ({pct}, counted in the interval)"


def block_change(ctx: Any, condition: str, mode: str, metric: str
                 ) -> precision.Change | None:
    """A comparison's paired change as the precision card states it (its blocks in run
    order), found by the condition's description."""
    ok = tables.good(ctx.points)
    for key, grp in tables.groups(ok, ctx.group_cols):
        if (tables.describe(ctx.group_cols, key) or "all") != condition:
            continue
        sub, base = grp[grp["mode"] == mode], grp[grp["mode"] == ctx.baseline]
        if sub.empty or base.empty or metric not in grp:
            return None
        return tables.change_of(sub, base, metric, True, ctx.spread_from)
    return None
