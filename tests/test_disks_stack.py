"""Disk systems for real (004 §5): emulated IDE, SCSI and RAID-0 systems built from loop devices,
fio and the web tier on them through `tierbench run`, the throttles read back from the
containers' cgroups and checked against what was measured, three web servers with files spread
over their disks, and nothing left behind: after `tierbench clean`, after a SIGKILL, after a build
that fails half way. Needs root, Docker with Compose v2, the images (`make images`) and, without
md, mkfs.btrfs (`make setup`)."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from stack_env import ROOT, TIERBENCH, cli_env, tierbench

from tierbench.tiers import diskbuild, disks

pytestmark = pytest.mark.stack

EXPERIMENTS = ROOT / "tests" / "data" / "experiments"
MB = 1e6


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Results, state and disk images in temporary folders (stack_env's checks and clean)."""
    base = tmp_path_factory.mktemp("disks")
    with cli_env(base, DISK_IMAGE_DIR=str(base / "images")) as e:
        keys = ("TIERBENCH_STATE_DIR", "DISK_IMAGE_DIR")
        saved = {k: os.environ.get(k) for k in keys}
        os.environ.update({k: e[k] for k in keys})  # for the disks module used in-process below
        try:
            yield e
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def last_run(env: dict[str, str], name: str) -> Path:
    return sorted((Path(env["TIERBENCH_RESULTS"]) / name).iterdir())[-1]


def summary(run: Path) -> list[dict]:
    with (run / "summary.csv").open() as fh:
        return list(csv.DictReader(fh))


