"""--profile categories on the lab cluster (markers ``stack`` and ``lab_full``: `make
test-cluster`; issue 43: "a point's categories come per node and per tier"): the stack test's
two modes with `tierbench run --cluster` on a 3-node lab (`setup/lab.sh up 3`: node1 the load
generator, node2 the proxy, node3 the web tier). perf records on each of those nodes, perf
script runs there and its text comes back; every point's categories.csv has each tier on its
own node, and nothing of perf is left on the nodes."""

from __future__ import annotations

import csv
import json

import pytest
from stack_env import lab_cluster, lab_run, last_run, summary_rows

from tierbench.measure import profile
from tierbench.placement import nodes

pytestmark = [pytest.mark.stack, pytest.mark.lab_full]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_cluster(tmp_path_factory, size=3) as lab:
        yield lab


def test_a_points_categories_come_per_node_and_per_tier(lab) -> None:
    done = lab_run(lab, "two-modes.yml", "--profile", "categories")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "two-modes")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["profile"] == "categories"
    where = {"loadgen": "node1", "proxy": "node2", "web": "node3"}
    for row in summary_rows(run_dir):
        assert not row["error"] and not row.get("cat_note"), row
        assert row["cat_nodes"] == "node1 node2 node3"
        assert int(row["cat_tiers_samples"]) > 200
        assert float(row["cat_uncategorized_pct"]) < 5
        with (run_dir / "points" / row["point"] / profile.CATEGORIES_FILE).open() as fh:
            rows = list(csv.DictReader(fh))
        per: dict[tuple[str, str], int] = {}
        for r in rows:
            per[(r["node"], r["tier"])] = per.get((r["node"], r["tier"]), 0) + int(r["samples"])
        mine = {key for key in per if key[1] != profile.OTHERS}
        assert mine == {(node, tier) for tier, node in where.items()}, per
        assert all(per[(node, tier)] > 20 for tier, node in where.items()), per
        assert {r["category"] for r in rows if r["tier"] == "web"} & {"data copy", "TCP/IP"}
    for name in where.values():  # perf's private folders were removed on every node
        left = nodes.run_on_node(lab["cluster"].node(name), "ls /tmp/*/perf.data 2>/dev/null; "
                                 "true", timeout=30).stdout
        assert left.strip() == "", (name, left)
