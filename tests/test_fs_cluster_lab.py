"""The file-server kind on a 4-node lab cluster through `tierbench run --cluster` (markers
``stack`` and ``lab_full``: `make test-cluster` runs them; one lab for the module, `setup/lab.sh
up 4` with no image shipped up front). setup/lab.sh puts the GlusterFS server and its CPU hog
on node2 (fs_server) and the clients on node1 and node3 (fs_client, a list: one client runs on
node1, several go round both); OrangeFS (pfs-iozone) on node4 with its clients on node1.

- fs-clients (dbench), idle and busy server, offloads on and off on the server's NIC: the modes
  on node2's NIC only, verified and restored; CPU of the server, client and hog on their nodes;
  the server's traffic from node2's NIC;
- fs-randread (fio) and the think-time dbench with both loads;
- fs-filebench with 4 clients round node1 and node3: the server's page cache emptied and filled
  in its container on node2;
- pfs-iozone on OrangeFS (needs the OrangeFS image, which CI cannot build: skipped there,
  saying so).

Every node's interface settings are read over SSH before the module and compared after each
test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stack_env import lab_cluster, lab_run, last_run, nic_state, orangefs_image, summary_rows

from analysis import load

pytestmark = [pytest.mark.stack, pytest.mark.lab_full]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_cluster(tmp_path_factory) as lab:
        assert (lab["cluster"].roles.fs_server, lab["cluster"].roles.fs_client) == \
            ("node2", ["node1", "node3"])
        yield lab


def run(lab: dict, experiment: str) -> Path:
    """`tierbench run EXPERIMENT --cluster lab/cluster.yml`; its results folder."""
    done = lab_run(lab, experiment)
    assert done.returncode == 0, done.stderr[-3000:]
    return last_run(lab, experiment.removesuffix(".yml"))


def manifest(run_dir: Path) -> dict:
    data = json.loads((run_dir / "manifest.json").read_text())
    assert data["status"] == "complete"
    return data


def test_fs_clients_with_the_server_and_client_on_their_nodes(lab) -> None:
    run_dir = run(lab, "fs-clients-lab.yml")
    m = manifest(run_dir)
    services = m["cluster"]["services"]
    assert services["fs-server"] == ["node2"] and services["fs-client"] == ["node1"]
    # the servers' modes on node2's NIC only, verified and restored; node1's left alone
    for pid, point in load.point_records(run_dir).items():
        assert point["endpoints"] == ["node2:eth0"], pid
        assert point["mode_verified"] and point["restored"], pid
        want = "off" if point["mode"] == "servers-offloads-off" else "on"
        during = point["interfaces_during"]
        assert during["node2:eth0"]["features"]["tcp-segmentation-offload"] == want, pid
        assert during["node1:eth0"]["features"]["tcp-segmentation-offload"] == "on", pid
    found = summary_rows(run_dir)
    assert len(found) == 8
    for row in found:
        assert not row["error"] and float(row["mb_per_s"]) > 0, row
        assert float(row["cpu_s_fs-server"]) > 0 and float(row["cpu_s_fs-client"]) > 0, row
        assert float(row["server_net_mb_per_s"]) > 0, row
        assert float(row["node_node2_busy_s"]) > 0 and float(row["node_node1_busy_s"]) > 0
        # the hog runs on the server's node for busy points only
        assert (row["cpu_s_fs-hog"] != "") == (row["load"] == "busy"), row
        if row["load"] == "busy":
            assert float(row["cpu_s_fs-hog"]) > 0.2, row
    samples = [json.loads(x) for x in (run_dir / "points" / "p001" / "samples.jsonl")
               .read_text().splitlines()]
    assert set(samples[0]["nodes"]) == {"node1", "node2"}
    assert set(samples[0]["net"]) == {"node1:eth0", "node2:eth0"}
    assert nic_state(lab["cluster"]) == lab["before"]


def test_fs_randread_and_think_time_on_the_nodes(lab) -> None:
    found = summary_rows(run(lab, "fs-randread-short.yml"))
    assert len(found) == 2
    assert all(not r["error"] and float(r["iops"]) > 0 for r in found), found
    found = summary_rows(run(lab, "fs-dbench-short.yml"))
    assert {(r["load"], r["think_ms"]) for r in found} == {
        ("idle", "0"), ("idle", "2"), ("busy", "0"), ("busy", "2")}
    assert all(not r["error"] and float(r["mb_per_s"]) > 0 for r in found), found
    assert nic_state(lab["cluster"]) == lab["before"]


def test_fs_filebench_empties_and_fills_the_servers_cache_on_its_node(lab) -> None:
    run_dir = run(lab, "fs-filebench-lab.yml")
    m = manifest(run_dir)
    found = {r["workload"]: r for r in summary_rows(run_dir)}
    assert set(found) == {"1-seqread-uncached", "2-seqread-cached", "5-seqwrite"}
    assert all(not r["error"] and float(r["mb_per_s"]) > 0 for r in found.values()), found
    assert float(found["1-seqread-uncached"]["set_passes"]) > 0
    caches = sorted(p.get("server_cache", "") for p in m["points"].values())
    assert caches == ["", "cached", "uncached"], caches
    # the 4 clients went round the fs_client nodes: two on node1, two on node3, all sampled
    samples = [json.loads(x) for x in (run_dir / "points" / "p001" / "samples.jsonl")
               .read_text().splitlines()]
    assert set(samples[0]["nodes"]) == {"node1", "node2", "node3"}
    assert all((int(r["clients"]), int(r["clients_moving"])) == (4, 4) for r in found.values()), found
    assert nic_state(lab["cluster"]) == lab["before"]


def test_pfs_iozone_on_orangefs_nodes(lab) -> None:
    orangefs_image()
    run_dir = run(lab, "fs-iozone-short.yml")
    services = manifest(run_dir)["cluster"]["services"]
    assert services["pvfs-meta"] == ["node4"] and services["pvfs-io2"] == ["node4"]
    assert services["pvfs-client"] == ["node1"]
    found = summary_rows(run_dir)
    assert len(found) == 2
    for row in found:
        assert not row["error"], row
        assert float(row["write_mb_per_s"]) > 0 and float(row["read_mb_per_s"]) > 0, row
        assert float(row["write_cpu_s_fs-server"]) > 0, row
    assert nic_state(lab["cluster"]) == lab["before"]
