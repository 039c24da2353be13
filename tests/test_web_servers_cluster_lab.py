"""stack.web_servers: 3 on the lab cluster (markers ``stack`` and ``lab_full``: `make
test-cluster`): a 4-node lab (`setup/lab.sh up 4`) whose cluster file lists two web nodes
(`web: [node3, node4]`): web and web3 on node3 (ports 8080 and 8082), web2 on node4 (8081), the
proxy on node2 balancing over the three at their nodes' addresses, the load generator on node1.
With the docroot a volume and a tmpfs on each server's node, offloads on and off: every server
answers (its access log and its CPU grow), the modes are verified and restored on every node,
and the NICs are as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stack_env import lab_cluster, lab_run, last_run, summary_rows

from tierbench.placement import nodes

pytestmark = [pytest.mark.stack, pytest.mark.lab_full]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_cluster(tmp_path_factory, roles={"web": ["node3", "node4"]}) as lab:
        yield lab


def samples(point_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (point_dir / "samples.jsonl").read_text().splitlines()
            if line.strip()]


def test_three_web_servers_behind_the_proxy_on_two_web_nodes(lab) -> None:
    done = lab_run(lab, "web-servers-short.yml", timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "web-servers-short")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    services = manifest["cluster"]["services"]
    assert {s: services[s] for s in ("web", "web2", "web3", "proxy", "loadgen", "fileset")} == {
        "web": ["node3"], "web2": ["node4"], "web3": ["node3"], "proxy": ["node2"],
        "loadgen": ["node1"], "fileset": ["node3", "node4"]}
    rows = summary_rows(run_dir)
    assert sorted((r["docroot"], r["mode"]) for r in rows) == [
        ("disk", "offloads-off"), ("disk", "offloads-on"), ("tmpfs", "offloads-off"),
        ("tmpfs", "offloads-on")]
    for row in rows:
        assert not row["error"] and float(row["tps"]) > 0, row
    for pid, point in manifest["points"].items():
        assert point["mode_verified"] and point["restored"], pid
        assert set(point["endpoints"]) == {"node1:eth0", "node2:eth0", "node3:eth0",
                                           "node4:eth0"}, pid
        # every server's CPU grew over the point (the web tier's parts, sampled on its node)
        got = samples(run_dir / "points" / pid)
        first, last = got[0]["cpu"]["web"]["parts"], got[-1]["cpu"]["web"]["parts"]
        for server in ("web", "web2", "web3"):
            assert last[server] - first[server] > 0.01, (pid, server, first, last)
    # every server's own access log has requests, on its node
    for server, node in (("web", "node3"), ("web2", "node4"), ("web3", "node3")):
        n = lab["cluster"].node(node)
        ids = nodes.run_docker(n, "ps", "-q", "--filter",
                               f"label=com.docker.compose.service={server}").stdout.split()
        assert len(ids) == 1, (server, ids)
        lines = nodes.run_docker(n, "exec", ids[0], "wc", "-l",
                                 "/var/log/apache2/access.log").stdout.split()[0]
        assert int(lines) > 100, (server, lines)
