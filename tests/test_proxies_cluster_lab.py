"""004's data center on the lab cluster (markers ``stack`` and ``lab_full``: `make
test-cluster`): a 4-node lab (`setup/lab.sh up 4`) whose cluster file lists three nodes for the
proxy, web and app roles (node2..node4) and puts the load generator and the database on node1:
proxy and proxy4 on node2 (ports 80 and 83), proxy2 on node3 (81), proxy3 on node4 (82); web,
app on node2, web2, app2 on node3, web3, app3 on node4. A short dynamic and static run with wrk:
every proxy, web server and application server served requests (its access log, its CPU), the
proxy tier's CPU is the sum of its four proxies', each application server admits only its web
server's node and the database all three application servers' nodes (and its own), the modes
are verified and restored on every node, and the NICs are as before. Then DC-classes' docroots
(dc-classes-cluster-short): each web server on its own emulated IDE disk built on its node, and
OrangeFS whose I/O servers (pvfs-io1..3 on node2..node4) each store on an emulated IDE disk
built on their node, every web server mounting it there. PFS-basic on the emulated IDE disk
(pfs-basic-ide-cluster-short): each I/O server's disk on its own node, the client's on node1,
the file written and read back whole. Last DC-hybrid's placements (dc-hybrid-cluster-short,
Locust): the foreground's small files on a tmpfs of each web server's node, over its IDE disk or
OrangeFS, both sites served (the stack is removed after an OrangeFS point, so the tmpfs are not
looked at afterwards)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from stack_env import fastcgi_answer, lab_cluster, lab_run, last_run, summary_rows

from tierbench.placement import nodes

pytestmark = [pytest.mark.stack, pytest.mark.lab_full]

SPREAD = ["node2", "node3", "node4"]
WHERE = {"proxy": "node2", "proxy2": "node3", "proxy3": "node4", "proxy4": "node2",
         "web": "node2", "web2": "node3", "web3": "node4",
         "app": "node2", "app2": "node3", "app3": "node4", "db": "node1", "loadgen": "node1"}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_cluster(tmp_path_factory, roles={"loadgen": "node1", "db": "node1",
                                              "proxy": SPREAD, "web": SPREAD,
                                              "app": SPREAD, "pfs_meta": "node1",
                                              "pfs_io": SPREAD, "pfs_clients": ["node1"]}) as lab:
        yield lab


def samples(point_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (point_dir / "samples.jsonl").read_text().splitlines()
            if line.strip()]


def container(lab: dict, service: str) -> tuple[nodes.Node, str]:
    n = lab["cluster"].node(WHERE[service])
    ids = nodes.run_docker(n, "ps", "-q", "--filter",
                           f"label=com.docker.compose.service={service}").stdout.split()
    assert len(ids) == 1, (service, ids)
    return n, ids[0]


def test_the_004_data_center_on_four_nodes(lab) -> None:
    ip = {n.name: n.interface().ip for n in lab["cluster"].nodes}
    done = lab_run(lab, "dc-cluster-short.yml", timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "dc-cluster-short")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    placed = manifest["cluster"]["services"]
    assert {s: placed[s] for s in WHERE} == {s: [n] for s, n in WHERE.items()}
    [row] = summary_rows(run_dir)
    assert not row["error"] and float(row["tps"]) > 0, row
    [(pid, point)] = manifest["points"].items()
    assert point["mode_verified"] and point["restored"]
    # the load generator reached each proxy at its node's address and port
    assert point["targets"] == [f"http://{ip['node2']}:80", f"http://{ip['node3']}:81",
                                f"http://{ip['node4']}:82", f"http://{ip['node2']}:83"]
    got = samples(run_dir / "points" / pid)
    first, last = got[0]["cpu"], got[-1]["cpu"]
    for tier, servers in (("proxy", ("proxy", "proxy2", "proxy3", "proxy4")),
                          ("web", ("web", "web2", "web3")), ("app", ("app", "app2", "app3"))):
        parts = last[tier]["parts"]
        assert set(parts) == set(servers), (tier, parts)
        # the tier's CPU is the sum of its servers', each of which worked during the point
        assert last[tier]["usage_s"] == pytest.approx(sum(parts.values()), abs=1e-6), tier
        for server in servers:
            assert parts[server] - first[tier]["parts"][server] > 0.01, (tier, server)
    # every proxy and web server logged requests (the web servers' include /dyn/ ones, which
    # each forwarded to its own application server)
    for server in ("proxy", "proxy2", "proxy3", "proxy4", "web", "web2", "web3"):
        n, cid = container(lab, server)
        log = nodes.run_docker(n, "exec", cid, "cat", "/var/log/apache2/access.log").stdout
        assert len(log.splitlines()) > 20, (server, len(log.splitlines()))
        if server.startswith("web"):
            assert "/dyn/" in log, server
    # admissions: each application server its web server's node only; the database the three
    # application servers' nodes and its own (the seed job)
    for app, node, port in (("app", "node2", 9000), ("app2", "node3", 9001),
                            ("app3", "node4", 9002)):
        n, cid = container(lab, app)
        env = nodes.run_docker(n, "inspect", "--format", "{{json .Config.Env}}", cid).stdout
        assert f"APP_CLIENTS={ip[node]}" in json.loads(env), (app, env)
        assert fastcgi_answer(node, ip[node], port) > 0, app  # its web server's node
        for other in ("node1", *(o for o in SPREAD if o != node)):
            assert fastcgi_answer(other, ip[node], port) == 0, (app, other)
    n, cid = container(lab, "db")
    env = json.loads(nodes.run_docker(n, "inspect", "--format", "{{json .Config.Env}}",
                                      cid).stdout)
    assert f"DB_CLIENTS={ip['node2']},{ip['node3']},{ip['node4']},{ip['node1']}" in env


def test_dc_classes_docroots_on_each_servers_own_node(lab) -> None:
    done = lab_run(lab, "dc-classes-cluster-short.yml", timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "dc-classes-cluster-short")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    rows = {r["docroot"]: r for r in summary_rows(run_dir)}
    assert set(rows) == {"ide", "orangefs"}
    for docroot, row in rows.items():
        assert not row["error"] and float(row["tps"]) > 0, row
        # under the 512 MB caps the written files were dropped: the window read the disks
        assert float(row["storage_read_mb"]) > 0, row
    placed = manifest["cluster"]["services"]
    for web, io, node in (("web", "pvfs-io1", "node2"), ("web2", "pvfs-io2", "node3"),
                          ("web3", "pvfs-io3", "node4")):
        assert placed[web] == [node] and placed[io] == [node], placed
    assert placed["pvfs-docroot"] == ["node2"]  # the copy into OrangeFS: once
    disks_of = {}
    for pid, point in manifest["points"].items():
        record = point["disk"]
        disks_of[record["system"] + ("-pvfs" if "pvfs-io1" in record["servers"] else "")] = \
            record
        for server, info in record["servers"].items():
            # each server's disk built on the node its container runs on, throttled there
            assert info["node"] == placed[server][0], (server, info)
            limits = record["throttles_read_back"][server]
            assert limits and all(v["read_bps"] == 35_000_000 for v in limits.values()), record
        got = samples(run_dir / "points" / pid)
        first, last = got[0]["cpu"], got[-1]["cpu"]
        for server in ("web", "web2", "web3"):  # every web server served
            assert last["web"]["parts"][server] - first["web"]["parts"][server] > 0.01, server
    assert set(disks_of) == {"ide", "ide-pvfs"}
    assert set(disks_of["ide"]["servers"]) == {"web", "web2", "web3"}
    assert set(disks_of["ide-pvfs"]["servers"]) == {"pvfs-io1", "pvfs-io2", "pvfs-io3"}


def test_pfs_basic_on_ide_disks_built_on_each_servers_node(lab) -> None:
    done = lab_run(lab, "pfs-basic-ide-cluster-short.yml")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "pfs-basic-ide-cluster-short")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    placed = manifest["cluster"]["services"]
    where = {"pvfs-io1": "node2", "pvfs-io2": "node3", "pvfs-client": "node1"}
    assert {s: placed[s] for s in where} == {s: [n] for s, n in where.items()}
    rows = {r["filesystem"]: r for r in summary_rows(run_dir)}
    assert set(rows) == {"disk", "orangefs"}
    for fs, r in rows.items():
        assert r["error"] == "" and r["integrity"] == "ok", (fs, r)
        assert float(r["write_mb_per_s"]) > 0 and float(r["read_mb_per_s"]) > 0, (fs, r)
        disk = json.loads((run_dir / "points" / r["point"] / "point.json").read_text())[
            "disk_system"]
        # each server's device built on the node its container ran on, throttled there
        assert {s: v["node"] for s, v in disk["servers"].items()} == where, disk
        for limits in disk["throttles_read_back"].values():
            assert [v["read_bps"] for v in limits.values()] == [35_000_000], disk


def test_dc_hybrid_placements_with_hot_files_on_the_web_nodes(lab) -> None:
    done = lab_run(lab, "dc-hybrid-cluster-short.yml", timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "dc-hybrid-cluster-short")
    rows = {r["docroot"]: r for r in summary_rows(run_dir)}
    assert set(rows) == {"ide+hot-tmpfs", "orangefs+hot-tmpfs"}
    for row in rows.values():
        assert row["error"] == "" and int(row["errors"]) == 0, row
        assert float(row["tps_foreground"]) > 0 and float(row["tps_background"]) > 0, row
    placed = json.loads((run_dir / "manifest.json").read_text())["cluster"]["services"]
    assert {s: placed[s] for s in ("web", "web2", "web3")} == {
        "web": ["node2"], "web2": ["node3"], "web3": ["node4"]}
