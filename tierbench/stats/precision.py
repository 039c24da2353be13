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
- **paired, two stages** (a precision run, Kalibera & Jones 2013's dimensioning stage): the
  first ``min_repetitions`` blocks only *plan* how many blocks a comparison needs (from a 90 %
  upper confidence bound of their spread, chi-square with n0 - 1 df); the interval is the mean
  log ratio over all n blocks with the spread (and t's degrees of freedom) of the blocks after
  the first ones. Whether a comparison is *resolved* is decided by the plan alone (its planned
  blocks were measured), so its interval is independent of that label: coverage among the
  resolved comparisons is the nominal 95 % at every noise level. Labelling resolved by the
  interval's own width would keep only the intervals whose spread came out small, and they
  under-cover (Stein's single-spread interval: 87-90 % among resolved where out of reach is
  common; tests/test_precision.py and analysis/README.md give the figures).
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

The runner's stopping rule (tierbench.blocks) and the report (analysis) use these same
functions: this module is on the ground floor so that both import it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from tierbench.stats import quantiles

Block = TypeVar("Block", bound=Hashable)  # what labels a block: its number, a name

LEVEL = 0.95
POWER = 0.80
PAIRED, STEIN, WELCH = "paired", "paired-stein", "welch"
TWO_STAGE, DEPLOYMENTS = "paired-two-stage", "paired-deployments"
UCB_LEVEL = 0.90  # the plan's upper confidence bound of the first blocks' spread
SERIAL_Z = 1.645  # lag-1 autocorrelation above z / sqrt(n) - 1 / n: serially correlated; the
# interval is widened for the lag-1 autocorrelation's one-sided 95 % upper bound (the same z)
RHO_MAX = 0.9  # the largest lag-1 autocorrelation the widening assumes
MIN_DEPLOYMENTS = 3  # deployments before their spread enters the interval (2 give it 1 df)
METHODS = {
    PAIRED: "paired: log ratio of the two modes within each block, t with n - 1 df",
    STEIN: "paired: mean log ratio of the two modes within each block over all blocks, "
             "spread and t's degrees of freedom from the first blocks (Stein's two-stage "
             "procedure: the choice of when to stop does not narrow the interval)",
    WELCH: "Welch: ratio of the modes' means, delta method with Welch-Satterthwaite df",
    TWO_STAGE: "paired, two stages: the first blocks plan how many blocks are needed (90 % "
               "upper bound of their spread); the interval is the mean log ratio over all "
               "blocks with the spread and t's degrees of freedom of the blocks after the "
               "first ones (Kalibera & Jones 2013's dimensioning stage), widened by the AR(1) "
               "variance of a mean at the 95 % upper bound of the blocks' lag-1 "
               "autocorrelation",
    DEPLOYMENTS: "paired, blocks nested in deployments (3 or more): the mean log ratio with "
                 "the variance of a mean of blocks in deployments (one-way random-effects "
                 "components by the method of moments, Satterthwaite's degrees of freedom), "
                 "when that is wider than the blocks' interval",
}
MAX_REPETITIONS_ESTIMATE = 100_000  # "more needed" beyond this is stated as such


def baseline_mode(modes: list[str], experiment: dict[str, Any],
                  spec: dict[str, Any] | None = None) -> str | None:
    """The mode others are compared against (by the stopping rule and by the report): the
    report spec's or experiment's 'baseline', else a '*-off' mode ('baseline', 'default',
    'none'), else the last mode."""
    if not modes:
        return None
    for wanted in ((spec or {}).get("baseline"), experiment.get("baseline")):
        if wanted in modes:
            return str(wanted)
    off = [m for m in modes if m.endswith("-off") or m in ("baseline", "default", "none")]
    return off[0] if off else modes[-1]


def expected_half_widths(n: int, variation_pct: float) -> tuple[float | None, float | None]:
    """Half-widths (%) of the 95 % t intervals of one condition's mean over n repetitions and
    of the change between two conditions, for a run-to-run variation (sd/mean) in % (the
    plan's expectation for a run without a precision target)."""
    if n < 2:
        return None, None
    mean = quantiles.t_quantile(0.5 + LEVEL / 2.0, n - 1) * variation_pct / math.sqrt(n)
    change = quantiles.t_quantile(0.5 + LEVEL / 2.0, 2 * n - 2) * variation_pct * math.sqrt(2 / n)
    return mean, change


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
    decision_pct: float | None = None  # also resolved once the interval settles this threshold


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
    spread_n: int | None = None  # STEIN: the first blocks the spread comes from; TWO_STAGE:
    # the blocks after them
    lag1: float | None = None  # lag-1 autocorrelation of the blocks' log ratios in run order
    deployments: int = 1  # deployments (bring-ups) the blocks came from
    deployment_share: float | None = None  # share of the blocks' variance between deployments
    logs: tuple[float, ...] = ()  # the blocks' log ratios in run order (diagnostics)
    widened: float = 1.0  # the factor on se for a possible serial correlation (``widening``)

    @property
    def serial(self) -> bool:
        """Whether the blocks' log ratios are serially correlated (lag-1 autocorrelation above
        its one-sided 5 % bound for independent blocks, z / sqrt(n) - 1 / n; 6 blocks at
        least): their interval would be too narrow, so the comparison is not resolved."""
        n = len(self.logs)
        return self.lag1 is not None and n >= 6 and \
            self.lag1 > SERIAL_Z / math.sqrt(n) - 1.0 / n

    def decision(self, threshold_pct: float) -> str | None:
        """What the interval settles against a practical threshold of ±``threshold_pct`` %:
        'above' (wholly above +threshold: superiority), 'below' (wholly below -threshold:
        inferiority), 'within' (within ±threshold: equivalence), or None."""
        lo, hi = self.low_pct, self.high_pct
        if lo is None or hi is None or self.serial:
            return None
        if lo > threshold_pct:
            return "above"
        if hi < -threshold_pct:
            return "below"
        if -threshold_pct <= lo and hi <= threshold_pct:
            return "within"
        return None

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
        return quantiles.t_quantile(0.5 + LEVEL / 2.0, df) * se

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
        t = (quantiles.t_quantile(0.5 + LEVEL / 2.0, self.df)
             + quantiles.t_quantile(POWER, self.df))
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


def blocks_needed(change: Change, half_width_pct: float,
                  decision_pct: float | None = None) -> int | None:
    """The blocks a comparison needs in all, its ``change.n`` blocks so far taken as the
    dimensioning stage: the fewest n + m whose interval, with m further blocks giving the spread
    (t with m - 1 df) and the spread at the 90 % upper confidence bound of the one observed
    (chi-square with the change's df), is within ±``half_width_pct`` % of the ratio, or (with
    ``decision_pct``) clears that threshold on the side the estimate lies on or lies within it.
    The spread is the blocks' own, before the widening for a possible serial correlation
    (``widening``, which the stated interval carries). The runner plans each condition with it
    and the report's "about N more" comes from it: one formula. Welch changes: ``repetitions_for``. None: no spread yet, or deployments differ
    (more deployments, not blocks, are needed); MAX_REPETITIONS_ESTIMATE when even that many
    would not do."""
    if change.method == WELCH:
        return change.repetitions_for(half_width_pct)
    sd, df = change.unit_sd(), change.df
    if sd is not None:
        sd /= change.widened  # the blocks' own spread: serial correlation is the interval's
    if sd is None or df is None or not df > 0 or change.center is None or \
            change.method == DEPLOYMENTS:
        return None
    n = change.n
    goals = [math.log1p(half_width_pct / 100.0)]
    if decision_pct is not None:
        c, up, down = change.center, math.log1p(decision_pct / 100.0), \
            math.log1p(-min(decision_pct, 99.0) / 100.0)
        goals += [g for g in (c - up, down - c, min(up - c, c - down)) if g > 0]
    goal = max(goals)
    if sd == 0:
        return n + 2
    ucb = sd * math.sqrt(df / _chi2_low(df))
    m = 2
    while n + m < MAX_REPETITIONS_ESTIMATE:
        if _t(m - 1) * ucb / math.sqrt(n + m) <= goal:
            return n + m
        m = m + 1 if m < 200 else int(m * 1.1)
    return MAX_REPETITIONS_ESTIMATE


@functools.lru_cache(maxsize=4096)
def _t(df: float) -> float:
    return quantiles.t_quantile(0.5 + LEVEL / 2.0, df)


@functools.lru_cache(maxsize=1024)
def _chi2_low(df: float) -> float:
    return quantiles.chi2_quantile(1.0 - UCB_LEVEL, df)


def lag1(logs: list[float] | tuple[float, ...]) -> float | None:
    """The lag-1 autocorrelation of values in run order (None: fewer than 3 or no spread)."""
    n = len(logs)
    if n < 3:
        return None
    m = sum(logs) / n
    dev = [x - m for x in logs]
    var = sum(d * d for d in dev)
    return None if var == 0 else sum(a * b for a, b in zip(dev, dev[1:])) / var


def drift(logs: list[float] | tuple[float, ...]) -> tuple[float, float] | None:
    """A linear trend of the blocks' log ratios over run order: (slope in % of the ratio per
    block, its two-sided p-value: least squares, t with n - 2 df); None with fewer than 4
    blocks or no spread. A small p-value says the effect itself changed during the run (a
    mode's advantage growing as the host warmed, say): the mean is then an average over the
    run's conditions, not one effect."""
    n = len(logs)
    if n < 4:
        return None
    xs = list(range(n))
    mx, my = (n - 1) / 2.0, sum(logs) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, logs)) / sxx
    resid = sum((y - my - slope * (x - mx)) ** 2 for x, y in zip(xs, logs))
    if resid <= 0:
        return None
    se = math.sqrt(resid / (n - 2) / sxx)
    p = 2.0 * quantiles.t_tail(abs(slope / se), n - 2)
    return 100.0 * math.expm1(slope), p


