"""The lab cluster for real (marker ``stack``, about a minute): `make lab-up NODES=2` (setup,
images, `setup/lab.sh up 2`) starts two node containers with their own dockerd and sshd; the node
checks pass and measure the clocks; a NIC setting changed over SSH on one node reads back changed
there and unchanged on the other; images ship with their IDs; checks of a broken cluster name
every problem; `make lab-down` removes everything. Ships two tiny probe images (made here with docker import) instead of the stack's."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from stack_env import lab_containers, require_free_lab

from tierbench.kinds import registry
from tierbench.placement import clusterfile, nodes
from tierbench.placement.clusterfile import load_cluster, parse_cluster
from tierbench.placement.nodes import NodeError

pytestmark = pytest.mark.stack

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "setup" / "lab.sh"
PROBES = ("tierbench-labprobe:lab", "tierbench-labprobe:ship")


def sh(*argv: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, **kw)


def make_probe(tag: str) -> str:
    """A one-file image made with docker import (no registry, no base image): its ID."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = f"tierbench lab probe {tag}\n".encode()
        info = tarfile.TarInfo("probe.txt")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    done = subprocess.run(["docker", "import", "-", tag], input=buf.getvalue(),
                          capture_output=True, check=True)
    assert done.returncode == 0
    return sh("docker", "image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()


@pytest.fixture(scope="module")
def lab():
    require_free_lab()
    ids = {tag: make_probe(tag) for tag in PROBES}
    env = {**os.environ, "LAB_IMAGES": PROBES[0]}
    start = time.monotonic()
    try:
        # the README's commands: make lab-up (setup, images, then setup/lab.sh up) and lab-down
        up = sh("make", "lab-up", "NODES=2", env=env, cwd=ROOT, timeout=1800)
        assert up.returncode == 0, up.stderr[-3000:]
        yield {"ids": ids, "up_s": time.monotonic() - start, "up": up, "env": env}
    finally:
        down = sh("make", "lab-down", cwd=ROOT, timeout=300)
        for tag in PROBES:
            sh("docker", "image", "rm", tag)
        assert down.returncode == 0, down.stderr
        assert lab_containers() == []
        assert sh("docker", "network", "inspect", "tierbench-lab").returncode != 0
        contexts = sh("docker", "context", "ls", "--format", "{{.Name}}").stdout.split()
        assert not [c for c in contexts if c.startswith("tierbench-node")]
        volumes = sh("docker", "volume", "ls", "-q").stdout.split()
        assert not [v for v in volumes if v.startswith("tierbench-node")]
        assert not Path("/etc/ssh/ssh_config.d/tierbench-lab.conf").exists()


def test_lab_nodes_checks_nic_and_images(lab) -> None:
    cluster = load_cluster(ROOT / "lab" / "cluster.yml", registry.roles())
    assert [(n.name, n.address, n.docker_context) for n in cluster.nodes] == [
        ("node1", "198.18.16.11", "tierbench-node1"), ("node2", "198.18.16.12", "tierbench-node2")]
    assert cluster.placement()["loadgen"] == ["node1"] and cluster.placement()["web"] == ["node2"]
    n1, n2 = cluster.nodes

    # the checks pass, clocks within a millisecond (containers share the host's clock)
    report = nodes.check_nodes(cluster)
    assert report.problems == []
    assert set(report.clocks) == {"node1", "node2"}
    for reading in report.clocks.values():
        assert abs(reading.offset_s) < 0.001 and 0 < reading.rtt_s < 0.05
        assert reading.samples == 7
    for name in ("node1", "node2"):
        facts = report.facts[name]
        assert facts["docker"] and facts["compose"].startswith("2.")
        assert facts["interfaces"]["eth0"]["state"] == "UP"

    # the probe image was shipped by lab.sh with the controller's ID
    for node in cluster.nodes:
        assert nodes.image_ids(node, [PROBES[0]]) == {PROBES[0]: lab["ids"][PROBES[0]]}

    # a NIC setting over SSH: changed on node1 only, read back, restored
    def tso(node: clusterfile.Node) -> str:
        out = nodes.run_on_node(node, ["ethtool", "-k", "eth0"], timeout=20).stdout
        return next(line.split(":")[1].strip() for line in out.splitlines()
                    if line.startswith("tcp-segmentation-offload:"))

    assert tso(n1) == "on" and tso(n2) == "on"
    nodes.run_on_node(n1, ["ethtool", "-K", "eth0", "tso", "off"], timeout=20)
    try:
        assert tso(n1) == "off"
        assert tso(n2) == "on"
    finally:
        nodes.run_on_node(n1, ["ethtool", "-K", "eth0", "tso", "on"], timeout=20)
    assert tso(n1) == "on"

    # commands that fail say which node, which command and why
    with pytest.raises(NodeError, match=r"^node2: `ethtool -K eth9 tso off` failed with exit "
                                        r"code \d+: .*No such device"):
        nodes.run_on_node(n2, ["ethtool", "-K", "eth9", "tso", "off"], timeout=20)
    with pytest.raises(NodeError, match=r"^node1: `sleep 5` did not finish within 1 s$"):
        nodes.run_on_node(n1, "sleep 5", timeout=1)

    # docker over the node's context sees the node's own engine, not the controller's
    info = nodes.run_docker(n2, "info", "--format", "{{.Name}}", timeout=30).stdout.strip()
    assert info == "node2"

    # shipping: IDs recorded, and nothing travels the second time
    said: list[str] = []
    got = nodes.ship_images(n2, list(PROBES), progress=said.append)
    assert got == lab["ids"]
    assert any("shipping 1 image(s): tierbench-labprobe:ship" in s for s in said)
    said.clear()
    assert nodes.ship_images(n2, list(PROBES), progress=said.append) == lab["ids"]
    assert said == ["node2: 2 image(s) already there"]
    with pytest.raises(NodeError, match=r"^controller: no image tierbench-labprobe:none"):
        nodes.ship_images(n1, ["tierbench-labprobe:none"])

    # provenance
    prov = nodes.node_provenance(n1)
    assert prov["kernel"] == os.uname().release
    assert prov["cpus"] == os.cpu_count()
    assert prov["cpu_model"]
    assert prov["interfaces"]["eth0"]["driver"] == "veth"
    assert "firmware_version" in prov["interfaces"]["eth0"]


def test_checks_of_a_broken_cluster_name_every_problem(lab) -> None:
    cluster = load_cluster(ROOT / "lab" / "cluster.yml", registry.roles())
    data = cluster.model_dump()
    data["nodes"][1]["interfaces"].append({"name": "eth9", "address": "198.18.16.99/24"})
    data["nodes"].append({"name": "ghost", "address": "198.18.16.250", "user": "root",
                          "context": "tierbench-ghost",
                          "interfaces": [{"name": "eth0", "address": "198.18.16.250/24"}],
                          "ssh_config": cluster.ssh_config})
    broken = parse_cluster(data, registry.roles(), "broken.yml")
    start = time.monotonic()
    report = nodes.check_nodes(broken, need_disk_bytes={"node1": 10**15}, timeout=8)
    assert time.monotonic() - start < 30
    assert len(report.problems) == 3, report.problems
    disk, eth9, ghost = report.problems
    assert disk.startswith("node1: ") and "less than the 1000000.0 GB this needs there" in disk
    assert eth9.startswith("node2: data-plane interface eth9 does not exist (")
    assert ghost.startswith("ghost: cannot reach root@198.18.16.250 over SSH (port 22): ")


def test_lab_up_again_is_quick_and_keeps_the_nodes(lab) -> None:
    before = sh("docker", "inspect", "--format", "{{.Id}}", "tierbench-node1").stdout
    start = time.monotonic()
    up = sh(str(LAB), "up", "2", env=lab["env"], timeout=600)
    took = time.monotonic() - start
    assert up.returncode == 0, up.stderr[-3000:]
    assert "node1: images up to date" in up.stderr and "node2: images up to date" in up.stderr
    assert sh("docker", "inspect", "--format", "{{.Id}}", "tierbench-node1").stdout == before
    assert took < lab["up_s"]
    status = sh(str(LAB), "status")
    assert status.returncode == 0
    assert [line.split()[0] for line in status.stdout.splitlines()[1:3]] == [
        "tierbench-node1", "tierbench-node2"]
    assert all(line.split()[3] == "ready" for line in status.stdout.splitlines()[1:3])

    # a third node that would not fit in memory: one sentence, and nothing changes
    env = {**lab["env"], "LAB_NODE_MEM_MB": str(10**8)}
    refused = sh(str(LAB), "up", "3", env=env, timeout=120)
    assert refused.returncode == 1
    assert refused.stderr.startswith("lab: too little memory for 1 new node(s): they need about ")
    assert len(refused.stderr.splitlines()) == 1
    assert lab_containers() == ["tierbench-node1", "tierbench-node2"]
