"""The shipped example run (`make example`): a run of `quick` copied into examples/quick/,
trimmed so that the repository stays small while the report, the notebooks and the analysis
work on it unchanged: the interface snapshots keep only the features whose values the run's
modes changed, the load generator's warm-up output and the traces are left out, and the report
is not copied (`make report-example` writes it). The manifest says so under `trimmed`.

A study's run (`--study results/study-ID/<run-id>`) is shipped the same way, smaller: its
record (study.json, each experiment's run named relative to it) and, per experiment, what its
scoreboard reads (summary.csv, experiment.yml and manifest.json without the
per-point interface snapshots), in examples/studies/study-ID/<run-id>/, replacing the copies of that study holding
any of its rows (a part run with --rows leaves the other parts' copies): `tierbench claims` on it prints docs/fidelity.md's scoreboard lines, and the
tests check that each line there is what it prints.

Usage: python -m tierbench.example [RUN_DIR]   (default: the newest run of quick in the results)
       python -m tierbench.example --study STUDY_DIR [--rows ID,ID]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from analysis.study import run_of
from tierbench import space
from tierbench.config.errors import ConfigError
from tierbench.config.files import ROOT, results_root
from tierbench.modes.apply import SNAPSHOT_KEYS

EXAMPLES = ROOT / "examples" / "quick"
STUDIES = ROOT / "examples" / "studies"
STUDY_FILES = ("summary.csv", "experiment.yml")  # and manifest.json, trimmed
LEFT_OUT = ("traces", "report.html", "wrk-warmup.json", "wrk-warmup.txt")


def _snapshots(record: Any) -> list[dict]:
    """Every {"features": {...}} dict under a record's interface snapshot keys."""
    found: list[dict] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if isinstance(value.get("features"), dict):
                found.append(value)
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    if isinstance(record, dict):
        for key, value in record.items():
            if key.startswith(SNAPSHOT_KEYS):
                walk(value)
    return found


def changed_features(records: list[dict]) -> set[str]:
    """The features that take more than one value over the snapshots of the records: the ones
    the modes set."""
    seen: dict[str, set[str]] = {}
    for record in records:
        for snap in _snapshots(record):
            for name, value in snap["features"].items():
                seen.setdefault(name, set()).add(str(value))
    return {name for name, values in seen.items() if len(values) > 1}


def trim(record: dict, keep: set[str]) -> dict:
    """The record with every snapshot's features cut to `keep` (in place; returned)."""
    for snap in _snapshots(record):
        snap["features"] = {k: v for k, v in snap["features"].items() if k in keep}
    return record


def record(run: Path, dest: Path = EXAMPLES) -> Path:
    """Copy `run` into `dest`/<run id>, trimmed, replacing what `dest` held; the new folder."""
    manifest = json.loads((run / "manifest.json").read_text())
    points = sorted((run / "points").glob("*/point.json"))
    records = [json.loads(p.read_text()) for p in points]
    keep = changed_features(records + list((manifest.get("points") or {}).values()))
    room_for(sum(p.stat().st_size for p in run.rglob("*") if p.is_file()), dest)
    if dest.exists():
        shutil.rmtree(dest)
    out = dest / run.name
    shutil.copytree(run, out, ignore=shutil.ignore_patterns(*LEFT_OUT))
    for path, rec in zip(points, records):
        target = out / path.relative_to(run)
        target.write_text(json.dumps(trim(rec, keep), indent=2) + "\n")
    for rec in (manifest.get("points") or {}).values():
        trim(rec, keep)
    manifest["trimmed"] = (
        "example copy (python -m tierbench.example): interface snapshots cut to the features the "
        f"modes changed ({', '.join(sorted(keep))}); the load generator's warm-up output, the "
        "traces and the report left out")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return out


def room_for(nbytes: int, dest: Path) -> None:
    """ConfigError (one sentence) when ``dest``'s disk has not ``nbytes`` free for a copy."""
    need = space.on_disk("the example copy", nbytes, dest, "the repository's folder",
                         "free space on that disk")
    for problem in space.problems([need]):
        raise ConfigError(problem)


FINISHED = ("complete", "refused")  # an experiment's states a shipped row may hold


def finished_rows(record: dict[str, Any], rows: list[str]) -> dict[str, Any]:
    """The study record cut to ``rows``, each of them finished (every experiment complete, or
    refused by design), with a note saying which rows the run held: a run stopped before its
    last rows ships those it finished. ConfigError for a row it lacks or did not finish."""
    held = {str(r.get("id")): r for r in record.get("rows") or []}
    for row in rows:
        if row not in held:
            raise ConfigError(f"the run has no row {row} (its rows: {', '.join(held)})")
        left = [f"{e.get('name')} {e.get('status')}" for e in held[row].get("experiments") or []
                if e.get("status") not in FINISHED]
        if left:
            raise ConfigError(f"row {row} is not finished in this run ({', '.join(left)})")
    cut = dict(record, rows=[r for r in record.get("rows") or [] if str(r.get("id")) in rows])
    cut["shipped"] = (f"rows {', '.join(rows)} of the run's {', '.join(held)}: the rows it "
                      f"finished (its status: {record.get('status')})")
    return cut


