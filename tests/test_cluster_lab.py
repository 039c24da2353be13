"""Experiments on a 4-node lab cluster through `tierbench run --cluster` (marker ``stack``; one
lab for the whole module, `setup/lab.sh up 4` with no image shipped up front: the runner ships
what each node needs; `make test` runs the DC experiment and the SIGKILL case, the others are
marked ``lab_full`` and `make test-cluster` runs them all). node1 runs the load generator and
the network sender, node2 the proxy, node3 the web tier and the network receivers, node4
OrangeFS.

- a DC experiment with offloads on and off on the nodes' NICs: every tier on its node, the
  modes verified on the NICs and restored, CPU per tier and per node, provenance per node;
- the network kind with two receivers on one node (each on its own ports); Locust workers on
  the workers' node, started by tierbench; a cpu: mode on the web tier's cgroup on its node; a
  platform mode on each server node's common parent cgroup;
- SIGINT, and SIGKILL followed by `tierbench clean --cluster`: every node's NIC as before;
- the web node's Docker daemon stopped mid-run: one sentence naming the node, every node's
  NIC as before;
- a PFS experiment with servers and clients on different nodes (needs the OrangeFS image, which
  CI cannot build: skipped there, saying so);
- safe on a rack, the dynamic tiers (also in `make test`): every tierbench listener on its node's
  data-plane address during a run, PHP-FPM and PostgreSQL refusing the nodes they do not admit
  (tests/test_rack_lab.py: the other tiers).

Every node's interface settings are read over SSH (ethtool -k/-c/-g/-l, MTU, qdisc) before the
module and compared after each test."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from stack_env import (EXPERIMENTS, TAG, TIERBENCH, ROOT, Listeners, fastcgi_answer,
                       lab_cluster, lab_run, last_run, nic_state, orangefs_image,
                       postgres_answer, db_window_rel, summary_rows, tierbench)

from analysis import load
from tierbench.placement import model, nodes

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_cluster(tmp_path_factory) as lab:
        yield lab


def sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def test_dc_experiment_on_the_nodes(lab) -> None:
    done = lab_run(lab, "two-modes.yml")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "two-modes")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    # every tier on the node its role names, images shipped there with the controller's IDs
    assert manifest["cluster"]["services"] == {
        "fileset": ["node3"], "web": ["node3"], "proxy": ["node2"], "loadgen": ["node1"]}
    web, loadgen = f"tierbench-web:{TAG}", f"tierbench-loadgen:{TAG}"
    local = nodes.image_ids(None, [web, loadgen])
    assert manifest["cluster"]["images"]["node3"][web] == local[web]
    assert manifest["cluster"]["images"]["node1"][loadgen] == local[loadgen]
    for name in ("node1", "node2", "node3", "node4"):
        prov = manifest["nodes"][name]
        assert prov["kernel"] == os.uname().release and prov["interfaces"]["eth0"]["driver"] \
            == "veth"
        assert "tcp-segmentation-offload: on" in prov["nic_before"]["eth0"]["ethtool -k"]
        assert prov["nic_after"]["eth0"]["ethtool -k"] == prov["nic_before"]["eth0"]["ethtool -k"]
        assert abs(prov["clock_offset_s"]) < 0.005
    # the modes on the NICs of the nodes that carry the tiers, verified and restored
    for pid, point in load.point_records(run_dir).items():
        assert point["endpoints"] == ["node1:eth0", "node2:eth0", "node3:eth0"], pid
        assert point["mode_verified"] and point["restored"], pid
        during = point["interfaces_during"]["node3:eth0"]["features"]
        want = "off" if point["mode"] == "offloads-off" else "on"
        assert during["tcp-segmentation-offload"] == want, pid
    rows = {r["mode"]: r for r in summary_rows(run_dir)}
    for mode, row in rows.items():
        assert float(row["tps"]) > 0 and not row["error"], mode
        for column in ("cpu_s_loadgen", "cpu_s_proxy", "cpu_s_web", "node_node3_busy_s",
                       "node_node2_softirq_pct", "host_cpu_us_per_kb"):
            assert float(row[column]) >= 0, (mode, column)
        assert float(row["cpu_s_web"]) > 0 and float(row["cpu_s_proxy"]) > 0
        # bytes delivered: what node1's NIC received over the window: the responses' bodies
        # and headers (a response crossing the window's edges counts in part)
        assert 0.95 < float(row["bytes_moved"]) / (float(row["requests"]) * 1048576) < 1.2
    samples = [json.loads(x) for x in (run_dir / "points" / "p001" / "samples.jsonl")
               .read_text().splitlines()]
    assert len(samples) >= 8 and set(samples[0]["nodes"]) == {"node1", "node2", "node3"}
    # the merged ticks keep to 1 Hz; the web kind's two marks inside the window come between
    ticks = [s for s in samples if not s.get("mark")]
    assert all(b["t"] - a["t"] == pytest.approx(1.0, abs=0.2)
               for a, b in zip(ticks[:-2], ticks[1:-1]))
    assert len(samples) - len(ticks) == 2
    assert nic_state(lab["cluster"]) == lab["before"]


def test_the_dynamic_tiers_listen_on_their_nodes_and_admit_only_their_peers(lab) -> None:
    """Safe on a rack (tests/test_rack_lab.py has the other tiers): during a dynamic point every
    tierbench service on every node (read in the node's own network namespace) listens only on
    that node's data-plane address; then the application tier (node3) answers FastCGI from the
    web node only, and PostgreSQL (node4) goes on to the password only from the app and db nodes:
    from every other node it closes the connection, or refuses naming pg_hba.conf."""
    ip = {n.name: n.interface().ip for n in lab["cluster"].nodes}
    with Listeners(lab["cluster"]) as listeners:
        done = lab_run(lab, "rack-dynamic.yml")
    assert done.returncode == 0, done.stderr[-3000:]
    assert listeners.readings >= 5
    assert listeners.misplaced() == []
    # and the listeners were seen: the proxy, the web tier, PHP-FPM and PostgreSQL
    assert {("node2", 80), ("node3", 8080), ("node3", 9000), ("node4", 5432)} <= \
        listeners.ports()
    assert {("node3", "php-fpm8.2"), ("node4", "postgres")} <= listeners.processes()
    assert fastcgi_answer("node3", ip["node3"]) > 0  # the web node: admitted
    for other in ("node1", "node2", "node4"):
        assert fastcgi_answer(other, ip["node3"]) == 0, other
    for admitted in ("node3", "node4"):  # the app node; the db node (its seed job)
        assert postgres_answer(admitted, ip["node4"])[0] == "R", admitted
    for other in ("node1", "node2"):
        kind, text = postgres_answer(other, ip["node4"])
        assert kind == "E" and f'no pg_hba.conf entry for host "{ip[other]}"' in text, text
    # nothing but the tiers' data-plane addresses was ever admitted: PHP-FPM said why it dropped
    manifest = json.loads((last_run(lab, "rack-dynamic") / "manifest.json").read_text())
    assert manifest["cluster"]["services"]["app"] == ["node3"]
    logs = sh("docker", "--context", "tierbench-node3", "logs", f"{model.PROJECT}-app-1")
    assert f"Connection disallowed: IP address '{ip['node1']}' has been dropped" in \
        logs.stdout + logs.stderr
    assert nic_state(lab["cluster"]) == lab["before"]


@pytest.mark.lab_full
def test_network_kind_with_two_receivers_on_one_node(lab) -> None:
    done = lab_run(lab, "net-short.yml")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "net-short")
    rows = summary_rows(run_dir)
    assert len(rows) == 2
    for row in rows:
        assert int(row["connections_established"]) == 4 and int(row["sender_processes"]) == 4
        assert float(row["mbit_per_s"]) > 0 and float(row["cpu_s_net-server"]) > 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["cluster"]["services"] == {"net-server": ["node3"], "net-client": ["node1"]}
    assert nic_state(lab["cluster"]) == lab["before"]


@pytest.mark.lab_full
def test_locust_workers_on_the_workers_nodes(lab) -> None:
    """load.workers: the worker containers on the loadgen_workers nodes, started by tierbench,
    connected to the master at its node's address, their CPU sampled there."""
    done = lab_run(lab, "workers.yml")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "workers")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["cluster"]["services"]["loadgen-worker"] == ["node1"]
    [row] = summary_rows(run_dir)
    assert float(row["tps"]) > 0 and not row["error"] and row["workers"] == "2"
    samples = [json.loads(x) for x in (run_dir / "points" / "p001" / "samples.jsonl")
               .read_text().splitlines()]
    assert set(samples[-1]["cpu"]["loadgen"]["parts"]) == {
        "loadgen", "loadgen-worker-1", "loadgen-worker-2"}
    assert nic_state(lab["cluster"]) == lab["before"]


