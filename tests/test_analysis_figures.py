"""Every report family (tierbench/kinds/families/) rendered: its figure drawn from a synthetic run
of its columns written in shuffled order (one bar or line per mode and category, categories in
the experiment's order, the paper's numbers in grey beside them), its report with the run's modes
and sections in the tables; and from the shipped example run, every panel drawn or said why
not."""

from __future__ import annotations

import html
import json
import re
import shutil
from pathlib import Path

import pytest

from analysis import figures, load, report, spec
from tierbench.kinds import families

import synthetic_runs

# the shipped example run: the one folder under examples/quick/ (make example records it)
(EXAMPLE,) = [p.parent for p in (Path(__file__).resolve().parent.parent / "examples" / "quick")
              .glob("*/summary.csv")]

PAPER = {"dc-single": "9,754", "dc-zipf": "2,212", "dc-clients": "14,996",
         "pfs-concurrent": "731", "pfs-basic": "775", "net-conns": "11,792",
         "dc-disk-basic": "147",
         "net-platform": "59", "net-platform-bw": "1,748", "net-txprofile": "5.28",
         "fs-filebench": "24,555"}


def test_every_family_has_an_expectation() -> None:
    assert set(synthetic_runs.FIRST_PANEL) == set(synthetic_runs.FAMILIES)


@pytest.mark.parametrize("name", synthetic_runs.FAMILIES)
def test_family_figure_from_a_synthetic_run(name: str, tmp_path: Path) -> None:
    run = load.load_run(synthetic_runs.family_run(tmp_path, name))
    fig = figures.family_figure(run.points, run.spec, run.experiment)
    kind, categories, series = synthetic_runs.FIRST_PANEL[name]
    assert f'data-family="{run.spec["family"]}"' in fig.body
    measured = [p for p in fig.panels if not p.reference]
    first = measured[0]
    assert first.kind == kind
    assert [s.name for s in first.series] == series
    svg = fig.body[fig.body.index("<svg"): fig.body.index("</svg>")]
    chunk = synthetic_runs.axes_chunks(svg)[0]
    if kind == "bars":
        assert synthetic_runs.xticks(chunk) == categories
        bars = re.findall(r'id="[^"]*-p0-bar-s(\d+)-c(\d+)"', chunk)
        # exactly one bar per series (mode) and category
        assert sorted(bars) == sorted((str(j), str(i)) for j in range(len(series))
                                      for i in range(len(categories)))
    else:
        assert [t for t in synthetic_runs.xticks(chunk) if t] == categories
        lines = re.findall(r'id="[^"]*-p0-line-s(\d+)"', chunk)
        assert lines == [str(j) for j in range(len(series))]  # one line per series
    legend = re.findall(r"<text[^>]*>([^<]*)</text>", chunk)
    for s in series:
        assert s in legend, (s, legend)
    if name in PAPER:
        refs = [p for p in fig.panels if p.reference]
        assert refs and "2004-2008 hardware" in refs[0].title
        assert re.search(r'-ref-s0-c0"', svg) and PAPER[name] in svg
        assert "Grey bars: the paper's numbers" in fig.caption


def test_net_conns_table_panel(tmp_path: Path) -> None:
    run = load.load_run(synthetic_runs.family_run(tmp_path, "net-conns"))
    fig = figures.family_figure(run.points, run.spec, run.experiment)
    tables_html = fig.body[fig.body.index("</svg>"):]
    # throughput: mean of 101 and 102 MB/s x 8 = 812 Mb/s; CI half = 12.706 x 0.5 x 8
    assert "812 ± 50.8" in tables_html
    # cycles/KB: 0.0015 s x 2 GHz / 1000 KB = 3000
    assert "3,000" in tables_html
    heads = re.findall(r"<th>(\d+)<br>", tables_html)
    assert heads[:2] == ["1024", "65536"]  # the spec's write-size order, not the run order
    rows = re.findall(r'<tr><td class="l">([\d,]+)</td>', tables_html)
    assert rows[:3] == ["1", "100", "6000"]
    page = report.write_report(run.dir).read_text()
    assert "11,792" in page  # the paper's 1-connection cycles/KB
    assert "offloads-on 812 ± 51" in page  # measured beside it: 64K writes, 1 connection


def test_missing_columns_are_named_not_fatal(tmp_path: Path) -> None:
    run = load.load_run(synthetic_runs.family_run(tmp_path, "dc-worldcup"))
    spec = dict(run.spec)
    spec["figures"] = run.spec["figures"] + [
        {**run.spec["figures"][0], "x": "case", "title": "by case"}]
    fig = figures.family_figure(run.points, spec, run.experiment)
    assert "Not drawn: by case: no column case in this run." in fig.caption


