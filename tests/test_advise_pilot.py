"""The pilot and the design it buys (tierbench.advise.pilot) against simulations with a known
variance model: per seed a pilot is simulated from the truth, the design chosen from its fit, and
the knob run simulated at that design and decided by the advice's rule (analysis.advise,
Holm's control), so the guarantees are those of the whole chain, pilot noise included.

The documented budget: `--budget-min 20` (the issue's acceptance run) for one web workload
(a point: 11.2 s + the window, the web kind's estimate), the veth plan's seven knobs with all-on
and all-off, a truth whose block log ratio has sd 0.04 at 10-s windows (the rule tests' noisy
workload; sd^2 of a point 0.0002 + 0.006/window_s). 1000 seeds each (+-2 points)."""

from __future__ import annotations

import csv
import json
import math
import random
import re
from typing import Any

import pytest

from analysis import advise as advice
from tierbench.advise import knobs, pilot, plan
from tierbench.advise import run as advise_run
from tierbench.kinds import registry
import test_advise as ta

advisor_env = ta.advisor_env  # the fixture: the stubbed interfaces and registry

SEEDS = 1000
TRUTH = pilot.Fit(0.0002, 0.006)
BUDGET_S = 20 * 60
KNOBS = {"tso": "off", "gso": "off", "gro": "on", "checksum": "off", "sg": "off",
         "jumbo": "on", "channels": "on"}
PLANS = [{"knob": k, "changeable": True, "mode": f"{k}-{t}", "target": t,
          "state": "off" if t == "on" else "on", "features_asked": []} for k, t in KNOBS.items()]
METRICS = {"throughput": {"column": "tps", "label": "TPS", "better": "higher"},
           "cpu": {"column": "cpu", "label": "CPU per KB", "better": "lower"}}


def point_s(window_s: float) -> float:
    return 11.2 + window_s


def chosen(rng: random.Random, truth: pilot.Fit = TRUTH,
           budget_s: float = BUDGET_S) -> pilot.Design:
    """The design a simulated pilot of ``truth`` buys."""
    pairs = {w: [rng.gauss(0, truth.ratio_sd(w)) for _ in range(pilot.PILOT_BLOCKS)]
             for w in pilot.PILOT_WINDOWS}
    return pilot.design(pilot.fit(pairs), point_s, pilot.ranked(PLANS), 2,
                        budget_s - pilot.pilot_cost_s(point_s), 10.0)


def changes(seed: int, effects: dict[str, float],
            truth: pilot.Fit = TRUTH) -> tuple[pilot.Design, list[str]]:
    """A whole run: pilot, design, MIN_BLOCKS blocks of the chosen modes at the chosen window
    (the truth's sd there), the rule; the knobs (and "all") whose recommendation is a change."""
    rng = random.Random(seed)
    d = chosen(rng, truth)
    return d, decided(rng, d.window_s, d.knobs, d.ends, effects, truth)


def decided(rng: random.Random, window_s: float, measured: list[str], ends: int,
            effects: dict[str, float], truth: pilot.Fit) -> list[str]:
    """MIN_BLOCKS blocks of the baseline and ``measured`` knobs (and all-on/all-off when
    ``ends`` is 2) at ``window_s`` (the truth's sd there), decided by the rule: the knobs (and
    "all") whose recommendation is a change."""
    sd = truth.ratio_sd(window_s)
    modes = ["baseline", *(f"{k}-{KNOBS[k]}" for k in measured),
             *(("all-on", "all-off") if ends == 2 else ())]
    values: advice.Values = {m: {} for m in modes}
    for block in range(1, plan.MIN_BLOCKS + 1):
        level = rng.gauss(0, 0.1)
        for m in modes:
            values[m][block] = {
                "tps": 1000 * (1 + effects.get(m, 0.0)) * math.exp(
                    level + rng.gauss(0, sd / math.sqrt(2))),
                "cpu": 10 * math.exp(-level + rng.gauss(0, sd / math.sqrt(2)))}
    entry: dict[str, Any] = {"name": "sim", "primary": "throughput", "metrics": METRICS,
                             "all": {"on": "all-on", "off": "all-off"} if ends == 2 else {},
                             "knobs": PLANS}
    found, verdicts = advice.decisions(entry, values, plan.MIN_BLOCKS, None)
    out = [n for n, m in found.items() if verdicts[n][1][1] != m.knob["state"]]
    if "all" in verdicts and verdicts["all"][1][0] != advice.NO_EFFECT:
        out.append("all")
    return out


def test_at_20_minutes_no_workload_fits_the_defaults_but_the_design_does() -> None:
    default = plan.cost(point_s(10.0), 1 + len(KNOBS) + 2).least * plan.MARGIN
    assert default > BUDGET_S  # the reason for the pilot
    d = chosen(random.Random(1))
    assert d.fits and d.knobs and d.cost_s <= BUDGET_S - pilot.pilot_cost_s(point_s)
    assert d.knobs == pilot.ranked(PLANS)[:len(d.knobs)]
    assert any("not measured within the budget" in line for line in d.why)


