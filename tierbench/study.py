"""A whole study in one command: `tierbench study 000|001|002|003|004`.

A study file (experiments/studies/<id>.yml) lists the catalogue rows of one paper in the
paper's order, each with its figures, the experiment files that reproduce it and its fidelity
(what is the same as the paper, what differs, why, and what would close the gap). A study run
plans every experiment (``plan_lines``), runs them one after another (each an ordinary run in
results/<experiment>/<run-id>/, with its own report), keeps going when one is refused or fails
(the sentence is recorded), and writes results/study-<id>/<run-id>/ with study.json (which run
holds which experiment) and study.html (analysis.study: each figure in the paper's order with
the paper's numbers beside the measured ones, the fidelity row, what was resolved, links to each
experiment's report). ``--resume`` continues an interrupted study: finished experiments are
kept, an interrupted one resumes where it stopped.

Each row also states its paper's claims (``claims:``, analysis.claimspec's model: checkable
statements over named conditions, with their source); the study's report opens with their
verdicts on this run (the scoreboard, also claims.csv), and ``scoreboards`` gives them for
recorded runs (``tierbench claims``).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from pydantic import model_validator

from analysis.claimspec import Claim, Claims
from tierbench import runner
from tierbench.config.errors import ConfigError, TierbenchError
from tierbench.config.files import (EXPERIMENTS_DIR, fresh_run_dir, read_text, read_yaml,
                                    results_root)
from tierbench.config.models import Model, check, number, text, validate
from tierbench.kinds import registry
from tierbench.kinds.contract import Experiment, log
from tierbench.placement.placer import Placer

STUDIES_DIR = EXPERIMENTS_DIR / "studies"


class Fidelity(Model):
    """How a row's experiments differ from the paper's."""

    same: str
    different: str
    why: str
    to_close: str = ""


class Row(Model):
    """One catalogue row: its id, the paper's figures, the experiment files that run it."""

    id: Annotated[str, text(r"^[A-Z]+-[\w-]+$", "DC-single")]
    figures: str
    experiments: list[Annotated[str, text(r"^[\w.-]+$", "dc-single")]]
    fidelity: Fidelity | None = None
    claims: list[Claim] = []
    # the scale `--scale recommended` runs the row's experiments at, repetitions kept (rows
    # without one are left out of such a run)
    recommended_scale: Annotated[float, number(0.0001, 1)] | None = None

    @model_validator(mode="after")
    def _claims_of_its_experiments(self) -> Row:
        Claims(claims=self.claims)  # ids unique within the row
        for c in self.claims:
            check(c.experiment in self.experiments,
                  f"claim {c.id!r} names experiment {c.experiment!r}, which the row does not "
                  f"run (it runs: {', '.join(self.experiments) or 'none'})")
        return self


class Study(Model):
    """A study file: the paper's rows in the paper's order."""

    study: Annotated[str, text(r"^\d{3}$", "004")]
    title: str
    rows: list[Row]


def names() -> list[str]:
    """The studies there are files for."""
    return sorted(p.stem for p in STUDIES_DIR.glob("*.yml"))


def load(study_id: str) -> Study:
    """The study file of that id (one sentence when there is none or it is malformed)."""
    path = STUDIES_DIR / f"{study_id}.yml"
    if not path.is_file():
        raise ConfigError(f"no study {study_id!r} (studies: {', '.join(names())})")
    return validate(Study, read_yaml(path, "study file"), str(path))


def only_rows(study: Study, ids: list[str] | None) -> Study:
    """The study with only the rows named (None: all of them), in the study file's order: a
    part of a long study, run on its own (`tierbench study ID --rows A,B`)."""
    if not ids:
        return study
    known = [r.id for r in study.rows]
    unknown = [i for i in ids if i not in known]
    if unknown:
        raise ConfigError(f"study {study.study} has no row {', '.join(unknown)} (its rows: "
                          f"{', '.join(known)})")
    return study.model_copy(update={"rows": [r for r in study.rows if r.id in ids]})


def part_words(study: Study, row_ids: list[str]) -> str:
    """Which rows a run of ``study`` holds: "every row", or "rows A, B" for a part."""
    return "every row" if row_ids == [r.id for r in study.rows] else \
        f"rows {', '.join(row_ids)}"


RECOMMENDED = "recommended"
Scale = float | str | None  # a factor, or RECOMMENDED: each row's own


def row_scale(row: Row, scale: Scale) -> tuple[float | None, bool]:
    """The factor a row's experiments run at, and whether their repetitions are kept (a
    recommended scale); ConfigError for a row --scale recommended leaves out."""
    if scale != RECOMMENDED:
        return (float(scale) if scale is not None else None), False
    if row.recommended_scale is None:
        raise ConfigError(f"{row.id} has no recommended scale: not in a --scale recommended run")
    return row.recommended_scale, True


