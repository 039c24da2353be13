"""A whole study in one command (`tierbench study`, `plan --study`), `--scale`, and `tierbench
runs`: the study files against the catalogue, the plan's total, a study run of simulated
experiments end to end (a refused experiment recorded, the report, resume), scaling."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from analysis import runs as runs_list
from analysis import tables
from tierbench import blocks, cli, example, runner, study
from tierbench.config import files
from tierbench.config.errors import ConfigError
from tierbench.kinds import registry
import sim_kind

ROOT = Path(__file__).resolve().parent.parent

# The catalogue's rows (the brief's EXPERIMENTS.md), by study.
CATALOGUE = {
    "000": ["NET-bw", "NET-streams", "NET-sockopt", "NET-dmacopy", "NET-msgsize", "DC-single",
            "DC-zipf", "DC-clients", "PFS-concurrent", "PFS-streams"],
    "001": ["NET-conns", "NET-txprofile", "FS-filebench"],
    "002": ["FS-thinktime", "FS-clients", "FS-randread"],
    "003": ["PFS-basic", "NET-b2b", "PFS-profile", "NET-latency", "PFS-iozone"],
    "004": ["PFS-basic", "DC-classes", "DC-hybrid", "DC-disk-basic", "DC-disk-file",
            "DC-cache-hit", "DC-disk-classes", "DC-placement", "NET-platform",
            "DC-alpha-cache", "NET-csum", "NET-toe-est", "DC-static", "DC-dynamic", "DC-cpus",
            "DC-worldcup"],
}


@pytest.mark.parametrize("sid", sorted(CATALOGUE))
def test_each_study_lists_its_catalogue_rows_in_order_with_existing_experiments(
        sid: str) -> None:
    s = study.load(sid)
    assert [r.id for r in s.rows] == CATALOGUE[sid]
    for row in s.rows:
        for name in row.experiments:
            registry.load_experiment(name)  # exists and loads


def test_every_shipped_experiment_but_quick_belongs_to_a_study() -> None:
    """...or is one of docs/fidelity.md's "Beyond the studies", which names its file."""
    named = {n for sid in study.names() for r in study.load(sid).rows for n in r.experiments}
    shipped = {p.stem for p in Path("experiments").glob("*.yml")}
    fidelity = Path("docs/fidelity.md").read_text()
    beyond = set(re.findall(r"\(\.\./experiments/([\w-]+)\.yml\)",
                            fidelity.split("## Beyond the studies", 1)[1]))
    assert beyond == {"latency-at-load"}
    assert shipped - named == {"quick"} | beyond
    assert len({i for ids in CATALOGUE.values() for i in ids}) == 36


def test_the_study_plan_lists_every_experiment_and_their_total(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["plan", "--study", "003"]) == 0
    out = capsys.readouterr().out.splitlines()
    names = [n for r in study.load("003").rows for n in r.experiments]
    for n in names:
        assert any(f" {n} " in line for line in out), n
    total = sum(runner.estimate_s(registry.load_experiment(n)) for n in names)
    assert out[-1].startswith(f"estimated duration: {total / 60:.1f} min")
    assert cli.main(["plan", "--study", "007"]) == 2
    assert "no study '007'" in capsys.readouterr().err


def test_scale_shortens_windows_counts_and_repetitions_down_to_their_floors() -> None:
    exp = registry.with_scale(registry.load_experiment("dc-single"), 0.1)
    load = exp.settings.load  # type: ignore[attr-defined]
    assert load.measure_s == 4 and load.requests_per_client == 50
    assert load.warmup_s == 1  # 2 x 0.1 is below the floor of 1 s
    assert exp.repetitions == 2  # 4 x 0.1, at least 2
    assert exp.scaled[0].startswith("scaled by 0.1 (--scale): load.measure_s 40 -> 4")
    assert runner.resolved_of(exp)["scale"] == 0.1
    assert runner.plan_lines(exp)[3] == exp.scaled[0]
    with pytest.raises(ConfigError, match="--scale must be a number above 0"):
        registry.with_scale(registry.load_experiment("dc-single"), -1)


