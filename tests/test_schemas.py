"""The JSON Schemas shipped for editors are the declared models' own, and they accept every
shipped file and refuse bad ones; files that are not YAML text are one sentence, not a trace."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from tierbench import cli
from tierbench.config.errors import ConfigError
from tierbench.kinds import registry
from tierbench.modes.model import load_mode

ROOT = Path(__file__).resolve().parent.parent


def schema_of(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert cli.main(["schema", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("kind", sorted(registry.kinds()))
def test_shipped_experiment_schemas_are_current(kind: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    shipped = json.loads((ROOT / "experiments" / "schema" / f"{kind}.schema.json").read_text())
    assert shipped == schema_of(["experiment", "--kind", kind], capsys), (
        f"regenerate: tierbench schema experiment --kind {kind} > "
        f"experiments/schema/{kind}.schema.json")


def test_shipped_mode_schema_is_current(capsys: pytest.CaptureFixture[str]) -> None:
    shipped = json.loads((ROOT / "modes" / "mode.schema.json").read_text())
    assert shipped == schema_of(["mode"], capsys)


def test_every_shipped_file_validates_and_names_its_schema() -> None:
    for path in sorted((ROOT / "experiments").glob("*.yml")):
        data = yaml.safe_load(path.read_text())
        assert path.read_text().startswith(
            f"# yaml-language-server: $schema=schema/{data['kind']}.schema.json\n"), path
        schema = json.loads((ROOT / "experiments" / "schema" /
                             f"{data['kind']}.schema.json").read_text())
        jsonschema.validate(data, schema)
        assert registry.load_experiment(str(path)).kind == data["kind"]
    mode_schema = json.loads((ROOT / "modes" / "mode.schema.json").read_text())
    for path in sorted((ROOT / "modes").glob("*.yml")):
        jsonschema.validate(yaml.safe_load(path.read_text()), mode_schema)


@pytest.mark.parametrize("text", [
    "name: x\nkind: web\nmodes: [a]\ntraces: [{name: a, kind: single, size: -1}]\n",
    "name: x\nkind: web\nmodes: [a]\ntraces: [{name: a, kind: single, size: 4}]\ncolour: 1\n",
    "name: x\nkind: pfs\nmodes: [a]\npfs: {test: scatter}\n",
])
def test_schemas_refuse_what_the_models_refuse(text: str, tmp_path: Path) -> None:
    data = yaml.safe_load(text)
    schema = json.loads((ROOT / "experiments" / "schema" /
                         f"{data['kind']}.schema.json").read_text())
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)
    path = tmp_path / "x.yml"
    path.write_text(text)
    with pytest.raises(ConfigError):
        registry.load_experiment(str(path))


@pytest.mark.parametrize("content, fragment", [
    (b"\x7fELF\x02\x01\x01\x00\x00\x00", "is a binary file, not a"),
    ("name: caf\xe9\n".encode("latin-1"), "is not UTF-8 text (byte 9 cannot be decoded)"),
    (b"name: [unclosed\n", "not valid YAML at line 2"),
    (b"- a\n- b\n", "expected a mapping"),
])
def test_unreadable_files_are_one_sentence(content: bytes, fragment: str, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    exp = tmp_path / "exp.yml"
    exp.write_bytes(content)
    assert cli.main(["plan", str(exp)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and str(exp) in err and err.count("\n") == 1
    mode = tmp_path / "m.yml"
    mode.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_mode("m", tmp_path)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_a_folder_or_an_unreadable_file_is_one_sentence(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "d.yml").mkdir()
    assert cli.main(["plan", str(tmp_path / "d.yml")]) == 2
    assert "is a folder, not a" in capsys.readouterr().err
