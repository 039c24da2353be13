"""Offered rates as fractions of each mode's measured maximum (load.rate_of_max,
tierbench/kinds/web/maxrate.py): the experiment key, its factor and plan, the maximum measured
once per condition by a closed loop and reused, the report's comparison at equal fractions."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pandas as pd
import pytest

from analysis import loadcurve
from tierbench import runner
from tierbench.config.errors import ConfigError
from tierbench.kinds import registry
from tierbench.kinds.web import maxrate
from tierbench.kinds.web.load import LoadgenError, LoadResult, LoadSpec


def experiment(tmp_path: Path, load: str, engine: str = "locust") -> Path:
    path = tmp_path / "exp.yml"
    path.write_text("name: t\nrepetitions: 2\nmodes: [offloads-on, offloads-off]\n"
                    "traces: [{name: a, kind: single, size: 4096}]\n"
                    f"engine: {engine}\nload: {load}\n")
    return path


def test_fractions_are_a_factor_planned_with_their_maximum(tmp_path: Path) -> None:
    exp = registry.load_experiment(str(experiment(
        tmp_path, "{users: 8, rate_of_max: [0.8, 0.5], arrival: poisson}")))
    points = runner.points_of(exp)
    assert len(points) == 8 and sorted({p["rate_of_max"] for p in points}) == [0.5, 0.8]
    assert all("rate" not in p.factors for p in points)
    lines = runner.plan_lines(exp)
    assert sum("rate=0.5x max" in line for line in lines) == 4
    assert any("first measures that maximum with a closed loop of 8 users" in line
               for line in lines)
    web = registry.kind("web")
    resolved = web.resolved(exp)
    assert resolved["load"]["rate_of_max"] == [0.8, 0.5] and resolved["load"]["rate"] is None
    assert resolved["load"]["arrival"] == "poisson"
    # the modes meet at equal fractions, never at equal target_rate (each mode's own)
    assert web.report(resolved)["factors"] == ["trace", "rate_of_max"]


@pytest.mark.parametrize(("load", "engine", "message"), [
    ("{rate: 100, rate_of_max: 0.5}", "locust", "load.rate_of_max: rate gives the offered rates"),
    ("{rate_of_max: [0.5, 0.5]}", "locust", "load.rate_of_max: two fractions are the same"),
    ("{rate_of_max: 2.5}", "locust", "a fraction above 2 offers more"),
    ("{rate_of_max: 0}", "locust", "load.rate_of_max"),
    ("{rate_of_max: 0.5}", "wrk", "think and rate need engine: locust"),
    ("{rate_of_max: 0.5, requests_per_client: 10, measure_s: 30}", "locust",
     "request counts are for closed-loop clients"),
])
def test_bad_fractions_are_refused_in_one_sentence(tmp_path: Path, load: str, engine: str,
                                                    message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        registry.load_experiment(str(experiment(tmp_path, load, engine)))


def closed_result(tps: float) -> LoadResult:
    """A closed loop's result that answered `tps` requests every second of 10 s."""
    per_second = [{"t": 100 + s, "requests": tps} for s in range(10)]
    return LoadResult("locust", 100.0, (100.0, 110.0), None,
                      {"per_second": per_second, "active": (100.0, 110.0), "ok_share": 1.0}, 1.0)


def test_the_maximum_is_measured_once_per_condition_and_reused(tmp_path: Path) -> None:
    runs: list[tuple[float | None, Path]] = []
    measured = {"offloads-on": 1200.0, "offloads-off": 800.0}

    def closed(mode: str):
        def run(spec: LoadSpec, folder: Path) -> LoadResult:
            runs.append((spec.rate, folder))
            return closed_result(measured[mode])
        return run

    spec = LoadSpec("locust", 8, 2, 5, rate=None)
    for point, mode, fraction, rep in [("p1", "offloads-on", 0.5, 1), ("p2", "offloads-off", 0.8, 1),
                                       ("p3", "offloads-on", 0.8, 2), ("p4", "offloads-on", 0.5, 2)]:
        pdir = tmp_path / "points" / point
        pdir.mkdir(parents=True)
        key = maxrate.condition_key(mode, {"trace": {"name": "a"}, "users": 8,
                                           "rate_of_max": fraction, "repetition": rep})
        entry = maxrate.maximum(tmp_path, key, spec, point, pdir, closed(mode))
        assert entry["reused"] == (point in ("p3", "p4"))
        assert maxrate.offered(fraction, entry) == fraction * measured[mode]
    # one closed loop per mode, without a rate, each in its point's max/ folder
    assert [(r, f.parent.name) for r, f in runs] == [(None, "p1"), (None, "p2")]
    kept = json.loads((tmp_path / maxrate.MAX_FILE).read_text())
    assert sorted(e["tps"] for e in kept.values()) == [800.0, 1200.0]
    assert {e["point"] for e in kept.values()} == {"p1", "p2"}


def test_a_closed_loop_that_answers_nothing_fails_in_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(LoadgenError, match="answered no request"):
        maxrate.maximum(tmp_path, "k", LoadSpec("locust", 8, 2, 5), "p1", tmp_path,
                        lambda spec, folder: closed_result(0.0))
    assert not (tmp_path / maxrate.MAX_FILE).exists()


def test_modes_with_different_maxima_are_compared_at_equal_fractions() -> None:
    """Two modes whose maxima differ (1,000 and 500/s) offered 0.5x and 0.8x of their own: no
    two of their target_rates are equal, yet each fraction pairs them, and the ratio of their
    p99s comes out near the known 1.5x (3 % noise) with an interval around it."""
    rng = random.Random(4)
    rows = []
    for mode, top, p99 in (("on", 1000.0, 10.0), ("off", 500.0, 15.0)):
        for frac in (0.5, 0.8):
            for rep in (1, 2, 3):
                rows.append({"mode": mode, "repetition": rep, "trace": "a", "rate_of_max": frac,
                             "target_rate": frac * top, "achieved_rate": frac * top,
                             "rate_short": False, "p50_ms": 1.0,
                             "p99_ms": p99 * (1 + frac) * math.exp(rng.gauss(0, 0.03))})
    out = loadcurve.equal_load(pd.DataFrame(rows), "on", ["on", "off"], ["trace", "rate_of_max"])
    assert [(c.offered, c.mode, c.level) for c in out] == [(0.5, "off", "rate_of_max"),
                                                            (0.8, "off", "rate_of_max")]
    for c in out:
        assert c.ratio.low is not None and c.ratio.high is not None
        assert c.ratio.value is not None and abs(c.ratio.value - 1.5) < 0.1
        assert c.ratio.low < c.ratio.value < c.ratio.high
