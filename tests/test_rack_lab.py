"""Safe on a rack: what every tier opens on a 4-node lab cluster (markers ``stack`` and
``lab_full``: `make test-cluster` runs them; one lab for the module, `setup/lab.sh up 4` with the
Locust workers' role on node2, so that they reach the master on node1 from another node).
During a run of each tier that opens ports, every node's listening sockets are read in the
node's own network namespace (`ss -ltnup` in the node container, once a second), and every one
a tierbench container holds must be on that node's data-plane address (never 0.0.0.0, `*`,
loopback or another address of the node); the tier's own listeners must have been seen, and
those that admit whoever connects must be gone when the run has ended.

- OrangeFS: the metadata and I/O servers on node4 (TCPBindSpecific), removed after the run;
- the file server: glusterd and the brick on node2, the volume admitting only node1 (auth.allow
  read back from the running server);
- the net kind: iperf, iperf3 and sockperf receivers on node3, stopped after the run;
- Locust with workers on another node: the master on node1 only during the point, the workers
  on node2 connected to it there;
- the proxy and three web servers on their ports (Apache), and HAProxy.

The dynamic tiers (PHP-FPM and PostgreSQL, and their refusals of the nodes they do not admit)
are tests/test_cluster_lab.py's, which `make test` runs too."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from stack_env import Listeners, lab_cluster, lab_run, last_run, listening, nic_state, summary_rows

from tierbench.placement import model
from tierbench.placement.model import TAG

pytestmark = [pytest.mark.stack, pytest.mark.lab_full]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_cluster(tmp_path_factory, roles={"loadgen_workers": ["node2"]}) as lab:
        yield lab


def run_watched(lab: dict, experiment: str) -> tuple[Listeners, Path]:
    """`tierbench run EXPERIMENT --cluster` with every node's listeners read meanwhile; every
    tierbench listener seen must be on its node's data-plane address."""
    with Listeners(lab["cluster"]) as listeners:
        done = lab_run(lab, experiment)
    assert done.returncode == 0, done.stderr[-3000:]
    assert listeners.readings >= 5
    assert listeners.misplaced() == []
    run_dir = last_run(lab, experiment.removesuffix(".yml"))
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "complete"
    assert all(not r.get("error") for r in summary_rows(run_dir))
    return listeners, run_dir


def tierbench_ports(node: str) -> set[int]:
    """The ports tierbench's containers listen on on a node now."""
    return {s["port"] for s in listening(node) if s["tierbench"]}


def test_orangefs_servers_listen_on_their_nodes_address_only_during_the_run(lab) -> None:
    if subprocess.run(["docker", "image", "inspect", f"tierbench-orangefs:{TAG}"],
                      capture_output=True).returncode != 0:
        pytest.skip("the OrangeFS image is not built (it needs the OrangeFS source, which CI "
                    "does not have: make orangefs-image ORANGEFS_TARBALL=...)")
    listeners, _ = run_watched(lab, "pfs-short.yml")
    # the metadata server and both I/O servers (their own ports: 3334, 3335, 3336) on node4
    assert {("node4", 3334), ("node4", 3335), ("node4", 3336)} <= listeners.ports()
    assert ("node4", "pvfs2-server") in listeners.processes()
    # OrangeFS admits whoever connects: the cluster is gone when the run has ended
    assert tierbench_ports("node4") == set()
    assert nic_state(lab["cluster"]) == lab["before"]


def test_the_file_server_listens_on_its_nodes_address_and_admits_only_the_client(lab) -> None:
    listeners, _ = run_watched(lab, "rack-fs.yml")
    assert ("node2", 24007) in listeners.ports()
    assert {("node2", "glusterd"), ("node2", "glusterfsd")} <= listeners.processes()
    client = lab["cluster"].node("node1").interface().ip
    got = subprocess.run(["docker", "--context", "tierbench-node2", "exec",
                          f"{model.PROJECT}-fs-server-1", "gluster", "--mode=script", "volume", "get",
                          "share", "auth.allow"], capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert [ln.split()[-1] for ln in got.stdout.splitlines() if ln.startswith("auth.allow")] \
        == [client]
    assert nic_state(lab["cluster"]) == lab["before"]


def test_the_net_kinds_receivers_listen_on_their_nodes_address_only_during_the_run(lab) -> None:
    listeners, _ = run_watched(lab, "net-short.yml")
    # two receivers on node3, 1000 ports apart: iperf 2 from 5001, iperf3 from 5201, sockperf
    # from 11111
    ports = {p for node, p in listeners.ports() if node == "node3"}
    assert {5001, 5201, 11111, 6001, 6201, 12111} <= ports, sorted(ports)
    assert {("node3", "iperf"), ("node3", "iperf3"), ("node3", "sockperf")} <= \
        listeners.processes()
    assert tierbench_ports("node3") == set()  # stopped when the run ended
    assert nic_state(lab["cluster"]) == lab["before"]


def test_the_locust_master_listens_on_its_nodes_address_for_workers_on_another(lab) -> None:
    listeners, run_dir = run_watched(lab, "workers.yml")
    assert ("node1", 5557) in listeners.ports()  # the master, during the point
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["cluster"]["services"]["loadgen-worker"] == ["node2"]
    [row] = summary_rows(run_dir)
    assert float(row["tps"]) > 0 and row["workers"] == "2"
    assert 5557 not in tierbench_ports("node1")  # the master ends with its point
    assert nic_state(lab["cluster"]) == lab["before"]


def test_the_proxy_and_three_web_servers_listen_on_their_nodes_address(lab) -> None:
    listeners, _ = run_watched(lab, "rack-web.yml")
    assert {("node2", 80), ("node3", 8080), ("node3", 8081), ("node3", 8082)} <= \
        listeners.ports()
    assert {("node2", "apache2"), ("node3", "apache2")} <= listeners.processes()
    listeners, _ = run_watched(lab, "haproxy.yml")
    assert ("node2", 80) in listeners.ports() and ("node2", "haproxy") in listeners.processes()
    assert nic_state(lab["cluster"]) == lab["before"]
