"""Whether a run reproduced a paper's claims (analysis.claimspec declares them).

Each claim is a contrast L = sum of c_k ln(mean_k) over its conditions' means across
repetitions (A over B: ln A - ln B; a trend of a gap: (ln A - ln B) at the last level minus the
same at the first). Its 95 % interval is the delta method's, as the Welch comparisons of
tierbench.stats.precision: each mean's relative standard error u_k = s_k / (mean_k sqrt(n_k)),
se(L)^2 = sum c_k^2 u_k^2, Student t with Welch-Satterthwaite degrees of freedom
(sum c_k^2 u_k^2)^2 / sum (c_k^2 u_k^2)^2 / (n_k - 1). The repetitions are taken as independent
(a precision run's blocks are not paired here: wider, never narrower, under drift).

The verdict compares the interval [lo, hi] with the claim's regions on the log scale:

- ``direction`` (sign s = +1 when A should be higher): reproduced when s lo > 0 (the interval
  excludes no effect on the claimed side), reversed when s hi < 0, not reproduced when the
  interval lies within ±ln(1 + negligible) (no effect worth the name), else unresolved. A
  ``trend`` is a direction of its contrast; an ``order`` is a direction per neighbouring pair
  (reproduced when every pair is, reversed when one is, not reproduced when one is not, else
  unresolved).
- ``ratio``: reproduced when the interval lies inside ln(ratio) ± ln(1 + tolerance), reversed
  when it lies wholly on the other side of no effect, not reproduced when it misses the band,
  else unresolved.

An unresolved claim states the repetitions (per condition) that would decide it at the spread
observed: the least n whose half-width, t(df_n) sqrt(sum c_k^2 cv_k^2 / n), is below the
distance from the estimate to the boundary that decides it. ``not measured``: a condition has no
value in the run (not run, or failed); one repetition gives no interval (unresolved).
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import load, stats, tables
from analysis.claimspec import Claim, Condition
from tierbench.stats import quantiles

REPRODUCED, NOT_REPRODUCED, REVERSED, UNRESOLVED = (
    "reproduced", "not reproduced", "reversed", "unresolved")
NOT_MEASURED = "not measured"
VERDICTS = (REPRODUCED, NOT_REPRODUCED, REVERSED, UNRESOLVED, NOT_MEASURED)
MAX_REPETITIONS = 1000  # "more than this" beyond
LEVEL = stats.LEVEL


@dataclass(frozen=True)
class Term:
    """One condition's mean over repetitions and its coefficient in the contrast."""

    coefficient: float
    n: int
    mean: float | None
    sd: float | None


@dataclass(frozen=True)
class Contrast:
    """L with its 95 % interval on the log scale (``lo``/``hi`` None: no interval)."""

    estimate: float | None
    lo: float | None = None
    hi: float | None = None
    terms: tuple[Term, ...] = ()

    def unit_variance(self) -> float:
        """sum c_k^2 cv_k^2: the variance of L times the repetitions per condition."""
        return sum(t.coefficient ** 2 * (t.sd / t.mean) ** 2 for t in self.terms
                   if t.sd is not None and t.mean)

    def repetitions_to(self, distance: float) -> int | None:
        """The least repetitions per condition whose half-width is below ``distance`` at the
        spread observed (None: the estimate sits on the boundary, no number will do)."""
        if distance <= 0 or self.estimate is None:
            return None
        unit = self.unit_variance()
        if unit == 0:
            return max(t.n for t in self.terms)
        parts = sum((t.coefficient ** 2 * (t.sd / t.mean) ** 2) ** 2 for t in self.terms
                    if t.sd is not None and t.mean)
        for n in range(2, MAX_REPETITIONS + 1):
            df = (n - 1) * unit ** 2 / parts
            if quantiles.t_quantile(0.5 + LEVEL / 2, df) * math.sqrt(unit / n) < distance:
                return n
        return MAX_REPETITIONS + 1


def contrast(terms: list[Term]) -> Contrast:
    """The contrast of the terms' log means with its delta-method interval."""
    if any(t.mean is None or t.mean <= 0 for t in terms):
        return Contrast(None, terms=tuple(terms))
    means = [float(t.mean or 0) for t in terms]
    est = sum(t.coefficient * math.log(m) for t, m in zip(terms, means))
    if any(t.n < 2 or t.sd is None for t in terms):
        return Contrast(est, terms=tuple(terms))
    parts = [t.coefficient ** 2 * (float(t.sd or 0) / m) ** 2 / t.n
             for t, m in zip(terms, means)]
    var = sum(parts)
    if var == 0:
        return Contrast(est, est, est, tuple(terms))
    df = var ** 2 / sum(p * p / (t.n - 1) for p, t in zip(parts, terms) if p)
    half = quantiles.t_quantile(0.5 + LEVEL / 2, df) * math.sqrt(var)
    return Contrast(est, est - half, est + half, tuple(terms))


