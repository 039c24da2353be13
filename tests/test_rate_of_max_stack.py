"""load.rate_of_max on the real stack: each mode's maximum measured once by a closed loop (in
the first point of that mode), recorded in the run's max_rate.json and in every row, and each
point offered half of its own mode's maximum.

Needs root, Docker with Compose v2 and the images (`make test` provides them)."""

import csv
import json
from pathlib import Path

import pytest
from stack_env import cli_env, tierbench

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENT = ROOT / "tests" / "data" / "experiments" / "rate-of-max-short.yml"


def test_each_mode_offers_half_of_its_own_measured_maximum(tmp_path: Path) -> None:
    with cli_env(tmp_path) as env:
        done = tierbench(env, "run", str(EXPERIMENT), timeout=420)
        assert done.returncode == 0, done.stderr[-3000:]
        run = next((Path(env["TIERBENCH_RESULTS"]) / "rate-of-max-short").iterdir())
    rows = list(csv.DictReader((run / "summary.csv").open()))
    assert len(rows) == 4 and all(r["error"] == "" for r in rows), rows
    kept = json.loads((run / "max_rate.json").read_text())
    assert len(kept) == 2  # one maximum per mode, the repetitions reuse it
    by_mode = {json.loads(k)["mode"]: e for k, e in kept.items()}
    for r in rows:
        entry = by_mode[r["mode"]]
        assert float(r["rate_of_max"]) == 0.5 and entry["tps"] > 0
        assert float(r["max_rate"]) == pytest.approx(entry["tps"], abs=0.01)
        assert float(r["target_rate"]) == pytest.approx(0.5 * entry["tps"], abs=0.01)
        point = json.loads((run / "points" / r["point"] / "point.json").read_text())
        assert point["max_rate"]["reused"] == (r["point"] != entry["point"])
    for entry in by_mode.values():  # the closed loop's own files, in its point's max/
        assert (run / "points" / entry["point"] / "max" / "requests.parquet").is_file()
