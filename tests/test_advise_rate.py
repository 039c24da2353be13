"""The advisor's latency-at-load workloads (suite key rate_of_baseline_max): a whole advise run
of a simulated kind whose modes have known maxima offers every mode of every run (knobs,
2 x 2, confirmation) the same absolute rate, the fraction of the baseline's maximum measured
first by one closed-loop point; the budget counts that point; the suite key's checks."""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import model_validator

from analysis import load
from tierbench.advise import plan
from tierbench.advise import run as advise_run
from tierbench.config.errors import ConfigError
from tierbench.config.models import Model, choice, number, problem
from tierbench.kinds import registry
from tierbench.kinds.contract import Column, Experiment, PointContext, PointResult
import sim_kind
import test_advise as ta

advisor_env = ta.advisor_env  # the fixture: the stubbed interfaces and registry


class RateLoad(Model):
    """The part of the web kind's load block the advisor writes: an open loop's rate."""

    rate: Annotated[float, number(1)] | None = None
    arrival: Annotated[str, choice("constant", "poisson")] | None = None

    @model_validator(mode="after")
    def _rate(self) -> RateLoad:
        if self.arrival is not None and self.rate is None:
            raise problem("arrival needs a rate", sub="arrival")
        return self


class RateSimModel(Model):
    """sim's keys and a load block."""

    sim: sim_kind.SimSettings
    load: RateLoad = RateLoad()


def effect(mode: str, i: int) -> float:
    """A mode's factor on the knob-sim's TPS (i = 0) or CPU per KB (i = 1)."""
    return math.prod(1 + ta.EFFECTS.get(part, (0.0, 0.0))[i] for part in mode.split("_"))


class RateSim(ta.KnobSim):
    """A closed loop serves the mode's maximum (1000 requests/s times its TPS effect); an open
    loop serves what it is offered (up to the maximum), its tail latency rising with the load
    over the mode's maximum and with half its CPU effect (jumbo frames: 15 % lower)."""

    name = "rate-sim"
    model = RateSimModel

    def run_point(self, ctx: PointContext) -> PointResult:
        s = ctx.exp.settings
        time.sleep(s.sim.sleep_s)  # type: ignore[attr-defined]  (what the budget counts)
        rng = random.Random(ctx.exp.seed * 7919 + ctx.point.index)
        cap = 1000 * effect(ctx.point.mode, 0) * math.exp(rng.gauss(0, s.sim.noise))  # type: ignore
        rate = s.load.rate  # type: ignore[attr-defined]
        if rate is None:
            return PointResult({"tps": cap, "p50_ms": 5.0, "p99_ms": 50.0,
                                "host_cpu_us_per_kb": 10.0, "target_rate": None})
        busy, cpu = min(rate / cap, 0.95), (1 + effect(ctx.point.mode, 1)) / 2
        p99 = 10 / (1 - busy) * cpu * math.exp(rng.gauss(0, s.sim.noise))  # type: ignore
        return PointResult({"tps": min(rate, cap), "p50_ms": 2 / (1 - busy), "p99_ms": p99,
                            "host_cpu_us_per_kb": 10.0 * cpu, "target_rate": rate})

    def columns(self, exp: Experiment) -> list[Column]:
        return [*super().columns(exp), Column("target_rate")]


SUITE = """seed: 3
settle_s: 0
workloads:
  - name: at-load
    description: a simulated open loop
    primary: tail
    rate_of_baseline_max: 0.5
    metrics:
      latency: {column: p50_ms, label: median response time, unit: ms, better: lower}
      tail: {column: p99_ms, label: p99 response time, unit: ms, better: lower}
      cpu: {column: host_cpu_us_per_kb, label: host CPU per KB, unit: us/KB, better: lower}
    experiment:
      kind: rate-sim
      sim: {conditions: [{name: only}], noise: 0.005, drift: 0, sleep_s: 0.02}
      load: {arrival: poisson}
"""