@dataclass(frozen=True)
class Outcome:
    """A claim's verdict on one run: the measured ratio (e^L) and its interval, in %."""

    verdict: str
    effect_pct: float | None = None
    low_pct: float | None = None
    high_pct: float | None = None
    repetitions: int = 0
    repetitions_needed: int | None = None
    note: str = ""


def pct(x: float | None) -> float | None:
    """A log ratio as a change in %."""
    return None if x is None else 100.0 * math.expm1(x)


def undecidable(c: Contrast) -> Outcome | None:
    """Not measured (a condition without values) or unresolved (no interval), else None."""
    if c.estimate is None:
        return Outcome(NOT_MEASURED, note="a condition has no value in the run")
    if c.lo is None or c.hi is None:
        return Outcome(UNRESOLVED, **outcome_base(c), note="one repetition: no interval")
    return None


def direction(c: Contrast, sign: float, negligible: float) -> Outcome:
    """The verdict of a contrast that should have ``sign`` (+1 or -1)."""
    early = undecidable(c)
    if early is not None or c.lo is None or c.hi is None or c.estimate is None:
        return early or Outcome(NOT_MEASURED)
    base = outcome_base(c)
    band = math.log1p(negligible)
    lo, hi = sorted((sign * c.lo, sign * c.hi))
    if lo > 0:
        return Outcome(REPRODUCED, **base)
    if hi < 0:
        return Outcome(REVERSED, **base)
    if band > 0 and -band <= lo and hi <= band:
        return Outcome(NOT_REPRODUCED, **base,
                       note=f"within ±{100 * negligible:g} %: no effect worth the name")
    est = abs(c.estimate)
    return unresolved(c, base, max(est, band - est))


def ratio(c: Contrast, claimed: float, tolerance: float) -> Outcome:
    """The verdict of a contrast that should be ln(claimed) within ln(1 + tolerance)."""
    early = undecidable(c)
    if early is not None or c.lo is None or c.hi is None or c.estimate is None:
        return early or Outcome(NOT_MEASURED)
    base = outcome_base(c)
    centre, width = math.log(claimed), math.log1p(tolerance)
    low, high = centre - width, centre + width
    if low <= c.lo and c.hi <= high:
        return Outcome(REPRODUCED, **base)
    if (centre > 0 and c.hi < 0) or (centre < 0 and c.lo > 0):
        return Outcome(REVERSED, **base)
    if c.hi < low or c.lo > high:
        return Outcome(NOT_REPRODUCED, **base,
                       note=f"outside {claimed:g}x ± {100 * tolerance:g} %")
    return unresolved(c, base, min(abs(c.estimate - low), abs(c.estimate - high)))


def outcome_base(c: Contrast) -> dict[str, Any]:
    """The measured change, interval and repetitions of a contrast."""
    return {"effect_pct": pct(c.estimate), "low_pct": pct(c.lo), "high_pct": pct(c.hi),
            "repetitions": min((t.n for t in c.terms), default=0)}


def unresolved(c: Contrast, base: dict[str, Any], distance: float) -> Outcome:
    """Unresolved, with the repetitions that would decide at the spread observed."""
    need = c.repetitions_to(distance)
    note = ("the estimate sits on a boundary: no number of repetitions decides it"
            if need is None else f"more than {MAX_REPETITIONS} repetitions would be needed"
            if need > MAX_REPETITIONS else
            f"about {need} repetitions per condition would decide it at the observed spread")
    return Outcome(UNRESOLVED, **base, repetitions_needed=need, note=note)


# --------------------------------------------------------------------------- results


def condition_values(points: pd.DataFrame, metric: str, cond: Condition) -> list[float]:
    """The condition's value per repetition: the mean of the good points it matches."""
    pts = tables.good(points)
    if metric not in pts or not len(pts):
        return []
    sub = pts[tables.matches(pts, dict(cond))]
    vals = pd.to_numeric(sub[metric], errors="coerce")
    reps = sub["repetition"] if "repetition" in sub else pd.Series(1, index=sub.index)
    means = vals.groupby(reps).mean().dropna()
    return [float(v) for v in means]


