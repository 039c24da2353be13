"""The network kind for real, through `tierbench run`: bulk TCP over 2 receivers with offloads on
and off (connections counted, throughput and CPU per side, the interfaces restored), and
sockperf latency by message size. Needs root, Docker with Compose v2 and tierbench-net
(`make images`); run under the Docker lock like the other stack tests."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "tests" / "data" / "experiments"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    if os.geteuid() != 0:
        pytest.fail("the stack tests need root: run `make test` as root")
    return {**os.environ, "TIERBENCH_RESULTS": str(tmp_path_factory.mktemp("net-results"))}


def tierbench(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tierbench.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def rows_of(env: dict[str, str], name: str) -> tuple[Path, list[dict]]:
    run = next((Path(env["TIERBENCH_RESULTS"]) / name).iterdir())
    with (run / "summary.csv").open(newline="") as fh:
        return run, list(csv.DictReader(fh))


def test_bulk_tcp_over_two_receivers_with_offloads_on_and_off(env: dict[str, str]) -> None:
    done = tierbench(env, "run", str(EXPERIMENTS / "net-short.yml"))
    assert done.returncode == 0, done.stderr[-3000:]
    run, rows = rows_of(env, "net-short")
    by_mode = {r["mode"]: r for r in rows}
    assert set(by_mode) == {"offloads-on", "offloads-off"}
    for r in rows:
        assert r["error"] == "", r
        assert int(r["connections_established"]) == 4 and int(r["sender_processes"]) == 4
        assert float(r["mbit_per_s"]) > 100
        assert float(r["mbit_per_s"]) == pytest.approx(8 * float(r["mb_per_s"]), rel=1e-3)
        assert float(r["cpu_s_net-client"]) > 0 and float(r["cpu_s_servers"]) > 0
        assert float(r["server_cpu_us_per_kb"]) > 0
    # segmentation and receive offloads cut the CPU per KB moved
    assert float(by_mode["offloads-on"]["host_cpu_us_per_kb"]) < \
        float(by_mode["offloads-off"]["host_cpu_us_per_kb"])
    manifest = json.loads((run / "manifest.json").read_text())
    for record in manifest["points"].values():
        assert record["mode_verified"] and record["restored"]
        assert record["interfaces_after"] == record["interfaces_before"]
    # every iperf process's raw CSV is kept
    assert len(list((run / "points" / "p001").glob("iperf-*.csv"))) == 4
    assert "Measured here: throughput" in (run / "report.html").read_text()


def test_latency_by_message_size(env: dict[str, str]) -> None:
    done = tierbench(env, "run", str(EXPERIMENTS / "net-latency-short.yml"))
    assert done.returncode == 0, done.stderr[-3000:]
    _, rows = rows_of(env, "net-latency-short")
    assert sorted(int(r["message_size"]) for r in rows) == [14, 4096]
    for r in rows:
        assert r["error"] == "", r
        assert 0 < float(r["p50_us"]) <= float(r["p99_us"]) < 100_000
        assert float(r["messages_per_s"]) > 100
    assert tierbench(env, "clean").returncode == 0
