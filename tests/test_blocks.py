"""Precision runs' design (tierbench.blocks): blocks nested in deployments (which bring-up each
block runs on, fresh bring-ups through the runner, the `deployment` column) and the modes'
counterbalanced order within blocks (a Williams design), with the simulated kind
(tests/sim_kind.py; its bring-ups touch no stack)."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tierbench import blocks, runner
from tierbench.config.errors import ConfigError
from tierbench.kinds import registry
import sim_kind


@pytest.fixture()
def sim_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The sim kind known, results and state in tmp_path, its bring-ups counted afresh."""
    sim_kind.use(monkeypatch)
    monkeypatch.setattr(sim_kind, "BRING_UPS", [])
    monkeypatch.setenv("TIERBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("TIERBENCH_STATE_DIR", str(tmp_path / "state"))
    return tmp_path


def experiment(folder: Path, modes: int = 2, **precision: object) -> registry.Experiment:
    """A sim experiment of two conditions and ``modes`` modes with a precision target."""
    path, mode_dir = sim_kind.write_experiment(
        folder, {"a": 0.1, "b": 0.0}, noise=0.01, drift=0.0,
        precision={"half_width_pct": 5, "min_repetitions": 4, "max_repetitions": 12,
                   **precision})
    if modes > 2:
        data = yaml.safe_load(path.read_text())
        for n in range(2, modes):
            (mode_dir / f"extra{n}.yml").write_text(f"description: simulated mode extra{n}\n")
            data["modes"].append(f"extra{n}")
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return registry.load_experiment(str(path), mode_dir)


def test_the_first_blocks_are_spread_over_the_deployments_and_later_ones_go_on(
        sim_env: Path) -> None:
    exp = experiment(sim_env, min_repetitions=8, max_repetitions=30)
    assert [blocks.deployment_of(exp, b) for b in range(1, 13)] == \
        [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3]
    three = experiment(sim_env, min_repetitions=3, deployments=3)
    assert [blocks.deployment_of(three, b) for b in range(1, 6)] == [1, 2, 3, 4, 5]
    odd = experiment(sim_env, min_repetitions=5)  # ceil(5 / 2) = 3 blocks per bring-up
    assert [blocks.deployment_of(odd, b) for b in range(1, 8)] == [1, 1, 1, 2, 2, 2, 3]
    one = experiment(sim_env, deployments=1)
    assert {blocks.deployment_of(one, b) for b in range(1, 13)} == {1}
    assert "a fresh bring-up every 2 block(s) (2 over blocks 1-4" in \
        "\n".join(runner.plan_lines(experiment(sim_env)))


def test_more_deployments_than_first_blocks_are_refused_in_one_sentence(sim_env: Path) -> None:
    with pytest.raises(ConfigError, match=r"deployments \(5\) must not exceed min_repetitions "
                       r"\(4\)"):
        experiment(sim_env, deployments=5)


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6, 7])
def test_williams_rows_are_latin_and_balance_what_follows_what(k: int) -> None:
    rows = blocks.williams_rows(k)
    assert len(rows) == (k if k % 2 == 0 else 2 * k)
    assert all(sorted(r) == list(range(k)) for r in rows)
    for place in range(k):  # every treatment in every place equally often
        assert Counter(r[place] for r in rows) == {t: len(rows) // k for t in range(k)}
    follows = Counter((r[i], r[i + 1]) for r in rows for i in range(k - 1))
    assert set(follows) == {(a, b) for a in range(k) for b in range(k) if a != b}
    assert set(follows.values()) == {1 if k % 2 == 0 else 2}


def test_each_conditions_modes_follow_a_williams_row_per_block(sim_env: Path) -> None:
    exp = experiment(sim_env, modes=4)
    names = [m.name for m in exp.modes]
    rows = blocks.williams_rows(4)
    firsts, follows = Counter(), Counter()
    for block in range(1, 5):
        points = blocks.block_points(exp, block, None, 1)
        for cond in ("a", "b"):
            order = [p.mode for p in points if p["condition"] == cond]
            assert order == [names[t] for t in rows[block - 1]]
            firsts[order[0]] += 1
            follows.update(zip(order, order[1:]))
    # over 4 blocks every mode ran first once per condition, and followed every other once
    assert set(firsts.values()) == {2} and len(firsts) == 4
    assert set(follows.values()) == {2} and len(follows) == 12


def test_a_precision_run_brings_each_deployment_up_afresh_and_records_it(
        sim_env: Path) -> None:
    exp = experiment(sim_env, min_repetitions=4, max_repetitions=4)
    run_dir = runner.Run(exp).execute()
    with (run_dir / "summary.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    plan = {p["point"]: p for p in json.loads((run_dir / "plan.json").read_text())["points"]}
    assert len(rows) == 16
    for row in rows:  # blocks 1-2 on bring-up 1, blocks 3-4 on bring-up 2
        assert int(row["deployment"]) == (1 if int(row["repetition"]) <= 2 else 2)
    first_of_block3 = next(p for p in plan.values() if p["repetition"] == 3)["point"]
    assert sim_kind.BRING_UPS == [first_of_block3]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert [d["deployment"] for d in manifest["deployments"]] == [1, 2]
    assert manifest["deployments"][1]["first_point"] == first_of_block3
    point = json.loads((run_dir / "points" / rows[-1]["point"] / "point.json").read_text())
    assert point["deployment"] == int(rows[-1]["deployment"])


def test_the_last_line_says_when_a_decision_not_the_width_settled_a_condition() -> None:
    record = {"target": {"half_width_pct": 5, "decision_pct": 5, "min_repetitions": 8},
              "blocks": 8, "stopped": "done",
              "conditions": [{"condition": {"trace": t}, "blocks": 8, "state": "resolved",
                              "comparisons": [{"met": met}]}
                             for t, met in (("4k", "decision: above"), ("1m", "precision"))]}
    line = blocks.Schedule.summary_line(record)
    assert line.startswith("tierbench: precision: 2 of 2 condition(s) resolved for ±5 % or, "
                           "1 of them, settled against the ±5 % threshold after 8 block(s)")
    for c in record["conditions"]:
        c["comparisons"] = [{"met": "precision"}]
    assert "2 of 2 condition(s) resolved for ±5 % after 8" in blocks.Schedule.summary_line(record)
    assert "wider" not in blocks.Schedule.summary_line(record)
    record["conditions"][1]["comparisons"] = [{"met": "precision", "half_width_pct": 26.6}]
    assert ("; 1 of them state an interval wider than ±5 % (their planned blocks were measured"
            in blocks.Schedule.summary_line(record))
