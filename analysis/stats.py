"""Statistics over repetitions: t quantiles, means with 95 % CIs, ratios between modes, CPU costs.

Student t quantiles come from tierbench.stats.quantiles (scipy.stats; fractional degrees of
freedom included, as the Welch-Satterthwaite intervals below need).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from tierbench.stats.quantiles import t_quantile

LEVEL = 0.95
CV_UNSTABLE = 0.10  # repetitions whose TPS varies more than this (sd / mean) are flagged
CV_UNSTABLE_SECONDS = 0.35  # a point whose per-second TPS varies more than this is flagged
COUNT_MISMATCH = 0.02  # engine count vs per-request records: the runner flags more than this


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
ESTIMATE = "estimate: CPU time x clock (no hardware counters)"
HARDWARE_COUNTERS = "hardware counters (cycles_* columns of summary.csv)"


@dataclass(frozen=True)
class Clock:
    """The CPU clock used to turn CPU time into cycles, and where it came from."""

    hz: float
    source: str  # "host.cpu_mhz in manifest.json" | "the CPU model's nominal clock"


def clock(cpu_model: str | None, cpu_mhz: float | str | None = None) -> Clock | None:
    """The clock for cycle estimates: the measured MHz the runner recorded (host.cpu_mhz) when
    present, else the nominal clock the CPU model names ('... @ 2.50GHz'), else None."""
    try:
        mhz = float(cpu_mhz) if cpu_mhz not in (None, "") else None
    except (TypeError, ValueError):
        mhz = None
    if mhz and mhz > 0 and math.isfinite(mhz):
        return Clock(mhz * 1e6, "host.cpu_mhz in manifest.json")
    match = _CLOCK.search(cpu_model or "")
    if match:
        hz = float(match.group(1)) * (1e9 if match.group(2).upper() == "G" else 1e6)
        return Clock(hz, "the CPU model's nominal clock")
    return None


def estimated_cycles_per_kb(cpu_s: float, bytes_moved: float, hz: float) -> float:
    """Cycles per KB estimated as CPU seconds x clock / KB (no hardware counters)."""
    return cycles_per_kb(cpu_s * hz, bytes_moved)
