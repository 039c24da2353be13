"""The default experiment on the lab (markers ``stack`` and ``lab_full``: `make test-cluster`
runs it; one 4-node lab for the module, `setup/lab.sh up 4`): `tierbench run quick --cluster`
end to end, all 24 points complete, every mode verified and restored. Lab nodes are containers
whose /proc/sys is read-only, and a node's tiers share its namespace, so quick's `+tcp-cubic` goes
on the routes between the run's nodes (tierbench/modes/congctl.py): while the run goes, every
node is read once a second in its own namespace (`docker exec` in the node container: the
default `net.ipv4.tcp_congestion_control`, `ip route show`, `ss -ti`), and every TCP connection
between two nodes of the run uses CUBIC while the node's default never changes and the
controller's SSH connection keeps it; afterwards every node's routes are as before. A mode whose
sysctl a read-only /proc/sys cannot take is refused before anything starts, in one sentence
naming the mode and the nodes."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
from netns_lab import ss_algorithms
from stack_env import Listeners, lab_cluster, lab_containers, lab_run, last_run, node_container
from stack_env import summary_rows

from analysis import load
from tierbench.config.files import EXPERIMENTS_DIR
from tierbench.placement import clusterfile

pytestmark = [pytest.mark.stack, pytest.mark.lab_full]

READ = ("sysctl -n net.ipv4.tcp_congestion_control; echo ==; ip route show table main; "
        "echo ==; ss -tinH state established")


def node_view(node: str) -> tuple[str, list[str], list[tuple[str, str, str]]]:
    """A node's default congestion control, its main routes, and its established TCP
    connections as (local address, peer address, algorithm)."""
    done = subprocess.run(["docker", "exec", node_container(node), "sh", "-c", READ],
                          capture_output=True, text=True, timeout=60, check=True)
    default, routes, conns = (part.strip() for part in done.stdout.split("=="))
    return default, routes.splitlines(), ss_algorithms(conns)


class Watch(Listeners):
    """Every node's default congestion control, routes with a congctl and connections, read
    once a second while the block runs (the polling of stack_env.Listeners)."""

    def __init__(self, cluster: clusterfile.Cluster) -> None:
        super().__init__(cluster)
        self.defaults: set[tuple[str, str]] = set()
        self.congctl_routes: set[tuple[str, str]] = set()
        self.conns: set[tuple[str, str, str, str]] = set()

    def read(self) -> None:
        for node in self.cluster.nodes:
            default, routes, conns = node_view(node.name)
            self.defaults.add((node.name, default))
            self.congctl_routes |= {(node.name, r) for r in routes if " congctl " in f"{r} "}
            self.conns |= {(node.name, *c) for c in conns}
        self.readings += 1


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_cluster(tmp_path_factory) as lab:
        yield lab


def test_a_sysctl_the_lab_nodes_cannot_take_is_refused_before_anything_starts(
        lab, tmp_path: Path) -> None:
    text = (EXPERIMENTS_DIR / "quick.yml").read_text().replace(
        "modes: [offloads-on+tcp-cubic, offloads-off+tcp-cubic]",
        "modes: [offloads-on+tcp-cubic, big-socket-buffers]")
    (tmp_path / "quick-buffers.yml").write_text(text)
    before = {n.name: node_view(n.name)[1] for n in lab["cluster"].nodes}
    done = lab_run(lab, str(tmp_path / "quick-buffers.yml"), timeout=300)
    assert done.returncode != 0
    assert ("mode big-socket-buffers cannot run on node1, node2 and node3: its /proc/sys is "
            "read-only (a container, such as a lab node), so sysctl net.ipv4.tcp_rmem cannot be "
            "set there") in done.stderr, done.stderr[-2000:]
    assert "nothing was started" in done.stderr
    assert not (lab["results"] / "quick-buffers").exists()
    running = subprocess.run(["docker", "--context", "tierbench-node2", "ps", "-q"],
                             capture_output=True, text=True, timeout=60, check=True)
    assert running.stdout.strip() == ""
    assert {n.name: node_view(n.name)[1] for n in lab["cluster"].nodes} == before
    assert lab_containers()  # the lab itself is still up for the module


def test_quick_runs_on_the_lab_with_cubic_between_its_nodes_only(lab) -> None:
    cluster = lab["cluster"]
    before = {n.name: node_view(n.name) for n in cluster.nodes}
    address = {n.interface().ip: n.name for n in cluster.nodes}
    started = time.monotonic()
    with Watch(cluster) as watch:
        done = lab_run(lab, str(EXPERIMENTS_DIR / "quick.yml"), timeout=2400)
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    print(f"quick on the lab: {took:.0f} s")
    run_dir = last_run(lab, "quick")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    rows = summary_rows(run_dir)
    assert len(rows) == 24 and all(not r.get("error") for r in rows)
    assert all(float(r["tps"]) > 0 for r in rows)
    points = load.point_records(run_dir).values()
    assert all(p["mode_verified"] and p["restored"] for p in points)
    # quick runs on node1 (load generator), node2 (proxy) and node3 (web)
    used = {"node1", "node2", "node3"}
    peers = {n: sorted(ip for ip, m in address.items() if m in used and m != n) for n in used}
    for p in points:
        during = p["mode_state_during"]["sysctls"]
        assert {t: sorted(v) for t, v in during.items()} == {
            f"node:{n}": [f"route {ip}" for ip in peers[n]] for n in sorted(used)}
        assert all(v.endswith(" congctl cubic") for t in during.values() for v in t.values())
    assert {(n, r.split()[0]) for n, r in watch.congctl_routes} == {
        (n, ip) for n in used for ip in peers[n]}
    # the nodes' default never changed; the tiers' connections between nodes used CUBIC: every
    # one of wrk's (opened at each point, node1 to the proxy's port 80 on node2), and the
    # proxy's to the web server (some may be older than the first point: not all of them)
    assert watch.defaults == {(n, before[n][0]) for n in before}
    between: dict[tuple[str, str], set[str]] = {}
    wrk = set()
    for _n, local, peer, algo in watch.conns:
        (here, port), (there, peer_port) = local.rsplit(":", 1), peer.rsplit(":", 1)
        if here in address and there in address and address[here] != address[there]:
            between.setdefault((address[here], address[there]), set()).add(algo)
            if {(address[here], port), (address[there], peer_port)} & {("node2", "80")}:
                wrk.add(algo)
    assert wrk == {"cubic"}, between
    assert all("cubic" in between.get(pair, set()) for pair in (
        ("node1", "node2"), ("node2", "node1"), ("node2", "node3"), ("node3", "node2"))), between
    # the controller's SSH connection to each node (from outside the run) kept the default
    ssh = {(n, algo) for n, _local, peer, algo in watch.conns
           if peer.rsplit(":", 1)[0] not in address}
    assert ssh and all(algo == before[n][0] for n, algo in ssh), ssh
    assert {n.name: node_view(n.name)[1] for n in cluster.nodes} == {
        n: view[1] for n, view in before.items()}