def experiment(name: str, scale: float | None, where: Placer | None = None,
               precision: dict[str, Any] | None = None, *,
               keep_repetitions: bool = False) -> Experiment:
    """One of the study's experiments, scaled, to run on ``where`` (None: this host), with the
    warm pass where a recommended scale shortens it (Kind.with_warm_pass), with the
    command line's precision options (``precision``: Precision's keys, None values left out;
    an experiment of one mode is refused in one sentence: nothing to compare)."""
    exp = registry.with_scale(registry.load_experiment(name, placer=where), scale,
                              keep_repetitions=keep_repetitions)
    if keep_repetitions and scale is not None and scale < 1:  # a recommended, shortened scale
        exp = exp.impl.with_warm_pass(exp)
    return registry.with_precision(exp, **(precision or {}))


def plan_lines(study: Study, scale: Scale = None,
               where: Placer | None = None,
               precision: dict[str, Any] | None = None) -> list[str]:
    """Every experiment of the study with its points and time (a precision run's: the blocks
    it is expected to measure), and the total."""
    given = {k: v for k, v in (precision or {}).items() if v is not None}
    lines = [f"study {study.study}: {study.title}" + scale_words(scale)
             + (f", precision ±{given['half_width_pct']:g} %" if "half_width_pct" in given
                else "")]
    total = 0.0
    for row in study.rows:
        if not row.experiments:
            lines.append(f"  {row.id:<16} {row.figures:<22} documented only: nothing to run")
        for name in row.experiments:
            if scale == RECOMMENDED and row.recommended_scale is None:
                lines.append(f"  {row.id:<16} {row.figures:<22} {name}: left out (the row has "
                             "no recommended scale)")
                continue
            try:
                factor, keep = row_scale(row, scale)
                exp = experiment(name, factor, where, precision, keep_repetitions=keep)
                seconds = runner.estimate_s(exp)
                points = len(runner.points_of(exp))
            except TierbenchError as exc:
                lines.append(f"  {row.id:<16} {row.figures:<22} {name}: refused: {exc}")
                continue
            total += seconds
            lines.append(f"  {row.id:<16} {row.figures:<22} {name:<18} {points:>4} points  "
                         f"{seconds / 60:6.1f} min"
                         + (f"  at {factor:g}" if scale == RECOMMENDED else ""))
    lines.append(f"estimated duration: {total / 60:.1f} min ({total / 3600:.1f} h) of measuring, "
                 "plus bring-ups, file sets and seeds")
    return lines


def scale_words(scale: Scale) -> str:
    """How the plan's first line says the scale."""
    if scale == RECOMMENDED:
        return ", at each row's recommended scale (repetitions kept; rows without one left out)"
    return f", scaled by {float(scale):g}" if scale and scale != 1 else ""


def scale_text(scale: Scale) -> str:
    """A recorded scale in words: the factor, or `recommended` (each row its own)."""
    return str(scale) if isinstance(scale, str) else f"{scale or 1:g}"


def new_dir(study: Study) -> Path:
    """A fresh results/study-<id>/<run-id>/."""
    return fresh_run_dir(results_root() / f"study-{study.study}")


def run(study: Study, scale: Scale = None, resume: Path | None = None,
        where: Placer | None = None, precision: dict[str, Any] | None = None) -> Path:
    """Run every experiment of the study (on resume: those not complete) on ``where`` (None:
    this host); returns the study's
    folder. A refused or failed experiment is recorded and the next one runs; an interrupt
    ends the study (its record says where to resume). ``precision``: the command line's
    precision options, applied to every experiment (each run's budget is its own)."""
    precision = {k: v for k, v in (precision or {}).items() if v is not None}
    if resume is not None:
        folder = resume
        record = json.loads(read_text(folder / "study.json", "study record")) \
            if (folder / "study.json").is_file() else None
        if not record or record.get("study") != study.study:
            raise ConfigError(f"--resume {folder}: not a run of study {study.study}; give a "
                              f"results/study-{study.study}/<run-id> folder")
        if (record.get("scale") or 1) != (scale or 1):
            raise ConfigError(f"--resume {folder}: the study ran with --scale "
                              f"{scale_text(record.get('scale'))}; resume with the same")
        ran = [str(r.get("id")) for r in record.get("rows") or []]
        if ran != [r.id for r in study.rows]:
            words = part_words(load(study.study), ran)
            raise ConfigError(f"--resume {folder}: the study ran {words}; resume " + (
                "without --rows" if words == "every row" else f"with --rows {','.join(ran)}"))
        if (record.get("precision") or {}) != precision:
            raise ConfigError(f"--resume {folder}: the study ran with precision options "
                              f"{record.get('precision') or 'none'}; resume with the same")
    else:
        folder = new_dir(study)
        record = {"study": study.study, "title": study.title, "scale": scale or 1,
                  "precision": precision,
                  "started": now(), "finished": None, "status": "running",
                  "rows": [{"id": r.id, "figures": r.figures,
                            "fidelity": r.fidelity.model_dump() if r.fidelity else None,
                            "claims": [c.model_dump() for c in r.claims],
                            "experiments": [{"name": n, "status": "planned", "run": None}
                                            for n in r.experiments]} for r in study.rows]}
    save(folder, record)
    todo = [e for r in record["rows"] for e in r["experiments"] if e["status"] != "complete"]
    rows = {id(e): row for row, kept in zip(study.rows, record["rows"])
            for e in kept["experiments"]}  # the record's rows are the study file's, in order
    log(f"tierbench: study {study.study}: {len(todo)} experiment(s) to run; record in {folder}")
    try:
        for n, entry in enumerate(todo, 1):
            log(f"tierbench: study {study.study} [{n}/{len(todo)}]: {entry['name']}")
            run_one(entry, rows[id(entry)], scale, where, precision)
            save(folder, record)
        record["status"] = "complete"
    except runner.RunInterrupted as exc:
        record["status"] = f"interrupted by {exc}"
        raise
    finally:
        record["finished"] = now()
        save(folder, record)
        write_report(folder, study)
    return folder


