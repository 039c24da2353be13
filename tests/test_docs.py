"""Documentation that cannot drift: every experiment, mode, Make target, folder and docs page is
documented where a reader looks for it, and every relative link resolves."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DOCS = ROOT / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text()


def first_code_block(text: str) -> list[str]:
    block = text.split("```", 2)[1]
    return [line.strip() for line in block.splitlines() if line.strip()]


def test_readme_starts_with_the_two_commands_and_ci_runs_the_second() -> None:
    assert first_code_block(README) == ["make run", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.yml")), ids=lambda p: p.stem)
def test_every_experiment_is_documented(path: Path) -> None:
    """In the catalogue (docs/experiments.md, experiments/README.md); one a study's row names
    also on the fidelity page (quick, or a new kind's experiment, belongs to no study)."""
    assert f"(../experiments/{path.name})" in page("experiments.md")
    assert path.name in (ROOT / "experiments" / "README.md").read_text()
    if path.stem in {name for _, row in study_rows() for name in row["experiments"]}:
        assert f"(../experiments/{path.name})" in page("fidelity.md"), path.name


@pytest.mark.parametrize("path", sorted((ROOT / "modes").glob("*.yml")), ids=lambda p: p.stem)
def test_every_mode_is_documented(path: Path) -> None:
    assert f"| {path.stem} |" in page("modes.md")
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


def test_every_docs_page_is_in_both_tables() -> None:
    pages = sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md")
    assert {"fidelity.md", "experiments.md", "modes.md", "cluster.md", "results.md"} <= set(pages)
    index = page("README.md")
    for name in pages:
        assert f"]({name})" in index, f"docs/{name} is missing from docs/README.md's table"
        assert f"](docs/{name})" in README, f"docs/{name} is missing from the README's table"
    assert "](ARCHITECTURE.md)" in README


def anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", path.read_text(), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def relative_links(text: str) -> list[str]:
    """Markdown link targets that are not URLs, outside code blocks."""
    prose = re.sub(r"```.*?```", "", text, flags=re.S)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", prose)
            if not re.match(r"[a-z]+:", t)]


def markdown_files() -> list[Path]:
    """Every Markdown file the repository tracks (README.md, docs/, each folder's README)."""
    tracked = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    return [ROOT / name for name in tracked]


def test_the_link_check_covers_the_readme_and_every_docs_page() -> None:
    files = set(markdown_files())
    assert ROOT / "README.md" in files and set(DOCS.glob("*.md")) <= files


@pytest.mark.parametrize("doc", markdown_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(doc: Path) -> None:
    broken = []
    for target in relative_links(doc.read_text()):
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(target)
    assert not broken, f"{doc.relative_to(ROOT)}: links to nothing: {broken}"


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    doc = tmp_path / "page.md"
    doc.write_text("# Title\n\n[a](missing.md) [b](#title) [c](#nowhere) [d](https://x.org)\n")
    links = relative_links(doc.read_text())
    assert links == ["missing.md", "#title", "#nowhere"]
    assert "title" in anchors(doc) and "nowhere" not in anchors(doc)


def study_rows() -> list[tuple[str, dict]]:
    import yaml

    return [(path.stem, row) for path in sorted((ROOT / "experiments" / "studies").glob("*.yml"))
            for row in yaml.safe_load(path.read_text())["rows"]]


def fidelity_sections() -> dict[str, str]:
    """docs/fidelity.md's row sections: heading -> its text."""
    parts = re.split(r"^### (.+)$", page("fidelity.md"), flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_catalogue_row_has_its_fidelity_in_the_study_file_and_on_the_page() -> None:
    rows = study_rows()
    assert len({row["id"] for _, row in rows}) == 36  # the catalogue's ids (PFS-basic twice)
    sections = fidelity_sections()
    assert len(sections) == len(rows)
    for sid, row in rows:
        fidelity = row.get("fidelity") or {}
        assert all(fidelity.get(k) for k in ("same", "different", "why", "to_close")), row["id"]
        section = sections[f"{row['id']} ({sid} {row['figures']})"]
        for key, label in (("same", "Same as the paper"), ("different", "Different"),
                           ("why", "Why"), ("to_close", "To close the difference")):
            assert f"- **{label}**: {fidelity[key]}\n" in section, (row["id"], key)
        for name in row["experiments"]:
            assert f"(../experiments/{name}.yml)" in section, (row["id"], name)


def test_the_planned_durations_on_the_fidelity_page_are_the_plans() -> None:
    """Each file's points and minutes as `tierbench plan` prints them (the stored plans, which
    test_architecture checks against the real ones)."""
    planned = re.findall(r"\[`([\w-]+)`\]\(\.\./experiments/[\w-]+\.yml\): (\d+) points, "
                         r"(at most )?([\d.]+) min", page("fidelity.md"))
    assert len({name for name, *_ in planned}) >= 38
    for name, points, bound, minutes in planned:
        plan = (ROOT / "tests" / "data" / "plans" / f"{name}.txt").read_text()
        assert f": {points} points," in plan.splitlines()[0], name
        assert f"estimated duration: {minutes} min" in plan, name
        assert bool(bound) == ("upper bound" in plan), name
