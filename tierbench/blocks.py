"""Precision runs: repetitions in blocks until every comparison is resolved.

With a precision target (experiment key ``precision``, or ``tierbench run --precision``), a run
measures every mode of every condition (the factors other than mode and repetition) once per
block, in an order shuffled per block. Blocks 1 to ``min_repetitions`` run every condition;
after each block, each condition's comparisons of a mode with the baseline on the target's
metric are recomputed (paired within blocks, tierbench.stats.precision), and the condition gets
another block only while one of them is wider than asked, up to ``max_repetitions`` blocks and
within ``budget_min``. The report states the same intervals, from the same functions.

Blocks are nested in deployments: the first ``min_repetitions`` blocks are spread over
``deployments`` fresh bring-ups (2 by default), and later blocks go on in new bring-ups of as
many blocks each (``deployment_of``), so that the intervals hold beyond one placement, IRQ and
memory layout; every point records its ``deployment``. Within a block, the modes of each
condition run in the order of a row of a Williams design (Williams 1949, *Aust. J. Sci. Res.*
A2: a Latin square in which each mode follows every other equally often), one row per block in
turn (``counterbalanced``), so that no mode always runs first after a bring-up or always
follows the same other mode.

The first ``min_repetitions`` blocks are a dimensioning stage (Kalibera & Jones 2013): from
their spread (its 90 % upper confidence bound) each condition is given the number of blocks its
comparisons need, and the intervals take their spread from the blocks after the first ones, so
that being resolved (the planned blocks measured) says nothing about the interval's width or
place. With a decision threshold (``decision_pct``), a comparison whose interval already
settles it after the first blocks needs no more. A condition that needs more than
``max_repetitions`` is *out of reach* and gets no further block; with a budget, the conditions
that need the least time are given theirs first, and those the budget left cannot finish are
out of reach too. Their time goes to the conditions that can be resolved, and the report says
what each would have needed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from typing import Any

from tierbench.kinds.contract import Experiment, Point
from tierbench.stats import precision


def block_seed(exp: Experiment, block: int) -> int:
    """The seed that shuffles one block (recorded in plan.json's design)."""
    return exp.seed * 1000 + block


def condition_of(point: Point) -> str:
    """A point's condition: its factors other than mode and repetition, as one key."""
    return json.dumps(point.factors, sort_keys=True, default=str)


def block_points(exp: Experiment, block: int, conditions: set[str] | None,
                 first_index: int) -> list[Point]:
    """One block: every mode of each condition given (None: all) once, shuffled with the
    block's seed and grouped by placement, numbered from ``first_index``."""
    points = exp.impl.points(exp, block_seed(exp, block), repetitions=[block])
    points = counterbalanced(exp, points, block)
    chosen = [p for p in points if conditions is None or condition_of(p) in conditions]
    return [Point(first_index + i, p.mode, p.repetition, p.factors)
            for i, p in enumerate(chosen)]


def deployment_of(exp: Experiment, block: int) -> int:
    """The bring-up (1, 2, ...) a block runs on: the first min_repetitions blocks spread over
    ``deployments`` of them, ceil(min_repetitions / deployments) blocks each, and later blocks
    on new ones of as many blocks (1 deployment: every block on the first)."""
    assert exp.precision is not None
    if exp.precision.deployments <= 1:
        return 1
    size = math.ceil(exp.precision.min_repetitions / exp.precision.deployments)
    return (block - 1) // size + 1


def williams_rows(k: int) -> list[list[int]]:
    """A Williams design for k treatments: rows in which each treatment follows every other
    equally often (k rows for even k; for odd k, the k rows and their reverses)."""
    first, lo, hi = [0], 1, k - 1
    while len(first) < k:
        first.append(lo)
        lo += 1
        if len(first) < k:
            first.append(hi)
            hi -= 1
    rows = [[(t + r) % k for t in first] for r in range(k)]
    return rows if k % 2 == 0 else rows + [row[::-1] for row in rows]


def counterbalanced(exp: Experiment, points: list[Point], block: int) -> list[Point]:
    """A block's points in the kind's order, each condition's modes moved to the order of the
    block's Williams row (``williams_rows``, row block - 1 in turn) among the places the
    condition's points hold, within points that share a deployment key (so that a mode that
    restarts servers does not add restarts)."""
    kind = exp.impl
    names = [m.name for m in exp.modes]
    rows = williams_rows(len(names))
    rank = {names[t]: i for i, t in enumerate(rows[(block - 1) % len(rows)])}
    places: dict[tuple[str, str], list[int]] = {}
    for i, p in enumerate(points):
        places.setdefault((condition_of(p), repr(kind.deployment_key(exp, p))), []).append(i)
    out = list(points)
    for where in places.values():
        ordered = sorted((points[i] for i in where), key=lambda p: rank.get(p.mode, len(rank)))
        for i, p in zip(where, ordered):
            out[i] = Point(points[i].index, p.mode, p.repetition, p.factors)
    return out


def first_blocks(exp: Experiment) -> list[Point]:
    """Blocks 1 to min_repetitions, which every condition runs."""
    assert exp.precision is not None
    out: list[Point] = []
    for block in range(1, exp.precision.min_repetitions + 1):
        out += block_points(exp, block, None, len(out) + 1)
    return out


def expected_blocks(exp: Experiment) -> int:
    """The blocks a precision run is expected to measure per condition: those its first blocks
    would plan (tierbench.stats.precision.blocks_needed) if their log ratios spread as two
    values of the experiment's ``variation_pct`` do (sd sqrt 2 x variation); the first blocks
    only when that is beyond max_repetitions (the condition would be out of reach)."""
    target = exp.precision
    assert target is not None
    n0 = target.min_repetitions
    sd = math.sqrt(2.0) * math.log1p(exp.variation_pct / 100.0)
    first = precision.Change(precision.PAIRED, n0, 0.0, sd / math.sqrt(n0), n0 - 1)
    need = precision.blocks_needed(first, target.half_width_pct, target.decision_pct) or n0
    return need if need <= target.max_repetitions else n0


def plan_lines(exp: Experiment, points: list[Point], per_point: float,
               bring_up: str) -> list[str]:
    """The plan's last lines: what is certain, and what depends on the spread measured."""
    target = exp.precision
    assert target is not None
    block = len(points) // target.min_repetitions
    least = per_point * len(points)
    most = per_point * block * target.max_repetitions
    expected = expected_blocks(exp)
    decision = (f", or settled against a threshold of ±{target.decision_pct:g} % (above, "
                "below or within it)" if target.decision_pct is not None else "")
    lines = [f"precision target: {target.metric} of every mode against the baseline within "
             f"±{target.half_width_pct:g} % (95 % interval, paired within blocks){decision}; "
             f"blocks 1-{target.min_repetitions} above run every condition and plan the rest, "
             f"then up to {target.max_repetitions - target.min_repetitions} more blocks of at "
             f"most {block} points, each only for the conditions not yet resolved"]
    lines.append(deployments_line(exp))
    budget = f"; budget {target.budget_min:g} min of measuring" if target.budget_min else ""
    lines.append(f"expected: {expected} blocks per condition if the blocks spread as the "
                 f"experiment's variation of {exp.variation_pct:g} % says, about "
                 f"{per_point * block * expected / 60:.1f} min")
    lines.append(f"estimated duration: {least / 60:.1f} to {most / 60:.1f} min plus "
                 f"{bring_up}{budget}")
    if target.budget_min and least > target.budget_min * 60:
        lines.append(f"the budget ends before the minimum of {target.min_repetitions} blocks: "
                     "comparisons will not be resolved; raise budget_min or lower "
                     "min_repetitions")
    return lines


def deployments_line(exp: Experiment) -> str:
    """The plan's words for the bring-ups the blocks run on and the order of the modes."""
    target = exp.precision
    assert target is not None
    order = (f"each condition's modes in block b in row b of a Williams design of "
             f"{len(williams_rows(len(exp.modes)))} rows")
    if target.deployments <= 1:
        return f"one bring-up for every block (deployments: 1); {order}"
    size = math.ceil(target.min_repetitions / target.deployments)
    firsts = deployment_of(exp, target.min_repetitions)
    return (f"blocks nested in deployments: a fresh bring-up every {size} block(s) "
            f"({firsts} over blocks 1-{target.min_repetitions}, more if later blocks run; "
            f"bring-up time is not counted in the budget); {order}")


class Schedule:
    """Which conditions need another block, from the rows measured so far."""

    def __init__(self, exp: Experiment, points: list[Point], modes: list[str],
                 baseline: str) -> None:
        self.exp = exp
        self.points = points  # the run's list: later blocks are appended to it
        self.modes = modes
        self.baseline = baseline
        self.out_of_budget = False
        self.out_of_reach: dict[str, dict[str, Any]] = {}  # condition -> blocks needed, why

    def run(self, rows: list[dict[str, Any]], done: set[str], spent: Callable[[], float],
            block_seconds: Callable[[list[Point]], float]) -> Iterator[tuple[int, list[Point]]]:
        """The blocks to measure, one at a time: (block, its points not measured yet). The
        caller measures them (their rows appended to ``rows``) before asking for the next;
        a block after the planned ones is chosen from those rows and appended to the points.
        Stops when no condition needs another block, or when the next would end after the
        budget (``spent``: seconds of measuring so far)."""
        target = self.exp.precision
        assert target is not None
        block = 1
        while True:
            points = [p for p in self.points if p.repetition == block]
            if not points:
                room = None if target.budget_min is None else target.budget_min * 60 - spent()
                left = self.conditions_left(rows, block - 1, room, block_seconds)
                if not left:
                    return
                points = block_points(self.exp, block, left, len(self.points) + 1)
            todo = [p for p in points if p.id not in done]
            if todo and block > 1 and target.budget_min is not None and \
                    spent() + block_seconds(todo) > target.budget_min * 60:
                self.out_of_budget = True
                return
            if points[-1].index > len(self.points):
                self.points.extend(points)
            yield block, todo
            block += 1

    def values(self, rows: list[dict[str, Any]]) -> dict[str, dict[str, dict[int, float | None]]]:
        """condition -> mode -> block -> the metric's value (None: the point failed)."""
        assert self.exp.precision is not None
        metric = self.exp.precision.metric
        by_id = {p.id: p for p in self.points}
        out: dict[str, dict[str, dict[int, float | None]]] = {}
        for row in rows:
            point = by_id.get(str(row.get("point")))
            if point is None:
                continue
            value = row.get(metric)
            ok = not row.get("error") and isinstance(value, (int, float))
            out.setdefault(condition_of(point), {}).setdefault(point.mode, {})[
                point.repetition] = float(value) if ok and value is not None else None
        return out

    def deployments(self, rows: list[dict[str, Any]]) -> dict[str, dict[int, Any]]:
        """condition -> block -> the deployment (bring-up) its points were measured in, for
        rows that record one (column ``deployment``)."""
        by_id = {p.id: p for p in self.points}
        out: dict[str, dict[int, Any]] = {}
        for row in rows:
            point = by_id.get(str(row.get("point")))
            if point is not None and row.get("deployment") not in (None, ""):
                out.setdefault(condition_of(point), {})[point.repetition] = row["deployment"]
        return out

    def changes(self, by_mode: dict[str, dict[int, float | None]],
                deployments: dict[int, Any] | None = None) -> dict[str, Any]:
        """Each mode's paired change over the baseline in one condition."""
        return {m: o.change for m, o in self.outcomes(by_mode, deployments).items()}

    def outcomes(self, by_mode: dict[str, dict[int, float | None]],
                 deployments: dict[int, Any] | None = None) -> dict[str, Any]:
        """Each mode's comparison with the baseline in one condition, and which target it met
        (tierbench.stats.precision.assess: the first blocks plan, the later ones give the
        spread)."""
        target = self.target()
        n0 = target.min_repetitions
        base = by_mode.get(self.baseline, {})
        out = {}
        for m in self.modes:
            if m == self.baseline:
                continue
            mode = by_mode.get(m, {})
            ran = max(list(mode) + list(base), default=0)
            first = precision.paired_change({b: v for b, v in mode.items() if b <= n0},
                                            {b: v for b, v in base.items() if b <= n0}) \
                if ran >= n0 else None
            out[m] = precision.assess(precision.paired_change(mode, base, n0, deployments),
                                      first, target)
        return out

    def conditions_left(self, rows: list[dict[str, Any]], blocks: int,
                        room_s: float | None = None,
                        block_seconds: Callable[[list[Point]], float] | None = None) -> set[str]:
        """The conditions that need block ``blocks + 1``: a comparison not resolved yet, and
        within reach (the blocks its first blocks planned within max_repetitions; with
        ``room_s``, the seconds of budget left, the cheapest first while their remaining blocks
        fit, at ``block_seconds`` per condition's block). A condition whose planned blocks are
        measured gets no more, resolved or not."""
        target = self.target()
        deployments = self.deployments(rows)
        remaining: dict[str, int] = {}
        for cond, by_mode in self.values(rows).items():
            ran = max((b for v in by_mode.values() for b in v), default=0)
            if ran < blocks or cond in self.out_of_reach or ran >= target.max_repetitions:
                continue  # stopped earlier, or at the maximum
            if ran < target.min_repetitions:
                remaining[cond] = 1
                continue
            outcomes = [o for o in self.outcomes(by_mode, deployments.get(cond)).values()
                        if not o.resolved]
            if not outcomes:
                continue
            need = max(o.planned if o.planned is not None else
                       precision.MAX_REPETITIONS_ESTIMATE for o in outcomes)
            if need <= ran:
                continue  # planned blocks measured: no further block decides it
            if need > target.max_repetitions:
                self.out_of_reach[cond] = {"blocks_needed": need, "why": "maximum"}
                continue
            remaining[cond] = need - ran
        if room_s is None or block_seconds is None:
            return set(remaining)
        cost = {c: remaining[c] * block_seconds(self.condition_points(c)) for c in remaining}
        left = set()
        for cond in sorted(remaining, key=lambda c: (cost[c], c)):
            if cost[cond] <= room_s:
                left.add(cond)
                room_s -= cost[cond]
            else:
                self.out_of_reach[cond] = {"blocks_needed": blocks + remaining[cond],
                                           "why": "budget"}
        return left

    def condition_points(self, cond: str) -> list[Point]:
        """One block's points of a condition (every mode once)."""
        return [p for p in self.points if p.repetition == 1 and condition_of(p) == cond]

    def target(self) -> Any:
        """The statistics' Target for this experiment (tierbench.stats.precision)."""
        p = self.exp.precision
        assert p is not None
        return precision.Target(p.metric, p.half_width_pct, p.min_repetitions,
                                p.max_repetitions, p.budget_min, p.decision_pct)

    def record(self, rows: list[dict[str, Any]], blocks: int, spent_s: float) -> dict[str, Any]:
        """The manifest's `precision` section: the target, and per condition its blocks, the
        blocks its first ones planned, its state (resolved, not resolved: planned blocks
        measured but a target not met, out of reach, budget, maximum, running) and each
        comparison (effect, interval, method, which target it met, lag-1 autocorrelation,
        deployments)."""
        assert self.exp.precision is not None
        target = self.target()
        deployments = self.deployments(rows)
        conditions = []
        for cond, by_mode in self.values(rows).items():
            ran = max((b for v in by_mode.values() for b in v), default=0)
            outcomes = self.outcomes(by_mode, deployments.get(cond))
            reach = self.out_of_reach.get(cond)
            need = max((o.planned if o.planned is not None else
                        0 if o.resolved else precision.MAX_REPETITIONS_ESTIMATE
                        for o in outcomes.values()), default=0) or None
            state = "resolved" if all(o.resolved for o in outcomes.values()) else \
                "out of reach" if reach else \
                "not resolved" if need is not None and ran >= need else \
                "maximum" if ran >= target.max_repetitions else \
                "budget" if self.out_of_budget or ran < blocks else "running"
            conditions.append({
                "condition": json.loads(cond), "blocks": ran, "state": state,
                **({"blocks_needed": reach["blocks_needed"], "out_of_reach": reach["why"]}
                   if reach and state == "out of reach" else
                   {"blocks_needed": need} if need is not None else {}),
                "comparisons": [{
                    "mode": m, "baseline": self.baseline, "method": o.change.method,
                    "n": o.change.n, "effect_pct": o.change.effect_pct,
                    "low_pct": o.change.low_pct, "high_pct": o.change.high_pct,
                    "half_width_pct": o.change.half_width_pct, "mde_pct": o.change.mde_pct(),
                    "resolved": o.resolved, "met": o.met, "planned_blocks": o.planned,
                    "lag1": o.change.lag1, "serial": o.change.serial,
                    "deployments": o.change.deployments,
                    "deployment_share": o.change.deployment_share,
                    "repetitions_needed": o.planned if o.resolved else precision.blocks_needed(
                        o.change, target.half_width_pct, target.decision_pct)}
                    for m, o in outcomes.items()]})
        return {"target": self.exp.precision.model_dump(), "baseline": self.baseline,
                "blocks": blocks, "spent_s": round(spent_s, 1),
                "stopped": "budget" if self.out_of_budget or any(
                    c.get("out_of_reach") == "budget" for c in conditions) else (
                    "done" if all(c["state"] in ("resolved", "maximum", "out of reach",
                                                 "not resolved") for c in conditions)
                    else "running"),
                "conditions": conditions}

    @staticmethod
    def summary_line(record: dict[str, Any]) -> str:
        """One progress line at the end: how many conditions were resolved."""
        conds = record["conditions"]
        resolved = sum(c["state"] == "resolved" for c in conds)
        why = {"budget": "the budget was spent", "done": "every condition stopped"}.get(
            record["stopped"], record["stopped"])
        far = [c for c in conds if c["state"] == "out of reach"]
        short = [c for c in conds if c["state"] == "not resolved"]
        beyond = "".join(
            f"; {', '.join(f'{k}={v}' for k, v in c['condition'].items())} not resolved after "
            f"its {c['blocks']} planned blocks (see the report: serial correlation, or a "
            "decision not settled)" for c in short) + "".join(
            f"; {', '.join(f'{k}={v}' for k, v in c['condition'].items())} out of reach: it needs {c['blocks_needed']} blocks at the "
            f"upper bound of the spread of its first {record['target']['min_repetitions']}"
            + (" (more than max_repetitions)" if c["out_of_reach"] == "maximum"
               else " (more than the budget left)") for c in far)
        target = record["target"]
        decided = sum(c["state"] == "resolved" and any(
            str(x.get("met") or "").startswith("decision") for x in c.get("comparisons", []))
            for c in conds)
        how = f"for ±{target['half_width_pct']:g} %" if not decided else \
            (f"for ±{target['half_width_pct']:g} % or, {decided} of them, settled against "
             f"the ±{target['decision_pct']:g} % threshold")
        wide = sum(c["state"] == "resolved" and any(
            (x.get("half_width_pct") or 0) > target["half_width_pct"]
            for x in c.get("comparisons", [])) for c in conds)
        wider = "" if not wide else (
            f"; {wide} of them state an interval wider than ±{target['half_width_pct']:g} % "
            "(their planned blocks were measured, but the blocks after the first spread more, "
            "or a serial correlation widened it: the report says which)")
        return (f"tierbench: precision: {resolved} of {len(conds)} condition(s) resolved {how} "
                f"after {record['blocks']} block(s) ({why}){wider}{beyond}")
