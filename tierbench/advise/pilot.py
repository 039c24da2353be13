"""A budget that buys a decision: the pilot that fits a workload's own variance model, and the
design (window length, knobs measured) chosen from it when the budget cannot hold the workload
at the defaults (docs/advise.md, "The pilot").

The defaults are plan.MIN_BLOCKS first blocks of every mode at the suite's window (10 s). When
a workload's least at the defaults (its blocks and its confirmation, plan.cost) does not fit,
the advisor first measures a pilot: PILOT_BLOCKS blocks of the baseline twice (``baseline`` and
``baseline-again``, nothing changed on either) at each of PILOT_WINDOWS. A block's log ratio of
the two is what a knob's paired comparison sees under no effect: its variance is twice a
point's within-block variance, fitted as the project's model sd^2 = a + b / window_s (``fit``;
PRIOR, the project's own fit, when the pilot gave too little). The design (``design``) is then:

1. every candidate window (WINDOWS, up to the suite's) and number of knobs (the ranked list,
   ``ranked``, cut from its end; all-on and all-off go first) whose MIN_BLOCKS blocks and
   confirmation fit what the workload has left;
2. each with its predicted share of runs that recommend a knob worth +EFFECT (``power``: the
   rule's first Holm level, Stein's interval of the first blocks, at the variance's upper
   UPPER_Q bound from the pilot's degrees of freedom, so that a pilot that happened to be
   quiet does not buy a design too thin);
3. of those that reach POWER, the one with the most knobs, then the longest window; when none
   reaches it, the one with the highest predicted share (the advice says it is below POWER);
4. unless even that one is out of reach: when a knob would have to be worth more than
   MAX_EFFECT to be recommended in POWER of runs at it (``detectable``) even at the variance's
   lower LOWER_Q bound (so that a pilot that happened to be noisy does not send a workload
   within reach away), the workload is not measured (``fits`` False, in one sentence), and its
   minutes stay with the workloads after it.

Nothing here measures: the functions are pure (tests/test_advise_pilot.py simulates them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tierbench.advise import knobs, plan

PRIOR = (0.002, 0.05)  # the project's fit of a point's log variance: a + b / window_s
WINDOWS = (2.0, 3.0, 5.0, 10.0)  # candidate windows, s (those up to the suite's)
PILOT_WINDOWS = (2.0, 5.0)  # the pilot's windows: the model's two terms apart, cheaply
PILOT_BLOCKS = 3  # blocks of the pilot per window (the precision engine's least)
PILOT_MODE = "baseline-again"  # the baseline's second point in a pilot block
EFFECT = 0.10  # the effect the guarantee is about: a knob worth +10 %
POWER = 0.80  # ... recommended in at least this share of runs
MAX_EFFECT = 0.30  # not measured when only a knob worth more than +30 % would reach POWER
UPPER_Q = 0.3  # the variance's upper bound: its chi-square quantile at this level
LOWER_Q = 0.95  # ... and its lower bound, for the reach floor (MAX_EFFECT)
THRESHOLD = 0.02  # the rule's practical threshold (analysis.advise.MIN_EFFECT_PCT)
ALPHA = 0.05  # the family-wise error (analysis.advise.ALPHA)
# knobs whose change also moves another knob's features (the kernel's dependencies: checksum
# or scatter-gather off turn TSO off): measured after the knobs that move none, and only with
# the knob they take along, which their comparison holds (analysis.advise.measure)
DEPENDS = {"checksum": "tso", "sg": "tso"}


@dataclass(frozen=True)
class Fit:
    """A point's log variance a + b / window_s, with the degrees of freedom behind it (0: the
    prior) and where it came from."""

    a: float
    b: float
    df: int = 0
    source: str = "prior"

    def ratio_sd(self, window_s: float, upper: bool = False, lower: bool = False) -> float:
        """The sd of a block's log ratio of two modes (twice a point's variance); ``upper``:
        at the variance's upper UPPER_Q bound; ``lower``: at its lower LOWER_Q bound."""
        var = 2.0 * (self.a + self.b / window_s)
        if (upper or lower) and self.df > 0:
            from scipy import stats  # here: scipy.stats takes a second to load

            q = UPPER_Q if upper else LOWER_Q
            var *= self.df / float(stats.chi2.ppf(q, self.df))
        return math.sqrt(max(var, 1e-12))

    def text(self) -> str:
        """The fit in words."""
        head = f"sd^2 = {self.a:.4g} + {self.b:.4g}/window_s"
        return (f"{head} (the pilot, {self.df} df)" if self.source == "pilot" else
                f"{head} (the project's prior: {self.source})")


