"""Load curves (analysis/loadcurve.py): the knee rule on curves of a known truth, curves without
a knee, rate_short points never a knee, the equal-load comparison's interval against a known
ratio, and the report's card only for runs with more than one offered rate."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pandas as pd

from analysis import loadcurve, report

import synthetic_runs

MODES = ["offloads-on", "offloads-off"]


def mm1_p99_ms(rate: float, service_rate: float) -> float:
    """p99 of an M/M/1 queue's response time: exponential with rate mu - lambda."""
    return 1000.0 * math.log(100.0) / (service_rate - rate)


def frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)


def curve_rows(p99: dict[float, float], reps: int = 3, noise: float = 0.02, seed: int = 1,
               short: tuple[float, ...] = (), mode: str = "offloads-on") -> list[dict]:
    rng = random.Random(seed)
    return [{"mode": mode, "repetition": r, "target_rate": q,
             "achieved_rate": q * (0.9 if q in short else 1.0),
             "rate_short": q in short, "p50_ms": v / 4,
             "p99_ms": v * math.exp(rng.gauss(0, noise))}
            for q, v in p99.items() for r in range(1, reps + 1)]


def test_the_knee_of_an_mm1_queue_is_where_its_p99_doubles() -> None:
    """An M/M/1 server of 1,000 requests/s: its p99 doubles from its value at 100/s where
    mu - lambda halves, at 550/s; so the knee among 100, 200, ..., 900/s is 500/s, whatever
    the measurement noise of 2 % (20 seeds)."""
    rates = [100.0 * k for k in range(1, 10)]
    truth = {q: mm1_p99_ms(q, 1000.0) for q in rates}
    assert truth[500.0] < 2 * truth[100.0] < truth[600.0]
    for seed in range(20):
        points = loadcurve.curve(frame(curve_rows(truth, seed=seed)))
        k = loadcurve.knee(points)
        assert k.offered == 500.0 and k.achieved == 500.0, (seed, k)
        assert k.text.startswith("knee at 500/s offered") and "600/s" in k.text


def test_a_curve_that_stays_flat_has_no_knee_and_says_so() -> None:
    truth = {q: mm1_p99_ms(q, 100_000.0) for q in (100.0, 400.0, 800.0)}
    k = loadcurve.knee(loadcurve.curve(frame(curve_rows(truth))))
    assert k.offered is None
    assert k.text.startswith("no knee up to 800/s") and "the knee lies beyond" in k.text


def test_a_rate_short_point_is_never_the_knee() -> None:
    """The same server, with 300/s flagged rate_short (the generator could not send it): its p99
    is low, but the knee is the load below it; a curve whose lowest load fell short has none."""
    truth = {q: mm1_p99_ms(q, 1000.0) for q in (100.0, 200.0, 300.0, 400.0, 500.0)}
    k = loadcurve.knee(loadcurve.curve(frame(curve_rows(truth, short=(300.0,)))))
    assert k.offered == 200.0 and "300/s, fell short of its rate" in k.text
    k = loadcurve.knee(loadcurve.curve(frame(curve_rows(truth, short=(100.0,)))))
    assert k.offered is None and "lowest offered load (100/s) already fell short" in k.text
    # one repetition short is enough
    rows = curve_rows(truth)
    rows[[i for i, r in enumerate(rows) if r["target_rate"] == 400.0][1]]["rate_short"] = True
    assert loadcurve.knee(loadcurve.curve(frame(rows))).offered == 300.0


def test_equal_load_intervals_cover_a_known_p99_ratio() -> None:
    """Two modes whose true p99 differ by 1.5x at every load, 5 % lognormal noise, 4
    repetitions: the 95 % intervals of the equal-load ratio cover 1.5 in 93-97 % of 1,000
    comparisons, and the rates pair up (every rate once, per mode against the baseline)."""
    covered = total = 0
    for seed in range(250):
        rng = random.Random(seed)
        rows = [{"mode": m, "repetition": r, "target_rate": q, "trace": "single-4k",
                 "p99_ms": 10.0 * q / 100 * (1.5 if m == MODES[0] else 1.0)
                 * math.exp(rng.gauss(0, 0.05)), "rate_short": False}
                for q in (100.0, 200.0, 300.0, 400.0) for m in MODES for r in range(1, 5)]
        out = loadcurve.equal_load(frame(rows), MODES[1], MODES, ["trace", "target_rate"])
        assert [(c.offered, c.mode, c.n, c.n_baseline) for c in out] == [
            (q, MODES[0], 4, 4) for q in (100.0, 200.0, 300.0, 400.0)]
        for c in out:
            total += 1
            covered += c.ratio.low is not None and c.ratio.low <= 1.5 <= c.ratio.high
    assert 0.93 <= covered / total <= 0.97, covered / total


def test_the_report_draws_curves_only_for_runs_with_several_rates(tmp_path: Path) -> None:
    """The synthetic curves: p99 3 + (q/400)^3 (+1 off): 100/s 3.0, 400/s 4.0, 800/s 11.0 ms,
    so the knee is 400/s for both modes; with 800/s short in one repetition of one mode, that
    mode's knee stays 400/s and the equal-load row at 800/s is marked."""
    run_dir = synthetic_runs.family_run(tmp_path, "latency-at-load")
    page = report.write_report(run_dir).read_text()
    card = page[page.index('id="loadcurve"'):page.index('id="group-')]
    assert card.count("knee at 400/s offered") == 2 and "(fell short)" not in card
    # at 800/s: p99 11.0 + 0.15 (on) against 12.15 (off), the mean over repetitions 1 and 2
    assert "<td class=\"num\">11.15 / 12.15</td>" in card
    assert 'class="chart loadcurve"' in card and "p0-knee-s0" in card and "p0-knee-s1" in card
    rows, traces, modes, _ = synthetic_runs.family_rows("latency-at-load")
    man = synthetic_runs.manifest("latency-at-load", traces, modes,
                                  synthetic_runs.spec_of("latency-at-load"))
    for r in rows:
        if r["target_rate"] == 800.0 and r["mode"] == MODES[1] and r["repetition"] == 1:
            r.update(rate_short=True, achieved_rate=700.0)
    page = report.render_report(rows, man)
    card = page[page.index('id="loadcurve"'):page.index('id="group-')]
    assert card.count("knee at 400/s offered") == 2 and card.count("(fell short)") == 1
    one_rate = [r for r in rows if r["target_rate"] == 400.0]
    assert loadcurve.has_curves(rows) and not loadcurve.has_curves(one_rate)
    assert 'id="loadcurve"' not in report.render_report(one_rate, man)
