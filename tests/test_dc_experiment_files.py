"""The data-center experiment files that replay traces (experiments/dc-*.yml of kind web):
each one's load is a spec an engine can honour and each trace validates, builds and survives
being written and read back (World Cup logs are not shipped: building one names the file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierbench.kinds.web import load
from tierbench.kinds.web.load import LoadSpec
from workloads import traces

ROOT = Path(__file__).resolve().parents[1]

# the data-center experiments that replay traces (dc-disk-basic is the disk kind's: fio)
DC_FILES = sorted(p for p in (ROOT / "experiments").glob("dc-*.yml")
                  if "kind: web" in p.read_text())


def test_every_study_of_issue_4_has_its_experiment_file() -> None:
    assert {p.stem for p in DC_FILES} >= {"dc-single", "dc-zipf", "dc-clients", "dc-classes",
                                          "dc-worldcup"}


@pytest.mark.parametrize("path", DC_FILES, ids=lambda p: p.stem)
def test_dc_experiment_traces_validate_and_build(path: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    from workloads import worldcup

    data = yaml.safe_load(path.read_text())
    assert data["engine"] in load.ENGINES
    settings = data["load"]
    users = settings["users"] if isinstance(settings["users"], list) else [settings["users"]]
    for n in users:
        load.check_spec(LoadSpec(data["engine"], n, settings["warmup_s"], settings["measure_s"],
                                    processes=settings.get("processes", 1),
                                    think=settings.get("think"), rate=settings.get("rate"),
                                    target=data.get("target", load.TARGET)))
    for i, spec in enumerate(data["traces"]):
        traces.validate(f"{path.name}: traces[{i}]", spec)
        if spec["kind"] == "worldcup":
            # no log is shipped: building must fail saying which file to put where
            monkeypatch.setattr(worldcup, "DATA_DIR", tmp_path)
            with pytest.raises(worldcup.WorldCupError, match=spec["log"]):
                traces.build(spec, seed=data["seed"])
            continue
        built = traces.build(spec, seed=data["seed"])
        subset = traces.subset_size(spec)
        if subset:
            assert len(built) == subset * spec["subsets"] >= subset * max(users)
        out = tmp_path / f"{spec['name']}.txt"
        traces.write(out, built, spec["name"], subset)
        assert traces.read_with_subset(out) == (built, subset)