def leftovers(env: dict[str, str]) -> dict[str, list[str]]:
    """tierbench's loop devices, mounts and images that still exist."""
    images = Path(env["DISK_IMAGE_DIR"])
    loops = subprocess.run(["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
                           capture_output=True, text=True, timeout=30).stdout.splitlines()
    state = env["TIERBENCH_STATE_DIR"]
    return {"loops": [ln for ln in loops if str(images) in ln],
            "mounts": [ln for ln in Path("/proc/mounts").read_text().splitlines()
                       if f" {state}/disks" in ln],
            "images": sorted(p.name for p in images.glob("*")) if images.is_dir() else []}


NOTHING = {"loops": [], "mounts": [], "images": []}


def test_fio_on_emulated_disks_runs_at_the_papers_bandwidths(env: dict[str, str]) -> None:
    """DC-disk-basic's machinery: the limits Docker gave the benchmark container are the
    paper's, read back from its cgroup, and fio measures them (direct I/O both ways)."""
    done = tierbench(env, "run", str(EXPERIMENTS / "disk-basic-short.yml"))
    assert done.returncode == 0, done.stderr
    run = last_run(env, "disk-basic-short")
    rows = {r["system"]: r for r in summary(run)}
    assert set(rows) == {"ide", "raid0"} and all(r["error"] == "" for r in rows.values())
    ide, raid = rows["ide"], rows["raid0"]
    assert (float(ide["throttle_read_mb_s"]), float(ide["throttle_write_mb_s"])) == (35, 39)
    assert (float(raid["throttle_read_mb_s"]), float(raid["throttle_write_mb_s"])) == (58, 55)
    assert ide["throttle"] == raid["throttle"] == "ok" and ide["emulated"] == "true"
    # one throttled device: within 15 % of its limit
    assert 0.85 * 35 <= float(ide["read_mb_per_s"]) <= 1.15 * 35, ide
    assert 0.85 * 39 <= float(ide["write_mb_per_s"]) <= 1.15 * 39, ide
    # three striped devices: more than one device gives, at most the three limits together
    for phase, each in (("read", 58), ("write", 55)):
        got = float(raid[f"{phase}_mb_per_s"])
        assert 1.5 * each <= got <= 1.15 * 3 * each, (phase, got)
    manifest = json.loads((run / "manifest.json").read_text())
    record = next(p["disk"] for p in manifest["points"].values()
                  if p["disk"]["system"] == "raid0")
    limits = record["throttles_read_back"]["disk-bench"]
    assert len(limits) == 3 and all(v == {"read_bps": 58_000_000, "write_bps": 55_000_000,
                                              "read_iops": None, "write_iops": None}
                                    for v in limits.values())
    ide_record = next(p["disk"] for p in manifest["points"].values()
                      if p["disk"]["system"] == "ide")
    assert [v["read_iops"] for v in ide_record["throttles_read_back"]["disk-bench"].values()] \
        == [disks.IDE_IOPS]  # a seek costs (004 §3.2's disks; values in disks.py)
    assert record["emulated"] and ("raid0" in record["filesystem"]
                                   or "RAID-0" in record["filesystem"])
    assert manifest["experiment"]["disk_systems"]["ide"]["emulated"] is True
    assert "emulated" in (run / "report.html").read_text()
    assert leftovers(env) != NOTHING  # the last system stays up with the stack
    assert tierbench(env, "clean").returncode == 0
    assert leftovers(env) == NOTHING


def test_a_docroot_on_emulated_disks_is_read_cold_at_their_bandwidths(
        env: dict[str, str]) -> None:
    """Uncached 1 MB files through the web tier: each read comes from the throttled devices
    (the hit ratio near 0), an IDE disk takes at least a 1 MB read at 35 MB/s per request, a
    RAID-0 less; the web container's limits are the system's; per-file times are logged."""
    done = tierbench(env, "run", str(EXPERIMENTS / "disk-web-short.yml"))
    assert done.returncode == 0, done.stderr
    run = last_run(env, "disk-web-short")
    rows = {r["docroot"]: r for r in summary(run)}
    for row in rows.values():
        assert row["error"] == "" and float(row["page_cache_hit_ratio"]) < 0.1, row
        assert float(row["file_ms_large"]) > 0 and int(row["files_requested"]) > 10
    assert float(rows["ide"]["mean_ms"]) >= 0.9 * 1e3 * (1 << 20) / (35 * MB), rows["ide"]
    assert float(rows["raid0"]["mean_ms"]) < 0.8 * float(rows["ide"]["mean_ms"])
    manifest = json.loads((run / "manifest.json").read_text())
    for point in manifest["points"].values():
        record = point["disk"]
        want = 35_000_000 if record["system"] == "ide" else 58_000_000
        limits = record["throttles_read_back"]["web"]
        assert limits and all(v["read_bps"] == want for v in limits.values()), record
        assert point["page_cache"].startswith("cold: ")
        per_file = run / "points" / point["point"] / "per_file.csv"
        assert len(per_file.read_text().splitlines()) > 10


def test_three_web_servers_with_files_spread_over_their_disks(env: dict[str, str]) -> None:
    """DC-placement's machinery: popularity spreads every server's files over three devices
    and the balancer sends requests to all three servers; raid-single is one server on a
    RAID-0 of three."""
    done = tierbench(env, "run", str(EXPERIMENTS / "placement-short.yml"))
    assert done.returncode == 0, done.stderr
    run = last_run(env, "placement-short")
    rows = {r["placement"]: r for r in summary(run)}
    assert set(rows) == {"popularity", "raid-single"}
    assert all(r["error"] == "" and float(r["tps"]) > 0 for r in rows.values())
    manifest = json.loads((run / "manifest.json").read_text())
    by = {p["summary"]["placement"]: p for p in manifest["points"].values()}
    spread = by["popularity"]["disk"]
    assert sorted(spread["servers"]) == ["web", "web2", "web3"]
    assert all(len(s["devices"]) == 3 for s in spread["servers"].values())
    assert spread["filesystem"] == "ext3 on each disk"
    assert sorted(spread["throttles_read_back"]) == ["web", "web2", "web3"]
    raid = by["raid-single"]["disk"]
    assert list(raid["servers"]) == ["web"] and len(raid["servers"]["web"]["devices"]) == 3
    # every web server served: its CPU grew over the popularity point
    samples = [json.loads(ln) for ln in
               (run / "points" / by["popularity"]["point"] / "samples.jsonl").open()]
    first, last = samples[0]["cpu"]["web"]["parts"], samples[-1]["cpu"]["web"]["parts"]
    assert sorted(first) == ["web", "web2", "web3"]
    assert all(last[s] - first[s] > 0.05 for s in first), (first, last)


def test_a_killed_run_leaves_nothing_after_clean(env: dict[str, str]) -> None:
    """SIGKILL once the disk system is up; `tierbench clean` then removes its mounts, loop
    devices and images (from the state file it recorded before each step)."""
    tierbench(env, "clean")
    proc = subprocess.Popen([*TIERBENCH, "run", str(EXPERIMENTS / "disk-web-short.yml")],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not leftovers(env)["mounts"]:
            time.sleep(0.5)
        assert leftovers(env)["mounts"], "the disk system never came up"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert disks.state_path().is_file()
    done = tierbench(env, "clean")
    assert done.returncode == 0, done.stderr
    assert leftovers(env) == NOTHING
    assert not disks.state_path().exists()


def test_a_build_that_fails_half_way_removes_what_it_made(env: dict[str, str]) -> None:
    """Devices too small for btrfs: the loop devices are made, mkfs.btrfs refuses them; the
    failure is one sentence and nothing stays (images, loop devices, mounts, state)."""
    if disks.has_md():
        pytest.skip("this kernel has md: RAID-0 uses mdadm, which accepts small devices")
    tierbench(env, "clean")
    raid = disks.BUILTIN["raid0"]
    plan = disks.Plan(raid, disks.layout(raid), ("web",), 16 << 20)
    with pytest.raises(disks.DiskError) as err:
        diskbuild.ensure(plan, env, log=lambda _msg: None)
    assert "btrfs RAID-0 of web" in str(err.value) and "\n" not in str(err.value)
    assert leftovers(env) == NOTHING
    assert not disks.state_path().exists()