def term(points: pd.DataFrame, metric: str, cond: Condition, coefficient: float) -> Term:
    """A condition's mean and spread over repetitions, as a term of a contrast."""
    est = stats.mean_ci(condition_values(points, metric, cond))
    return Term(coefficient, est.n, est.mean, est.sd)


def conditions(claim: Claim) -> list[tuple[Condition, float]]:
    """The contrast's conditions (``where`` merged in) and coefficients, for two-sided kinds."""
    def at(cond: Condition | None, extra: Condition | None = None) -> Condition:
        return {**claim.where, **(cond or {}), **(extra or {})}

    if claim.kind in ("direction", "ratio"):
        return [(at(claim.a), 1.0), (at(claim.b), -1.0)]
    assert claim.factor is not None and claim.levels is not None
    first: Condition = {claim.factor: claim.levels[0]}
    last: Condition = {claim.factor: claim.levels[1]}
    out = [(at(claim.a, last), 1.0), (at(claim.a, first), -1.0)]
    if claim.b is not None:
        out += [(at(claim.b, last), -1.0), (at(claim.b, first), 1.0)]
    return out


def evaluate(claim: Claim, points: pd.DataFrame) -> Outcome:
    """The claim's verdict on a run's tidy points (analysis.load.points_frame)."""
    sign = 1.0 if claim.higher else -1.0
    if claim.kind == "order":
        pairs = [(claim.order[i], claim.order[i + 1])  # type: ignore[index]
                 for i in range(len(claim.order or []) - 1)]
        found = [direction(contrast([term(points, claim.metric, {**claim.where, **x}, 1.0),
                                     term(points, claim.metric, {**claim.where, **y}, -1.0)]),
                           1.0, claim.negligible) for x, y in pairs]
        return combine(found)
    c = contrast([term(points, claim.metric, cond, k) for cond, k in conditions(claim)])
    if claim.kind == "ratio":
        assert claim.ratio is not None
        return ratio(c, claim.ratio, claim.tolerance)
    return direction(c, sign, claim.negligible)


def combine(pairs: list[Outcome]) -> Outcome:
    """An order's verdict from its neighbouring pairs' (the weakest pair's numbers shown)."""
    for v in (NOT_MEASURED, REVERSED, NOT_REPRODUCED, UNRESOLVED):
        hit = [p for p in pairs if p.verdict == v]
        if hit:
            needs = [p.repetitions_needed for p in hit if p.repetitions_needed is not None]
            first = hit[0]
            return Outcome(v, first.effect_pct, first.low_pct, first.high_pct,
                           first.repetitions, max(needs) if needs else None,
                           f"{len(hit)} of {len(pairs)} neighbouring pairs {v}"
                           + (f"; {first.note}" if first.note else ""))
    p = min(pairs, key=lambda o: abs(o.low_pct or 0))
    return Outcome(REPRODUCED, p.effect_pct, p.low_pct, p.high_pct, p.repetitions,
                   note=f"all {len(pairs)} neighbouring pairs in order")


def expected(claim: Claim) -> str:
    """What the claim expects, in a few words."""
    def name(cond: Condition | None) -> str:
        return ", ".join(f"{k}=" + ("|".join(tables.label(x) for x in v) if isinstance(v, list)
                                    else tables.label(v))
                         for k, v in (cond or {}).items()) or "all"

    if claim.kind == "direction":
        return f"{name(claim.a)} {'above' if claim.higher else 'below'} {name(claim.b)}"
    if claim.kind == "ratio":
        return (f"{name(claim.a)} / {name(claim.b)} = {claim.ratio:g}x "
                f"± {100 * claim.tolerance:g} %")
    if claim.kind == "trend":
        what = name(claim.a) if claim.b is None else f"{name(claim.a)} / {name(claim.b)}"
        lv = claim.levels or []
        return (f"{what} {'rises' if claim.higher else 'falls'} from {claim.factor}="
                f"{tables.label(lv[0])} to {tables.label(lv[1])}")
    return " > ".join(name(c) for c in claim.order or [])


# --------------------------------------------------------------------------- scoreboard

CSV_COLUMNS = ("study", "row", "figure", "claim", "source", "says", "experiment", "run",
               "metric", "expected", "verdict", "effect_pct", "low_pct", "high_pct",
               "repetitions", "repetitions_needed", "note")


def entry(claim: Claim, outcome: Outcome, study: str = "", row: str = "",
          run: str = "") -> dict[str, Any]:
    """One scoreboard line (claims.csv's columns)."""
    return {"study": study, "row": row, "figure": claim.figure, "claim": claim.id,
            "source": claim.source, "says": claim.says, "experiment": claim.experiment,
            "run": run, "metric": claim.metric, "expected": expected(claim),
            **{k: v for k, v in asdict(outcome).items()}}