def fit(pairs: Mapping[float, Sequence[float]]) -> Fit:
    """The model from a pilot: per window, the blocks' log ratios of the baseline's two points
    (their true mean is 0, so each counts one degree of freedom); a point's variance at a window
    is half their mean square, fitted by least squares on (1, 1/window_s) weighted by the
    blocks, with a and b kept at 0 or above; the prior when fewer than two windows have two
    blocks."""
    rows = [(w, len(d), sum(x * x for x in d) / len(d) / 2.0) for w, d in sorted(pairs.items())
            if len(d) >= 2]
    if len(rows) < 2:
        return Fit(*PRIOR, source="the pilot gave fewer than two windows of two blocks")
    n = sum(k for _, k, _ in rows)
    df = n
    xs = [(1.0 / w, k, v) for w, k, v in rows]
    mx = sum(k * x for x, k, _ in xs) / n
    my = sum(k * v for _, k, v in xs) / n
    sxx = sum(k * (x - mx) ** 2 for x, k, _ in xs)
    b = sum(k * (x - mx) * (v - my) for x, k, v in xs) / sxx if sxx > 0 else 0.0
    a = my - b * mx
    if b < 0:  # no sign of the window: one level
        a, b = my, 0.0
    elif a < 0:  # through the origin
        b = sum(k * x * v for x, k, v in xs) / sum(k * x * x for x, k, _ in xs)
        a = 0.0
    return Fit(a, b, df, "pilot")


def power(sd: float, comparisons: int, blocks: int = plan.MIN_BLOCKS,
          effect: float = EFFECT) -> float:
    """The predicted share of runs in which a knob worth ``effect`` is recommended when a
    block's log ratio has sd ``sd``: its interval (Stein's, from ``blocks`` first blocks) at
    Holm's first level over ``comparisons`` clears the threshold (noncentral t)."""
    from scipy import stats

    if blocks < 2 or comparisons < 1:
        return 0.0
    df = blocks - 1
    crit = float(stats.t.ppf(1.0 - ALPHA / (2.0 * comparisons), df))
    nc = (math.log1p(effect) - math.log1p(THRESHOLD)) / (sd / math.sqrt(blocks))
    return float(stats.nct.sf(crit, df, nc))


def detectable(sd: float, comparisons: int, blocks: int = plan.MIN_BLOCKS) -> float:
    """The least effect (a ratio less one) recommended in POWER of runs at ``sd`` and
    ``comparisons`` (``power`` solved by bisection, to 0.1 %); above 1000 % as 10."""
    lo, hi = 0.0, 10.0
    if power(sd, comparisons, blocks, hi) < POWER:
        return hi
    while hi - lo > 0.001:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power(sd, comparisons, blocks, mid) < POWER else (lo, mid)
    return hi


def knob_count(n: int) -> str:
    """``n`` knobs in words: "one knob", "3 knobs"."""
    return "one knob" if n == 1 else f"{n} knobs"


def ranked(plans: Sequence[dict[str, Any]]) -> list[str]:
    """The changeable knobs in the order they are kept: those that move no other knob's
    features, in the catalogue's order, then the dependents (DEPENDS) whose knob is there (on
    the same side: "checksum.server" with "tso.server")."""
    names = [str(p["knob"]) for p in plans if p.get("changeable") and p.get("mode")]
    first = [k for k in names if knobs.base(k) not in DEPENDS]
    return first + [k for k in names if knobs.base(k) in DEPENDS and
                    k.replace(knobs.base(k), DEPENDS[knobs.base(k)], 1) in first]



@dataclass
class Design:
    """What a workload measures within its budget: the window, the knobs (the rest named as
    not measured within the budget), whether all-on and all-off are kept, the predicted ratio
    sd and share of runs that find a +EFFECT knob, the cost, and why."""

    window_s: float
    knobs: list[str]
    left_out: list[str]
    ends: int  # all-on/all-off modes kept
    sd: float
    power: float
    cost_s: float
    fits: bool = True
    why: list[str] = field(default_factory=list)

    @property
    def comparisons(self) -> int:
        """The Holm family: the knobs and all-on against all-off (when both are kept)."""
        return len(self.knobs) + (1 if self.ends == 2 else 0)

    def as_dict(self) -> dict[str, Any]:
        """The design as advise.json records it."""
        return {"window_s": self.window_s, "knobs": self.knobs, "left_out": self.left_out,
                "ends": self.ends, "ratio_sd": round(self.sd, 4),
                "power": round(self.power, 3), "cost_s": round(self.cost_s, 1),
                "fits": self.fits, "why": self.why}


def least_s(point_s: float, modes: int, before: int = 0) -> float:
    """MIN_BLOCKS blocks of ``modes`` modes and of the confirmation, with plan.MARGIN (and the
    points measured before, at the same point time)."""
    return plan.cost(point_s, modes, before).least * plan.MARGIN


