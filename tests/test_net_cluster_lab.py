"""net.profile on the lab cluster (marker ``stack`` and ``lab_full``: `make test-cluster`): a
shortened NET-txprofile with `tierbench run --cluster` on a 2-node lab (`setup/lab.sh up 2`:
node1 the sender, node2 the receiver). perf records on node1 on the sender's CPUs, perf script
and perf report run there, and their text comes back into the point's folder: the profile names
the kernel's TCP transmit functions, as on one host, and the NICs are as before."""

from __future__ import annotations

import json

import pytest
from stack_env import lab_cluster, lab_run, last_run, summary_rows

from tierbench.placement import model, nodes

pytestmark = [pytest.mark.stack, pytest.mark.lab_full]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_cluster(tmp_path_factory, size=2) as lab:
        yield lab


def test_the_senders_profile_is_taken_on_their_node(lab) -> None:
    done = lab_run(lab, "net-txprofile-short.yml")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "net-txprofile-short")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["cluster"]["services"] == {"net-server": ["node2"], "net-client": ["node1"]}
    (pid, point), = manifest["points"].items()
    prof = point["profile"]
    assert prof["node"] == "node1" and prof["event"] == "cpu-clock" and prof["cpus"]
    assert point["mode_verified"] and point["restored"]
    assert manifest["tools"]["perf"].startswith("perf version")
    (row,) = summary_rows(run_dir)
    assert not row["error"] and float(row["mbit_per_s"]) > 0
    assert int(row["prof_samples"]) > 500
    assert float(row["prof_write_pct"]) > 0 and float(row["prof_tcp_output_pct"]) > 0
    script = (run_dir / "points" / pid / "perf-script.txt").read_text()
    report = (run_dir / "points" / pid / "perf-report.txt").read_text()
    for name in ("tcp_sendmsg", "tcp_write_xmit"):
        assert name in script and name in report, name
    assert "iperf3" in script
    # perf.data stayed on the node, in this checkout's folder there, and was removed there
    left = nodes.run_on_node(lab["cluster"].node("node1"),
                             f"ls {lab['cluster'].workdir}/{model.PROJECT}/perf 2>/dev/null; true",
                             timeout=30).stdout
    assert left.strip() == ""