# --------------------------------------------------------------------------- a study run


CLAIM = ("{id: %s, figure: Fig. 1, source: 999 §1 Fig. 1, says: the treatment raises TPS, "
         "experiment: %s, metric: tps, kind: direction, a: {mode: sim-on}, b: {mode: sim-off}, "
         "higher: %s}")


@pytest.fixture()
def sim_study(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A study of two rows of simulated experiments (and one that does not exist)."""
    sim_kind.use(monkeypatch)
    monkeypatch.setenv("TIERBENCH_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("TIERBENCH_STATE_DIR", str(tmp_path / "state"))
    paths = {}
    for name, effect in (("sim-a", 0.2), ("sim-b", 0.0)):
        path, modes = sim_kind.write_experiment(tmp_path / name, {"only": effect},
                                                noise=0.01, repetitions=3)
        paths[name] = (path, modes)
    studies = tmp_path / "studies"
    studies.mkdir()
    (studies / "999.yml").write_text(
        "study: '999'\ntitle: a simulated study\nrows:\n"
        "  - {id: SIM-a, figures: 'Fig. 1', experiments: [sim-a, sim-missing],\n"
        "     recommended_scale: 1,\n"
        "     fidelity: {same: the model, different: nothing, why: it is simulated},\n"
        f"     claims: [{CLAIM % ('up', 'sim-a', 'true')}, {CLAIM % ('down', 'sim-a', 'false')},\n"
        f"              {CLAIM % ('gone', 'sim-missing', 'true')}]}}\n"
        "  - {id: SIM-b, figures: 'Fig. 2', experiments: [sim-b],\n"
        f"     claims: [{CLAIM % ('flat', 'sim-b', 'true')}]}}\n")
    monkeypatch.setattr(study, "STUDIES_DIR", studies)

    def load(name: str, scale: float | None, where: object = None,
             precision: dict | None = None, *,
             keep_repetitions: bool = False) -> registry.Experiment:
        if name not in paths:
            raise ConfigError(f"no experiment {name!r}")
        return registry.with_precision(
            registry.with_scale(registry.load_experiment(str(paths[name][0]),
                                                         paths[name][1]), scale,
                                keep_repetitions=keep_repetitions),
            **(precision or {}))

    monkeypatch.setattr(study, "experiment", load)
    return tmp_path


def test_a_study_runs_every_experiment_records_refusals_and_writes_its_report(
        sim_study: Path) -> None:
    folder = study.run(study.load("999"))
    record = json.loads((folder / "study.json").read_text())
    entries = {e["name"]: e for r in record["rows"] for e in r["experiments"]}
    assert record["status"] == "complete"
    assert entries["sim-a"]["status"] == entries["sim-b"]["status"] == "complete"
    assert entries["sim-missing"]["status"] == "refused"
    assert "no experiment 'sim-missing'" in entries["sim-missing"]["note"]
    run_a = Path(entries["sim-a"]["run"])
    assert (run_a / "report.html").is_file() and (run_a / "comparisons.csv").is_file()
    html = (folder / "study.html").read_text()
    assert html.index('id="SIM-a"') < html.index('id="SIM-b"')
    assert "it is simulated" in html and "No fidelity row recorded" in html
    assert "no experiment &#39;sim-missing&#39;" in html
    assert f'href="../../sim/{run_a.name}/report.html"' in html
    assert "sim-on vs sim-off: +" in html  # the comparison's sentence
    # the scoreboard: +20 % reproduced, the same claimed downwards reversed, a true 0 not
    # reproduced (within 5 %), the experiment that was refused not measured
    verdicts = {r["claim"]: r for r in csv.DictReader((folder / "claims.csv").open())}
    assert {k: v["verdict"] for k, v in verdicts.items()} == {
        "up": "reproduced", "down": "reversed", "gone": "not measured",
        "flat": "not reproduced"}
    assert float(verdicts["up"]["low_pct"]) > 10 and verdicts["up"]["row"] == "SIM-a"
    assert html.index('id="scoreboard"') < html.index('id="SIM-a"')
    board = html[html.index('id="scoreboard"'):html.index('id="SIM-a"')]
    assert "<summary>differences</summary>nothing</details>" in board  # SIM-a's fidelity row
    assert board.count("<tr>") == 5 and "sim-b: tps, mode=sim-on above mode=sim-off" in board
    assert "1 reproduced, 1 not reproduced, 1 reversed, 1 not measured" in html
    listed = runs_list.runs(sim_study / "results")
    assert sorted(r["experiment"] for r in listed) == ["sim", "sim", "study 999"]
    assert [r["started"] for r in listed] == sorted((r["started"] for r in listed),
                                                    reverse=True)
    assert {r["status"] for r in listed} == {"complete"}
    assert next(r for r in listed if r["experiment"] == "study 999")["points"] == \
        "2/3 experiments"
    assert "this host" in runs_list.table(listed)


def test_a_study_with_precision_runs_every_experiment_in_blocks(sim_study: Path) -> None:
    """`tierbench study ID --precision 5`: every experiment is a precision run (its manifest
    has the precision record, its blocks as its first ones planned); resuming with other
    precision options is refused in one sentence."""
    options = {"half_width_pct": 5.0, "min_repetitions": 3, "max_repetitions": 12,
               "budget_min": None}
    folder = study.run(study.load("999"), precision=options)
    record = json.loads((folder / "study.json").read_text())
    assert record["precision"] == {"half_width_pct": 5.0, "min_repetitions": 3,
                                   "max_repetitions": 12}
    runs = [Path(e["run"]) for r in record["rows"] for e in r["experiments"] if e["run"]]
    assert len(runs) == 2
    for run in runs:
        rec = json.loads((run / "manifest.json").read_text())["precision"]
        assert rec["target"]["half_width_pct"] == 5.0 and rec["stopped"] == "done"
        (cond,) = rec["conditions"]
        assert cond["blocks"] > 3  # the first blocks planned more (two stages)
    with pytest.raises(ConfigError, match="resume with the same"):
        study.run(study.load("999"), resume=folder, precision={"half_width_pct": 2.0})


def test_the_plan_of_a_precision_run_counts_the_blocks_it_expects(
        sim_study: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """plan --study --precision: an experiment's estimate is its points per block times the
    blocks its first ones would plan at the experiment's variation, not the first blocks
    only; a budget caps it, but not below the first blocks."""
    monkeypatch.setattr(sim_kind.SimKind, "point_seconds", lambda self, exp: 1.0)
    exp = study.experiment("sim-a", None, None, {"half_width_pct": 5.0, "min_repetitions": 8})
    per_block = len(runner.points_of(exp)) // 8
    expected = blocks.expected_blocks(exp)
    assert 8 < expected <= 30
    assert runner.estimate_s(exp) == pytest.approx(
        registry.kind("sim").point_seconds(exp) * per_block * expected)
    capped = study.experiment("sim-a", None, None, {"half_width_pct": 5.0,
                                                    "min_repetitions": 8, "budget_min": 0.01})
    assert runner.estimate_s(capped) == 8 * per_block < runner.estimate_s(exp)
    lines = study.plan_lines(study.load("999"), precision={"half_width_pct": 5.0})
    assert "precision ±5 %" in lines[0]


def test_an_interrupted_study_resumes_where_it_stopped(
        sim_study: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = sim_kind.SimKind.run_point
    calls = {"n": 0}

    def stop_in_the_second(self: sim_kind.SimKind, ctx: object) -> object:
        calls["n"] += 1
        if calls["n"] == 9:  # sim-a has 6 points: the third of sim-b
            raise runner.RunInterrupted("SIGINT")
        return real(self, ctx)  # type: ignore[arg-type]

    monkeypatch.setattr(sim_kind.SimKind, "run_point", stop_in_the_second)
    with pytest.raises(runner.RunInterrupted):
        study.run(study.load("999"))
    folder = next((sim_study / "results" / "study-999").iterdir())
    record = json.loads((folder / "study.json").read_text())
    assert record["status"].startswith("interrupted")
    monkeypatch.setattr(sim_kind.SimKind, "run_point", real)
    first_b = next(e for r in record["rows"] for e in r["experiments"] if e["name"] == "sim-b")
    assert first_b["status"] == "interrupted" and first_b["run"]
    # The run's own manifest may be far larger than any file a user gives (the 004 data
    # center's records every interface's state per point): resume still reads it.
    manifest = Path(first_b["run"]) if Path(first_b["run"]).is_absolute() \
        else folder / first_b["run"]
    manifest = manifest / "manifest.json"
    padded = json.loads(manifest.read_text())
    padded["points"]["p001"]["interfaces_before"] = {"sim:eth0": {"note": "x" * 200_000}}
    manifest.write_text(json.dumps(padded))
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 100_000)
    # an earlier attempt's failure, written beside the entry, goes once the run completes
    for entry in (e for r in record["rows"] for e in r["experiments"] if e["name"] == "sim-b"):
        entry["note"] = "an earlier attempt failed"
    (folder / "study.json").write_text(json.dumps(record))
    study.run(study.load("999"), resume=folder)
    record = json.loads((folder / "study.json").read_text())
    b = next(e for r in record["rows"] for e in r["experiments"] if e["name"] == "sim-b")
    assert record["status"] == "complete" and b["status"] == "complete" and "note" not in b
    assert b["run"] == first_b["run"]  # the same run folder, resumed
    with pytest.raises(ConfigError, match="ran with --scale 1; resume with the same"):
        study.run(study.load("999"), scale=0.5, resume=folder)


def test_a_study_runs_in_parts_each_part_with_its_rows_record_and_scoreboard(
        sim_study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a long study run in parts (each fits the time a machine is up): --rows runs only the rows
    # named, the record and the scoreboard hold only theirs, and the markdown says which
    part = study.only_rows(study.load("999"), ["SIM-b"])
    folder = study.run(part)
    record = json.loads((folder / "study.json").read_text())
    assert [r["id"] for r in record["rows"]] == ["SIM-b"] and record["status"] == "complete"
    assert [e["name"] for r in record["rows"] for e in r["experiments"]] == ["sim-b"]
    assert cli.claim_counts(folder) == "1 not reproduced"
    capsys.readouterr()
    assert cli.main(["claims", str(folder), "--markdown"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("- **Scoreboard, rows SIM-b** (") and len(out) == 2
    assert out[1].startswith("- **Scoreboard, SIM-b** (")
    whole = study.run(study.load("999"))
    assert cli.main(["claims", str(whole), "--markdown"]) == 0
    assert capsys.readouterr().out.startswith("- **Scoreboard, every row** (")
    with pytest.raises(ConfigError, match="ran rows SIM-b; resume with --rows SIM-b"):
        study.run(study.load("999"), resume=folder)
    with pytest.raises(ConfigError, match="ran every row; resume without --rows"):
        study.run(part, resume=whole)
    with pytest.raises(ConfigError, match="has no row SIM-c .its rows: SIM-a, SIM-b"):
        study.only_rows(study.load("999"), ["SIM-c"])
    assert cli.main(["plan", "--study", "999", "--rows", "SIM-b"]) == 0
    plan = capsys.readouterr().out
    assert "sim-b" in plan and "sim-a" not in plan
    assert cli.main(["plan", "quick", "--rows", "SIM-b"]) == 2  # not silently ignored
    assert "--rows names rows of a study" in capsys.readouterr().err


def test_scale_recommended_runs_each_row_at_its_own_scale_with_its_repetitions(
        capsys: pytest.CaptureFixture[str]) -> None:
    """004's rows with a recommended scale, repetitions kept (a plain --scale 0.01 halves
    them), the others left out and named; an experiment alone refuses it in one sentence."""
    s004 = study.load("004")
    rows = {r.id: r for r in s004.rows}
    assert rows["DC-static"].recommended_scale == 0.01 and rows["DC-dynamic"].recommended_scale \
        is None
    kept = study.experiment("dc-static", 0.01, keep_repetitions=True)
    halved = study.experiment("dc-static", 0.01)
    assert (kept.repetitions, halved.repetitions) == (4, 2)
    assert kept.scaled[0].startswith("scaled by 0.01 (--scale recommended, repetitions kept)")
    lines = study.plan_lines(s004, study.RECOMMENDED)
    assert "at each row's recommended scale (repetitions kept" in lines[0]
    static = next(ln for ln in lines if " dc-static " in ln)
    assert static.endswith("at 0.01") and " 96 points" in static
    assert any("dc-dynamic: left out (the row has no recommended scale)" in ln for ln in lines)
    hours = float(lines[-1].split("(")[1].split(" h")[0])
    assert 1 <= hours <= 6, lines[-1]  # a few hours on this machine, stated in docs/fidelity.md
    assert lines[-1] in (ROOT / "docs" / "fidelity.md").read_text()
    assert cli.main(["plan", "dc-static", "--scale", "recommended"]) == 2
    assert "--scale recommended is a study's rows' own scale" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["plan", "--study", "004", "--scale", "most"])
    assert "a number or recommended, got 'most'" in capsys.readouterr().err


def test_a_recommended_study_run_leaves_out_rows_without_a_scale(
        sim_study: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = study.run(study.load("999"), scale=study.RECOMMENDED)
    entries = {e["name"]: e for r in json.loads((folder / "study.json").read_text())["rows"]
               for e in r["experiments"]}
    assert entries["sim-b"]["status"] == "refused"
    assert "SIM-b has no recommended scale" in entries["sim-b"]["note"]
    assert entries["sim-a"]["status"] == "complete"
    capsys.readouterr()
    assert cli.main(["claims", str(folder), "--markdown"]) == 0  # the recorded scale is a word
    assert "recommended" in capsys.readouterr().out


def test_the_004_rows_count_requests_as_the_paper_and_scale_shortens_them() -> None:
    for name in ("dc-classes", "dc-classes-large", "dc-alpha-cache", "dc-disk-classes",
                 "dc-placement", "dc-static", "dc-dynamic", "dc-cpus", "dc-worldcup"):
        exp = registry.load_experiment(name)
        assert exp.settings.load.requests_per_client == 10000, name  # type: ignore[attr-defined]
        assert "64 clients: 640,000 a point" in runner.plan_lines(exp)[1], name
    quick = registry.with_scale(registry.load_experiment("dc-classes"), 0.01)
    assert quick.settings.load.requests_per_client == 100  # type: ignore[attr-defined]
    assert quick.settings.load.measure_s == 216  # type: ignore[attr-defined]
    lines = runner.plan_lines(quick)
    assert "64 clients: 6,400 a point; at most 216 s" in lines[1]
    assert "load.requests_per_client 10000 -> 100" in lines[3]


# --------------------------------------------------------------------------- claims


def claim_vocabulary(name: str) -> tuple[dict[str, set[str]], set[str]]:
    """An experiment's condition columns with the values its points give them (as summary.csv
    writes them: the kind's identity; `phase` for a report with phases) and its metrics."""
    exp = registry.load_experiment(name)
    kind = registry.kind(exp.kind)
    section = runner.report_section(exp)
    values: dict[str, set[str]] = {}
    for point in kind.points(exp, exp.seed):
        for k, v in kind.identity(exp, point).items():
            values.setdefault(k, set()).add(tables.label(v))
    phases = section.get("phases") or []
    if phases:
        values["phase"] = set(phases)
    metrics = set()
    for c in kind.columns(exp):
        metrics.add(c.name)
        metrics.update(c.name[len(p) + 1:] for p in phases if c.name.startswith(f"{p}_"))
    metrics.update(re.findall(r"'column': '([\w.]+)'", str(section)))
    return values, metrics