def design(model: Fit, point_s: Callable[[float], float], knobs: Sequence[str], ends: int,
           budget_s: float, suite_window_s: float, before: int = 0) -> Design:
    """The design for ``budget_s`` seconds of measuring (after the pilot): the rule of the
    module's docstring over the candidate windows up to ``suite_window_s`` and the knobs
    (``knobs`` ranked, ``ends`` all-on/all-off modes droppable first). ``point_s(window)``:
    a point's time at a window. ``fits`` is False when not even one knob at the shortest
    window fits (``why`` says so in one sentence)."""
    windows = sorted({w for w in WINDOWS if w <= suite_window_s} | {suite_window_s})
    options = []
    for w in windows:
        for n in range(len(knobs), 0, -1):
            for e in ((ends, 0) if ends else (0,)):
                cost = least_s(point_s(w), 1 + n + e, before)
                if cost <= budget_s:
                    sd = model.ratio_sd(w, upper=True)
                    options.append(Design(w, list(knobs[:n]), list(knobs[n:]), e, sd,
                                          power(sd, n + (1 if e == 2 else 0)), cost))
    if not options:
        w = windows[0]
        need = least_s(point_s(w), 2, before)
        return Design(w, [], list(knobs), 0, model.ratio_sd(w, upper=True), 0.0, need, False,
                      [f"not measured: {budget_s / 60:.1f} min of the budget were left, and even "
                       f"one knob at {w:g}-s windows ({plan.MIN_BLOCKS} blocks of the baseline, "
                       f"the knob and the confirmation) needs about {need / 60:.1f} min"])
    good = [d for d in options if d.power >= POWER]
    best = max(good, key=lambda d: (len(d.knobs), d.window_s, d.ends)) if good else \
        max(options, key=lambda d: (d.power, len(d.knobs), d.window_s))
    variance = (f"variance {model.text()}; a knob's paired ratio sd at {best.window_s:g}-s "
                f"windows about {best.sd:.3f} (the upper {UPPER_Q:.0%} bound)")
    low = model.ratio_sd(best.window_s, lower=True)
    least = detectable(low, best.comparisons)
    if not good and least > MAX_EFFECT:
        return Design(best.window_s, [], list(knobs), 0, best.sd, best.power, best.cost_s, False,
                      [f"out of reach within the budget, not measured: at its best design "
                       f"({best.window_s:g}-s windows, {knob_count(len(best.knobs))}) a knob would "
                       f"have to be worth more than "
                       f"{'+1000%' if least >= 10 else f'+{least:.0%}'} to be recommended in "
                       f"{POWER:.0%} of runs, even at the variance's lower {1 - LOWER_Q:.0%} "
                       f"bound (one worth +{EFFECT:.0%} in at most about "
                       f"{power(low, best.comparisons):.0%}; +{MAX_EFFECT:.0%} or less asked): "
                       "its minutes are left to the workloads after it (a larger --budget-min "
                       "or a quieter host brings it within reach)", variance])
    best.why = [variance,
                f"design: {best.window_s:g}-s windows, {len(best.knobs)} of {len(knobs)} knobs "
                f"({', '.join(best.knobs)})" + (", all-on and all-off" if best.ends == 2 else "")
                + f": {plan.MIN_BLOCKS} blocks and the confirmation about "
                  f"{best.cost_s / 60:.1f} of {budget_s / 60:.1f} min",
                (f"a knob worth +{EFFECT:.0%} is recommended in about {best.power:.0%} of runs "
                 f"at this design (at least {POWER:.0%} asked: the most knobs, then the longest "
                 "window, that reach it)") if good else
                (f"no design within the budget reaches {POWER:.0%} for a knob worth "
                 f"+{EFFECT:.0%}: the one with the most (about {best.power:.0%}) is chosen")]
    if best.left_out:
        best.why.append(f"not measured within the budget: {', '.join(best.left_out)} (ranked "
                        "last: knobs that move no other knob's features first, in the "
                        "catalogue's order, then checksum and scatter-gather, which take TSO "
                        "with them)")
    return best


def pilot_cost_s(point_s: Callable[[float], float]) -> float:
    """The pilot's measuring time: PILOT_BLOCKS blocks of two points at each pilot window."""
    return sum(PILOT_BLOCKS * 2 * point_s(w) for w in PILOT_WINDOWS)


def log_ratios(values: Mapping[str, Mapping[int, Mapping[str, float | None]]], a: str, b: str,
               column: str) -> list[float]:
    """Per block, the log ratio of mode ``a``'s value over ``b``'s (blocks missing either, or
    with a value not above 0, left out)."""
    out = []
    for block, row in (values.get(a) or {}).items():
        x, y = row.get(column), (values.get(b) or {}).get(block, {}).get(column)
        if x is not None and y is not None and x > 0 and y > 0:
            out.append(math.log(x / y))
    return out