def section_values(rows: list[dict], spec: dict) -> set[tuple[str, ...]]:
    """The values of the spec's section columns that the rows hold (a phase: where it has a
    primary value), as the report labels them."""
    def text(v: object) -> str:
        return f"{v:g}" if isinstance(v, float) else str(v)

    out = set()
    for r in rows:
        phases = [p for p in spec.get("phases") or [] if r.get(f"{p}_mb_per_s") is not None]
        for phase in phases or [None]:
            values = {**r, "phase": phase}
            out.add(tuple(text(values[c]) for c in spec["sections"] if values.get(c) is not None))
    return out


@pytest.mark.parametrize("name", synthetic_runs.FAMILIES)
def test_report_of_each_family(name: str, tmp_path: Path) -> None:
    run_dir = synthetic_runs.family_run(tmp_path, name)
    page = report.write_report(run_dir).read_text()
    family = synthetic_runs.spec_of(name)["family"]
    assert f'data-family="{family}"' in page
    assert "Paper reference" in page and "2004-2008 hardware" in page
    assert "Points with errors or missing values" not in page
    assert "report spec from manifest.json" in page
    if name in PAPER:
        assert PAPER[name] in page
    # the tables hold the run's rows: one section per value of the section columns, each
    # with a row per mode (and condition), every mode of the run among them
    rows, _, modes, _ = synthetic_runs.family_rows(name)
    spec = load.load_run(run_dir).spec
    heads = re.findall(r'<section class="group" id="group-\d+"><h2>(.*?)</h2>', page)
    shown = {tuple(v.strip() for v in re.findall(r"</span> ([^<]+)", h)) for h in heads}
    assert shown == section_values(rows, spec), heads
    labels = re.findall(r'<td class="l"><span class="sw"[^>]*></span>([^<]*)</td>', page)
    assert {label.split(" · ")[0] for label in labels} == set(modes)


def test_a_reference_side_with_no_measured_value_is_left_blank(tmp_path: Path) -> None:
    """A run interrupted mid-point: the interrupted points' rows have their factors but no
    figures and no error, and are the only rows on one side of a reference comparison (here
    dc-cpus' two CPUs for small files); the report says nothing was measured there."""
    rows, traces, modes, web = synthetic_runs.family_rows("dc-cpus")
    cut = [r for r in rows if r.get("mode") == "webapp-2cpus" and r.get("trace") == "static-4k"]
    assert cut
    for r in cut:
        for k in list(r):
            if k not in ("trace", "mode", "repetition", "users"):
                r[k] = None
    man = synthetic_runs.manifest("dc-cpus", traces, modes, synthetic_runs.spec_of("dc-cpus"))
    page = report.write_report(synthetic_runs.write_run(tmp_path / "run", rows, man,
                                                        web=web)).read_text()
    assert "small files, 2 CPUs vs 1 (21a)" in page and "large files, 2 CPUs vs 1 (21a)" in page
    assert ">nan<" not in page.lower()


@pytest.fixture(scope="module")
def example_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shipped example run (a dc-single run) without its report spec."""
    run = tmp_path_factory.mktemp("example") / "run"
    shutil.copytree(EXAMPLE, run)
    manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
    del manifest["report"]
    (run / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    return run


@pytest.mark.parametrize("name", synthetic_runs.FAMILIES)
def test_every_family_draws_from_the_example_run_or_says_why_not(name: str,
                                                                 example_run: Path) -> None:
    """Each family's spec over the example's summary: every panel drawn or named with the
    reason it is not; a family whose primary column the example lacks is refused in one
    sentence naming it."""
    family = spec.validate(families.load(name))
    header = (example_run / "summary.csv").read_text(encoding="utf-8").splitlines()[0]
    try:
        run = load.load_run(example_run, family)
    except load.LayoutError as exc:
        assert family["primary"]["column"] not in header.split(",")
        assert f"column(s) {family['primary']['column']} missing" in str(exc)
        assert "\n" not in str(exc)
        return
    assert run.spec_source == "given" and run.spec["family"] == family["family"]
    fig = figures.family_figure(run.points, run.spec, run.experiment)
    assert f'data-family="{family["family"]}"' in fig.body
    drawn = [p.title for p in fig.panels if not p.reference]
    for panel in family["figures"]:
        if panel["type"] == "table":
            title = panel.get("title") or f"{spec.label(panel['rows'])} x " \
                                           f"{spec.label(panel['columns'])}"
            shown = "<table" in fig.body
        else:
            title = panel.get("title") or f"{spec.label(panel['y'])} by {spec.label(panel['x'])}"
            shown = any(t.startswith(title) for t in drawn)
        assert shown or f"Not drawn: {html.escape(title)}: " in fig.caption, (title, fig.caption)
    if name == "dc-single":  # the example's own family: its traces, a bar per mode
        first = [p for p in fig.panels if not p.reference][0]
        assert first.categories == [t["name"] for t in run.experiment["traces"]]
        # its modes layer CUBIC on offloads on and off (experiments/quick.yml)
        assert [s.name for s in first.series] == [f"{m}+tcp-cubic" for m in synthetic_runs.ON_OFF]
