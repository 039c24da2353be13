"""Every notebook in analysis/notebooks/ is its family's: it names the family and calls
analysis/notebook.py, and run headlessly against a synthetic run of that family (TIERBENCH_RUN)
it prints the run, shows tables holding the run's modes and conditions, and draws the family
figure with the run's categories and series."""

from __future__ import annotations

import html
import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from analysis import notebook
from tierbench.kinds import families

import synthetic_runs

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "analysis" / "notebooks").glob("*.ipynb"))
# the family file whose synthetic run each notebook is run against (pfs: three tests, one family)
RUN_OF = {"pfs": "pfs-concurrent"}


def test_one_notebook_per_family() -> None:
    """Every family that reproduces a paper's numbers (its file's ``reference``) has its
    notebook, and every notebook is a family's; for a family of no paper (a new kind's) one is
    optional."""
    loaded = [families.load(n) for n in families.names()]
    assert {f["family"] for f in loaded if f.get("reference")} <= {p.stem for p in NOTEBOOKS} \
        <= {f["family"] for f in loaded}


def frames(outputs: list) -> list[dict[str, list[str]]]:
    """Each DataFrame shown (its HTML), as {column: [cell texts]}."""
    out = []
    for o in outputs:
        page = o.get("data", {}).get("text/html", "")
        if 'class="dataframe"' not in page:
            continue
        head = re.findall(r"<th>([^<]*)</th>", page.split("</thead>")[0])[1:]  # not the index
        rows = [re.findall(r"<td>([^<]*)</td>", r) for r in page.split("</thead>")[1]
                .split("<tr>")[1:]]
        out.append({c: [html.unescape(r[i]) for r in rows] for i, c in enumerate(head)})
    return out


def same(values: list[str], expected: list) -> bool:
    """The cells hold the expected values (numbers compared as numbers)."""
    def norm(v: object) -> str:
        try:
            return repr(float(v))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return str(v)
    return {norm(v) for v in values} == {norm(v) for v in expected if v is not None}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_shows_a_run_of_its_family(path: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    name = RUN_OF.get(path.stem, path.stem)
    run_dir = synthetic_runs.family_run(tmp_path, name)
    monkeypatch.setenv(notebook.RUN_VARIABLE, str(run_dir))
    nb = nbformat.read(path, as_version=4)
    assert [c.cell_type for c in nb.cells] == ["markdown", "code", "code"]
    assert nb.cells[1].source.endswith(f'notebook.open_run("{path.stem}")')
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    rows, _, modes, _ = synthetic_runs.family_rows(name)
    assert f"{run_dir} | {name} | seed 7 | {len(rows)} points" in text
    assert f"report spec: {path.stem} from manifest.json" in text
    # the tables: every point, and the means per condition and mode of this run
    points, means = frames(outputs)[:2]
    assert sorted(set(points["point"])) == [f"p{i:03d}" for i in range(1, len(rows) + 1)]
    for table in (points, means):
        assert same(table["mode"], list(modes))
    spec = synthetic_runs.spec_of(name)
    for factor in [f for f in spec["factors"] if f in means]:
        assert same(means[factor], [r.get(factor) for r in rows]), factor
    if spec["phases"]:
        assert same(means["phase"], [p for p in spec["phases"]
                                     if any(r.get(f"{p}_mb_per_s") is not None for r in rows)])
    # the figure: the first panel's categories and series are the run's
    page = next(o["data"]["text/html"] for o in outputs
                if "data-family=" in o.get("data", {}).get("text/html", ""))
    assert f'data-family="{path.stem}"' in page
    kind, categories, series = synthetic_runs.FIRST_PANEL[name]
    chunk = synthetic_runs.axes_chunks(page[page.index("<svg"):page.index("</svg>")])[0]
    assert [t for t in synthetic_runs.xticks(chunk) if t] == categories
    legend = re.findall(r"<text[^>]*>([^<]*)</text>", chunk)
    assert all(html.escape(s) in legend for s in series), (series, legend)


def test_a_run_of_another_family_is_refused(tmp_path: Path) -> None:
    run_dir = synthetic_runs.family_run(tmp_path, "dc-zipf")
    with pytest.raises(ValueError, match=r"is a run of the report family dc-zipf, not "
                                         r"dc-single: open analysis/notebooks/dc-zipf.ipynb"):
        notebook.open_run("dc-single", run_dir)


def run_at(path: Path, family: str) -> Path:
    """A synthetic run of the family at path (results/<experiment>/<run-id>)."""
    return synthetic_runs.family_run(path.parent, family).rename(path)


def test_the_newest_run_of_the_family_is_found(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(notebook.RUN_VARIABLE, raising=False)
    run_at(tmp_path / "results" / "dc-zipf" / "20260101T000000Z", "dc-zipf")
    newer = run_at(tmp_path / "results" / "dc-zipf-short" / "20260102T000000Z", "dc-zipf")
    bw = run_at(tmp_path / "results" / "net-bw" / "20260103T000000Z", "net-bw")
    example = run_at(tmp_path / "examples" / "quick" / "20250101T000000Z", "dc-single")
    here = tmp_path / "analysis" / "notebooks"
    here.mkdir(parents=True)
    assert notebook.find_run("dc-zipf", here) == newer
    assert notebook.find_run("net-bw", here) == bw
    assert notebook.find_run("dc-single", here) == example
    with pytest.raises(FileNotFoundError, match="no run of the report family dc-cpus in "
                                                "results/ or examples/: run an experiment"):
        notebook.find_run("dc-cpus", here)
    monkeypatch.setenv(notebook.RUN_VARIABLE, str(bw))
    assert notebook.find_run("dc-zipf", here) == bw  # TIERBENCH_RUN wins (open_run checks it)
