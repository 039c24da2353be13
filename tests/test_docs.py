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


def studies_table() -> dict[str, str]:
    """The README's table of studies: id -> its reference."""
    return dict(re.findall(r"^\| (00\d) \| (.+) \|$", README, flags=re.M))


def test_every_study_has_a_full_reference_in_the_readme_and_the_citation_file() -> None:
    import yaml

    studies = studies_table()
    assert sorted(studies) == ["000", "001", "002", "003", "004"]
    for ref in studies.values():
        # authors and a title; a year, or the statement that the copy names none
        assert re.search(r'"[^"]+"', ref) and (re.search(r"\b(19|20)\d\d\b", ref)), ref
    assert "OSU-CISRC-2/07-TR13" in studies["000"] and "OSU-CISRC-5/04-TR25" in studies["004"]
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["title"] and citation["authors"]
    titles = [r["title"] for r in citation["references"]]
    for sid, ref in studies.items():
        quoted = re.findall(r'"([^"]+)"', ref)
        assert any(q in title for q in quoted for title in titles), (sid, quoted, titles)


def test_the_license_is_the_one_the_citation_and_the_readme_name() -> None:
    import yaml

    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License\n")
    assert yaml.safe_load((ROOT / "CITATION.cff").read_text())["license"] == "MIT"
    assert "[`LICENSE`](LICENSE)" in README and "MIT" in README.split("## License")[1]
