"""Claims as data (analysis.claimspec, analysis.claims): every verdict reached on synthetic
results, unresolved when the interval straddles a boundary (with the repetitions that would
decide it), reversed when the sign flips, the interval against hand computation and, over
simulated runs of known truth, the verdicts' error rates; the model refuses malformed claims."""

from __future__ import annotations

import math
import random

import pandas as pd
import pytest
from pydantic import ValidationError
from scipy import stats as scipy_stats

from analysis import claims
from analysis.claimspec import Claim, Claims


def points(values: dict[tuple[str, str], list[float]], metric: str = "tps") -> pd.DataFrame:
    """A tidy table: (mode, trace) -> one value per repetition."""
    rows = [{"mode": m, "trace": t, "repetition": r, metric: v, "failed": False}
            for (m, t), vs in values.items() for r, v in enumerate(vs, 1)]
    return pd.DataFrame(rows)


def claim(**kw: object) -> Claim:
    base: dict[str, object] = {"id": "c", "figure": "Fig. 1", "source": "000 §1, Fig. 1",
                               "says": "offload raises TPS", "experiment": "x",
                               "metric": "tps", "kind": "direction",
                               "a": {"mode": "on"}, "b": {"mode": "off"}}
    base.update(kw)
    return Claim.model_validate(base)


ON_OFF = {"direction": claim()}


def run(on: list[float], off: list[float], trace: str = "t") -> pd.DataFrame:
    return points({("on", trace): on, ("off", trace): off})


# --------------------------------------------------------------------------- direction


def test_direction_reproduced_when_the_interval_excludes_no_effect_on_the_claimed_side() -> None:
    out = claims.evaluate(claim(), run([110, 112, 111, 109], [100, 101, 99, 100]))
    assert out.verdict == claims.REPRODUCED
    assert out.low_pct is not None and out.low_pct > 0 and out.repetitions == 4


def test_direction_reversed_when_the_sign_flips() -> None:
    out = claims.evaluate(claim(), run([90, 91, 89, 90], [100, 101, 99, 100]))
    assert out.verdict == claims.REVERSED and out.high_pct is not None and out.high_pct < 0
    # the same data, the claim stated the other way round, is reproduced
    assert claims.evaluate(claim(higher=False), run([90, 91, 89, 90],
                                                     [100, 101, 99, 100])).verdict == "reproduced"


def test_direction_not_reproduced_when_the_interval_lies_within_the_negligible_band() -> None:
    out = claims.evaluate(claim(), run([100.5, 99.5, 100.2, 99.8], [100, 100.4, 99.6, 100]))
    assert out.verdict == claims.NOT_REPRODUCED
    assert -5 < out.low_pct < 0 < out.high_pct < 5  # type: ignore[operator]
    # without a band there is no "no effect" verdict: the same interval is unresolved
    assert claims.evaluate(claim(negligible=0), run([100.5, 99.5, 100.2, 99.8],
                                                    [100, 100.4, 99.6, 100])).verdict \
        == claims.UNRESOLVED


def test_unresolved_when_the_interval_straddles_with_the_repetitions_that_would_decide() -> None:
    on, off = [130, 95, 120, 100], [100, 110, 90, 105]
    out = claims.evaluate(claim(), run(on, off))
    assert out.verdict == claims.UNRESOLVED
    assert out.low_pct < 0 < out.high_pct  # type: ignore[operator]
    need = out.repetitions_needed
    assert need is not None and need > 4 and "repetitions per condition" in out.note
    # checked: with `need` repetitions at the same means and spreads the interval decides,
    # with one fewer it does not (the spread is kept by repeating the same deviations)
    def widened(xs: list[float], n: int) -> list[float]:
        m = sum(xs) / len(xs)
        sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
        z = [scipy_stats.norm.ppf((i + 0.5) / n) for i in range(n)]
        zm = sum(z) / n
        zs = math.sqrt(sum((v - zm) ** 2 for v in z) / (n - 1))
        return [m + sd * (v - zm) / zs for v in z]

    decided = claims.evaluate(claim(), run(widened(on, need), widened(off, need)))
    short = claims.evaluate(claim(), run(widened(on, need - 1), widened(off, need - 1)))
    assert decided.verdict == claims.REPRODUCED and short.verdict == claims.UNRESOLVED


