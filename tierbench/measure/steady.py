"""Where a per-second series reaches steady state: the warm-up a point's window starts after.

The truncation point is MSER-5's (White 1997, "An effective truncation heuristic for bias
reduction in simulation output", Simulation 69(6); White, Cobb & Spratt 2000, "A comparison of
five steady-state truncation heuristics", Proc. Winter Simulation Conference): the series is cut
into batches of 5 observations, and the warm-up is the number of leading batches d whose removal
minimises the squared standard error of the mean of those left,
``MSER(d) = sum_{j>d} (Z_j - mean_{j>d} Z)^2 / (k - d)^2`` (Z_j the batch means, k batches).
As White et al. advise, d is only searched over the first half of the series: a minimum past it
means the series is too short to show a steady state.

Here the search is further bounded by the point's ``warmup_max_s`` (and starts at its fixed
``warmup_s``, the least warm-up), so a window never starts later than the maximum. A window is
*flagged* (``steady`` false) when steady state was not shown before it started: MSER's minimum
over the first half lies past the maximum, or the window itself still drifts (a slope test on its
5 s batch means: the least-squares slope differs from 0 at the 5 % level, Student's t on the
batches, and moves the mean by more than ``DRIFT_PCT`` over the window). A fixed warm-up is
checked with the slope test only: MSER's unbounded minimum alone lands past a short fixed
warm-up in about 30 % of series that are steady from their first second (white noise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

BATCH = 5  # observations per batch (MSER-5)
DRIFT_PCT = 5.0  # a window whose fitted trend moves its mean by more than this is drifting
METHOD = "MSER-5 (White 1997; White, Cobb & Spratt 2000), bounded by warmup_max_s"
# two-sided 5 % critical values of Student's t, by degrees of freedom (1..30; beyond: 1.96)
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


@dataclass(frozen=True)
class Steady:
    """Where a window starts, in seconds from the start of the series, and whether steady state
    was shown before it (``why``: what was not, when ``steady`` is false)."""

    warmup_s: float
    steady: bool
    why: str = ""
    mser_s: float | None = None  # MSER-5's truncation over the first half, unbounded by the max

    def record(self, max_s: float | None) -> dict[str, object]:
        """The point record's ``warmup`` entry."""
        out: dict[str, object] = {"warmup_s": self.warmup_s, "steady": self.steady,
                                  "method": METHOD if max_s is not None else
                                  "fixed warm-up, checked with MSER-5 and a slope test"}
        if max_s is not None:
            out["warmup_max_s"] = max_s
        if self.mser_s is not None:
            out["mser_s"] = self.mser_s
        if self.why:
            out["why"] = self.why
        return out


def batch_means(series: list[float], batch: int = BATCH) -> list[float]:
    """Means of consecutive batches (an incomplete last batch is left out)."""
    k = len(series) // batch
    return [sum(series[j * batch:(j + 1) * batch]) / batch for j in range(k)]


def mser(means: list[float], d: int) -> float:
    """MSER statistic of the batch means after dropping the first d."""
    rest = means[d:]
    m = sum(rest) / len(rest)
    return sum((z - m) ** 2 for z in rest) / len(rest) ** 2


def mser_point(means: list[float], lo: int = 0, hi: int | None = None) -> int:
    """The d in [lo, hi] (hi: half the batches at most) that minimises MSER; the first on ties."""
    half = len(means) // 2
    hi = half if hi is None else min(hi, half)
    lo = min(lo, hi)
    return min(range(lo, hi + 1), key=lambda d: (mser(means, d), d))


def drift_pct(series: list[float], batch: int = BATCH) -> float | None:
    """The relative change of the least-squares trend over a window (%), when the slope is
    significant at 5 % on its batch means (None: no significant trend, or too few batches)."""
    z = batch_means(series, batch)
    n = len(z)
    if n < 3:
        return None
    xs = [j * batch for j in range(n)]
    mx, mz = sum(xs) / n, sum(z) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (v - mz) for x, v in zip(xs, z)) / sxx
    resid = sum((v - mz - slope * (x - mx)) ** 2 for x, v in zip(xs, z))
    se = math.sqrt(resid / (n - 2) / sxx) if resid > 0 else 0.0
    t = _T975[n - 3] if n - 2 <= len(_T975) else 1.96
    if mz <= 0 or abs(slope) <= t * se:
        return None
    return 100.0 * slope * n * batch / mz


def detect(series: list[float], measure_s: float, min_s: float = 0.0,
           max_s: float | None = None) -> Steady:
    """The warm-up of a series of per-second values that starts with the load (one value per
    second): with ``max_s``, MSER-5's truncation point within [min_s, max_s] (whole batches,
    never past max_s), flagged when MSER's minimum over the first half of the series lies past
    max_s; without, the fixed ``min_s``. Either way the window that follows (``measure_s``
    long) is flagged when it still drifts."""
    means = batch_means(series)
    found = float(mser_point(means) * BATCH) if len(means) >= 2 else None
    why = []
    if max_s is None:
        start = min_s
    elif found is None:
        start = max_s
        why.append(f"the series ({len(series)} s) is too short for MSER-5")
    else:
        lo, hi = math.ceil(min_s / BATCH), int(max_s // BATCH)
        start = min(max(min_s, float(mser_point(means, lo, hi) * BATCH)), max_s) \
            if lo <= hi else min_s
        if found > start + BATCH:
            why.append(f"MSER-5 puts steady state at {found:g} s, after warmup_max_s "
                       f"({max_s:g} s)")
    drift = drift_pct(series[int(start):int(start + measure_s)])
    if drift is not None and abs(drift) > DRIFT_PCT:
        why.append(f"the window's trend moves its mean by {drift:+.0f} %")
    return Steady(float(start), not why, "; ".join(why), found)
