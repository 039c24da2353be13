"""Every workload kind keeps the contract (tierbench/kinds/contract.py) for every shipped
experiment of its kind: points, plan, identity columns, and a report section the report accepts:
one of the kind's family files (tierbench/kinds/families/) completed with the experiment's order.
A family file the report would not accept stops `tierbench plan` and `run` before anything
starts."""

from __future__ import annotations

import ast
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from analysis import spec as report_spec
from tierbench import runner
from tierbench.config.errors import ConfigError
from tierbench.kinds import families, registry
from tierbench.kinds.contract import Kind

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = sorted(p.stem for p in (ROOT / "experiments").glob("*.yml"))


def declared_kinds(kinds_dir: Path) -> set[str]:
    """The ``name`` of every class deriving from Kind in a module of the kinds folder or in a
    subpackage's module ``kind``, read from the source (not through the registry)."""
    names = set()
    for path in [*kinds_dir.glob("*.py"), *kinds_dir.glob("*/kind.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(b, ast.Subscript) and getattr(b.value, "id", "") == "Kind"
                    or getattr(b, "id", "") == "Kind" for b in node.bases):
                names |= {s.value.value for s in node.body if isinstance(s, ast.Assign)
                          and [getattr(t, "id", "") for t in s.targets] == ["name"]
                          and isinstance(s.value, ast.Constant)}
    return names


def test_the_registry_finds_every_kind_module() -> None:
    """Every kind of a module of tierbench/kinds/ or of a subpackage (which exports it) is
    found, by its name; the web, net, fs and pfs kinds are packages, disk a module."""
    kinds_dir = ROOT / "tierbench" / "kinds"
    modules = {p.stem for p in kinds_dir.glob("*.py")} | {
        p.parent.name for p in kinds_dir.glob("*/__init__.py")}
    found = registry.kinds()
    assert set(found) == declared_kinds(kinds_dir) and {"web", "disk"} <= set(found)
    for name, kind in found.items():
        assert isinstance(kind, Kind) and kind.name == name and kind.tiers
        assert type(kind).__module__.split(".")[2] in modules


# shipped experiments whose names no family's begins: the family their kind picks otherwise
DEFAULT_FAMILY = {"quick": "dc-single"}


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
    # the family file as it is, but what the experiment adds: the order, and the dynamic
    # requests' optional columns and write check
    added = ("order", "optional", "checks")
    files = [n for n in families.names(exp.kind)
             if {k: v for k, v in families.load(n).items() if k not in added}
             == {k: v for k, v in spec.items() if k not in added}]
    chosen = (f"pfs-{resolved['pfs']['test']}" if exp.kind == "pfs"  # by its test
              else spec["family"])
    assert files == [chosen]
    assert name.startswith(spec["family"]) or DEFAULT_FAMILY.get(name) == spec["family"]
    own = families.load(chosen).get("order", {})  # the family's own (static first)
    for column, values in spec["order"].items():
        assert len(values) > 1 and column in spec.get("factors", []) + list(own) + [
            "trace", "users", "docroot", "filesystem", "buffer"]
    assert "point" in columns and "mode" in columns


def test_families_are_found_by_kind_and_by_name() -> None:
    assert families.names() == sorted(p.stem for p in families.FOLDER.glob("*.yml"))
    assert len(families.names()) >= 39
    assert families.names("disk") == ["dc-disk-basic"]
    assert set(families.names("pfs")) == {"pfs-basic", "pfs-concurrent", "pfs-streams"}
    assert "pfs-profile" in families.names("net") and "dc-single" in families.names("web")
    assert families.by_name("web", "net-csum-dc", "dc-single") == "net-csum-dc"
    assert families.by_name("net", "net-platform-bw-short", "net-streams") == "net-platform-bw"
    assert families.by_name("net", "net-platform-1", "net-streams") == "net-platform"
    assert families.by_name("web", "mine", "dc-single") == "dc-single"
    first = families.load("dc-single")
    first["figures"].clear()
    assert families.load("dc-single")["figures"]  # each load is a copy
    with pytest.raises(ConfigError, match=r"no report family named 'dc-singel' in .*families "
                                          r"\(known: dc-alpha-cache, "):
        families.load("dc-singel")


def bad_family_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str,
                      text: str) -> None:
    """The family files, with <name>.yml replaced by text."""
    folder = tmp_path / "families"
    shutil.copytree(families.FOLDER, folder, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    (folder / f"{name}.yml").write_text(text)
    monkeypatch.setattr(families, "FOLDER", folder)
    families.read.cache_clear()  # and again after the test (fresh_family_cache)


@pytest.fixture(autouse=True)
def fresh_family_cache() -> Iterator[None]:
    families.read.cache_clear()
    yield
    families.read.cache_clear()


def test_a_bad_family_file_stops_plan_and_run_before_anything_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tierbench import cli

    good = (families.FOLDER / "dc-single.yml").read_text()
    bad_family_folder(tmp_path, monkeypatch, "dc-single",
                      good.replace("  xlabel: trace\n", "  xlable: trace\n", 1))
    said = ("quick: the report family 'dc-single' of the web kind cannot be used (report spec: "
            "figures[0] has unknown key 'xlable' (known: type, ")
    assert cli.main(["plan", "quick"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"tierbench: {said}") and "\n" not in err
    assert err.endswith(f"correct its file in {tmp_path / 'families'}")
    checked = []
    monkeypatch.setattr(runner, "check_space", lambda *a: checked.append(a))
    with pytest.raises(ConfigError) as refused:
        runner.Run(registry.load_experiment("quick")).execute()
    assert str(refused.value).startswith(said) and checked == []  # before anything else


def test_a_family_file_that_is_no_mapping_is_one_sentence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad_family_folder(tmp_path, monkeypatch, "net-bw", "- kind: net\n")
    with pytest.raises(ConfigError, match=r"net-bw.yml: expected a mapping"):
        families.load("net-bw")
    bad_family_folder(tmp_path / "2", monkeypatch, "net-bw", "kind: net\ntitle: x\n")
    with pytest.raises(ConfigError, match=r"net-bw.yml: family must name the family's family"):
        families.names("net")


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


def test_no_kind_is_the_default() -> None:
    """An experiment without `kind:` is of the kind whose key it has (traces: web, pfs: pfs);
    with none, one sentence names the kinds and their keys (the registry has no default)."""
    assert registry.kind_of({"traces": []}) == "web"
    assert registry.kind_of({"pfs": {}}) == "pfs"
    with pytest.raises(ConfigError) as err:
        registry.experiment_from({"modes": ["offloads-on"]}, "e.yml", "e", lambda _: [])
    text = str(err.value)
    assert text.startswith("e.yml: kind: none given: name the experiment's kind (kind: ")
    assert "traces: web" in text and "pfs: pfs" in text and "\n" not in text