def test_one_repetition_gives_no_interval_and_a_missing_condition_is_not_measured() -> None:
    assert claims.evaluate(claim(), run([110], [100])).verdict == claims.UNRESOLVED
    out = claims.evaluate(claim(a={"mode": "gone"}), run([110, 111], [100, 99]))
    assert out.verdict == claims.NOT_MEASURED and out.effect_pct is None


def test_the_interval_is_the_delta_methods_with_welch_degrees_of_freedom() -> None:
    on, off = [110.0, 120.0, 115.0], [100.0, 104.0, 98.0, 102.0]
    out = claims.evaluate(claim(), run(on, off))
    ma, mb = sum(on) / 3, sum(off) / 4
    ua = (sum((x - ma) ** 2 for x in on) / 2) / (3 * ma * ma)
    ub = (sum((x - mb) ** 2 for x in off) / 3) / (4 * mb * mb)
    df = (ua + ub) ** 2 / (ua * ua / 2 + ub * ub / 3)
    half = scipy_stats.t.ppf(0.975, df) * math.sqrt(ua + ub)
    est = math.log(ma / mb)
    assert out.effect_pct == pytest.approx(100 * math.expm1(est))
    assert out.low_pct == pytest.approx(100 * math.expm1(est - half))
    assert out.high_pct == pytest.approx(100 * math.expm1(est + half))


# --------------------------------------------------------------------------- ratio


def test_ratio_verdicts_inside_outside_reversed_and_straddling_the_band() -> None:
    c = claim(kind="ratio", ratio=1.14, tolerance=0.05)
    assert claims.evaluate(c, run([114, 114.5, 113.5, 114], [100, 100.2, 99.8, 100])).verdict \
        == claims.REPRODUCED
    assert claims.evaluate(c, run([140, 141, 139, 140], [100, 100.2, 99.8, 100])).verdict \
        == claims.NOT_REPRODUCED
    assert claims.evaluate(c, run([101, 101.5, 100.5, 101], [100, 100.2, 99.8, 100])).verdict \
        == claims.NOT_REPRODUCED  # above no effect, below the claimed band
    assert claims.evaluate(c, run([80, 81, 79, 80], [100, 100.2, 99.8, 100])).verdict \
        == claims.REVERSED
    out = claims.evaluate(c, run([125, 105, 115, 112], [100, 100, 100, 100]))
    assert out.verdict == claims.UNRESOLVED and out.repetitions_needed


# --------------------------------------------------------------------------- trend, order


def test_trend_of_a_gap_over_a_factor_falls_rises_or_stays() -> None:
    c = claim(kind="trend", factor="trace", levels=["lo", "hi"], higher=False)
    shrinks = points({("on", "lo"): [200, 202, 198], ("off", "lo"): [100, 101, 99],
                      ("on", "hi"): [150, 151, 149], ("off", "hi"): [100, 101, 99]})
    assert claims.evaluate(c, shrinks).verdict == claims.REPRODUCED
    widens = points({("on", "lo"): [150, 151, 149], ("off", "lo"): [100, 101, 99],
                     ("on", "hi"): [200, 202, 198], ("off", "hi"): [100, 101, 99]})
    assert claims.evaluate(c, widens).verdict == claims.REVERSED
    stays = points({("on", "lo"): [160, 160.5, 159.5], ("off", "lo"): [100, 100.2, 99.8],
                    ("on", "hi"): [160, 160.4, 159.6], ("off", "hi"): [100, 100.1, 99.9]})
    assert claims.evaluate(c, stays).verdict == claims.NOT_REPRODUCED
    # without b, the trend of A alone: "on" falls from lo to hi in `shrinks`
    assert claims.evaluate(claim(kind="trend", factor="trace", levels=["lo", "hi"], b=None,
                                 higher=False), shrinks).verdict == claims.REPRODUCED


