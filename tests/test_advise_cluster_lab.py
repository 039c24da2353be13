"""The offload advisor on the lab cluster (markers ``stack`` and ``lab_full``: `make
test-cluster`): `tierbench advise --cluster` on a 2-node lab (`setup/lab.sh up 2`: node1 the
sender, node2 the receiver) for the bulk stream and request/response: the endpoints are the
nodes' eth0 (veths into the lab's bridge), the knobs those can change are tried and measured
there, coalescing, rings and header split are reported as not changeable, jumbo frames are
refused (the lab's bridge ports stay at 1500), the commands are ssh lines, and every node's
NIC is as before (ethtool -k/-c/-g/-l, MTU, qdisc: the lab fixture compares them)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from stack_env import lab_cluster, tierbench

pytestmark = [pytest.mark.stack, pytest.mark.lab_full]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_cluster(tmp_path_factory, size=2) as lab:
        yield lab


def test_the_advisor_measures_the_nodes_nics_and_restores_them(lab) -> None:
    # 2-s windows (the cluster's mechanics, not the design's windows): 8 first blocks of about
    # 11 modes at some 7 s a point, about 12 minutes a workload, and 8 blocks of its
    # confirmation, about 2 more
    done = tierbench(lab["env"], "advise", "--cluster", str(lab["path"]), "--budget-min", "40",
                     "--window-s", "2", "--workloads", "bulk-stream", "request-response",
                     timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    folder = sorted((lab["results"] / "advise").iterdir())[-1]
    record = json.loads((folder / "advise.json").read_text())
    assert record["status"] == "complete" and record["cluster"] == str(lab["path"])
    stream = record["workloads"][0]
    assert {e["label"] for e in stream["endpoints"]} == {"node1:eth0", "node2:eth0"}
    assert {e["node"] for e in stream["endpoints"]} == {"node1", "node2"}
    knobs = {k["knob"]: k for k in stream["knobs"]}
    for name in ("coalescing", "rings", "header-split", "lro"):
        assert not knobs[name]["changeable"], name
    # the lab's bridge ports stay at 1500: frames of 9000 set on both nodes do not pass (the
    # node image has ping: a missing one would say so instead)
    assert knobs["jumbo"]["why"].startswith("its trial failed: 9000-byte frames did not pass "
                                            "from node1 to node2"), knobs["jumbo"]["why"]
    assert knobs["tso"]["changeable"] and knobs["gro"]["changeable"]
    assert all(c.startswith("ssh ") for c in knobs["tso"]["commands"]["on"])
    assert all(t["restored"] for t in record["trials"])
    for entry in record["workloads"]:
        assert entry["status"] == "complete", entry["status"]
        run = json.loads((Path(entry["runs"]["knobs"]) / "manifest.json").read_text())
        assert all(p["restored"] and p["mode_verified"] for p in run["points"].values())
    # one configuration: confirmed with its persistent forms, or the current one kept
    config = json.loads((folder / "config.json").read_text())
    forms = {d.name for d in (folder / "persist").iterdir()}
    if config["confirmed"]:
        assert {"confirmed-client-side", "confirmed-server-side"} <= forms, forms
        rounds = record["confirmation"]["rounds"]
        assert rounds and all(w["blocks"] >= 8 for w in rounds[-1]["workloads"].values())
    else:
        assert "kept" in forms and config["status"].startswith("nothing to confirm"), forms
    with (folder / "advice.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    measured = [r for r in rows if r["row"] == "knob" and r["recommendation"] not in
                ("cannot change",)]
    assert {r["workload"] for r in measured} == {"bulk-stream", "request-response"}
    assert all(r["throughput_low_pct"] and r["recommendation"] for r in measured)