def counts(lines: Iterable[dict[str, Any]]) -> dict[str, int]:
    """How many claims got each verdict (every verdict named, zeros included)."""
    out = dict.fromkeys(VERDICTS, 0)
    for line in lines:
        out[str(line["verdict"])] += 1
    return out


def counts_text(found: dict[str, int]) -> str:
    """'3 reproduced, 1 reversed, ...' (verdicts with none left out)."""
    return ", ".join(f"{n} {v}" for v, n in found.items() if n) or "no claims"


def interval_text(line: dict[str, Any]) -> str:
    """'+12.1 % [+4.0, +20.9]' (or without the interval)."""
    if line.get("effect_pct") is None:
        return ""
    text = f"{line['effect_pct']:+.1f} %"
    if line.get("low_pct") is not None:
        text += f" [{line['low_pct']:+.1f}, {line['high_pct']:+.1f}]"
    return text


def write_csv(lines: list[dict[str, Any]], path: Path) -> Path:
    """claims.csv: one line per claim, CSV_COLUMNS, numbers with 4 significant digits."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=list(CSV_COLUMNS), extrasaction="ignore")
        out.writeheader()
        for line in lines:
            out.writerow({k: (f"{v:.4g}" if isinstance(v, float) else "" if v is None else v)
                          for k, v in line.items()})
    return path


# --------------------------------------------------------------------------- runs


def run_points(run: Path | None) -> pd.DataFrame | None:
    """A run's tidy points (its summary.csv and manifest.json), None when it has none."""
    if run is None or not (run / "summary.csv").is_file():
        return None
    rows, manifest, spec, _ = load.read_run_files(run)
    return load.points_frame(rows, manifest, spec)


def run_facts(run: Path) -> dict[str, str]:
    """What a scoreboard names of the run it comes from: its id, date, machine and scale."""
    try:
        m = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        m = {}
    host = m.get("host") if isinstance(m.get("host"), dict) else {}
    exp = m.get("experiment") if isinstance(m.get("experiment"), dict) else {}
    machine = ", ".join(str(x) for x in (
        f"{host.get('cpus')} CPUs" if host.get("cpus") else None, host.get("cpu_model"),
        f"kernel {host['kernel']}" if host.get("kernel") else None) if x)
    return {"run": str(m.get("run_id") or run.name), "date": str(m.get("started") or "")[:10],
            "machine": machine or "not recorded", "experiment": str(exp.get("name") or ""),
            "scale": f"{exp.get('scale') or 1:g}", "repetitions": str(exp.get("repetitions") or "")}


def score(rows: Iterable[tuple[str, str, Claim, Path | None]]) -> list[dict[str, Any]]:
    """Scoreboard lines: each (study, row, claim, run folder or None) evaluated on its run."""
    cache: dict[Path, pd.DataFrame | None] = {}
    out = []
    for study, row, claim, run in rows:
        if run is not None and run not in cache:
            cache[run] = run_points(run)
        pts = cache.get(run) if run is not None else None
        outcome = evaluate(claim, pts) if pts is not None else Outcome(
            NOT_MEASURED, note="the experiment has no results in this study run")
        out.append(entry(claim, outcome, study, row, run_facts(run)["run"] if run else ""))
    return out


def markdown(lines: list[dict[str, Any]], facts: dict[str, str], title: str = "",
             items: bool = True) -> str:
    """A scoreboard as docs/fidelity.md's generated paragraph (one list item): ``title`` after
    "Scoreboard" (a row's id, or "every row"), the claims themselves unless ``items`` is False
    (the counts alone)."""
    head = (f"- **Scoreboard{(', ' + title) if title else ''}** (generated by `tierbench claims`"
            f" from run {facts['run']} of {facts['experiment']}, {facts['date']}, "
            f"{facts['machine']}, scale {facts['scale']}"
            + (f", {facts['repetitions']} repetitions" if facts.get("repetitions") else "")
            + f"): {counts_text(counts(lines))}")
    told = [f"{line['figure']} `{line['claim']}` ({line['source']}): {line['expected']}: "
             f"**{line['verdict']}**" + (f", {interval_text(line)}" if interval_text(line) else "")
             + (f" ({line['note']})" if line.get("note") else "") for line in lines]
    return head + ("; " + "; ".join(told) if told and items else "")
