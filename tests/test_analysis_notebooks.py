"""Every notebook in analysis/notebooks/ runs headlessly against the shipped example run."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "analysis" / "notebooks").glob("*.ipynb"))


def test_one_notebook_per_family() -> None:
    import synthetic_runs

    families = {synthetic_runs.spec_of(n)["family"] for n in synthetic_runs.FIXTURES}
    assert {p.stem for p in NOTEBOOKS} == families


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_executes_and_draws_its_figure(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TIERBENCH_RUN", raising=False)
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any(f'data-family="{path.stem}"' in h for h in html), "figure not drawn"
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    (example,) = [p.parent for p in (ROOT / "examples" / "quick").glob("*/summary.csv")]
    points = len((example / "summary.csv").read_text().splitlines()) - 1
    assert f"examples/quick/{example.name}" in text and f"{points} points" in text
