"""Every workload kind keeps the contract (tierbench/kinds/contract.py) for every shipped
experiment of its kind: points, plan, identity columns, and a report section the report accepts,
equal to the family's fixture that the analysis tests render."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from analysis import spec as report_spec
from tierbench import runner
from tierbench.kinds import registry
from tierbench.kinds.contract import Kind

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted(p.stem for p in (ROOT / "experiments").glob("*.yml"))
FIXTURES = ROOT / "tests" / "data" / "report-specs"


def test_the_registry_finds_every_kind_module() -> None:
    modules = {p.stem for p in (ROOT / "tierbench" / "kinds").glob("*.py")}
    found = registry.kinds()
    assert {"web", "pfs"} <= set(found)
    for name, kind in found.items():
        assert isinstance(kind, Kind) and kind.name == name and kind.tiers
        assert type(kind).__module__.rsplit(".", 1)[-1] in modules


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_shipped_experiments_keep_the_contract(name: str) -> None:
    exp = registry.load_experiment(name)
    kind = registry.kind(exp.kind)
    points = runner.points_of(exp)
    assert [p.id for p in points] == [f"p{i:03d}" for i in range(1, len(points) + 1)]
    assert len({(p.mode, p.repetition, json.dumps(p.factors, sort_keys=True))
                for p in points}) == len(points)
    columns = [c.name for c in kind.columns(exp)]
    for p in points[:3]:
        ident = kind.identity(exp, p)
        assert ident["point"] == p.id and ident["mode"] == p.mode
        assert kind.point_line(exp, p).strip().startswith(p.id)
    resolved = kind.resolved(exp)
    assert resolved["kind"] == exp.kind and resolved["name"] == exp.name
    assert yaml.safe_load(yaml.safe_dump(resolved)) == json.loads(json.dumps(resolved))
    spec = kind.report(resolved)
    report_spec.validate(spec)
    family = spec["family"] if spec["family"] != "pfs" else f"pfs-{resolved['pfs']['test']}"
    fixture = json.loads((FIXTURES / f"{family}.json").read_text())
    assert {k: v for k, v in spec.items() if k != "order"} == \
        {k: v for k, v in fixture.items() if k != "order"}
    for column, values in spec["order"].items():
        assert len(values) > 1 and column in spec.get("factors", []) + ["trace", "users",
                                                                         "docroot", "filesystem",
                                                                         "buffer"]
    assert "point" in columns and "mode" in columns


def test_the_example_runs_report_section_is_the_kinds() -> None:
    (run,) = [p.parent for p in (ROOT / "examples" / "quick").glob("*/summary.csv")]
    resolved = yaml.safe_load((run / "experiment.yml").read_text())
    manifest = json.loads((run / "manifest.json").read_text())
    assert registry.kind(registry.kind_of(resolved)).report(resolved) == manifest["report"]


def test_cli_report_and_compare_write_pages(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`tierbench report` and `tierbench compare` on copies of a real run (an earlier quick's)."""
    import shutil

    from tierbench import cli

    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(ROOT / "tests" / "data" / "quick-locust-run", a)
    shutil.copytree(a, b)
    (a / "report.html").unlink(missing_ok=True)
    assert cli.main(["report", str(a)]) == 0
    page = (a / "report.html").read_text()
    assert "TPS per trace by mode (000 Fig. 8a)" in page and "9754" in page.replace(",", "")
    assert cli.main(["compare", str(a), str(b)]) == 0
    out = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert out.is_file() and out.stat().st_size > 1000
    assert cli.main(["report", str(tmp_path)]) == 2
    assert "no summary.csv here" in capsys.readouterr().err