def test_when_no_knob_matters_at_most_5_percent_of_runs_recommend_any_change() -> None:
    runs = sum(bool(changes(seed, {})[1]) for seed in range(SEEDS))
    assert runs / SEEDS <= 0.05


def test_a_measured_knob_worth_10_percent_is_recommended_in_at_least_80_percent_of_runs() -> None:
    # the first-ranked knob (tso, measured in every design) worth +10 %
    hits = 0
    for seed in range(SEEDS):
        d, found = changes(10_000 + seed, {"tso-off": 0.10, "all-off": 0.10})
        assert "tso" in d.knobs
        hits += "tso" in found
    assert hits / SEEDS >= 0.80


def test_a_noisier_workload_is_told_the_guarantee_is_not_reached_and_stays_null_safe() -> None:
    # the project's prior (a point's sd about 0.084 at 10 s): nothing within 20 minutes reaches
    # 80 % for +10 %; the design says so and still recommends nothing when nothing matters
    noisy = pilot.Fit(*pilot.PRIOR)
    d = chosen(random.Random(3), noisy)
    assert d.power < pilot.POWER and any("no design within the budget" in w for w in d.why)
    runs = sum(bool(changes(seed, {}, noisy)[1]) for seed in range(SEEDS // 2))
    assert runs / (SEEDS // 2) <= 0.05


def test_a_workload_out_of_reach_is_not_measured_and_says_what_it_could_not_find() -> None:
    # static-at-half-load's pilot on the host (docs/advise.md): a block's p99 ratio spread
    # sd^2 about 0.9, a point's variance 0.46; its best design could recommend a +10 % knob in
    # about 3 % of runs. Not measured; the sentence's effect is a lower bound: at the truth, a
    # knob must be worth more to reach 80 % (in 95 % of runs, by the bound's level), and a
    # knob worth it, run at that design, is recommended in fewer than 80 % of runs.
    truth = pilot.Fit(0.46, 0.0)
    hits, below, out, seeds = 0, 0, 0, SEEDS // 2
    for seed in range(seeds):
        rng = random.Random(20_000 + seed)
        d = chosen(rng, truth)
        if d.fits:  # a pilot that happened to be far too quiet
            continue
        out += 1
        assert d.knobs == [] and d.why[0].startswith("out of reach")
        stated = float(re.search(r"worth more than \+(\d+)%", d.why[0]).group(1)) / 100
        assert stated > pilot.MAX_EFFECT
        below += stated <= pilot.detectable(truth.ratio_sd(d.window_s), 1)
        hits += "tso" in decided(rng, d.window_s, ["tso"], 0, {"tso-off": stated}, truth)
    assert out / seeds >= 0.95
    assert below / out >= 0.95 - 0.02
    assert hits / out < 0.80


def test_the_reach_floor_leaves_a_workload_at_the_projects_prior_measured() -> None:
    # the prior's noise (a knob worth about +16-25 % reaches 80 %) stays within reach, however
    # its pilot happened to fall; ``detectable`` is where ``power`` reaches 80 %
    out = sum(not chosen(random.Random(seed), pilot.Fit(*pilot.PRIOR)).fits
              for seed in range(SEEDS))
    assert out / SEEDS <= 0.01
    assert pilot.power(0.2, 1, effect=pilot.detectable(0.2, 1)) == pytest.approx(0.80, abs=0.01)


def test_nothing_fits_is_one_sentence_before_measuring() -> None:
    d = chosen(random.Random(1), budget_s=pilot.pilot_cost_s(point_s) + 60)
    assert not d.fits and d.knobs == [] and len(d.why) == 1
    assert d.why[0].startswith("not measured: 1.0 min of the budget were left")


def test_fit_recovers_the_model_and_falls_back_to_the_prior() -> None:
    rng = random.Random(5)
    many = {w: [rng.gauss(0, TRUTH.ratio_sd(w)) for _ in range(4000)] for w in (2.0, 10.0)}
    f = pilot.fit(many)
    assert f.source == "pilot" and f.df == 8000
    assert f.a == pytest.approx(TRUTH.a, abs=0.0001) and f.b == pytest.approx(TRUTH.b, rel=0.1)
    assert pilot.fit({2.0: [0.1, -0.1]}).source != "pilot"
    flat = pilot.fit({2.0: [0.1, -0.1], 5.0: [0.2, -0.2]})  # larger at the longer window
    assert flat.b == 0 and flat.a == pytest.approx((0.01 + 0.04) / 2 / 2)


def test_power_matches_the_rule_tests_figure() -> None:
    # docs/advise.md: 8 blocks, sd 0.04, ten comparisons: +10 % recommended in 88 % of runs
    assert pilot.power(0.04, 10) == pytest.approx(0.88, abs=0.04)
    assert pilot.power(0.04, 1) > pilot.power(0.04, 10) > pilot.power(0.08, 10)


def test_ranked_puts_the_dependents_last_and_only_with_tso() -> None:
    assert pilot.ranked(PLANS) == ["tso", "gso", "gro", "jumbo", "channels", "checksum", "sg"]
    no_tso = [p for p in PLANS if p["knob"] != "tso"]
    assert "checksum" not in pilot.ranked(no_tso) and "sg" not in pilot.ranked(no_tso)


def test_an_advise_run_off_its_defaults_pilots_then_measures_the_design(
        advisor_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # a point is estimated at 0.1 s: the defaults (12 modes and the confirmation) need about
    # 12.9 s, the budget is 9: a pilot (2 windows x 3 blocks x 2 points), then as many ranked
    # knobs as fit; the simulated noise is small, so the most knobs that fit reach 80 %
    monkeypatch.setattr(advise_run.Advisor, "point_s", lambda self, exp: 0.1)
    folder = advise_run.Advisor(["first"], 9 / 60, 5.0, advisor_env["suite"]).run()
    record = json.loads((folder / "advise.json").read_text())
    (first,) = record["workloads"]
    d = first["design"]
    assert first["status"] == "complete" and d["fits"]
    assert set(first["runs"]) >= {"pilot2", "pilot5", "knobs"}
    assert d["fit"]["source"] == "pilot" and d["fit"]["df"] == 2 * pilot.PILOT_BLOCKS
    ranked = ["tso", "gso", "gro", "jumbo", "channels", "rps", "xps", "checksum", "sg"]
    n = len(d["knobs"])  # as many as what the pilot left holds (its points took 0.05 s)
    assert 3 <= n < len(ranked) and d["knobs"] == ranked[:n] and d["left_out"] == ranked[n:]
    assert d["ends"] == 0 and d["power"] >= pilot.POWER
    assert d["cost_s"] <= d["budget_s"] and d["cost_s"] + 0.8 * 1.15 > first["budget"]["share_s"]
    table = list(csv.DictReader((folder / "advice.csv").open()))
    rows = {r["knob"]: r for r in table if r["workload"] == "first" and r["row"] == "knob"}
    assert rows["gro"]["recommendation"] == "enable"  # measured: the simulation's +20 %
    assert rows["checksum"]["recommendation"] == "not measured"
    assert rows["checksum"]["reason"].startswith("not measured within the budget: ")
    assert not [r for r in table if r["workload"] == "first" and r["row"] == "all"]
    modes = {r["mode"] for r in csv.DictReader(open(f"{first['runs']['knobs']}/summary.csv"))}
    named = {k["knob"]: k["mode"] for k in first["knobs"]}
    assert modes == {"baseline", *(named[k] for k in d["knobs"])}
    assert first["budget"]["pilot_spent_s"] > 0 and record["spent_s"] <= 9
    html = (folder / "advice.html").read_text()
    assert "The budget&#39;s design" in html or "The budget's design" in html
    assert "not measured within the budget" in html


def test_every_suite_workload_builds_at_every_candidate_window_with_the_pilots_modes() -> None:
    # the net kind's windows are whole seconds: 2.0 is written as 2
    suite = plan.load()
    again = knobs.make_mode(pilot.PILOT_MODE, "the baseline again", {})
    for w in suite.workloads:
        for window in pilot.WINDOWS:
            exp = plan.experiment(suite, plan.windowed(w, window), [knobs.baseline(), again],
                                  0.2, rate=100.0 if w.rate_of_baseline_max else None)
            exp = registry.with_precision(exp, half_width_pct=5.0,
                                          metric=w.metrics[w.primary].column,
                                          min_repetitions=pilot.PILOT_BLOCKS,
                                          max_repetitions=pilot.PILOT_BLOCKS)
            assert plan.window_of(plan.windowed(w, window)) == window
            assert registry.kind(exp.kind).point_seconds(exp) == pytest.approx(
                window + (11.2 if exp.kind == "web" else 7.2))


def test_an_advise_run_leaves_a_workload_out_of_reach_and_measures_the_next(
        advisor_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # the first workload's points spread as static-at-half-load's p99 did (sd 0.7): its pilot
    # says no design within the budget could decide, so it is not measured and the second,
    # as quiet as before, gets the minutes
    suite = advisor_env["suite"]
    text = suite.read_text()
    suite.write_text(text.replace("noise: 0.005", "noise: 0.7", 1))
    monkeypatch.setattr(advise_run.Advisor, "point_s", lambda self, exp: 0.1)
    folder = advise_run.Advisor(["first", "second"], 12 / 60, 5.0, suite).run()
    record = json.loads((folder / "advise.json").read_text())
    first, second = record["workloads"]
    assert first["status"].startswith("out of reach within the budget, not measured")
    assert not first["design"]["fits"] and "knobs" not in first["runs"]
    assert set(first["runs"]) >= {"pilot2", "pilot5"}
    assert second["status"] == "complete" and second["design"]["fits"]
    assert second["design"]["knobs"] and second["runs"]["knobs"]
    table = list(csv.DictReader((folder / "advice.csv").open()))
    assert {r["recommendation"] for r in table if r["workload"] == "first"
            and r["row"] == "knob"} <= {"not measured", "cannot change"}