def _sd(xs: list[float]) -> float:
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


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
                  spread_from: int | None = None,
                  deployments: Mapping[Block, Hashable] | None = None,
                  stein: bool = False) -> Change:
    """The paired effect of ``mode`` over ``baseline``: both map a block to the value measured
    in it (blocks in run order); blocks missing either value (a failed point) are left out.
    ``spread_from``: a precision run's first blocks (``min_repetitions``), which planned the run:
    with at least two blocks after them, the spread comes from those later blocks only (two
    stages). From 6 blocks on, the standard error is widened for serial correlation
    (``widening``: the lag-1 autocorrelation's 95 % upper bound). ``deployments`` maps a block
    to the bring-up it was measured in: with two or more, the share of the variance between
    deployments is recorded, and with three or more the interval is the wider of the blocks'
    and the variance-components one (``_nested``).
    ``stein``: the spread from the first ``spread_from`` blocks instead, not widened (Stein's
    two-stage procedure): exact for independent blocks whichever blocks the run stopped at,
    but not among the comparisons its first blocks resolved; for statements made of every
    comparison, as the advisor's Holm family is, not only of those labelled resolved."""
    logs, blocks, dropped = [], [], 0
    for block in sorted(set(mode) | set(baseline),
                        key=lambda b: (0, b, "") if isinstance(b, (int, float)) else (1, 0, str(b))):
        a, b = mode.get(block), baseline.get(block)
        pair, bad = _logs([a, b])
        if bad:
            dropped += 1
            continue
        logs.append(pair[0] - pair[1])
        blocks.append(block)
    n = len(logs)
    if n == 0:
        return Change(PAIRED, 0, dropped=dropped)
    mean = sum(logs) / n
    if n == 1:
        return Change(PAIRED, 1, mean, dropped=dropped, logs=tuple(logs))
    r = lag1(logs) if n >= 6 else None
    numbered = all(isinstance(b, (int, float)) for b in blocks)
    if stein and spread_from and 2 <= spread_from:
        first = logs[:spread_from]
        return Change(STEIN if len(first) < n else PAIRED, n, mean, _sd(first) / math.sqrt(n),
                      len(first) - 1, dropped, len(first), r, logs=tuple(logs))
    later = [] if not spread_from else logs[spread_from:] if not numbered else \
        [x for x, b in zip(logs, blocks) if float(b) > spread_from]  # type: ignore[arg-type]
    if len(later) >= 2:
        w = widening(r, n, len(later))
        change = Change(TWO_STAGE, n, mean, w * _sd(later) / math.sqrt(n), len(later) - 1,
                        dropped, len(later), r, logs=tuple(logs), widened=w)
    else:
        w = widening(r, n, n)
        change = Change(PAIRED, n, mean, w * _sd(logs) / math.sqrt(n), n - 1, dropped,
                        lag1=r, logs=tuple(logs), widened=w)
    if deployments:
        change = _nested(change, [deployments.get(b) for b in blocks])
    return change


