"""How precisely a run resolved each comparison between modes, and when to stop repeating.

A comparison is one mode against the baseline within one condition (the factors other than
mode and repetition: a trace, a number of users, ...), on one metric. Its effect is the ratio
of the two modes' values, stated in % (``+12.1 %``: 1.121 times the baseline):

- **paired** (within-block): when the modes were measured in blocks (every mode of a condition
  once per block, in shuffled order), the log ratio of each block's two values. Slow drift of a
  shared host moves both values of a block alike and cancels out; only the spread between
  blocks' ratios remains. On the log scale (the ratio of geometric means: the interval stays
  positive, and an effect and its inverse are symmetric); Student t with n - 1 degrees of
  freedom over n blocks.
- **paired, spread of the first blocks** (a precision run): the mean log ratio over all n
  blocks, with the spread (and t's degrees of freedom) of the first ``min_repetitions`` blocks
  only: Stein's two-stage procedure. A run that decides when to stop from the spread it has
  seen, and then states an interval from that same spread, states intervals that are too narrow
  (simulated: 90-92 % of 95 % intervals cover the truth); with the spread fixed by the first
  blocks, the choice of n does not depend on the data the interval's centre comes from, and
  coverage stays at its nominal 95 % (tests/test_precision.py prints the figures).
- **welch**: the ratio of the two modes' arithmetic means, its interval by the delta method
  with Welch-Satterthwaite degrees of freedom; for runs whose repetitions were not measured in
  blocks (every run without ``precision``).

With a precision target (half-width of the 95 % interval, in % of the estimated ratio: 5 means
the interval lies within 0.95 and 1.05 times the ratio, so +12 % is resolved at [+6.4, +17.6]
and +400 % at [+375, +425]), a comparison is *resolved* once its interval is at most that wide;
otherwise the repetitions it would need at the observed spread are estimated. Near no effect
the two readings agree (5 % of a ratio of 1.1 is 5.5 points); a large effect is resolved
when it is known as precisely relative to its size. The *minimum detectable effect* is the effect
the run could have told from none at 95 % confidence with 80 % power.

The runner's stopping rule (tierbench.runner) and the report use these same functions.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TypeVar

from analysis import stats

Block = TypeVar("Block", bound=Hashable)  # what labels a block: its number, a name

LEVEL = 0.95
POWER = 0.80
PAIRED, STEIN, WELCH = "paired", "paired-stein", "welch"
METHODS = {
    PAIRED: "paired: log ratio of the two modes within each block, t with n - 1 df",
    STEIN: "paired: mean log ratio of the two modes within each block over all blocks, "
             "spread and t's degrees of freedom from the first blocks (Stein's two-stage "
             "procedure: the choice of when to stop does not narrow the interval)",
    WELCH: "Welch: ratio of the modes' means, delta method with Welch-Satterthwaite df",
}
MAX_REPETITIONS_ESTIMATE = 100_000  # "more needed" beyond this is stated as such


@dataclass(frozen=True)
class Target:
    """What a run is asked to resolve: the 95 % interval of every comparison on ``metric`` at
    most ``half_width_pct`` % of the estimated ratio wide on each side, within the repetition and
    time limits."""

    metric: str = "tps"
    half_width_pct: float = 5.0
    min_repetitions: int = 3
    max_repetitions: int = 30
    budget_min: float | None = None


@dataclass(frozen=True)
class Change:
    """The effect of a mode over the baseline on one metric, with its 95 % interval.

    ``center`` is the effect's centre on its scale: ln of the ratio on the log scale (paired),
    the ratio itself on the ratio scale (Welch: the ratio of the modes' arithmetic means, with
    the delta method's interval ratio (1 ± t·se)); ``se`` the relative standard error on that
    scale; ``df`` the t distribution's degrees of freedom; ``n`` the blocks (paired) or the
    smaller of the two modes' repetitions (Welch)."""

    method: str
    n: int
    center: float | None = None
    se: float | None = None
    df: float | None = None
    dropped: int = 0  # values left out: failed points (missing) or not positive
    spread_n: int | None = None  # STEIN: the first blocks the spread comes from

    @property
    def log_scale(self) -> bool:
        """Paired effects are ratios of geometric means, on the log scale."""
        return self.method != WELCH

    def _pct(self, h: float) -> float | None:
        if self.center is None:
            return None
        if self.log_scale:
            return 100.0 * math.expm1(self.center + h)
        return 100.0 * (self.center * (1.0 + h) - 1.0)

    @property
    def effect_pct(self) -> float | None:
        """The effect in %: 100 (ratio - 1)."""
        return self._pct(0.0)

    def _half(self, df: float | None = None, se: float | None = None) -> float | None:
        df, se = df or self.df, self.se if se is None else se
        if se is None or df is None or not df > 0:
            return None
        return stats.t_quantile(0.5 + LEVEL / 2.0, df) * se

    @property
    def low_pct(self) -> float | None:
        """Lower end of the 95 % interval, in %."""
        h = self._half()
        return None if h is None else self._pct(-h)

    @property
    def high_pct(self) -> float | None:
        """Upper end of the 95 % interval, in %."""
        h = self._half()
        return None if h is None else self._pct(h)

    @property
    def half_width_pct(self) -> float | None:
        """The precision reached: the interval's half-width in % of the estimated ratio (its
        wider side: on the log scale the upper end, 100 (e^h - 1); Welch's 100 h)."""
        return None if self.center is None else self._relative(self._half())

    def _relative(self, h: float | None) -> float | None:
        if h is None:
            return None
        return 100.0 * (math.expm1(h) if self.log_scale else h)

    def resolved(self, half_width_pct: float) -> bool:
        """Whether the interval is within ±``half_width_pct`` % of the estimated ratio."""
        h = self.half_width_pct
        return h is not None and h <= half_width_pct

    def significant(self) -> bool:
        """Whether the interval excludes no effect."""
        lo, hi = self.low_pct, self.high_pct
        return lo is not None and hi is not None and (lo > 0 or hi < 0)

    def unit_sd(self) -> float | None:
        """The relative spread of one block's ratio (paired) or the equivalent for Welch: the
        standard error times sqrt(n)."""
        return None if self.se is None else self.se * math.sqrt(self.n)

    def mde_pct(self) -> float | None:
        """The smallest effect (in %, as an increase) this many repetitions at this spread
        tell from none at 95 % confidence with 80 % power."""
        if self.se is None or self.df is None or not self.df > 0:
            return None
        t = stats.t_quantile(0.5 + LEVEL / 2.0, self.df) + stats.t_quantile(POWER, self.df)
        return 100.0 * (math.expm1(t * self.se) if self.log_scale else t * self.se)

    def repetitions_for(self, half_width_pct: float) -> int | None:
        """Repetitions (blocks, or per mode for Welch) the interval would need to be within
        ±``half_width_pct`` % of the ratio, at the spread observed so far (None: no spread yet;
        MAX_REPETITIONS_ESTIMATE when even that many would not do)."""
        sd = self.unit_sd()
        if sd is None or self.center is None:
            return None
        if sd == 0:
            return max(self.n, 2)
        n = max(self.n, 2)
        while n < MAX_REPETITIONS_ESTIMATE:
            df = (self.df if self.method == STEIN and self.df else
                  n - 1 if self.method == PAIRED else 2 * n - 2)
            reached = self._relative(self._half(df, sd / math.sqrt(n)))
            if reached is not None and reached <= half_width_pct:
                return n
            n = n + 1 if n < 200 else int(n * 1.1)
        return MAX_REPETITIONS_ESTIMATE


def blocks_needed(change: Change, half_width_pct: float) -> int | None:
    """The blocks a precision run's comparison needs in all to be resolved. Its interval takes
    its spread and t's degrees of freedom from the first blocks (Stein), so once those are
    measured the half-width at n blocks, 100 (e^(t s / sqrt n) - 1) on the log scale, is known
    in advance: the answer does not change with later blocks (None: no spread yet)."""
    if change.method == PAIRED and change.n >= 2:
        change = replace(change, method=STEIN, spread_n=change.n)
    return change.repetitions_for(half_width_pct)


def _logs(values: Iterable[float | None]) -> tuple[list[float], int]:
    out, dropped = [], 0
    for v in values:
        f = None if v is None else float(v)
        if f is None or not math.isfinite(f) or f <= 0:
            dropped += 1
            continue
        out.append(math.log(f))
    return out, dropped


def paired_change(mode: Mapping[Block, float | None],
                  baseline: Mapping[Block, float | None],
                  spread_from: int | None = None) -> Change:
    """The paired effect of ``mode`` over ``baseline``: both map a block to the value measured
    in it; blocks missing either value (a failed point) are left out. ``spread_from``: take
    the spread from the first that many blocks only (a precision run's minimum: Stein)."""
    logs, dropped = [], 0
    for block in sorted(set(mode) | set(baseline),
                        key=lambda b: (0, b, "") if isinstance(b, (int, float)) else (1, 0, str(b))):
        a, b = mode.get(block), baseline.get(block)
        pair, bad = _logs([a, b])
        if bad:
            dropped += 1
            continue
        logs.append(pair[0] - pair[1])
    n = len(logs)
    if n == 0:
        return Change(PAIRED, 0, dropped=dropped)
    mean = sum(logs) / n
    if n == 1:
        return Change(PAIRED, 1, mean, dropped=dropped)
    first = logs[:spread_from] if spread_from and spread_from < n else logs
    if len(first) < 2:
        return Change(PAIRED, n, mean, dropped=dropped)
    m0 = sum(first) / len(first)
    sd = math.sqrt(sum((d - m0) ** 2 for d in first) / (len(first) - 1))
    if len(first) < n:
        return Change(STEIN, n, mean, sd / math.sqrt(n), len(first) - 1, dropped, len(first))
    return Change(PAIRED, n, mean, sd / math.sqrt(n), n - 1, dropped)


def welch_change(mode: Iterable[float | None], baseline: Iterable[float | None]) -> Change:
    """The unpaired effect of ``mode`` over ``baseline`` (independent repetitions): the ratio
    of their arithmetic means, the delta method's relative standard error and the
    Welch-Satterthwaite degrees of freedom (analysis.stats.ratio_of_means)."""
    a = [float(v) for v in mode if v is not None and math.isfinite(float(v))]
    b = [float(v) for v in baseline if v is not None and math.isfinite(float(v))]
    n = min(len(a), len(b))
    if not a or not b or sum(b) == 0:
        return Change(WELCH, n)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    if len(a) < 2 or len(b) < 2 or ma == 0:
        return Change(WELCH, n, ma / mb)
    ua = sum((x - ma) ** 2 for x in a) / (len(a) - 1) / (len(a) * ma * ma)
    ub = sum((x - mb) ** 2 for x in b) / (len(b) - 1) / (len(b) * mb * mb)
    if ua + ub == 0:
        return Change(WELCH, n, ma / mb, 0.0, float(len(a) + len(b) - 2))
    df = (ua + ub) ** 2 / (ua * ua / (len(a) - 1) + ub * ub / (len(b) - 1))
    return Change(WELCH, n, ma / mb, math.sqrt(ua + ub), df)


@dataclass(frozen=True)
class Verdict:
    """Whether a condition needs another block: ``state`` is one of resolved (every comparison
    as narrow as asked), maximum (max_repetitions reached), continue."""

    state: str
    blocks: int

    @property
    def done(self) -> bool:
        """No further block for this condition."""
        return self.state != "continue"


def verdict(changes: Iterable[Change], blocks: int, target: Target) -> Verdict:
    """After ``blocks`` blocks of a condition: stop when every comparison is resolved (and the
    minimum is reached), or at the maximum; else go on."""
    if blocks >= target.max_repetitions:
        return Verdict("maximum", blocks)
    if blocks < max(target.min_repetitions, 2):
        return Verdict("continue", blocks)
    if all(c.resolved(target.half_width_pct) for c in changes):
        return Verdict("resolved", blocks)
    return Verdict("continue", blocks)


def statement(change: Change, target_pct: float | None, budget_left: bool = False) -> str:
    """One sentence for the report: resolved or not, the interval, and what it would take."""
    if change.effect_pct is None:
        return "not measured (no repetition of both modes)"
    if change.low_pct is None:
        return f"{change.effect_pct:+.1f} % from one repetition: no interval"
    interval = f"{change.effect_pct:+.1f} % [{change.low_pct:+.1f}, {change.high_pct:+.1f}]"
    if target_pct is None:
        return interval
    if change.resolved(target_pct):
        return f"resolved: {interval}"
    need = change.repetitions_for(target_pct)
    why = "within the repetitions allowed" if budget_left else "within the budget"
    more = ("" if need is None else
            f": about {max(need - change.n, 1)} more repetitions would be needed at the "
            "observed spread" if need < MAX_REPETITIONS_ESTIMATE else
            f": more than {MAX_REPETITIONS_ESTIMATE:,} repetitions would be needed")
    return f"not resolved {why} ({interval}){more}"
