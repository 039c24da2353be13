"""What every family notebook (analysis/notebooks/<family>.ipynb) shows, written once: a notebook
names its family and calls

    view = notebook.open_run("dc-zipf")   # the run, its spec and tidy table; prints what it is
    notebook.show(view)                   # the tables, the comparison, samples and the figure

or any one part: `view.points_table()`, `view.means()`, `view.comparison()`,
`view.seconds()`, `view.figure()`. The run is the folder in TIERBENCH_RUN, else the newest run
of the family in results/, else the example run in examples/ if it is of the family.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from analysis import figures, load, tables
from tierbench.stats import precision

RUN_VARIABLE = "TIERBENCH_RUN"
ROWS_SHOWN = 500


def family_of(run_dir: Path) -> str | None:
    """The report family a run's manifest.json names (None without one)."""
    try:
        report = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))["report"]
        return str(report["family"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def find_run(family: str, here: Path | None = None) -> Path:
    """TIERBENCH_RUN, else the newest run of the family in results/ or examples/ (searched in
    this folder and the ones above it)."""
    if os.environ.get(RUN_VARIABLE):
        return Path(os.environ[RUN_VARIABLE])
    here = (here or Path.cwd()).resolve()
    for folder in [here, *here.parents]:
        for where in ("results", "examples"):
            runs = sorted((p.parent for p in (folder / where).glob("*/*/summary.csv")
                           if family_of(p.parent) == family), key=lambda p: p.name)
            if runs:
                return runs[-1]
    raise FileNotFoundError(f"no run of the report family {family} in results/ or examples/: "
                            f"run an experiment of that family, or set {RUN_VARIABLE} to its "
                            "results/<experiment>/<run-id> folder")


@dataclass
class RunView:
    """One run seen through its family's report spec."""

    family: str
    run: load.Run

    @property
    def spec(self) -> dict[str, Any]:
        return self.run.spec

    @property
    def points(self) -> pd.DataFrame:
        return self.run.points

    @property
    def groups(self) -> list[str]:
        """The columns that name a condition (factors, phase) besides mode and repetition."""
        return tables.group_columns(self.points, self.spec)

    @property
    def modes(self) -> list[str]:
        return [str(m) for m in tables.order_of(self.points, "mode", self.spec,
                                                self.run.experiment)]

    @property
    def primary(self) -> str:
        return str(self.spec["primary"]["column"])

    def sorted_points(self) -> pd.DataFrame:
        return tables.sort_points(self.points, self.groups, self.spec, self.run.experiment)

    def points_table(self) -> pd.DataFrame:
        """One row per point (and phase): its condition, mode, the primary figure and costs."""
        cols = ["point", "order", *self.groups, "mode", "repetition", self.primary,
                *[c["column"] for c in self.spec["costs"]], "server_cycles_per_kb",
                "client_bound"]
        return self.points[[c for c in dict.fromkeys(cols) if c in self.points]]

    def means(self) -> pd.DataFrame:
        """Means and 95 % confidence intervals over repetitions, per condition and mode."""
        metrics = [self.primary] + [c["column"] for c in self.spec["costs"]
                                    if c["column"] in self.points]
        return tables.group_stats(self.sorted_points(), self.groups + ["mode"],
                                  metrics=list(dict.fromkeys(metrics)))

    def comparison(self) -> pd.DataFrame | None:
        """Each mode against the baseline: change of the primary figure, relative CPU benefit
        (None with one mode)."""
        if len(self.modes) < 2:
            return None
        baseline = precision.baseline_mode(self.modes, self.run.experiment, self.spec)
        if baseline is None:  # no modes
            return None
        return tables.compare_modes(self.sorted_points(), baseline, self.groups, self.primary,
                                    self.spec["benefit"], self.modes)

    def seconds(self) -> pd.DataFrame | str:
        """Per-second samples per point and phase (warm-up marked), or why there are none."""
        try:
            samples = load.load_samples(self.run)
        except load.LayoutError as exc:
            return str(exc)
        if samples.empty:
            return f"no per-second samples (points/<id>/samples.jsonl) in {self.run.dir}"
        return samples.groupby(["point", "phase"]).size().unstack(fill_value=0)

    def figure(self) -> figures.Figure:
        """The family figure with the paper's numbers, as the report draws it."""
        return figures.family_figure(self.points, self.spec, self.run.experiment)


def open_run(family: str, run_dir: str | Path | None = None) -> RunView:
    """The run to look at (run_dir, else `find_run`) with the report spec its manifest holds;
    a run of another family is refused, naming both. Prints what was opened."""
    path = Path(run_dir) if run_dir is not None else find_run(family)
    run = load.load_run(path)
    if run.spec_source == "manifest.json" and run.spec["family"] != family:
        raise ValueError(f"{path} is a run of the report family {run.spec['family']}, not "
                         f"{family}: open analysis/notebooks/{run.spec['family']}.ipynb, or set "
                         f"{RUN_VARIABLE} to a run of {family}")
    print(run.dir, "|", run.name, "| seed", run.seed, "|", len(run.per_point), "points")
    print("report spec:", run.spec["family"], "from", run.spec_source)
    for note in run.notes:
        print("note:", note)
    return RunView(family, run)


def show(view: RunView, rows: int = ROWS_SHOWN) -> None:
    """Every part of the view under its heading, in a notebook; tables of up to `rows` rows
    whole (pandas shows the first and last few of a longer one)."""
    from IPython.display import HTML, Markdown, display

    parts: list[tuple[str, Any]] = [
        ("One row per point (and phase)", view.points_table),
        ("Means and 95 % confidence intervals over repetitions", view.means),
        ("Modes against the baseline: change and relative CPU benefit", view.comparison),
        ("Per-second samples (warm-up marked, excluded from every number)", view.seconds),
    ]
    for title, part in parts:
        display(Markdown(f"## {title}"))
        value = part()
        if value is None:
            print("one mode: nothing to compare")
        elif isinstance(value, str):
            print(value)
        else:
            with pd.option_context("display.max_rows", rows):
                display(value)
    display(Markdown("## The figure"))
    fig = view.figure()
    display(HTML(fig.body))
    print(fig.caption)