def ar1_factor(rho: float, n: int, m: int) -> float:
    """Under AR(1) errors of lag-1 correlation ``rho``: the variance of a mean of ``n``
    consecutive blocks over the expected variance estimate of ``m`` consecutive blocks divided
    by n (1 for independent blocks). The first is sigma^2 / n (1 + 2 sum (1 - k / n) rho^k),
    the second is biased low by the correlation (2 / (m (m - 1)) sum (m - k) rho^k of it)."""
    if rho == 0:
        return 1.0
    mean = 1.0 + 2.0 * sum((n - k) * rho ** k for k in range(1, n)) / n
    spread = 1.0 - 2.0 * sum((m - k) * rho ** k for k in range(1, m)) / (m * (m - 1))
    return mean / max(spread, 1e-3)


def widening(r: float | None, n: int, m: int) -> float:
    """The factor on a standard error for serial correlation, from ``r``, the lag-1
    autocorrelation of ``n`` blocks in run order (None: fewer than 6, no widening), the spread
    coming from ``m`` of them: r corrected for its small-sample bias (r + (1 + 4 r) / n,
    Kendall 1954), its one-sided 95 % upper bound (+ 1.645 sqrt((1 - r^2) / n), Bartlett's
    variance), at most RHO_MAX, and ``ar1_factor`` at that bound (none when it is not
    positive). Twenty blocks do not tell a correlation of 0.5 from none (the lag-1 test
    refuses about 40 % of such comparisons, and those it lets through are the ones whose
    estimate came out low), so the interval assumes the largest correlation the blocks do not
    rule out: independent blocks pay with an interval about 1.5 times as wide."""
    if r is None:
        return 1.0
    rb = max(min(r + (1.0 + 4.0 * r) / n, RHO_MAX), -RHO_MAX)
    bound = min(rb + SERIAL_Z * math.sqrt((1.0 - rb * rb) / n), RHO_MAX)
    return math.sqrt(ar1_factor(bound, n, m)) if bound > 0 else 1.0


