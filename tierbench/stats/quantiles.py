"""Quantiles of Student's t and chi-square (fractional degrees of freedom included, as the
Welch-Satterthwaite intervals need), from scipy.stats.

scipy.stats takes about a second to import, which every `tierbench` command would pay at
start-up (the runner imports the stopping rule, which imports this module): it is imported at
the first quantile asked for, here, and nowhere else of tierbench.
"""

from __future__ import annotations

import functools
from types import ModuleType


@functools.cache
def _scipy_stats() -> ModuleType:
    from scipy import stats  # at the first quantile: see the module's docstring

    return stats


def t_quantile(p: float, df: float) -> float:
    """The p quantile of Student's t with df (> 0, may be fractional) degrees of freedom."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError(f"t_quantile needs 0 < p < 1 and df > 0, got p={p}, df={df}")
    return float(_scipy_stats().t.ppf(p, df))


def t_tail(t: float, df: float) -> float:
    """The upper tail of Student's t with df degrees of freedom beyond t: P(T > t)."""
    return float(_scipy_stats().t.sf(t, df))


def chi2_quantile(p: float, df: float) -> float:
    """The p quantile of chi-square with df degrees of freedom."""
    return float(_scipy_stats().chi2.ppf(p, df))
