"""Disk systems on a 4-node lab cluster through `tierbench run --cluster` (markers ``stack`` and
``lab_full``: `make test-cluster` runs them; one lab for the module, `setup/lab.sh up 4` with
no image shipped up front). The lab's cluster file puts the `disk` and `web` roles on node3, so
every disk system is built there: loop devices over images in this checkout's folder of node3's
workdir, ext3 or btrfs RAID-0, mounted under it and throttled by node3's Docker engine.

- kind disk (disk-basic-short): the limits read back from the benchmark container's cgroup on
  node3 are the paper's, and fio measures them there (direct I/O, the nested engine's blkio
  throttle);
- a docroot on disk systems (disk-web-short): uncached 1 MB files read through node3's emulated
  IDE disk and RAID-0, the web container's limits read back there, per-file times logged;
- SIGKILL of the controller once node3's disk system is mounted, then `tierbench clean
  --cluster`: nothing stays.

After each test `tierbench clean --cluster` leaves no loop device of tierbench's, mount or image
file on any node or on this host, and every node's NIC settings are as before the module."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from stack_env import (EXPERIMENTS, ROOT, TIERBENCH, lab_cluster, lab_run, last_run, nic_state,
                       summary_rows, tierbench)

from tierbench.placement import clusterfile, compose, nodes
from tierbench.tiers import disks

pytestmark = [pytest.mark.stack, pytest.mark.lab_full]

MB = 1_000_000
NOTHING_ON_NODE = {"loops": [], "mounts": [], "images": []}


def sh(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False)


def node_dir(lab: dict) -> str:
    """This checkout's folder in the nodes' workdir (cluster.ClusterPlacer.node_dir)."""
    return f"{lab['cluster'].workdir}/{compose.PROJECT}"


def on_node(node: clusterfile.Node, workdir: str) -> dict[str, list[str]]:
    """The node's loop devices, mounts under its workdir's disks, and image files."""
    script = (f"losetup -l -n -O NAME,BACK-FILE | grep 'tierbench-disk@{node.name}-' || true; "
              "echo ==; grep ' {w}/disks' /proc/self/mounts || true; echo ==; "
              "ls {w}/disk-images 2>/dev/null | grep '\\.img$' || true").replace("{w}", workdir)
    parts = nodes.run_on_node(node, script, timeout=30).stdout.split("==\n")
    return {k: [ln for ln in v.splitlines() if ln.strip()]
            for k, v in zip(("loops", "mounts", "images"), parts)}


def on_host(env: dict[str, str]) -> list[str]:
    """Loop devices of any tierbench image (the host's or a node's: one kernel), mounts under
    the state folder, image files in the host's default folder."""
    loops = [ln for ln in sh("losetup", "-l", "-n", "-O", "NAME,BACK-FILE").stdout.splitlines()
             if "tierbench-disk" in ln]
    state = env["TIERBENCH_STATE_DIR"]
    mounts = [ln for ln in Path("/proc/mounts").read_text().splitlines() if f" {state}/" in ln]
    folder = disks.image_dir({})
    images = [p.name for p in folder.glob("tierbench-disk*")] if folder.is_dir() else []
    return loops + mounts + images


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_cluster(tmp_path_factory) as lab:
        assert [n.name for n in lab["cluster"].nodes_for("disk")] == ["node3"]
        yield lab


def clean_leaves_nothing(lab: dict) -> None:
    done = tierbench(lab["env"], "clean", "--cluster", str(lab["path"]), timeout=300)
    assert done.returncode == 0, done.stderr
    for node in lab["cluster"].nodes:
        assert on_node(node, node_dir(lab)) == NOTHING_ON_NODE, node.name
    assert on_host(lab["env"]) == []
    assert not (Path(lab["env"]["TIERBENCH_STATE_DIR"]) / "disks.json").exists()
    assert nic_state(lab["cluster"]) == lab["before"]