def run_one(entry: dict[str, Any], row: Row, scale: Scale, where: Placer | None = None,
            precision: dict[str, Any] | None = None) -> None:
    """One experiment of a study (of ``row``), its outcome written into its entry."""
    previous = Path(entry["run"]) if entry.get("run") else None
    try:
        factor, keep = row_scale(row, scale)
        exp = experiment(entry["name"], factor, where, precision, keep_repetitions=keep)
        r = runner.Run(exp, previous if previous and previous.is_dir() else None)
        try:
            r.execute()
            entry["status"] = "complete"
            entry.pop("note", None)  # an earlier attempt's failure, now resumed past
        except runner.RunInterrupted:
            entry["status"] = "interrupted"
            raise
        finally:
            if r.dir is not None:
                entry["run"] = str(r.dir)
                if r.rows:
                    runner.write_report(r.dir)
    except runner.RunInterrupted:
        raise
    except TierbenchError as exc:
        entry["status"] = "failed" if entry.get("run") else "refused"
        entry["note"] = str(exc)
        log(f"tierbench: {entry['name']}: {entry['status']}: {exc}")


def now() -> str:
    """The time as the records write it."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def save(folder: Path, record: dict[str, Any]) -> None:
    """study.json, written atomically."""
    runner.write_json(folder / "study.json", record)


def claims_of(study: Study) -> dict[str, list[dict[str, Any]]]:
    """Each row's claims as the study file states them now (a study run's report evaluates
    these, so that claims added or corrected since apply to earlier runs too)."""
    return {r.id: [c.model_dump() for c in r.claims] for r in study.rows}


def write_report(folder: Path, study: Study | None = None) -> Path:
    """study.html and claims.csv of a study's folder (analysis.study), the claims of ``study``
    (None: those its record holds)."""
    from analysis import study as report  # pandas and matplotlib: loaded when needed

    return report.write_study_report(folder, claims_of(study) if study else None)


def claims_for(experiment_name: str) -> list[tuple[str, str, Claim]]:
    """Every study's claims checked on that experiment: (study, row, claim)."""
    return [(sid, r.id, c) for sid in names() for r in load(sid).rows for c in r.claims
            if c.experiment == experiment_name]


def scoreboards(folders: list[Path], as_experiment: str | None = None
                ) -> list[tuple[dict[str, str], list[dict[str, Any]]]]:
    """``tierbench claims``: the scoreboard of each folder, a run of an experiment (the claims
    on that experiment, or on ``as_experiment``'s: a run of another experiment with the same
    conditions, such as quick for dc-single) or a study's folder (the study file's claims), with
    what names the run (id, date, machine, scale)."""
    from analysis import claims as evaluation  # pandas: loaded when needed
    from analysis import study as report

    out = []
    for folder in folders:
        if (folder / "study.json").is_file():
            record = json.loads(read_text(folder / "study.json", "study record"))
            lines = report.scoreboard(record, folder,
                                      claims_of(load(str(record.get("study")))))
            runs = [report.run_of(e, folder) for r in record.get("rows") or []
                    for e in r.get("experiments") or []]
            first = next((r for r in runs if r is not None and (r / "manifest.json").is_file()),
                         None)
            facts = {"run": folder.name, "date": str(record.get("started") or "")[:10],
                     "machine": evaluation.run_facts(first)["machine"] if first else
                     "not recorded", "scale": scale_text(record.get("scale")),
                     "experiment": f"study {record.get('study')}",
                     "rows": part_words(load(str(record.get("study"))),
                                        [str(r.get("id")) for r in record.get("rows") or []])}
            out.append((facts, lines))
            continue
        if not (folder / "summary.csv").is_file():
            raise ConfigError(f"{folder}: not a run (no summary.csv) or a study's folder (no "
                              "study.json)")
        facts = evaluation.run_facts(folder)
        name = as_experiment or facts["experiment"]
        found = claims_for(name)
        if not found:
            raise ConfigError(f"{folder}: no study states claims on experiment {name!r}; give "
                              "--as EXPERIMENT for a run of another experiment")
        out.append((facts, evaluation.score((s, r, c, folder) for s, r, c in found)))
    return out