@pytest.mark.parametrize("sid", sorted(CATALOGUE))
def test_every_claim_names_conditions_its_experiment_runs_and_a_column_it_writes(
        sid: str) -> None:
    """The schema validation of every study's claims: the model accepts them (study.load), each
    names one of its row's experiments, every condition's columns and values are ones the
    experiment's points have, the metric one its summary (or report) has, and no condition
    matches nothing."""
    rows = study.load(sid).rows
    assert sum(len(r.claims) for r in rows) >= 1
    for row in rows:
        for c in row.claims:
            values, metrics = claim_vocabulary(c.experiment)
            assert c.metric in metrics, (row.id, c.id, c.metric)
            conds = [c.a, c.b, *(c.order or [])] + [{c.factor: lv} for lv in c.levels or []]
            for cond in [c.where, *(x for x in conds if x)]:
                for key, want in cond.items():
                    assert key in values, (row.id, c.id, key, sorted(values))
                    wanted = {tables.label(w) for w in (want if isinstance(want, list)
                                                         else [want])}
                    assert wanted & values[key], (row.id, c.id, key, want, values[key])


def test_a_claim_on_an_experiment_its_row_does_not_run_is_refused(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    (tmp_path / "998.yml").write_text(
        "study: '998'\ntitle: t\nrows:\n  - {id: SIM-a, figures: 'Fig. 1', experiments: [a],\n"
        f"     claims: [{CLAIM % ('up', 'b', 'true')}]}}\n")
    monkeypatch.setattr(study, "STUDIES_DIR", tmp_path)
    with pytest.raises(ConfigError, match="claim 'up' names experiment 'b', which the row "
                                          "does not run"):
        study.load("998")


def test_tierbench_claims_scores_a_study_folder_and_a_run_and_refuses_other_folders(
        sim_study: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = study.run(study.load("999"))
    assert cli.claim_counts(folder) == "1 reproduced, 1 not reproduced, 1 reversed, 1 not measured"
    capsys.readouterr()
    out_csv = tmp_path / "all.csv"
    assert cli.main(["claims", str(folder), "--csv", str(out_csv)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"study 999 run {folder.name} (") and out[0].endswith(
        "1 reproduced, 1 not reproduced, 1 reversed, 1 not measured")
    assert any(" up " in line and "reproduced" in line for line in out[1:])
    assert len(out_csv.read_text().splitlines()) == 5
    run_a = Path(next(e["run"] for r in json.loads((folder / "study.json").read_text())["rows"]
                      for e in r["experiments"] if e["name"] == "sim-a"))
    assert cli.main(["claims", str(run_a)]) == 2  # a run of `sim`: no study claims on it
    assert "no study states claims on experiment 'sim'" in capsys.readouterr().err
    assert cli.main(["claims", str(tmp_path)]) == 2
    assert "not a run (no summary.csv) or a study's folder" in capsys.readouterr().err


def test_a_shipped_study_copy_scores_as_its_run_did_and_keeps_only_what_scores_read(
        sim_study: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    folder = study.run(study.load("999"))
    assert cli.main(["claims", str(folder), "--markdown"]) == 0
    original = capsys.readouterr().out
    dest = sim_study / "examples"
    out = example.record_study(folder, dest)
    assert out == dest / "study-999" / folder.name
    assert cli.main(["claims", str(out), "--markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "\n".join(lines) + "\n" == original  # the same verdicts from the copy
    assert lines[0].startswith("- **Scoreboard, every row** (generated by `tierbench claims` "
                               f"from run {folder.name} of study 999, ")
    assert lines[0].endswith("1 reproduced, 1 not reproduced, 1 reversed, 1 not measured")
    assert [x.split("**")[1] for x in lines[1:]] == ["Scoreboard, SIM-a", "Scoreboard, SIM-b"]
    record = json.loads((out / "study.json").read_text())
    runs = [e["run"] for r in record["rows"] for e in r["experiments"] if e.get("run")]
    assert runs and all(not Path(r).is_absolute() and (out / r / "summary.csv").is_file()
                        for r in runs)
    manifest = json.loads((out / runs[0] / "manifest.json").read_text())
    assert "points" not in manifest and "per-point records" in manifest["trimmed"]
    assert not list(out.rglob("points")) and not list(out.rglob("report.html"))
    # a second copy of the same study replaces the first; a disk without room refuses first
    again = example.record_study(folder, dest)
    assert [p.name for p in (dest / "study-999").iterdir()] == [again.name]
    with monkeypatch.context() as m:
        m.setattr(example.space, "disk_room", lambda path: 10)
        with pytest.raises(ConfigError, match=r"the example copy \(.*\) need .* which has 10 B"):
            example.record_study(folder, dest)
    assert (out / "study.json").is_file()  # nothing removed before the refusal
    (folder / "study.json").write_text("{\"study\": ")  # a record cut short: one sentence
    assert example.main(["--study", str(folder)]) == 2
    assert capsys.readouterr().err.startswith(f"example: {folder}: Expecting value")
    # parts of a study (--rows) each keep their copy; a part replaces a copy sharing its rows
    part_b = study.run(study.only_rows(study.load("999"), ["SIM-b"]))
    part_a = study.run(study.only_rows(study.load("999"), ["SIM-a"]))
    example.record_study(part_b, dest)
    assert [p.name for p in (dest / "study-999").iterdir()] == [part_b.name]  # held SIM-b too
    example.record_study(part_a, dest)
    assert sorted(p.name for p in (dest / "study-999").iterdir()) == sorted(
        [part_a.name, part_b.name])
    example.record_study(part_b, dest)
    assert sorted(p.name for p in (dest / "study-999").iterdir()) == sorted(
        [part_a.name, part_b.name])
    # a run stopped before its last rows ships the rows it finished, and says so
    real, calls = sim_kind.SimKind.run_point, {"n": 0}

    def stop_in_sim_b(self: sim_kind.SimKind, ctx: object) -> object:
        calls["n"] += 1
        if calls["n"] == 8:  # sim-a has 6 points: the second of sim-b
            raise runner.RunInterrupted("SIGINT")
        return real(self, ctx)  # type: ignore[arg-type]

    with pytest.raises(runner.RunInterrupted), monkeypatch.context() as m:
        m.setattr(sim_kind.SimKind, "run_point", stop_in_sim_b)
        study.run(study.load("999"))
    stopped = max((sim_study / "results" / "study-999").iterdir(), key=lambda p: p.stat().st_mtime)
    assert json.loads((stopped / "study.json").read_text())["status"].startswith("interrupted")
    with pytest.raises(ConfigError, match=r"row SIM-b is not finished in this run \(sim-b "
                                          r"interrupted\)"):
        example.record_study(stopped, dest, rows=["SIM-b"])
    with pytest.raises(ConfigError, match="the run has no row SIM-c"):
        example.record_study(stopped, dest, rows=["SIM-c"])
    shipped = example.record_study(stopped, dest, rows=["SIM-a"])
    record = json.loads((shipped / "study.json").read_text())
    assert [r["id"] for r in record["rows"]] == ["SIM-a"]
    assert record["shipped"].startswith("rows SIM-a of the run's SIM-a, SIM-b: the rows it "
                                        "finished (its status: interrupted")
    assert cli.main(["claims", str(shipped), "--markdown"]) == 0
    assert capsys.readouterr().out.startswith("- **Scoreboard, rows SIM-a** (")


def shipped_scoreboards() -> set[str]:
    """Every scoreboard line the generator prints for the runs shipped in examples/: the quick
    run checked as dc-single, and each study run in examples/studies/."""
    import contextlib
    import io

    argvs = [[str(next(Path("examples/quick").iterdir())), "--as", "dc-single"]]
    argvs += [[str(p)] for p in sorted(Path("examples/studies").glob("study-*/*"))]
    lines: set[str] = set()
    for argv in argvs:
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            assert cli.main(["claims", *argv, "--markdown"]) == 0
        lines |= set(buf.getvalue().splitlines())
    return lines


def test_the_fidelity_pages_scoreboards_are_what_the_generator_prints_for_shipped_runs() -> None:
    page = Path("docs/fidelity.md").read_text()
    written = {line for line in page.splitlines() if line.startswith("- **Scoreboard")}
    shipped = shipped_scoreboards()
    assert written and written == shipped, (sorted(written - shipped), sorted(shipped - written))
    studies = sorted(Path("examples/studies").glob("study-*/*"))
    assert {p.parent.name for p in studies} >= {"study-000"}