def test_fio_on_a_nodes_emulated_disks_runs_at_the_papers_bandwidths(lab) -> None:
    done = lab_run(lab, "disk-basic-short.yml")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "disk system ide on node3" in done.stderr
    run_dir = last_run(lab, "disk-basic-short")
    rows = {r["system"]: r for r in summary_rows(run_dir)}
    assert set(rows) == {"ide", "raid0"} and all(r["error"] == "" for r in rows.values())
    ide, raid = rows["ide"], rows["raid0"]
    assert (float(ide["throttle_read_mb_s"]), float(ide["throttle_write_mb_s"])) == (35, 39)
    assert (float(raid["throttle_read_mb_s"]), float(raid["throttle_write_mb_s"])) == (58, 55)
    assert ide["throttle"] == raid["throttle"] == "ok"
    # the nested engine's throttle holds: reads within 15 % of the device's limit; direct
    # writes never above it (through the node's overlay file system, on a loaded 2-core host,
    # they were seen as low as 25 of 39 MB/s)
    assert 0.85 * 35 <= float(ide["read_mb_per_s"]) <= 1.15 * 35, ide
    assert 0.5 * 39 <= float(ide["write_mb_per_s"]) <= 1.15 * 39, ide
    for phase, each in (("read", 58), ("write", 55)):
        got = float(raid[f"{phase}_mb_per_s"])
        assert 1.5 * each <= got <= 1.15 * 3 * each, (phase, got)
    assert float(ide["write_cpu_pct"]) >= 0  # read from node3's counters
    manifest = json.loads((run_dir / "manifest.json").read_text())
    record = next(p["disk"] for p in manifest["points"].values()
                  if p["disk"]["system"] == "raid0")
    assert record["servers"]["disk-bench"]["node"] == "node3"
    assert record["servers"]["disk-bench"]["root"] == \
        f"{node_dir(lab)}/disks/disk-bench"
    limits = record["throttles_read_back"]["disk-bench"]
    assert len(limits) == 3 and all(v == {"read_bps": 58_000_000, "write_bps": 55_000_000,
                                              "read_iops": None, "write_iops": None}
                                    for v in limits.values())
    node3 = lab["cluster"].node("node3")
    left = on_node(node3, node_dir(lab))
    assert len(left["loops"]) == 3 and len(left["images"]) == 3 and left["mounts"]
    for node in lab["cluster"].nodes:
        if node.name != "node3":
            assert on_node(node, node_dir(lab)) == NOTHING_ON_NODE
    clean_leaves_nothing(lab)


def test_a_docroot_on_a_nodes_disk_systems_is_read_cold_at_their_bandwidths(lab) -> None:
    done = lab_run(lab, "disk-web-short.yml")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "disk-web-short")
    rows = {r["docroot"]: r for r in summary_rows(run_dir)}
    for row in rows.values():
        # near 0 (0.10 seen for IDE on a loaded lab host, where the window holds few files)
        assert row["error"] == "" and float(row["page_cache_hit_ratio"]) < 0.15, row
        assert float(row["file_ms_large"]) > 0 and int(row["files_requested"]) > 10
    assert float(rows["ide"]["mean_ms"]) >= 0.9 * 1e3 * (1 << 20) / (35 * MB), rows["ide"]
    assert float(rows["raid0"]["mean_ms"]) < 0.8 * float(rows["ide"]["mean_ms"])
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for point in manifest["points"].values():
        record = point["disk"]
        want = 35_000_000 if record["system"] == "ide" else 58_000_000
        limits = record["throttles_read_back"]["web"]
        assert limits and all(v["read_bps"] == want for v in limits.values()), record
        assert record["servers"]["web"]["node"] == "node3"
        assert point["page_cache"].startswith("cold: ")
    clean_leaves_nothing(lab)


def test_sigkill_then_clean_removes_the_nodes_disk_systems(lab) -> None:
    node3 = lab["cluster"].node("node3")
    proc = subprocess.Popen([*TIERBENCH, "run", str(EXPERIMENTS / "disk-web-short.yml"),
                             "--cluster", str(lab["path"])], env=lab["env"], cwd=ROOT,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not on_node(node3, node_dir(lab))["mounts"]:
            time.sleep(1)
        assert on_node(node3, node_dir(lab))["mounts"], "no disk system on node3"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    state = Path(lab["env"]["TIERBENCH_STATE_DIR"]) / "disks.json"
    assert state.is_file() and "node3" in state.read_text()
    clean_leaves_nothing(lab)


def test_three_web_servers_lay_files_over_their_disks_on_the_web_node(lab) -> None:
    """DC-placement's machinery on a cluster: web, web2 and web3 on the web node, each over its
    own three emulated SCSI disks (files spread by popularity), then one server on a RAID-0."""
    done = lab_run(lab, "placement-short.yml")
    assert done.returncode == 0, done.stderr[-3000:]
    run_dir = last_run(lab, "placement-short")
    rows = {r["placement"]: r for r in summary_rows(run_dir)}
    assert set(rows) == {"popularity", "raid-single"}
    assert all(r["error"] == "" and float(r["tps"]) > 0 for r in rows.values()), rows
    manifest = json.loads((run_dir / "manifest.json").read_text())
    servers = {}
    for point in manifest["points"].values():
        record = point["disk"]
        servers[len(record["servers"])] = record
        assert {v["node"] for v in record["servers"].values()} == {"node3"}, record
        for name in record["servers"]:
            limits = record["throttles_read_back"][name]
            assert len(limits) == 3 and all(v["read_bps"] == 58_000_000
                                            for v in limits.values()), record
    assert sorted(servers) == [1, 3]
    clean_leaves_nothing(lab)