def test_order_is_reproduced_only_when_every_neighbouring_pair_is() -> None:
    c = claim(kind="order", a=None, b=None,
              order=[{"mode": "x"}, {"mode": "y"}, {"mode": "z"}])
    ok = points({("x", "t"): [30, 31, 29], ("y", "t"): [20, 21, 19], ("z", "t"): [10, 11, 9]})
    assert claims.evaluate(c, ok).verdict == claims.REPRODUCED
    flipped = points({("x", "t"): [30, 31, 29], ("y", "t"): [5, 6, 4], ("z", "t"): [10, 11, 9]})
    out = claims.evaluate(c, flipped)
    assert out.verdict == claims.REVERSED and "1 of 2" in out.note


# --------------------------------------------------------------------------- known truth


@pytest.mark.parametrize("truth,verdict_ok,verdict_wrong", [
    (1.10, claims.REPRODUCED, claims.REVERSED),
    (1.00, claims.UNRESOLVED, None),
])
def test_simulated_runs_of_known_truth_rarely_get_the_wrong_verdict(
        truth: float, verdict_ok: str, verdict_wrong: str | None) -> None:
    """400 runs of 5 repetitions, 4 % noise: a true +10 % is never called reversed and the
    interval covers the truth in about 95 % of runs; with no true effect, "reproduced" (a
    false positive of a one-sided claim) stays near 2.5 %."""
    rng = random.Random(44)
    c, found, covered = claim(negligible=0), [], 0
    for _ in range(400):
        on = [100 * truth * (1 + rng.gauss(0, 0.04)) for _ in range(5)]
        off = [100 * (1 + rng.gauss(0, 0.04)) for _ in range(5)]
        out = claims.evaluate(c, run(on, off))
        found.append(out.verdict)
        covered += out.low_pct <= 100 * (truth - 1) <= out.high_pct  # type: ignore[operator]
    assert 0.92 <= covered / 400 <= 0.98
    if verdict_wrong:
        assert found.count(verdict_wrong) == 0
        assert found.count(verdict_ok) > 300
    else:
        assert found.count(claims.REPRODUCED) / 400 < 0.05
        assert found.count(claims.UNRESOLVED) / 400 > 0.9


# --------------------------------------------------------------------------- the model


@pytest.mark.parametrize("bad,words", [
    ({"kind": "ratio"}, "needs ratio"),
    ({"kind": "trend", "factor": "alpha", "levels": [0.5]}, "two different values"),
    ({"kind": "trend", "factor": "mode", "levels": ["a", "b"]}, "cannot fix its factor"),
    ({"kind": "order", "order": [{"mode": "x"}]}, "at least two"),
    ({"kind": "guess"}, "kind"),
    ({"source": "Fig. 3"}, "source"),
    ({"colour": "red"}, "colour"),
])
def test_the_model_refuses_malformed_claims(bad: dict[str, object], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        claim(**bad)


def test_claim_ids_are_unique_within_a_row() -> None:
    one = claim().model_dump()
    with pytest.raises(ValidationError, match="used twice"):
        Claims.model_validate({"claims": [one, one]})


def test_claims_csv_has_one_line_per_claim_and_the_counts_name_every_verdict(tmp_path) -> None:
    lines = [claims.entry(claim(), claims.evaluate(claim(), run([110, 111], [100, 99])),
                          "000", "NET-bw", "r1"),
             claims.entry(claim(id="d"), claims.Outcome(claims.NOT_MEASURED), "000", "NET-bw")]
    path = claims.write_csv(lines, tmp_path / "claims.csv")
    text = path.read_text().splitlines()
    assert text[0].split(",")[:4] == ["study", "row", "figure", "claim"] and len(text) == 3
    got = claims.counts(lines)
    assert got[claims.REPRODUCED] == 1 and got[claims.NOT_MEASURED] == 1
    assert claims.counts_text(got) == "1 reproduced, 1 not measured"