def _nested(change: Change, where: list[Hashable | None]) -> Change:
    """The change with its blocks nested in deployments (``where``: each block's deployment):
    the share of the blocks' variance between deployments (one-way analysis of variance,
    method of moments), and from MIN_DEPLOYMENTS on the wider of ``change``'s interval and the
    one for a mean of blocks in deployments: variance sigma_b^2 sum n_i^2 / n^2 + sigma_w^2 / n
    at the components' estimates (sigma_b^2 at least 0), t with Satterthwaite's degrees of
    freedom. No pre-test decides between the two (a test of whether deployments differ at
    p < 0.25 fires a quarter of the time by chance and misses moderate differences). With 2
    deployments their spread has 1 degree of freedom: the blocks stay the unit and the
    interval holds for these bring-ups (the report says so)."""
    groups: dict[Hashable, list[float]] = {}
    for x, d in zip(change.logs, where):
        groups.setdefault(d, []).append(x)
    k, n = len(groups), len(change.logs)
    if k < 2 or n <= k:
        return replace(change, deployments=k)
    grand = sum(change.logs) / n
    means = {d: sum(v) / len(v) for d, v in groups.items()}
    ssb = sum(len(v) * (means[d] - grand) ** 2 for d, v in groups.items())
    ssw = sum((x - means[d]) ** 2 for d, v in groups.items() for x in v)
    msb, msw = ssb / (k - 1), ssw / (n - k)
    n0 = (n - sum(len(v) ** 2 for v in groups.values()) / n) / (k - 1)
    between = max(0.0, (msb - msw) / n0)
    share = between / (between + msw) if between + msw > 0 else 0.0
    flat = replace(change, deployments=k, deployment_share=share)
    own = change._half()
    if k < MIN_DEPLOYMENTS or between == 0 or own is None:
        return flat
    q = sum(len(v) ** 2 for v in groups.values()) / (n * n)
    c1, c2 = q / n0, 1.0 / n - q / n0  # the variance of the mean: c1 MSB + c2 MSW
    var = c1 * msb + c2 * msw
    df = var * var / ((c1 * msb) ** 2 / (k - 1) + (c2 * msw) ** 2 / (n - k))
    if _t(df) * math.sqrt(var) <= own:
        return flat
    return replace(flat, method=DEPLOYMENTS, se=math.sqrt(var), df=df, widened=1.0)


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