def record_study(folder: Path, dest: Path = STUDIES, rows: list[str] | None = None) -> Path:
    """Copy the study run ``folder`` (results/study-ID/<run-id>) into
    ``dest``/study-ID/<run-id> as the module's docstring says, replacing the study's earlier
    copies that hold any of its rows (a part, `tierbench study --rows`, leaves the copies of
    the other parts); ``rows``: only those rows, each finished (:func:`finished_rows`); the new
    folder."""
    record = json.loads((folder / "study.json").read_text(encoding="utf-8"))
    if rows:
        record = finished_rows(record, rows)
    copies: list[tuple[dict[str, Any], Path]] = []
    for row in record.get("rows") or []:
        for entry in row.get("experiments") or []:
            run = run_of(entry, folder)
            if run is not None and all((run / f).is_file()
                                       for f in ("summary.csv", "manifest.json")):
                copies.append((entry, run))
            elif entry.get("run"):
                entry["note"] = ((entry.get("note") or "") + " (its run folder was not found "
                                 "when the example was recorded)").strip()
                entry["run"] = None
    room_for(sum((r / f).stat().st_size for _, r in copies for f in (*STUDY_FILES,
                                                                       "manifest.json")
                 if (r / f).is_file()), dest)
    home = dest / f"study-{record.get('study')}"
    for earlier in overlapping(home, {str(r.get("id")) for r in record.get("rows") or []}):
        shutil.rmtree(earlier)
    out = home / folder.name
    for entry, run in copies:
        target = out / str(entry["name"]) / run.name
        target.mkdir(parents=True)
        for name in STUDY_FILES:
            if (run / name).is_file():
                shutil.copy2(run / name, target / name)
        manifest = json.loads((run / "manifest.json").read_text(encoding="utf-8"))
        points = len(manifest.pop("points", None) or {})
        manifest["trimmed"] = (f"study example copy (python -m tierbench.example --study): the "
                               f"per-point records ({points} points), their interface "
                               "snapshots, samples and report left out")
        (target / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        entry["run"] = f"{entry['name']}/{run.name}"
    (out / "study.json").write_text(json.dumps(record, indent=2) + "\n")
    return out


def overlapping(home: Path, rows: set[str]) -> list[Path]:
    """The copies in ``home`` (a study's folder of copies) holding any of ``rows`` (a copy
    whose record cannot be read counts as holding them all)."""
    out = []
    for copy in sorted(home.iterdir()) if home.is_dir() else []:
        try:
            held = {str(r.get("id")) for r in json.loads(
                (copy / "study.json").read_text(encoding="utf-8")).get("rows") or []}
        except (OSError, ValueError, AttributeError):
            held = rows
        if held & rows:
            out.append(copy)
    return out


def newest_run(experiment: str = "quick") -> Path:
    """The newest run of `experiment` in the results folder."""
    runs = sorted(p for p in (results_root() / experiment).glob("*/summary.csv"))
    if not runs:
        raise FileNotFoundError(f"no run of {experiment} in {results_root()}: run make run first")
    return runs[-1].parent


def main(argv: list[str] | None = None) -> int:
    """Record the example from a run folder (default: the newest run of quick)."""
    ap = argparse.ArgumentParser(prog="python -m tierbench.example", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", nargs="?", type=Path, help="a results/quick/<run-id> folder")
    ap.add_argument("--study", type=Path, metavar="STUDY_DIR",
                    help="ship a study's run (results/study-ID/<run-id>) instead")
    ap.add_argument("--rows", metavar="ID[,ID]", help="with --study: only these rows, each "
                    "finished (a run stopped before its last rows ships those it finished)")
    args = ap.parse_args(argv)
    if args.study is not None:
        if not (args.study / "study.json").is_file():
            print(f"example: {args.study} is not a study's folder (no study.json)",
                  file=sys.stderr)
            return 2
        try:
            out = record_study(args.study, rows=[r.strip() for r in (args.rows or "").split(
                ",") if r.strip()] or None)
        except (ConfigError, OSError, ValueError) as exc:  # ValueError: a JSON file cut short
            print(f"example: {args.study}: {exc}", file=sys.stderr)
            return 2
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        print(f"example: {out.relative_to(ROOT)} ({size / 1e6:.2f} MB) from {args.study}")
        return 0
    try:
        run = args.run or newest_run()
    except FileNotFoundError as exc:
        print(f"example: {exc}", file=sys.stderr)
        return 2
    if not (run / "summary.csv").is_file() or not (run / "manifest.json").is_file():
        print(f"example: {run} is not a run folder (no summary.csv and manifest.json)",
              file=sys.stderr)
        return 2
    out = record(run)
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    print(f"example: {out.relative_to(ROOT)} ({size / 1e6:.1f} MB) from {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
