"""stack.web_servers: 3 on the lab cluster (markers ``stack`` and ``lab_full``: `make
test-cluster`): a 4-node lab (`setup/lab.sh up 4`) whose cluster file lists two web nodes
(`web: [node3, node4]`): web and web3 on node3 (ports 8080 and 8082), web2 on node4 (8081), the
proxy on node2 balancing over the three at their nodes' addresses, the load generator on node1.
With the docroot a volume and a tmpfs on each server's node, offloads on and off: every server
answers (its access log and its CPU grow), the modes are verified and restored on every node,
and the NICs are as before."""

from __future__ import annotations

import csv
import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml
from stack_env import TIERBENCH, lab_containers, require_free_lab

from tierbench.placement import nodes

pytestmark = [pytest.mark.stack, pytest.mark.lab_full]

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "setup" / "lab.sh"
DATA = ROOT / "tests" / "data" / "experiments"
LAB_CLUSTER = ROOT / "lab" / "cluster.yml"


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
    # the lab's cluster file with two web nodes, beside it (its ssh_config is relative)
    path = LAB_CLUSTER.with_name("cluster-web2.yml")
    try:
        up = sh(str(LAB), "up", "4", env=env, timeout=900)
        assert up.returncode == 0, up.stderr[-3000:]
        data = yaml.safe_load(LAB_CLUSTER.read_text())
        data["roles"]["web"] = ["node3", "node4"]
        path.write_text(yaml.safe_dump(data))
        cluster = nodes.load_cluster(path)
        before = nic_state(cluster)
        yield {"env": env, "cluster": cluster, "path": path, "before": before,
               "results": results}
        assert nic_state(cluster) == before
    finally:
        clean = sh(*TIERBENCH, "clean", "--cluster", str(path), env=env, timeout=300)
        down = sh(str(LAB), "down", timeout=300)
        path.unlink(missing_ok=True)
        assert down.returncode == 0, down.stderr
        assert lab_containers() == []
        assert clean.returncode == 0, clean.stderr


def samples(point_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (point_dir / "samples.jsonl").read_text().splitlines()
            if line.strip()]


def test_three_web_servers_behind_the_proxy_on_two_web_nodes(lab) -> None:
    done = sh(*TIERBENCH, "run", str(DATA / "web-servers-short.yml"), "--cluster",
              str(lab["path"]), env=lab["env"], timeout=1200, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = sorted((lab["results"] / "web-servers-short").iterdir())[-1]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    services = manifest["cluster"]["services"]
    assert {s: services[s] for s in ("web", "web2", "web3", "proxy", "loadgen", "fileset")} == {
        "web": ["node3"], "web2": ["node4"], "web3": ["node3"], "proxy": ["node2"],
        "loadgen": ["node1"], "fileset": ["node3", "node4"]}
    rows = list(csv.DictReader((run_dir / "summary.csv").open()))
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
