"""Statistics over repetitions: t quantiles, means with 95 % CIs, ratios between modes, CPU costs.

No scipy: the Student t quantile is found by bisection on the t CDF, which is computed from the
regularized incomplete beta function (continued fraction, as in Numerical Recipes §6.4).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

LEVEL = 0.95
CV_UNSTABLE = 0.10  # repetitions whose TPS varies more than this (sd / mean) are flagged
CV_UNSTABLE_SECONDS = 0.35  # a point whose per-second TPS varies more than this is flagged


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < eps:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    front = math.exp(log_front)
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Cumulative distribution function of Student's t with df (> 0, may be fractional) degrees."""
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with df degrees of freedom (t_{0.975, 4} = 2.776)."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def _finite(values: Iterable[float | None]) -> list[float]:
    out = []
    for v in values:
        if v is None:
            continue
        f = float(v)
        if math.isfinite(f):
            out.append(f)
    return out


@dataclass(frozen=True)
class Estimate:
    """A mean over n repetitions with its sample sd and two-sided t confidence interval."""

    n: int
    mean: float | None
    sd: float | None = None
    half: float | None = None  # CI half-width; None when n < 2

    @property
    def low(self) -> float | None:
        """Lower end of the confidence interval."""
        return None if self.mean is None or self.half is None else self.mean - self.half

    @property
    def high(self) -> float | None:
        """Upper end of the confidence interval."""
        return None if self.mean is None or self.half is None else self.mean + self.half

    @property
    def cv(self) -> float | None:
        """Coefficient of variation sd / |mean| (None when undefined)."""
        if self.sd is None or not self.mean:
            return None
        return self.sd / abs(self.mean)


def mean_ci(values: Iterable[float | None], level: float = LEVEL) -> Estimate:
    """Mean and t-based CI (df = n - 1) over repetitions; NaN/None values are dropped."""
    xs = _finite(values)
    n = len(xs)
    if n == 0:
        return Estimate(0, None)
    mean = sum(xs) / n
    if n == 1:
        return Estimate(1, mean)
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    return Estimate(n, mean, sd, half)


@dataclass(frozen=True)
class Ratio:
    """A ratio-derived quantity with its delta-method CI (Welch-Satterthwaite df)."""

    value: float | None
    low: float | None = None
    high: float | None = None
    df: float | None = None

    @property
    def half(self) -> float | None:
        """CI half-width (the interval is symmetric)."""
        return None if self.value is None or self.high is None else self.high - self.value


def ratio_of_means(
    a: Iterable[float | None], b: Iterable[float | None], level: float = LEVEL
) -> Ratio:
    """mean(a) / mean(b) of two independent samples, CI by the delta method (see README)."""
    xa, xb = _finite(a), _finite(b)
    if not xa or not xb:
        return Ratio(None)
    ma, mb = sum(xa) / len(xa), sum(xb) / len(xb)
    if mb == 0:
        return Ratio(None)
    r = ma / mb
    if len(xa) < 2 or len(xb) < 2 or ma == 0:
        return Ratio(r)
    va = sum((x - ma) ** 2 for x in xa) / (len(xa) - 1)
    vb = sum((x - mb) ** 2 for x in xb) / (len(xb) - 1)
    ua, ub = va / (len(xa) * ma * ma), vb / (len(xb) * mb * mb)
    if ua + ub == 0:
        return Ratio(r, r, r, math.inf)
    df = (ua + ub) ** 2 / (ua * ua / (len(xa) - 1) + ub * ub / (len(xb) - 1))
    half = t_quantile(0.5 + level / 2.0, df) * abs(r) * math.sqrt(ua + ub)
    return Ratio(r, r - half, r + half, df)


def tps_change_pct(a: Iterable[float | None], b: Iterable[float | None]) -> Ratio:
    """TPS change of mode A over mode B in %: 100 (mean(a) / mean(b) - 1), with its CI."""
    r = ratio_of_means(a, b)

    def scale(v: float | None) -> float | None:
        return None if v is None else 100.0 * (v - 1.0)

    return Ratio(scale(r.value), scale(r.low), scale(r.high), r.df)


def relative_cpu_benefit(a: Iterable[float | None], b: Iterable[float | None]) -> Ratio:
    """Relative CPU benefit of mode A over B, (b - a) / b = 1 - mean(a) / mean(b), with its CI."""
    r = ratio_of_means(a, b)

    def flip(v: float | None) -> float | None:
        return None if v is None else 1.0 - v

    return Ratio(flip(r.value), flip(r.high), flip(r.low), r.df)


def us_per_request(cpu_s: float, requests: float) -> float:
    """CPU microseconds per request."""
    return cpu_s * 1e6 / requests if requests else math.nan


def us_per_kb(cpu_s: float, bytes_moved: float) -> float:
    """CPU microseconds per KByte (1024 bytes) moved."""
    return cpu_s * 1e6 / (bytes_moved / 1024.0) if bytes_moved else math.nan


def cycles_per_kb(cycles: float, bytes_moved: float) -> float:
    """CPU cycles per KByte (1024 bytes) moved."""
    return cycles / (bytes_moved / 1024.0) if bytes_moved else math.nan


_CLOCK = re.compile(r"@\s*([0-9.]+)\s*([GM])Hz", re.I)


def nominal_hz(cpu_model: str | None, mhz: float | None = None) -> float | None:
    """The nominal clock from a CPU model string ('... @ 2.50GHz') or a MHz figure, in Hz."""
    match = _CLOCK.search(cpu_model or "")
    if match:
        return float(match.group(1)) * (1e9 if match.group(2).upper() == "G" else 1e6)
    return float(mhz) * 1e6 if mhz else None


def estimated_cycles_per_kb(cpu_s: float, bytes_moved: float, hz: float) -> float:
    """Cycles per KB estimated as CPU seconds x nominal clock (no hardware counters)."""
    return cycles_per_kb(cpu_s * hz, bytes_moved)
