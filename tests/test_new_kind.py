"""What adding a kind takes, measured on the smallest one: the sleep kind of tests/data/newkind/
(one module, one family file, one experiment file, laid out as tierbench/kinds/, kinds/families/
and experiments/ are; the mode it names, which changes nothing, is the tests'). The registry
finds it, `tierbench plan` plans it and a run writes its summary, its manifest's report section
and the report, with nothing of placement, the runner or the analysis changed: the contract's
defaults give the rest. ARCHITECTURE.md ("Adding a kind") states the count measured here."""

from __future__ import annotations

import csv
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
import yaml

from analysis import load
from tierbench import cli, kinds, runner
from tierbench.kinds import families, registry
from tierbench.kinds.contract import Kind
from tierbench.measure import kernelview

from test_kinds import declared_kinds

ROOT = Path(__file__).resolve().parent.parent
NEWKIND = ROOT / "tests" / "data" / "newkind"
# The new kind's files, where they would be in the checkout.
FILES = {NEWKIND / "sleep.py": "tierbench/kinds/sleep.py",
         NEWKIND / "families" / "sleep.yml": "tierbench/kinds/families/sleep.yml",
         NEWKIND / "sleep.yml": "experiments/sleep.yml",
         NEWKIND / "schema" / "sleep.schema.json": "experiments/schema/sleep.schema.json"}


@pytest.fixture()
def sleep_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """tests/data/newkind/ on the kinds package's path (as if its files were in the checkout);
    results and the mode state in tmp_path; the experiment's mode named from the checkout."""
    monkeypatch.setattr(kinds, "__path__", [*kinds.__path__, str(NEWKIND)])
    monkeypatch.setenv("TIERBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("TIERBENCH_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(ROOT)
    registry.kinds.cache_clear()
    families.read.cache_clear()
    yield tmp_path
    registry.kinds.cache_clear()
    families.read.cache_clear()
    sys.modules.pop("tierbench.kinds.sleep", None)
    if hasattr(kinds, "sleep"):
        delattr(kinds, "sleep")


def test_the_registry_finds_the_new_kind_and_its_family(sleep_kind: Path) -> None:
    found = registry.kinds()
    assert set(found) == {*declared_kinds(ROOT / "tierbench" / "kinds"), "sleep"}
    assert type(found["sleep"]).__module__ == "tierbench.kinds.sleep"
    exp = registry.load_experiment(str(NEWKIND / "sleep.yml"))
    assert exp.kind == "sleep" and [m.name for m in exp.modes] == ["as-is"]
    assert families.names("sleep") == ["sleep"]
    assert found["sleep"].report(runner.resolved_of(exp))["order"] == {"seconds": [0.5, 1.0]}


def test_the_new_kind_writes_only_what_the_contract_cannot_know(sleep_kind: Path) -> None:
    """Its settings, tier, axes, a point's time, a deployment and a point's run: every other
    part of the contract is a default."""
    sleep = type(registry.kind("sleep"))
    own = {name for name, value in vars(sleep).items()
           if callable(value) and not isinstance(value, type) and not name.startswith("__")}
    assert own == {"axes", "point_seconds", "deploy", "run_point"}
    assert all(callable(getattr(Kind, name)) for name in own)


def test_its_experiment_file_names_its_schema_which_is_current(
        sleep_kind: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """As test_schemas.py asks of every shipped kind: the schema `tierbench schema experiment`
    writes, stored, and named on the experiment file's first line."""
    assert cli.main(["schema", "experiment", "--kind", "sleep"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert json.loads((NEWKIND / "schema" / "sleep.schema.json").read_text()) == schema
    text = (NEWKIND / "sleep.yml").read_text()
    assert text.startswith("# yaml-language-server: $schema=schema/sleep.schema.json\n")
    jsonschema.validate(yaml.safe_load(text), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**yaml.safe_load(text), "sleep": {"seconds": 0}}, schema)


def test_tierbench_plan_plans_the_new_kind(sleep_kind: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", str(NEWKIND / "sleep.yml")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"experiment sleep ({NEWKIND / 'sleep.yml'}): 4 points, order shuffled "
                        f"with seed 1; {registry.kind('sleep').description}")
    assert lines[1] == "per point: about 2 s"
    points = [ln for ln in lines if re.match(r"  p\d{3}  ", ln)]
    assert len(points) == 4
    assert sorted(re.search(r"seconds=(\S+)", ln).group(1) for ln in points) == [
        "0.5", "0.5", "1", "1"]
    assert all("mode=as-is" in ln for ln in points)
    assert any(ln.startswith("estimated duration: ") for ln in lines)


def test_a_run_of_the_new_kind_writes_its_summary_and_report(sleep_kind: Path) -> None:
    exp = registry.load_experiment(str(NEWKIND / "sleep.yml"))
    run_dir = runner.Run(exp).execute()
    with (run_dir / "summary.csv").open() as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    # the kind's columns, and the runner's per-CPU view and stack counters (every kind's)
    assert [c for c in reader.fieldnames or [] if not kernelview.is_view_column(c)] == [
        "point", "seconds", "mode", "repetition", "host_busy_pct", "slept_s", "error"]
    assert "softirq_bound" in (reader.fieldnames or [])
    assert [r["point"] for r in rows] == ["p001", "p002", "p003", "p004"]
    for r in rows:
        assert not r["error"]
        assert float(r["seconds"]) <= float(r["slept_s"]) < float(r["seconds"]) + 2
        assert 0 <= float(r["host_busy_pct"]) <= 100
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["report"]["family"] == "sleep"
    assert manifest["experiment"]["sleep"] == {"seconds": [0.5, 1.0]}
    assert all(p["restored"] and p["mode_verified"] for p in manifest["points"].values())
    # a finished point's snapshots live in its point.json only: the manifest, rewritten whole
    # several times a point, keeps the rest of the record
    for pid, entry in manifest["points"].items():
        whole = json.loads((run_dir / "points" / pid / "point.json").read_text())
        assert {"interfaces_before", "interfaces_during", "mode_state_before"} <= set(whole)
        assert entry == {k: v for k, v in whole.items()
                         if not k.startswith(("interfaces_", "mode_state_"))}
    assert load.point_records(run_dir) == {
        pid: json.loads((run_dir / "points" / pid / "point.json").read_text())
        for pid in manifest["points"]}
    report = runner.write_report(run_dir)
    assert report is not None
    html = report.read_text()
    assert "The host&#x27;s CPU while sleeping" in html or "The host's CPU while sleeping" in html


def test_architecture_states_what_the_new_kind_took() -> None:
    """The count in ARCHITECTURE.md is this kind's: its files and their lines."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = " ".join(text.split("## Adding a kind", 1)[1].split("\n## ", 1)[0].split())
    lines = {where: len(path.read_text().splitlines()) for path, where in FILES.items()}
    for where, n in lines.items():
        assert f"`{where}` ({n} lines" in section, f"ARCHITECTURE.md: {where} has {n} lines"
