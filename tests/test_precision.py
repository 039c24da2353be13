"""Precision runs (experiment key `precision`): the statistics of analysis.precision against
hand computations, the stopping rule and the stated intervals against the truth over hundreds
of simulated runs (tests/sim_kind.py: known effect, noise and drift), and whole runs of the
simulated kind through the real runner (blocks, budget, resume, comparisons.csv, report)."""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

import pytest
from scipy import stats as scipy_stats

from analysis import precision, stats
from tierbench import blocks, runner
from tierbench.config.errors import ConfigError
from tierbench.kinds import registry
import sim_kind

T975 = scipy_stats.t.ppf(0.975, 3)


# --------------------------------------------------------------------------- statistics


def test_paired_change_is_the_t_interval_of_the_blocks_log_ratios() -> None:
    mode = {1: 110.0, 2: 130.0, 3: 99.0, 4: 120.0}
    base = {1: 100.0, 2: 110.0, 3: 95.0, 4: 100.0}
    logs = [math.log(mode[b] / base[b]) for b in mode]
    mean = sum(logs) / 4
    sd = math.sqrt(sum((x - mean) ** 2 for x in logs) / 3)
    c = precision.paired_change(mode, base)
    assert c.method == "paired" and c.n == 4
    assert c.effect_pct == pytest.approx(100 * math.expm1(mean))
    assert c.low_pct == pytest.approx(100 * math.expm1(mean - T975 * sd / 2))
    assert c.high_pct == pytest.approx(100 * math.expm1(mean + T975 * sd / 2))
    t = scipy_stats.t.ppf(0.975, 3) + scipy_stats.t.ppf(0.8, 3)
    assert c.mde_pct() == pytest.approx(100 * math.expm1(t * sd / 2))


def test_paired_change_leaves_out_blocks_missing_a_value() -> None:
    c = precision.paired_change({1: 110.0, 2: None, 3: 121.0}, {1: 100.0, 2: 100.0, 3: 110.0})
    assert (c.n, c.dropped) == (2, 1)
    assert c.effect_pct == pytest.approx(10.0)
    assert c.half_width_pct == pytest.approx(0.0)  # both blocks say +10 % exactly


def test_welch_change_is_the_delta_method_ratio_of_means() -> None:
    a, b = [110.0, 118.0, 104.0], [100.0, 96.0, 109.0, 101.0]
    c = precision.welch_change(a, b)
    r = stats.ratio_of_means(a, b)
    assert c.method == "welch" and c.df == pytest.approx(r.df)
    assert c.effect_pct == pytest.approx(100 * (r.value - 1))
    assert c.low_pct == pytest.approx(100 * (r.low - 1))
    assert c.high_pct == pytest.approx(100 * (r.high - 1))


def test_repetitions_for_a_target_are_the_fewest_that_reach_it() -> None:
    rng = random.Random(3)
    mode = {b: 1000 * 1.1 * math.exp(rng.gauss(0, 0.05)) for b in range(1, 6)}
    base = {b: 1000 * math.exp(rng.gauss(0, 0.05)) for b in range(1, 6)}
    c = precision.paired_change(mode, base)
    need = c.repetitions_for(2.0)
    assert need is not None and need > c.n
    sd = c.unit_sd()

    def half(n: int) -> float:  # the interval's upper side in % of the ratio
        h = scipy_stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
        return 100 * math.expm1(h)

    assert half(need) <= 2.0 < half(need - 1)
    assert c.half_width_pct == pytest.approx(half(c.n))
    assert "more repetitions would be needed" in precision.statement(c, 2.0)
    assert precision.statement(c, 50.0).startswith("resolved: +")


def test_the_target_is_relative_to_the_ratio_so_a_large_effect_can_be_resolved() -> None:
    """+400 % measured within +-2 % per block: resolved at 5 % of the ratio, although its
    interval is about 20 percentage points wide on each side."""
    rng = random.Random(5)
    mode = {b: 5000 * math.exp(rng.gauss(0, 0.02)) for b in range(1, 11)}
    base = {b: 1000 * math.exp(rng.gauss(0, 0.02)) for b in range(1, 11)}
    c = precision.paired_change(mode, base)
    assert c.high_pct - c.effect_pct > 5.0  # more than 5 points above
    assert (100 + c.high_pct) / (100 + c.effect_pct) - 1 < 0.05  # within 5 % of the ratio
    assert c.resolved(5.0)
    small = precision.paired_change({b: v / 5 * 1.1 for b, v in mode.items()}, base)
    assert small.half_width_pct == pytest.approx(c.half_width_pct)  # the same spread