@dataclass(frozen=True)
class Outcome:
    """A comparison at the end of a precision run (or so far): its change, the blocks its
    first blocks planned (None: the first blocks are not all measured; their number when they
    settled the decision themselves) and which target it met: 'precision' (the planned blocks measured),
    'decision: above|below|within' (the interval settles the decision threshold), or None.
    A serially correlated comparison meets neither."""

    change: Change
    planned: int | None
    met: str | None

    @property
    def resolved(self) -> bool:
        """Whether the comparison met a target."""
        return self.met is not None


def assess(change: Change, first: Change | None, target: Target) -> Outcome:
    """Which target ``change`` (all its blocks) met, ``first`` being the same comparison over
    the first ``target.min_repetitions`` blocks (None: fewer measured). The decision is looked
    at twice only, after the first blocks and at the planned end, each look at the 95 % level
    (one-sided error at most 2 x 2.5 %); precision is met by measuring the planned blocks, a
    label that does not depend on the interval it is stated with."""
    if first is None:
        return Outcome(change, None, None)
    settled = first.decision(target.decision_pct) if target.decision_pct is not None else None
    if settled and change.n == first.n and not change.serial:
        return Outcome(change, first.n, f"decision: {settled}")
    planned = blocks_needed(first, target.half_width_pct, target.decision_pct)
    if planned is None or change.n < planned or change.serial:
        return Outcome(change, planned, None)
    if target.decision_pct is not None and (d := change.decision(target.decision_pct)):
        return Outcome(change, planned, f"decision: {d}")
    for_precision = blocks_needed(first, target.half_width_pct)
    if change.method == TWO_STAGE and for_precision is not None and \
            change.n >= for_precision or \
            change.method == DEPLOYMENTS and change.resolved(target.half_width_pct):
        return Outcome(change, planned, "precision")
    return Outcome(change, planned, None)


MET = {"precision": "the planned blocks", "decision: above": "above the threshold",
       "decision: below": "below the threshold", "decision: within": "within the threshold"}


def statement(change: Change, target_pct: float | None, budget_left: bool = False,
              outcome: Outcome | None = None, decision_pct: float | None = None) -> str:
    """One sentence for the report: resolved or not (by ``outcome``, a precision run's, when
    given: which target was met), the interval, and what it would take (blocks_needed)."""
    if change.effect_pct is None:
        return "not measured (no repetition of both modes)"
    if change.low_pct is None:
        return f"{change.effect_pct:+.1f} % from one repetition: no interval"
    interval = f"{change.effect_pct:+.1f} % [{change.low_pct:+.1f}, {change.high_pct:+.1f}]"
    if target_pct is None:
        return interval
    if change.serial:
        return (f"not resolved: the blocks' log ratios are serially correlated (lag-1 "
                f"{change.lag1:+.2f}), so the interval would be too narrow ({interval})")
    if outcome is not None and outcome.met == "precision":
        h, own = change.half_width_pct, change._relative(change._half(
            se=None if change.se is None else change.se / change.widened))
        wider = "" if h is None or h <= target_pct else \
            f" (±{h:.1f} %: the blocks after the first spread more than they did)" \
            if own is None or own > target_pct else \
            (f" (±{h:.1f} %: widened {change.widened:.2f} times for a serial correlation "
             "its blocks do not rule out)")
        return f"resolved: {interval}{wider}"
    if outcome is not None and outcome.met:
        return f"decided, {outcome.met.split(': ')[1]} the threshold: {interval}"
    if outcome is None and change.resolved(target_pct):
        return f"resolved: {interval}"
    need = (outcome.planned if outcome is not None and outcome.planned and
            outcome.planned > change.n else blocks_needed(change, target_pct, decision_pct))
    why = "within the repetitions allowed" if budget_left else "within the budget"
    more = ("" if need is None else
            f": about {max(need - change.n, 1)} more repetitions would be needed at the "
            "observed spread" if need < MAX_REPETITIONS_ESTIMATE else
            f": more than {MAX_REPETITIONS_ESTIMATE:,} repetitions would be needed")
    return f"not resolved {why} ({interval}){more}"
