"""Locust distributed workers on the real stack: a master in the loadgen container and two
worker containers (compose/loadgen-workers.yml), one short point through `tierbench run`.

Needs root, Docker with Compose v2 and the images (`make test` provides them)."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from workloads import traces

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
TIERBENCH = [sys.executable, "-m", "tierbench.cli"]
EXPERIMENT = ROOT / "tests" / "data" / "experiments" / "workers.yml"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of the workers experiment; the stack is removed afterwards."""
    if os.geteuid() != 0:
        pytest.fail("the stack tests need root: run `make test` as root")
    base = tmp_path_factory.mktemp("workers")
    env = dict(os.environ, TIERBENCH_RESULTS=str(base / "results"),
               TIERBENCH_STATE_DIR=str(base / "state"))
    try:
        done = subprocess.run([*TIERBENCH, "run", str(EXPERIMENT)], env=env, cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        yield next((base / "results" / "workers").iterdir())
    finally:
        subprocess.run([*TIERBENCH, "clean"], env=env, cwd=ROOT, capture_output=True,
                       timeout=300)


def rows(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_merged_log_holds_both_workers_client_subsets(run: Path) -> None:
    point = run / "points" / "p001"
    paths, subset = traces.read_with_subset(run / "traces" / "subsets.txt")
    # worker index k runs clients k and k + 2 (users interleaved over 2 workers)
    mine = {k: {p for c in (k, k + 2) for p in traces.client_sequence(paths, subset, c, 4)}
            for k in (0, 1)}
    # the workers' CSV logs became one Parquet file with a worker column, and are gone
    assert not list(point.glob("requests*.csv"))
    records = pq.read_table(point / "requests.parquet").to_pylist()
    logs = {k: [r for r in records if r["worker"] == k] for k in (0, 1)}
    assert len(logs[0]) + len(logs[1]) == len(records)
    for k in (0, 1):
        assert len(logs[k]) > 100, f"worker {k} logged {len(logs[k])} requests"
        seen = {r["path"] for r in logs[k]}
        assert seen <= mine[k], f"worker {k} sent paths outside its clients' subsets"
        only_mine = mine[k] - mine[1 - k]
        assert seen & only_mine, f"worker {k} never sent a path only its clients have"
    assert all(r["status"] == 200 for r in records)


def test_generator_cpu_is_the_master_and_both_worker_containers(run: Path) -> None:
    point = run / "points" / "p001"
    samples = [json.loads(line) for line in (point / "samples.jsonl").read_text().splitlines()]
    first, last = samples[0], samples[-1]
    parts = last["cpu"]["loadgen"]["parts"]
    assert sorted(parts) == ["loadgen", "loadgen-worker-1", "loadgen-worker-2"]
    used = {k: parts[k] - first["cpu"]["loadgen"]["parts"][k] for k in parts}
    # the workers make the load: each used CPU; the sum is what the generator is charged
    assert used["loadgen-worker-1"] > 0.2 and used["loadgen-worker-2"] > 0.2, used
    total = last["cpu"]["loadgen"]["usage_s"] - first["cpu"]["loadgen"]["usage_s"]
    assert total == pytest.approx(sum(used.values()), rel=1e-6)
    row = rows(run / "summary.csv")[0]
    assert not row["error"], row["error"]
    assert float(row["tps"]) > 50
    assert row["workers"] == "2" and row["remote_workers"] == "0"
    # both workers on the loadgen's core (WORKER_CPUS default 0): a one-core allowance
    assert float(row["generator_allowance_cores"]) == 1.0
    pct = 100 * float(row["cpu_s_loadgen"]) / float(row["window_s"])
    assert float(row["generator_cpu_pct"]) == pytest.approx(pct, rel=0.01)