def test_the_stopping_rule_waits_for_the_minimum_and_stops_at_the_maximum() -> None:
    target = precision.Target(half_width_pct=5, min_repetitions=4, max_repetitions=6)
    tight = precision.paired_change({1: 110.0, 2: 110.0, 3: 110.0}, {1: 100.0, 2: 100.0,
                                                                     3: 100.0})
    wide = precision.paired_change({1: 150.0, 2: 90.0, 3: 120.0}, {1: 100.0, 2: 100.0,
                                                                   3: 100.0})
    assert precision.verdict([tight], 3, target).state == "continue"
    assert precision.verdict([tight], 4, target).state == "resolved"
    assert precision.verdict([tight, wide], 5, target).state == "continue"
    assert precision.verdict([wide], 6, target).state == "maximum"


# --------------------------------------------------------------------------- simulated runs


def simulate(exp: registry.Experiment, kind: sim_kind.SimKind, point_s: float = 0.0
             ) -> tuple[blocks.Schedule, list[dict]]:
    """One precision run's decisions through the runner's own schedule, with the sim kind's
    values standing in for measurements and every point taking ``point_s`` seconds of a
    simulated clock (for budgets)."""
    points = runner.points_of(exp)
    schedule = blocks.Schedule(exp, points, [sim_kind.TREATMENT, sim_kind.BASELINE],
                               sim_kind.BASELINE)
    rows: list[dict] = []
    for _, todo in schedule.run(rows, set(), lambda: point_s * len(rows),
                                lambda pts: point_s * len(pts)):
        for p in todo:
            rows.append({**kind.identity(exp, p), "tps": kind.value(exp, p)})
    return schedule, rows


def changes_of(exp: registry.Experiment, schedule: blocks.Schedule, rows: list[dict]
               ) -> dict[str, tuple[precision.Change, precision.Change]]:
    """Per condition: the change of the treatment over the baseline as the run states it
    (paired, the spread from the first blocks) and as Welch would on the same values."""
    assert exp.precision is not None
    out = {}
    for cond, by_mode in schedule.values(rows).items():
        name = json.loads(cond)["condition"]
        on, off = by_mode[sim_kind.TREATMENT], by_mode[sim_kind.BASELINE]
        out[name] = (precision.paired_change(on, off, exp.precision.min_repetitions),
                     precision.welch_change(list(on.values()), list(off.values())))
    return out


