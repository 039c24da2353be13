"""The shipped example run (`make example`): a run of `quick` copied into examples/quick/,
trimmed so that the repository stays small while the report, the notebooks and the analysis
work on it unchanged: the interface snapshots keep only the features whose values the run's
modes changed, the load generator's warm-up output and the traces are left out, and the report
is not copied (`make report-example` writes it). The manifest says so under `trimmed`.

Usage: python -m tierbench.example [RUN_DIR]   (default: the newest run of quick in the results)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from tierbench.config.files import ROOT, results_root

EXAMPLES = ROOT / "examples" / "quick"
LEFT_OUT = ("traces", "report.html", "wrk-warmup.json", "wrk-warmup.txt")
SNAPSHOT_KEYS = ("interfaces_", "mode_state_")


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
    args = ap.parse_args(argv)
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