@pytest.mark.lab_full
def test_a_cpu_mode_on_a_containers_cgroup_on_its_node(lab) -> None:
    """cpu: the web tier's cpuset and CPU limit written on node3, verified, restored."""
    done = lab_run(lab, "cpu-mode.yml", timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    point = load.point_records(last_run(lab, "cpu-mode"))["p001"]
    assert point["mode_verified"] and point["restored"]
    assert point["mode_state_during"]["cpu"] == {"web": {"cpuset": "0-1", "limit": 0.5}}
    assert point["mode_state_after"]["cpu"] == point["mode_state_before"]["cpu"]
    assert point["mode_state_before"]["cpu"]["web"]["limit"] is None
    assert nic_state(lab["cluster"]) == lab["before"]


@pytest.mark.lab_full
def test_a_platform_mode_on_each_nodes_servers_parent_cgroup(lab) -> None:
    """cpu: {per: platform}: each node's server tiers under that node's own parent cgroup, its
    cpuset and shared CPU limit written there, verified, restored; the load generator's node
    has no platform."""
    done = lab_run(lab, "platform.yml", timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    for point in load.point_records(last_run(lab, "platform")).values():
        assert point["mode_verified"] and point["restored"], point["mode"]
        limit = 1.0 if point["mode"] == "servers-2cpus-half" else None
        assert point["mode_state_during"]["platform"] == {
            "platform (node2)": {"cpuset": "0-1", "limit": limit, "tiers": ["proxy"]},
            "platform (node3)": {"cpuset": "0-1", "limit": limit, "tiers": ["web"]}}
        assert point["mode_state_after"]["platform"] == point["mode_state_before"]["platform"]
    assert nic_state(lab["cluster"]) == lab["before"]


def _wait_for(path: Path, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.5)


def _wait_for_mode(lab: dict, timeout: float = 120) -> dict[str, str]:
    """Every node's NIC state once offloads-off holds on the web node (the mode applied)."""
    deadline = time.monotonic() + timeout
    while True:
        now = nic_state(lab["cluster"])
        if "tcp-segmentation-offload: off" in now["node3"]:
            return now
        assert time.monotonic() < deadline, "the mode was not applied on node3"
        time.sleep(1)


@pytest.mark.parametrize("sig", [pytest.param(signal.SIGINT, marks=pytest.mark.lab_full),
                                 signal.SIGKILL], ids=["sigint", "sigkill"])
def test_interrupted_runs_leave_every_nic_as_before(lab, sig) -> None:
    state = Path(lab["env"]["TIERBENCH_STATE_DIR"]) / "netif-state.json"
    proc = subprocess.Popen([*TIERBENCH, "run", str(EXPERIMENTS / "cluster-interrupt.yml"),
                             "--cluster", str(lab["path"])], env=lab["env"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(state)
    changed = _wait_for_mode(lab)  # the mode applied on every node the tiers run on
    assert changed != lab["before"] and changed["node4"] == lab["before"]["node4"]
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=300)
    if sig == signal.SIGINT:
        assert proc.returncode == 130, err[-2000:]
        assert "interrupted by SIGINT: interfaces restored" in err
        assert not state.exists()
    else:
        assert proc.returncode == -signal.SIGKILL
        assert state.exists() and nic_state(lab["cluster"]) != lab["before"]
        clean = tierbench(lab["env"], "clean", "--cluster", str(lab["path"]), timeout=300)
        assert clean.returncode == 0, clean.stderr
        assert "restored the interface and sysctl settings saved before a change" in clean.stdout
        assert not state.exists()
        for node in lab["cluster"].nodes:  # and the stack is gone from every node
            assert nodes.run_docker(node, "ps", "-q").stdout.strip() == ""
    assert nic_state(lab["cluster"]) == lab["before"]


@pytest.mark.lab_full
def test_a_node_whose_docker_daemon_stops_ends_the_run_in_one_sentence(lab) -> None:
    state = Path(lab["env"]["TIERBENCH_STATE_DIR"]) / "netif-state.json"
    proc = subprocess.Popen([*TIERBENCH, "run", str(EXPERIMENTS / "cluster-interrupt.yml"),
                             "--cluster", str(lab["path"])], env=lab["env"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(state)
        _wait_for_mode(lab)
        # mid-run: the point is being measured (the nodes' samples are coming in)
        deadline = time.monotonic() + 120
        while True:
            runs = sorted((lab["results"] / "cluster-interrupt").glob("*/points/p001/samples.jsonl"))
            if runs and len(runs[-1].read_text().splitlines()) >= 3:
                break
            assert time.monotonic() < deadline, "the point's sampling did not start"
            time.sleep(0.5)
        stop = sh("docker", "exec", "tierbench-node3", "sh", "-c",
                  "kill -TERM $(cat /run/node-dockerd.pid)")
        assert stop.returncode == 0, stop.stderr
        out, err = proc.communicate(timeout=400)
        lines = err.strip().splitlines()
        assert proc.returncode == 2, err[-3000:]
        assert lines[-1].startswith("tierbench: node3: its Docker engine does not answer"), \
            lines[-3:]
        assert lines[-1].endswith("; the run ends here; results so far are in "
                                  f"{last_run(lab, 'cluster-interrupt')}")
        assert nic_state(lab["cluster"]) == lab["before"]
        assert not state.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
        sh("docker", "exec", "tierbench-node3", "node-start", "--dockerd")
        deadline = time.monotonic() + 60
        while sh("docker", "exec", "tierbench-node3", "docker", "info").returncode != 0:
            assert time.monotonic() < deadline, "node3's dockerd did not come back"
            time.sleep(1)


@pytest.mark.lab_full
def test_dynamic_requests_with_app_and_db_on_their_nodes(lab) -> None:
    """The application tier on node3 (app), PostgreSQL seeded on node4 (db): the database's own
    counters read on its node count the transactions, rows written equal the successful writes,
    and the two tiers' CPU is sampled on their nodes."""
    done = lab_run(lab, "cluster-dynamic.yml")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "cluster-dynamic")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    services = manifest["cluster"]["services"]
    assert services["app"] == ["node3"] and services["db"] == ["node4"]
    assert services["db-seed"] == ["node4"] and services["web"] == ["node3"]
    assert manifest["database"]["seeded"]["rows"] == 2000  # read from PostgreSQL on node4
    # before each point the writes table was emptied on node4, and the database's counters were
    # read there before and after the load
    points = manifest["points"].values()
    assert not [p["db"] for p in points if "db" in p]
    assert all(p["db_over_load"]["statements"] > 0 for p in points)
    rows = {r["trace"]: r for r in summary_rows(run_dir)}
    assert set(rows) == {"dyn-point-8k", "mix-writes"}
    for trace, row in rows.items():
        assert not row["error"] and float(row["errors"] or 0) == 0, row
        assert float(row["dyn_tps"]) > 0 and float(row["db_tps"]) > 0, row
        # two transactions per dynamic request (the query and PHP's RESET ALL), by the
        # database's counters read on node4: over the window against wrk's rate, and over the
        # whole load against every dynamic answer
        assert float(row["db_tps"]) == pytest.approx(
            2 * float(row["dyn_tps"]), rel=db_window_rel(float(row["window_s"]))), row
        assert float(row["db_statements_per_dyn"]) == pytest.approx(2, rel=0.02), row
        assert float(row["cpu_s_app"]) > 0 and float(row["cpu_s_db"]) > 0, row
    writes = rows["mix-writes"]
    assert writes["write_check"] == "ok", writes
    assert int(writes["writes_ok"]) > 0
    # warm-up and measured run: at most 4 connections' requests in flight at each end
    assert int(writes["writes_ok"]) <= int(writes["rows_written"]) <= \
        int(writes["writes_ok"]) + 2 * 4, writes
    assert rows["dyn-point-8k"]["write_check"] == ""
    samples = [json.loads(x) for x in (run_dir / "points" / "p001" / "samples.jsonl")
               .read_text().splitlines()]
    assert set(samples[0]["nodes"]) == {"node1", "node2", "node3", "node4"}
    assert samples[-1]["probes"]["db"]["statements"] > samples[0]["probes"]["db"]["statements"]
    assert nic_state(lab["cluster"]) == lab["before"]


@pytest.mark.lab_full
def test_a_database_stopped_on_its_node_is_started_again_there(lab) -> None:
    """db-fault on the cluster: the db container stopped on node4 mid-point, started again there
    (one sentence), the next point measured as usual."""
    done = lab_run(lab, "db-fault.yml")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    said = [ln for ln in done.stderr.splitlines() if "the db tier stopped during p001" in ln]
    assert len(said) == 1 and said[0].endswith("starting it again, the run goes on"), said
    first, second = summary_rows(last_run(lab, "db-fault"))
    assert float(first["errors"] or 0) > 0 or first["error"], first
    assert not second["error"] and float(second["errors"] or 0) == 0, second
    assert second["write_check"] == "ok" and float(second["db_tps"]) > 0, second
    assert nic_state(lab["cluster"]) == lab["before"]


@pytest.mark.lab_full
def test_pfs_experiment_with_servers_and_clients_on_different_nodes(lab) -> None:
    orangefs_image()
    done = lab_run(lab, "pfs-short.yml")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "pfs-short")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    services = manifest["cluster"]["services"]
    assert services["pvfs-meta"] == ["node4"] and services["pvfs-io1"] == ["node4"]
    assert services["pvfs-client"] == ["node1"]
    rows = summary_rows(run_dir)
    assert rows and all(r["integrity"] == "ok" and not r["error"] for r in rows)
    assert all(float(r["read_mb_per_s"]) > 0 and float(r["write_mb_per_s"]) > 0 for r in rows)
    assert nic_state(lab["cluster"]) == lab["before"]
