"""What moved, beside each recommendation (issue 43): a knob's row of the advice says how the CPU
by kernel category moved from the baseline to the knob's mode, in the same knob run, when the run
was profiled (`tierbench advise --profile categories`), and nothing otherwise; the advise command
passes --profile on to every run it makes."""

from __future__ import annotations

import csv
import json
import random
import re
from pathlib import Path
from typing import Any

import pytest

from analysis import advise as advice
from tierbench import cli, runner
from tierbench.advise import run as advise_run

BLOCKS = 6
METRICS = {"throughput": {"column": "tps", "label": "TPS", "better": "higher"},
           "cpu": {"column": "host_cpu_us_per_kb", "label": "CPU per KB", "better": "lower"}}
# the truth: host CPU µs per KB by category in each mode; tso-off segments in software
TRUTH = {"baseline": {"segmentation": 0.02, "data_copy": 0.08, "user": 0.10},
         "tso-off": {"segmentation": 0.07, "data_copy": 0.08, "user": 0.10},
         "gro-on": {"segmentation": 0.02, "data_copy": 0.08, "user": 0.10}}
SEGMENTATION_UP = 0.05  # µs/KB, tso-off against the baseline


def entry(run: Path) -> dict[str, Any]:
    return {"name": "sim", "primary": "throughput", "metrics": METRICS, "status": "complete",
            "runs": {"knobs": str(run)},
            "knobs": [{"knob": k, "changeable": True, "mode": f"{k}-{t}", "target": t,
                       "state": "off" if t == "on" else "on", "features_asked": []}
                      for k, t in (("tso", "off"), ("gro", "on"))]}


def knob_run(folder: Path, profiled: bool, seed: int = 43) -> Path:
    """A knob run's summary.csv: every mode once per block, each category's µs/KB its truth
    plus noise (sd 0.002), written as the runner writes them (share of busy, host CPU per KB);
    without the profile, no cat_ columns."""
    rng = random.Random(seed)
    rows = []
    for block in range(1, BLOCKS + 1):
        for mode, cats in TRUTH.items():
            us = {c: max(v + rng.gauss(0, 0.002), 1e-6) for c, v in cats.items()}
            total = sum(us.values())
            row: dict[str, Any] = {"point": f"{mode}-r{block}", "mode": mode,
                                   "repetition": block, "tps": 1000 + rng.gauss(0, 5),
                                   "host_cpu_us_per_kb": total}
            if profiled:
                row.update({"cat_idle_pct": 30.0, "cat_uncategorized_pct": 0.0},
                           **{f"cat_{c}_pct": 100 * v / total for c, v in us.items()})
            rows.append(row)
    folder.mkdir(parents=True)
    with (folder / "summary.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return folder


def advice_of(tmp_path: Path, profiled: bool) -> tuple[dict[str, dict[str, str]], str]:
    """advice.csv's knob rows by knob and advice.html of an advise folder with one workload."""
    folder = tmp_path / "advise"
    run = knob_run(folder / "knobs", profiled)
    (folder / "advise.json").write_text(json.dumps({"workloads": [entry(run)]}))
    advice.write_advice(folder)
    table = list(csv.DictReader((folder / "advice.csv").open(encoding="utf-8")))
    return ({r["knob"]: r for r in table if r["row"] == "knob"},
            (folder / "advice.html").read_text(encoding="utf-8"))


def test_a_profiled_knob_run_says_what_moved_beside_each_recommendation(
        tmp_path: Path) -> None:
    rows, html = advice_of(tmp_path, profiled=True)
    tso = rows["tso"]["moved"]
    # segmentation in software went up by the known amount, the copy did not move
    assert tso.startswith("segmentation +0.0"), tso
    got = re.match(r"segmentation \+([0-9.]+) µs/KB \[([0-9.]+), ([0-9.]+)\]", tso)
    assert got is not None, tso
    assert float(got[1]) == pytest.approx(SEGMENTATION_UP, abs=0.004)
    assert float(got[2]) < SEGMENTATION_UP < float(got[3])
    assert tso.endswith("unchanged: user, data copy"), tso
    # a knob that moved nothing says so, not a made-up move
    assert rows["gro"]["moved"] == "unchanged: user, data copy"
    assert f"tested against the baseline: {tso}" in html


def test_an_unprofiled_knob_run_says_nothing_of_what_moved(tmp_path: Path) -> None:
    rows, html = advice_of(tmp_path, profiled=False)
    assert rows["tso"]["moved"] == rows["gro"]["moved"] == ""
    assert "CPU by kernel category" not in html


def test_the_advise_command_passes_profile_on_to_every_run(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    checked: list[Any] = []
    seen: dict[str, Any] = {}
    monkeypatch.setattr(cli, "check_profile", lambda args: checked.append(args.profile))
    monkeypatch.setattr(cli.compose, "preflight", lambda cluster: None)
    monkeypatch.setenv("TIERBENCH_LOCK_DIR", str(tmp_path / "locks"))  # a run beside holds the host's

    def fake_run(self: advise_run.Advisor) -> Path:
        seen["profile"] = self.profile
        return tmp_path

    monkeypatch.setattr(advise_run.Advisor, "run", fake_run)
    assert cli.main(["advise", "--profile", "categories", "--budget-min", "1"]) == 0
    assert checked == ["categories"] and seen["profile"] == "categories"
    assert cli.main(["advise", "--budget-min", "1"]) == 0
    assert checked == ["categories"] and seen["profile"] is None
    # the advisor hands it to each run it makes
    ran: list[Any] = []

    class FakeRun:
        def __init__(self, exp: Any) -> None:
            ran.append(exp.profile)
            self.dir, self.rows, self.point_times = None, [], []

        def execute(self) -> None:
            pass

    monkeypatch.setattr(runner, "Run", FakeRun)
    monkeypatch.setattr(advise_run, "spent_s", lambda r: 0.0)
    advisor = advise_run.Advisor(None, 1, profile="categories")
    exp = advisor.baseline_exp(advisor.workloads[0])
    exp.profile = None
    advisor.run_one(exp)
    assert ran == ["categories"]