@pytest.mark.parametrize("noise", [0.02, 0.05, 0.08])
def test_stated_intervals_cover_the_true_effect_at_about_their_nominal_rate(
        noise: float, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """400 simulated runs per noise level (two conditions each, drift 30 %): the stated 95 %
    intervals of runs that stop when their interval is 5 points wide cover the true effect at
    about 95 % (analysis.precision: the spread from the first blocks). 800 comparisons have a
    standard error of 0.8 points: the bounds allow three. (Seeds 1001-2000 measured 0.949 at
    noise 0.08, with and without drift; stating the spread of all blocks instead measured
    0.90-0.92.)"""
    sim_kind.use(monkeypatch)
    kind = sim_kind.SimKind()
    truth = {"small": 0.10, "none": 0.0}
    covered = total = resolved = 0
    blocks_used = []
    for seed in range(1, 401):
        path, modes = sim_kind.write_experiment(
            tmp_path, truth, noise=noise, seed=seed,
            precision={"half_width_pct": 5, "min_repetitions": 5, "max_repetitions": 30})
        exp = registry.load_experiment(str(path), modes)
        schedule, rows = simulate(exp, kind)
        for name, (paired, _) in changes_of(exp, schedule, rows).items():
            total += 1
            covered += paired.low_pct <= 100 * truth[name] <= paired.high_pct
            resolved += paired.resolved(5)
            blocks_used.append(paired.n)
    rate = covered / total
    blocks_used.sort()
    print(f"noise {noise}: coverage {rate:.3f} of {total}, resolved {resolved / total:.2f}, "
          f"median blocks {blocks_used[len(blocks_used) // 2]}")
    assert 0.925 <= rate <= 0.975


def test_the_rule_stops_where_the_spread_says_it_should(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With noise sd s on each value, a block's log ratio has sd s·√2: a half-width of h (on
    the log scale) needs about (t·s·√2 / h)² blocks, t with the first blocks' degrees of
    freedom. Runs stop near that, never before the minimum, and a condition that cannot be
    resolved within the maximum stops after the first blocks, out of reach."""
    sim_kind.use(monkeypatch)
    kind = sim_kind.SimKind()
    stops = {0.01: [], 0.04: [], 0.5: []}
    for noise in stops:
        for seed in range(1, 41):
            path, modes = sim_kind.write_experiment(
                tmp_path, {"only": 0.1}, noise=noise, seed=seed, drift=0.0,
                precision={"half_width_pct": 5, "min_repetitions": 5,
                           "max_repetitions": 30})
            exp = registry.load_experiment(str(path), modes)
            schedule, rows = simulate(exp, kind)
            stops[noise].append(max(r["repetition"] for r in rows))
            if noise == 0.5:
                (cond,) = schedule.record(rows, 5, 0.0)["conditions"]
                assert cond["state"] == "out of reach" and cond["blocks_needed"] > 30
    median = {n: sorted(v)[len(v) // 2] for n, v in stops.items()}
    print(f"median blocks at noise 0.01, 0.04, 0.5: {median}")
    assert set(stops[0.01]) == {5}  # resolved at the minimum
    h = 5 / 110  # +10 % within ±5 points, on the log scale
    expected = (scipy_stats.t.ppf(0.975, 4) * 0.04 * math.sqrt(2) / h) ** 2  # about 12
    assert abs(median[0.04] - expected) <= 3
    assert set(stops[0.5]) == {5}


def test_each_condition_stops_where_its_first_blocks_said_and_one_out_of_reach_at_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The spread of the first blocks fixes how many blocks a comparison needs (Stein): each
    resolved condition stops exactly there, and one that needs more than max_repetitions
    stops after the first blocks, its needed blocks stated."""
    sim_kind.use(monkeypatch)
    kind = sim_kind.SimKind()
    for seed in range(1, 21):
        path, modes = sim_kind.write_experiment(
            tmp_path, {"near": (0.1, 0.03), "far": (0.1, 0.2)}, drift=0.0, seed=seed,
            precision={"half_width_pct": 5, "min_repetitions": 5, "max_repetitions": 30})
        exp = registry.load_experiment(str(path), modes)
        schedule, rows = simulate(exp, kind)
        first = [r for r in rows if r["repetition"] <= 5]
        said = {}
        for cond, by_mode in schedule.values(first).items():
            (change,) = schedule.changes(by_mode).values()
            said[json.loads(cond)["condition"]] = precision.blocks_needed(change, 5)
        states = {c["condition"]["condition"]: c
                  for c in schedule.record(rows, 30, 0.0)["conditions"]}
        assert states["near"]["state"] == "resolved"
        assert states["near"]["blocks"] == max(said["near"], 5)
        assert states["far"]["state"] == "out of reach" and states["far"]["blocks"] == 5
        assert states["far"]["blocks_needed"] == said["far"] > 30


def test_a_budget_goes_to_the_conditions_it_can_resolve(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two conditions needing r0 <= r1 blocks after the first 5, and a budget that holds the
    first blocks and then 2 r0 + r1 points: the cheaper condition gets its r0 blocks and is
    resolved; the other stops at once, out of reach within the budget. Sharing the budget block
    by block (4 points a block) would have resolved neither when r1 < 2 r0."""
    sim_kind.use(monkeypatch)
    kind = sim_kind.SimKind()
    checked = 0
    for seed in range(1, 41):
        path, modes = sim_kind.write_experiment(
            tmp_path, {"a": (0.1, 0.045), "b": (0.1, 0.05)}, drift=0.0, seed=seed,
            precision={"half_width_pct": 5, "min_repetitions": 5, "max_repetitions": 40,
                       "budget_min": 1.0})
        exp = registry.load_experiment(str(path), modes)
        unlimited, rows = simulate(exp, kind)  # no time passes: what each condition needs
        conds = unlimited.record(rows, 40, 0.0)["conditions"]
        if any(c["state"] != "resolved" for c in conds):
            continue
        r0, r1 = sorted(c["blocks"] - 5 for c in conds)
        if not 0 < r0 <= r1 < 2 * r0:
            continue  # one resolves at the minimum, or sharing would have done as well
        point_s = 60.0 / (20 + 2 * r0 + r1)
        schedule, rows = simulate(registry.load_experiment(str(path), modes), kind, point_s)
        rec = schedule.record(rows, max(r["repetition"] for r in rows), point_s * len(rows))
        states = sorted((c["blocks"], c["state"]) for c in rec["conditions"])
        assert states == [(5, "out of reach"), (5 + r0, "resolved")]
        assert rec["stopped"] == "budget" and len(rows) * point_s <= 60.0 + 1e-9
        checked += 1
    print(f"{checked} of 40 seeds had a choice to make")
    assert checked >= 8


# --------------------------------------------------------------------------- whole runs


@pytest.fixture()
def sim_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The sim kind known, results and state in tmp_path."""
    sim_kind.use(monkeypatch)
    monkeypatch.setenv("TIERBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("TIERBENCH_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def test_a_precision_run_stops_each_condition_when_resolved(sim_env: Path) -> None:
    from analysis import report

    path, modes = sim_kind.write_experiment(
        sim_env, {"clear": 0.2, "none": 0.0}, noise=0.01, drift=0.3,
        precision={"half_width_pct": 5, "min_repetitions": 3, "max_repetitions": 8})
    exp = registry.load_experiment(str(path), modes)
    run_dir = runner.Run(exp).execute()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    rec = manifest["precision"]
    assert rec["stopped"] == "done" and rec["baseline"] == sim_kind.BASELINE
    assert {c["state"] for c in rec["conditions"]} == {"resolved"}
    assert all(c["blocks"] == 3 for c in rec["conditions"])
    plan = json.loads((run_dir / "plan.json").read_text())
    assert len(plan["points"]) == 12 and plan["design"]["planned_blocks"] == 3
    report.write_report(run_dir)
    with (run_dir / "comparisons.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 and {r["method"] for r in rows} == {"paired"}
    clear = next(r for r in rows if r["condition"] == "clear")
    assert float(clear["low_pct"]) < 20 < float(clear["high_pct"])
    assert clear["resolved"] == "True" and clear["statement"].startswith("resolved: +")
    html = (run_dir / "report.html").read_text()
    assert "Precision: what this run resolved" in html and "paired" in html


def test_a_budget_ends_the_blocks_and_the_report_says_so(sim_env: Path) -> None:
    from analysis import report

    path, modes = sim_kind.write_experiment(
        sim_env, {"hard": 0.1}, noise=0.006, drift=0.0, sleep_s=0.05,
        precision={"half_width_pct": 1, "min_repetitions": 3, "max_repetitions": 1000,
                   "budget_min": 0.01})
    exp = registry.load_experiment(str(path), modes)
    run_dir = runner.Run(exp).execute()
    rec = json.loads((run_dir / "manifest.json").read_text())["precision"]
    assert rec["stopped"] == "budget"
    (cond,) = rec["conditions"]
    assert (cond["state"], cond["out_of_reach"]) == ("out of reach", "budget")
    assert cond["blocks"] < cond["blocks_needed"] <= 1000
    report.write_report(run_dir)
    with (run_dir / "comparisons.csv").open() as fh:
        row = next(csv.DictReader(fh))
    assert row["resolved"] == "False"
    assert "not resolved within the budget" in row["statement"]
    assert "more repetitions would be needed" in row["statement"]


def test_an_interrupted_precision_run_resumes_with_the_blocks_it_chose(
        sim_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path, modes = sim_kind.write_experiment(
        sim_env, {"a": 0.1, "b": 0.0}, noise=0.03, drift=0.0,
        precision={"half_width_pct": 2, "min_repetitions": 3, "max_repetitions": 40})
    exp = registry.load_experiment(str(path), modes)
    whole = runner.Run(exp).execute()
    expected = json.loads((whole / "plan.json").read_text())["points"]
    assert len(expected) > 12  # some block after the minimum ran

    calls = {"n": 0}
    real = sim_kind.SimKind.run_point

    def stop_after_14(self: sim_kind.SimKind, ctx: object) -> object:
        calls["n"] += 1
        if calls["n"] > 14:
            raise runner.RunInterrupted("SIGINT")
        return real(self, ctx)  # type: ignore[arg-type]

    monkeypatch.setattr(sim_kind.SimKind, "run_point", stop_after_14)
    first = runner.Run(registry.load_experiment(str(path), modes))
    with pytest.raises(runner.RunInterrupted):
        first.execute()
    monkeypatch.setattr(sim_kind.SimKind, "run_point", real)
    resumed = runner.Run(registry.load_experiment(str(path), modes), first.dir).execute()
    assert json.loads((resumed / "plan.json").read_text())["points"] == expected
    with (resumed / "summary.csv").open() as fh:
        assert len(list(csv.DictReader(fh))) == len(expected)


def test_precision_inputs_are_refused_in_one_sentence(sim_env: Path) -> None:
    path, modes = sim_kind.write_experiment(
        sim_env, {"a": 0.1}, precision={"min_repetitions": 9, "max_repetitions": 4})
    with pytest.raises(ConfigError, match="min_repetitions .9. must not exceed"):
        registry.load_experiment(str(path), modes)
    path, modes = sim_kind.write_experiment(sim_env, {"a": 0.1}, precision={"metric": "nope"})
    with pytest.raises(ConfigError, match="'nope' is not a summary column"):
        registry.load_experiment(str(path), modes)
    path, modes = sim_kind.write_experiment(sim_env, {"a": 0.1}, precision={},
                                            repetitions=4)
    with pytest.raises(ConfigError, match="a precision target decides the repetitions"):
        registry.load_experiment(str(path), modes)