def test_every_mode_is_offered_the_fraction_of_the_baselines_maximum(
        advisor_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    registry.kinds()["rate-sim"] = RateSim()  # the fixture's registry
    suite = tmp_path / "rate-suite.yml"
    suite.write_text(SUITE)
    monkeypatch.setattr(advise_run.Advisor, "point_s", lambda self, exp: 0.01)
    folder = advise_run.Advisor(None, 5, 5.0, suite).run()
    record = json.loads((folder / "advise.json").read_text())
    entry = record["workloads"][0]
    assert entry["status"] == "complete"
    # the maximum: one closed-loop point of the baseline (its true maximum 1000 requests/s)
    maximum = load.read_summary_rows(Path(entry["runs"]["maximum"]) / "summary.csv")
    assert [(r["mode"], r["target_rate"]) for r in maximum] == [("baseline", "")]
    got = entry["rate"]
    assert got["baseline_max"] == pytest.approx(float(maximum[0]["tps"]), abs=0.01)
    assert got["baseline_max"] == pytest.approx(1000, rel=0.03)
    assert got["rate"] == pytest.approx(0.5 * got["baseline_max"], abs=1e-3)
    assert entry["budget"]["maximum_spent_s"] > 0
    # the same absolute rate for every mode of every run, not a fraction of each mode's own
    # maximum (gro-on's is 1300, tso-off's 500)
    assert set(entry["runs"]) == {"maximum", "knobs", "pair", "confirm1"}
    for name in ("knobs", "pair", "confirm1"):
        rows = load.read_summary_rows(Path(entry["runs"][name]) / "summary.csv")
        assert len({r["mode"] for r in rows}) >= 2, name
        assert {float(r["target_rate"]) for r in rows} == {got["rate"]}, name
    knob_rows = load.read_summary_rows(Path(entry["runs"]["knobs"]) / "summary.csv")
    assert {"gro-on", "tso-off"} <= {r["mode"] for r in knob_rows}
    # at equal load the mode with the larger maximum has the lower p99: gro on recommended
    assert entry["pair"]["a"] == "gro" or entry["pair"]["b"] == "gro"
    html = (folder / "advice.html").read_text()
    assert f"offered {got['rate']:,.0f} requests/s to every mode: 0.5 of the baseline" in html


def test_a_maximum_of_no_request_fails_the_workload_in_one_sentence(
        advisor_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    registry.kinds()["rate-sim"] = RateSim()
    monkeypatch.setattr(RateSim, "run_point", lambda self, ctx: PointResult(
        {"tps": 0.0, "p50_ms": 0.0, "p99_ms": 0.0, "host_cpu_us_per_kb": 0.0}))
    suite = tmp_path / "rate-suite.yml"
    suite.write_text(SUITE)
    monkeypatch.setattr(advise_run.Advisor, "point_s", lambda self, exp: 0.01)
    folder = advise_run.Advisor(None, 5, 5.0, suite).run()
    entry = json.loads((folder / "advise.json").read_text())["workloads"][0]
    assert entry["status"] == ("failed: the closed loop that measures the baseline's maximum "
                               "gave no tps (no request served)")
    assert set(entry["runs"]) == {"maximum"} and "rate" not in entry


def test_the_budget_counts_the_point_that_measures_the_maximum() -> None:
    plain, first = plan.cost(5.0, 10), plan.cost(5.0, 10, 1)
    assert first.least == plain.least + 5.0 and first.minimum == plain.minimum + 5.0
    assert first.maximum == 5.0 and (first.pair, first.confirm) == (plain.pair, plain.confirm)
    suite = plan.load()
    at_load = [w for w in suite.workloads if w.name.endswith("-load")]
    assert [plan.max_points(w) for w in suite.workloads].count(1) == len(at_load) == 2
    lines = plan.plan_lines(at_load, 60, {w.name: 5.0 for w in at_load}, 10)
    assert "a closed loop of the baseline for its maximum: offered 0.8 of it" in lines[2]
    assert f"{first.least / 60:.1f} min with its confirmation" in lines[1]


def test_rate_of_baseline_max_refuses_a_rate_of_its_own_or_no_load_block(
        tmp_path: Path) -> None:
    bad = tmp_path / "suite.yml"
    bad.write_text(SUITE.replace("load: {arrival: poisson}", "load: {rate: 100}"))
    with pytest.raises(ConfigError, match="the advisor sets load.rate from "
                                          "rate_of_baseline_max: remove load.rate$"):
        plan.load(bad)
    bad.write_text(SUITE.replace("      load: {arrival: poisson}\n", ""))
    with pytest.raises(ConfigError, match="the experiment needs a load block$"):
        plan.load(bad)
    bad.write_text(SUITE.replace("rate_of_baseline_max: 0.5", "rate_of_baseline_max: 3"))
    with pytest.raises(ConfigError, match="rate_of_baseline_max"):
        plan.load(bad)
    bad.write_text(SUITE)
    assert plan.load(bad).workloads[0].rate_of_baseline_max == 0.5
