"""The confirmation: the merged configuration measured against the current one on every
workload, and what is kept of it.

A round runs, per workload, a precision run of two modes, the baseline (nothing changed) and
``confirmed`` (the configuration's changes its interfaces take), once per block (the baseline
in every block, at least plan.MIN_BLOCKS blocks), and states the paired change on each of the
workload's metrics at 95 % (analysis.advise: the same Stein intervals as the knobs').
No correction over the workloads: it would widen the intervals and make a loss harder to see.
A workload is made worse when its primary metric's interval lies wholly beyond the threshold
on the worse side (its near end: analysis.advise.direction). Then the change that looked worst
on it is dropped (merge.drop) and the rest measured again; a configuration no workload finds
worse is the confirmed one. When the budget cannot hold a round, nothing is confirmed and the
current configuration is kept (the advice says so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tierbench.advise import merge

MODE = "confirmed"
LEVEL = 0.95

Outcomes = dict[str, dict[str, Any]]  # workload -> judge()'s outcome


def judge(entry: dict[str, Any], values: Any, spread: int | None) -> dict[str, Any]:
    """One workload's outcome of a round from its run's values (analysis.advise.run_values):
    per metric the effect and its 95 % interval, whether the primary is worse or better beyond
    the threshold, and a sentence."""
    from analysis import advise as advice  # pandas: loaded when a run needs it

    metrics, primary = entry.get("metrics") or {}, str(entry.get("primary"))
    effects: dict[str, dict[str, float | None]] = {}
    sign, blocks, told = 0, 0, "not measured"
    for role, m in metrics.items():
        c = advice.change(values, MODE, advice.BASELINE, str(m["column"]), spread)
        ends = advice.interval(c, LEVEL)
        effects[role] = {"effect_pct": c.effect_pct,
                         "low_pct": None if ends is None else ends[0],
                         "high_pct": None if ends is None else ends[1]}
        if role == primary:
            sign = advice.direction(c, str(m["better"]), advice.MIN_EFFECT_PCT, LEVEL)
            blocks = c.n
            told = f"{m['label']} {span(c.effect_pct, ends)}"
    verdict = ("worse beyond the threshold" if sign < 0 else
               "better beyond the threshold" if sign > 0 else "no change beyond the threshold "
               "shown")
    return {"effects": effects, "worse": sign < 0, "better": sign > 0, "blocks": blocks,
            "verdict": verdict, "text": f"{told} with the configuration: {verdict}"}


def span(effect: float | None, ends: tuple[float, float] | None) -> str:
    """An effect with its interval: '-5.1 % [-8.0, -2.3]'."""
    if effect is None:
        return "not measured"
    return f"{effect:+.1f} %" + ("" if ends is None else f" [{ends[0]:+.1f}, {ends[1]:+.1f}]")


def settle(changes: dict[str, str], votes: list[merge.Vote],
           measure: Callable[[dict[str, str], int], Outcomes | str]) -> dict[str, Any]:
    """The confirmation's rounds from the merged ``changes``: ``measure(changes, round)`` gives
    every workload's outcome, or a sentence why the round cannot run (the budget). Returns the
    record's part: status, the confirmed changes ({} when none), the dropped ones with why,
    every round's outcomes."""
    current = dict(changes)
    dropped: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    while current:
        outcomes = measure(current, len(rounds) + 1)
        if isinstance(outcomes, str):
            kept = ("the current configuration" if not dropped else
                    "the current configuration (the rest was not measured again)")
            return {"status": f"not confirmed: {outcomes}; kept: {kept}",
                    "is_confirmed": False, "confirmed": {}, "unconfirmed": current,
                    "dropped": dropped, "rounds": rounds}
        rounds.append({"changes": dict(current), "workloads": outcomes})
        offenders = [w for w, o in outcomes.items() if o.get("worse")]
        if not offenders:
            said = ", ".join(f"{k} {s}" for k, s in current.items())
            return {"status": f"confirmed on {len(outcomes)} workload(s): {said}"
                    + (f" (dropped: {', '.join(str(d['change']) for d in dropped)})"
                       if dropped else ""),
                    "is_confirmed": True, "confirmed": current, "dropped": dropped,
                    "rounds": rounds}
        knob = merge.drop(current, offenders, votes)
        dropped.append({"change": f"{knob} {current[knob]}", "round": len(rounds),
                        "because": "; ".join(f"{w}: {outcomes[w]['text']}" for w in offenders)})
        del current[knob]
    return {"status": ("nothing to confirm: no change was recommended; kept: the current "
                       "configuration") if not dropped else
            ("not confirmed: every change was dropped; kept: the current configuration"),
            "is_confirmed": False, "confirmed": {}, "dropped": dropped, "rounds": rounds}
