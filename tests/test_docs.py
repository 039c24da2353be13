"""Documentation that cannot drift: every experiment, mode, Make target and folder is documented."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def first_code_block(text: str) -> list[str]:
    block = text.split("```", 2)[1]
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_readme_starts_with_the_two_commands_and_ci_runs_the_second() -> None:
    assert first_code_block(README) == ["make run", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.yml")), ids=lambda p: p.stem)
def test_every_experiment_is_documented(path: Path) -> None:
    assert f"experiments/{path.name}" in README
    assert path.name in (ROOT / "experiments" / "README.md").read_text()


@pytest.mark.parametrize("path", sorted((ROOT / "modes").glob("*.yml")), ids=lambda p: p.stem)
def test_every_mode_is_documented(path: Path) -> None:
    assert f"| {path.stem} |" in README
    assert f"`{path.stem}`" in (ROOT / "modes" / "README.md").read_text()


def test_every_make_target_is_documented() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = re.findall(r"^([a-z-]+):.*## ", makefile, flags=re.M)
    assert {"run", "test", "clean", "plan"} <= set(targets)
    for target in targets:
        assert f"`make {target}" in README, target


def test_every_folder_has_a_readme_and_is_in_the_layout_table() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout
    folders = {line.split("/")[0] for line in tracked.splitlines() if "/" in line}
    folders -= {".ci"}
    for folder in sorted(folders):
        assert (ROOT / folder / "README.md").is_file(), f"{folder}/ has no README.md"
        assert f"`{folder}/`" in README, f"{folder}/ is missing from the README's layout table"
