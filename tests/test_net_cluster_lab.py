"""net.profile on the lab cluster (marker ``stack`` and ``lab_full``: `make test-cluster`): a
shortened NET-txprofile with `tierbench run --cluster` on a 2-node lab (`setup/lab.sh up 2`:
node1 the sender, node2 the receiver). perf records on node1 on the sender's CPUs, perf script
and perf report run there, and their text comes back into the point's folder: the profile names
the kernel's TCP transmit functions, as on one host, and the NICs are as before."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest
from stack_env import TIERBENCH, lab_containers, require_free_lab

from tierbench.placement import nodes

pytestmark = [pytest.mark.stack, pytest.mark.lab_full]

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "setup" / "lab.sh"
DATA = ROOT / "tests" / "data" / "experiments"
CLUSTER = ROOT / "lab" / "cluster.yml"


def sh(*argv: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, **kw)


def nic_state(cluster: nodes.Cluster) -> dict[str, str]:
    script = "ethtool -k eth0; ip -o link show dev eth0 | grep -o 'mtu [0-9]*'"
    return {n.name: nodes.run_on_node(n, script, timeout=30).stdout for n in cluster.nodes}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_free_lab()
    results = tmp_path_factory.mktemp("results")
    env = {**os.environ, "LAB_IMAGES": "none", "TIERBENCH_RESULTS": str(results),
           "TIERBENCH_STATE_DIR": str(tmp_path_factory.mktemp("state"))}
    env.pop("TIERBENCH_CLUSTER", None)
    try:
        up = sh(str(LAB), "up", "2", env=env, timeout=900)
        assert up.returncode == 0, up.stderr[-3000:]
        cluster = nodes.load_cluster(CLUSTER)
        before = nic_state(cluster)
        yield {"env": env, "cluster": cluster, "before": before, "results": results}
        assert nic_state(cluster) == before
    finally:
        clean = sh(*TIERBENCH, "clean", "--cluster", str(CLUSTER), env=env, timeout=300)
        down = sh(str(LAB), "down", timeout=300)
        assert down.returncode == 0, down.stderr
        assert lab_containers() == []
        assert clean.returncode == 0, clean.stderr


def test_the_senders_profile_is_taken_on_their_node(lab) -> None:
    done = sh(*TIERBENCH, "run", str(DATA / "net-txprofile-short.yml"), "--cluster",
              str(CLUSTER), env=lab["env"], timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = sorted((lab["results"] / "net-txprofile-short").iterdir())[-1]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["cluster"]["services"] == {"net-server": ["node2"], "net-client": ["node1"]}
    (pid, point), = manifest["points"].items()
    prof = point["profile"]
    assert prof["node"] == "node1" and prof["event"] == "cpu-clock" and prof["cpus"]
    assert point["mode_verified"] and point["restored"]
    assert manifest["tools"]["perf"].startswith("perf version")
    (row,) = list(csv.DictReader((run_dir / "summary.csv").open()))
    assert not row["error"] and float(row["mbit_per_s"]) > 0
    assert int(row["prof_samples"]) > 500
    assert float(row["prof_write_pct"]) > 0 and float(row["prof_tcp_output_pct"]) > 0
    script = (run_dir / "points" / pid / "perf-script.txt").read_text()
    report = (run_dir / "points" / pid / "perf-report.txt").read_text()
    for name in ("tcp_sendmsg", "tcp_write_xmit"):
        assert name in script and name in report, name
    assert "iperf3" in script
    # perf.data stayed on the node and was removed there
    left = nodes.run_on_node(lab["cluster"].node("node1"),
                             "ls /var/lib/tierbench/perf 2>/dev/null; true", timeout=30).stdout
    assert left.strip() == ""
