"""Disk systems without Docker: 004 Table 4's file distributions, the disk-system definitions and
their sizes, the settings the web kind refuses, the access-log parser and the per-file figures,
the fileset job writing a spread server's files where its map says."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tierbench.config.errors import ConfigError
from tierbench.config.models import validate
from tierbench.kinds import disk as disk_kind
from tierbench.kinds import registry
from tierbench.kinds.web import webdisks
from tierbench.tiers import orangefs
from tierbench.tiers import diskbuild, disks
from tierbench.placement.cluster import ClusterPlacer
from tierbench.placement.clusterfile import parse_cluster
from workloads import filesets, spread, traces

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


# --------------------------------------------------------------------------- 004 Table 4


def test_single_puts_every_file_on_the_first_disk() -> None:
    assert spread.assign([10, 20, 30], "single", 3) == [0, 0, 0]


def test_popularity_deals_ranks_round_robin() -> None:
    # file 2 is the most popular, then 0, 3, 1, 4
    got = spread.assign([1, 1, 1, 1, 1], "popularity", 3, popularity=[2, 0, 3, 1, 4])
    assert got == [1, 0, 0, 2, 1]  # rank 0 (file 2) on disk 0, rank 1 (file 0) on 1, ...


def test_size_deals_files_smallest_first() -> None:
    sizes = [500, 100, 400, 200, 300]
    got = spread.assign(sizes, "size", 2)
    # by size: 100 (f1) -> d0, 200 (f3) -> d1, 300 (f4) -> d0, 400 (f2) -> d1, 500 (f0) -> d0
    assert got == [0, 0, 1, 1, 0]
    assert spread.bytes_per_disk(sizes, got, 2) == [900, 600]


def test_random_is_seeded_and_uses_every_disk_about_evenly() -> None:
    sizes = [1] * 3000
    a = spread.assign(sizes, "random", 3, seed=5)
    assert a == spread.assign(sizes, "random", 3, seed=5)
    assert a != spread.assign(sizes, "random", 3, seed=6)
    counts = [a.count(d) for d in range(3)]
    assert all(abs(c - 1000) < 100 for c in counts), counts  # 3 sd of a binomial(3000, 1/3)


def test_bad_distributions_are_refused() -> None:
    with pytest.raises(spread.SpreadError, match="strategy must be one of"):
        spread.assign([1], "striped", 3)
    with pytest.raises(spread.SpreadError, match="popularity needs"):
        spread.assign([1, 2], "popularity", 3, popularity=[0, 0])


def test_a_map_reads_back_what_was_written() -> None:
    lines = spread.map_lines(["/a/f1", "/a/f2"], [2, 0])
    assert lines == ["/a/f1 d3", "/a/f2 d1"]
    assert spread.read_map("# comment\n" + "\n".join(lines) + "\n\n") == \
        {"/a/f1": "d3", "/a/f2": "d1"}


# --------------------------------------------------------------------------- definitions


def test_built_in_systems_carry_the_papers_bandwidths() -> None:
    systems = disks.resolve()
    assert (systems["ide"].read_bps, systems["ide"].write_bps) == (35_000_000, 39_000_000)
    assert (systems["scsi"].read_bps, systems["scsi"].write_bps) == (58_000_000, 55_000_000)
    raid = systems["raid0"]
    assert raid.devices == 3 and raid.raid0 and raid.read_bps == 58_000_000
    assert all(s.emulated for s in systems.values())
    assert "emulated: 3 loop devices" in raid.describe()


def test_an_experiments_own_systems_add_to_or_replace_the_built_in_ones() -> None:
    real = validate(disks.DiskSystemSpec, {"devices": ["/dev/sdb", "/dev/sdc"], "wipe": True},
                    "f")
    slow = validate(disks.DiskSystemSpec, {"devices": 1, "read_mb_s": 10, "write_mb_s": 12},
                    "f")
    systems = disks.resolve({"ide": real, "slow": slow})
    assert systems["ide"].paths == ("/dev/sdb", "/dev/sdc") and systems["ide"].raid0
    assert not systems["ide"].emulated and systems["ide"].read_bps is None
    assert systems["slow"].read_bps == 10_000_000 and not systems["slow"].raid0
    assert systems["scsi"] == disks.BUILTIN["scsi"]


@pytest.mark.parametrize("spec, fragment", [
    ({"devices": ["/dev/sdb"]}, "wipe: tierbench makes a new file system on /dev/sdb"),
    ({"devices": "sdb"}, "devices: must be a number of emulated devices"),
    ({"devices": ["sdb"], "wipe": True}, "devices: must name block devices like /dev/sdb"),
    ({"devices": 0}, "devices: must be a number of emulated devices (1-16)"),
    ({"devices": 2}, "read_mb_s: an emulated disk system needs read_mb_s and write_mb_s"),
    ({"devices": 2, "read_mb_s": 5, "write_mb_s": 5, "raid0": False},
     "raid0: several devices per server are striped"),
    ({"devices": ["/dev/sdb", "/dev/sdb"], "wipe": True}, "devices: names a device twice"),
    ({"devices": 1, "read_mb_s": 5, "write_mb_s": 5, "colour": 1}, "unknown key 'colour'"),
])
def test_bad_disk_systems_are_one_sentence(spec: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate(disks.DiskSystemSpec, spec, "exp.yml")
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_strategies_lay_out_three_servers_with_three_disks_but_raid_single() -> None:
    scsi = disks.BUILTIN["scsi"]
    assert webdisks.layout(scsi, "single-disk") == disks.Layout(3, 1, False)
    assert webdisks.layout(scsi, "size") == disks.Layout(3, 3, False, "size")
    assert webdisks.layout(scsi, "raid-single") == disks.Layout(1, 3, True)
    assert webdisks.layout(scsi, "raid") == disks.Layout(3, 3, True)
    assert disks.layout(disks.BUILTIN["raid0"]) == disks.Layout(1, 3, True)
    assert set(webdisks.STRATEGIES) == set(webdisks.STRATEGY_NOTES)


def test_device_sizes_hold_the_files_and_the_file_systems_room() -> None:
    lay = disks.Layout(1, 3, True)
    per = disks.per_disk_bytes(lay, 300 * MIB)
    assert per == [100 * MIB] * 3
    p = disks.plan(disks.BUILTIN["raid0"], lay, ["web"], per)
    assert p.device_bytes == math.ceil((100 * MIB * 1.15 + 256 * MIB) / MIB) * MIB
    assert p.image_bytes() == 3 * p.device_bytes
    spread = disks.Layout(3, 3, False, "random")
    assert disks.per_disk_bytes(spread, 90, [10, 50, 30]) == [10, 50, 30]
    p = disks.plan(disks.BUILTIN["scsi"], spread, ["web", "web2", "web3"], [10, 50, 30])
    assert p.image_bytes() == 9 * p.device_bytes
    real = disks.System("mine", 1, None, None, False, ("/dev/sdb",))
    assert disks.plan(real, disks.Layout(1, 1, False), ["web"], [MIB]).image_bytes() == 0
    with pytest.raises(disks.DiskError, match="layout of 3 servers"):
        disks.plan(disks.BUILTIN["scsi"], spread, ["web"], [1])


# --------------------------------------------------------------------------- the web kind


def stack_problem(docroots: list[str], strategies: list[str] | None = None,
                  servers: int | None = None, proxy: str = "apache") -> str | None:
    return webdisks.settings_problem(docroots, ("disk", "tmpfs", "orangefs"),
                                     disks.resolve(), strategies, servers, proxy)


def test_the_web_kinds_disk_settings() -> None:
    assert stack_problem(["ide", "scsi", "raid0", "disk+hot-tmpfs"]) is None
    assert "stack.docroot[1]: must be one of disk, tmpfs, orangefs or a disk system" in \
        stack_problem(["ide", "nfs"])
    assert "stack.web_servers: must be 1 or 3" in stack_problem(["disk"], servers=2)
    assert stack_problem(["scsi"], ["random", "raid"]) is None
    assert "needs docroot to be a one-device disk system" in stack_problem(["raid0"], ["size"])
    assert "leave it out with stack.placement" in stack_problem(["scsi"], ["size"], servers=3)
    assert "need proxy: apache" in stack_problem(["scsi"], ["raid"], proxy="haproxy")
    assert stack_problem(["scsi"], ["raid-single"], proxy="haproxy") is None


def test_popularity_follows_the_zipf_traces_mapping() -> None:
    fs = {"kind": "class", "class": 0, "seed": 1}
    spec = {"name": "z", "kind": "zipf", "alpha": 0.9, "mapping": "small-first", "fileset": fs}
    pops = webdisks.popularity([spec], seed=4)
    files = filesets.files(fs)
    assert pops[filesets.set_name(fs)] == traces.rank_order(files, "small-first", 4)
    sizes = [files[i][1] for i in pops[filesets.set_name(fs)]]
    assert sizes == sorted(sizes)
    hit = {"name": "h", "kind": "hit-ratio", "size": 4096, "hit_ratio": 0.5, "requests": 9}
    assert webdisks.popularity([hit], 4)["same-4096x10"] == list(range(10))


def test_every_strategys_plan_holds_every_file() -> None:
    fs = {"kind": "class", "class": 0, "seed": 1}
    spec = {"name": "z", "kind": "zipf", "alpha": 0.9, "fileset": fs}
    pops = webdisks.popularity([spec], 1)
    total = filesets.total_bytes(fs)
    for strategy, lay in webdisks.STRATEGIES.items():
        settings = {"docroot": "scsi", "placement": strategy, "web_servers": lay.servers}
        p, lines = webdisks.plan_for(settings, disks.resolve(), [fs], pops, 1)
        assert p.servers == ("web", "web2", "web3")[:lay.servers]
        assert p.device_bytes * lay.disks >= total * (1 / lay.disks if lay.raid0 else 1), \
            strategy
        if lay.spread:
            mapped = spread.read_map("\n".join(lines))
            assert set(mapped) == {path for path, _ in filesets.files(fs)}
            assert set(mapped.values()) == {"d1", "d2", "d3"}
        else:
            assert lines == []
    assert webdisks.plan_for({"docroot": "disk"}, disks.resolve(), [fs], pops, 1) is None


LOG = """198.18.2.20 [24/Nov/2026:22:14:39 +0000] "GET /s/f1.bin HTTP/1.1" 200 4096 1500
198.18.2.20 [24/Nov/2026:22:14:40 +0000] "GET /s/f1.bin HTTP/1.1" 200 4096 500
198.18.2.20 [24/Nov/2026:22:14:40 +0000] "GET /s/f2.bin HTTP/1.1" 200 2097152 30000
198.18.2.20 [24/Nov/2026:22:14:41 +0000] "GET /s/f3.bin HTTP/1.1" 404 0 100
198.18.2.20 [24/Nov/2026:22:14:45 +0000] "GET /s/f1.bin HTTP/1.1" 200 4096 9000
not a log line
"""


def test_access_log_lines_parse() -> None:
    when, path, status, nbytes, ms = webdisks.parse_line(LOG.splitlines()[0])
    assert (path, status, nbytes, ms) == ("/s/f1.bin", 200, 4096, 1.5)
    assert when == 1795558479.0  # 2026-11-24 22:14:39 UTC
    assert webdisks.parse_line("not a log line") is None


def test_per_file_figures_average_each_files_requests_then_the_files(tmp_path: Path) -> None:
    sizes = {"/s/f1.bin": 4096, "/s/f2.bin": 2 * MIB, "/s/f3.bin": 70000}
    start = 1795558479.4  # inside 22:14:39; 22:14:45 is after the end
    out = tmp_path / "per_file.csv"
    got = webdisks.per_file(LOG.splitlines(), sizes, start, start + 3, out)
    assert got["files_requested"] == 2  # f3 failed (404): not counted
    assert got["file_ms_small"] == pytest.approx(1.0)  # f1: (1.5 + 0.5) / 2
    assert got["file_ms_large"] == pytest.approx(30.0)
    assert math.isnan(got["file_ms_medium"])
    rows = out.read_text().splitlines()
    assert rows[0] == "path,size_bytes,requests,mean_ms"
    assert rows[1:] == ["/s/f1.bin,4096,2,1.0000", "/s/f2.bin,2097152,1,30.0000"]


# --------------------------------------------------------------------------- the fileset job


def test_the_fileset_job_spreads_a_servers_files_as_its_map_says(tmp_path: Path) -> None:
    fs = {"kind": "uniform-log", "files": 12, "min_size": 100, "max_size": 5000, "seed": 3}
    files = filesets.files(fs)
    disk_of = spread.assign([s for _, s in files], "size", 3)
    spread_root, whole = tmp_path / "web", tmp_path / "web2"
    spread_root.mkdir()
    whole.mkdir()
    (spread_root / spread.MAP_NAME).write_text(
        "\n".join(spread.map_lines([p for p, _ in files], disk_of)) + "\n")
    env = dict(os.environ, FILESETS=json.dumps([fs]), PYTHONPATH=str(ROOT),
               FILESET_ROOTS=json.dumps([str(spread_root), str(whole)]))
    done = subprocess.run([sys.executable, "-m", "workloads.filesets"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "24 file(s) written" in done.stdout
    for (path, size), d in zip(files, disk_of):
        on = spread_root / f"d{d + 1}" / path.lstrip("/")
        assert on.stat().st_size == size
        assert not any((spread_root / f"d{k + 1}" / path.lstrip("/")).exists()
                       for k in range(3) if k != d)
        assert (whole / path.lstrip("/")).stat().st_size == size


# --------------------------------------------------------------------------- the disk kind


def test_fio_output_and_phase_cpu() -> None:
    text = "fio-3.33\n" + json.dumps({"jobs": [{"read": {
        "io_bytes": 350_000_000, "bw_bytes": 35_000_000, "iops": 33.4, "runtime": 10000,
        "clat_ns": {"mean": 29_900_000.0}}}]})
    got = disk_kind.parse_fio(text, "read")
    assert got == {"mb_per_s": 35.0, "iops": 33.4, "lat_ms": 29.9, "bytes": 350_000_000,
                   "s": 10.0}
    ticks = dict.fromkeys(("user", "nice", "system", "idle", "iowait", "irq", "softirq",
                           "steal"), 0)
    cpu = disk_kind.phase_cpu({"usage_s": 1.0}, {"usage_s": 1.5}, ticks,
                              {**ticks, "idle": 150, "iowait": 50}, 10.0, 1024 * 1000)
    assert cpu == {"cpu_pct": 5.0, "cpu_us_per_kb": 500.0, "host_iowait_pct": 25.0,
                   "host_idle_pct": 75.0}
    argv = disk_kind.fio_argv("write", disk_kind.DiskBlock())
    assert "--direct" in argv and argv[argv.index("--direct") + 1] == "1"
    assert "--time_based" not in argv  # the write phase writes the whole file once


def test_the_shipped_disk_experiment_plans_the_papers_systems() -> None:
    exp = registry.load_experiment("dc-disk-basic")
    kind = registry.kind("disk")
    assert [n for n, _ in kind.axes(exp)] == ["system", "mode", "repetition"]
    spec = kind.report(kind.resolved(exp))
    paper = {(r["match"]["system"], r["match"]["phase"]): r["with"]
             for r in spec["reference"]["rows"]}
    assert paper == {("ide", "read"): 35, ("ide", "write"): 39, ("scsi", "read"): 58,
                     ("scsi", "write"): 55, ("raid0", "read"): 120, ("raid0", "write"): 147}


def test_several_web_servers_over_disk_systems_run_on_several_web_nodes() -> None:
    exp = registry.load_experiment("dc-placement")
    data = {"version": 1, "nodes": [
        {"name": f"node{n}", "address": f"198.18.16.1{n}",
         "interfaces": [{"name": "eth0", "address": f"198.18.16.1{n}/24"}]} for n in (1, 2, 3)],
        "roles": {"loadgen": "node1", "proxy": "node1", "web": ["node2", "node3"]}}
    exp.placer = ClusterPlacer(parse_cluster(data, registry.roles(), "c.yml"))
    assert registry.kind("web").cluster_roles(exp) == ["loadgen", "proxy", "web"]
    for other in ("dc-cache-hit", "dc-disk-file"):
        assert registry.kind("web").cluster_roles(registry.load_experiment(other)) == \
            ["loadgen", "proxy", "web"]


@pytest.mark.parametrize("name", ["dc-classes", "dc-classes-large", "dc-hybrid"])
def test_the_orangefs_data_center_rows_take_the_orangefs_roles_on_a_cluster(name: str) -> None:
    exp = registry.load_experiment(name)
    exp.placer = ClusterPlacer(parse_cluster(
        {"version": 1, "nodes": [
            {"name": f"node{n}", "address": f"198.18.16.1{n}",
             "interfaces": [{"name": "eth0", "address": f"198.18.16.1{n}/24"}]}
            for n in (1, 2, 3, 4)],
         "roles": {"loadgen": "node1", "proxy": ["node2", "node3", "node4"],
                   "web": ["node2", "node3", "node4"], "pfs_meta": "node1",
                   "pfs_io": ["node2", "node3", "node4"]}}, registry.roles(), "c.yml"))
    assert registry.kind("web").cluster_roles(exp) == ["loadgen", "proxy", "web", "pfs_meta",
                                                        "pfs_io"]


def test_three_web_servers_run_on_a_cluster_over_orangefs_too(tmp_path: Path) -> None:
    text = (ROOT / "experiments" / "dc-single.yml").read_text()
    path = tmp_path / "three.yml"
    path.write_text(text.replace("web_mmap: on}", "web_mmap: on, web_servers: 3}"))
    assert registry.kind("web").cluster_roles(registry.load_experiment(str(path))) == \
        ["loadgen", "proxy", "web"]
    path.write_text(text.replace("web_mmap: on}", "web_mmap: on, web_servers: 3, docroot: "
                                 "orangefs}"))
    assert registry.kind("web").cluster_roles(registry.load_experiment(str(path))) == \
        ["loadgen", "proxy", "web", "pfs_meta", "pfs_io"]


# --------------------------------------------------------------------------- OrangeFS on disks


def test_orangefs_stores_on_one_disk_of_the_system_per_io_server() -> None:
    fs = {"kind": "class", "class": 2, "seed": 1}  # 450 MiB
    total = filesets.total_bytes(fs)
    known = disks.resolve()
    settings = {"docroot": "orangefs", "pvfs_io_servers": 3, "pvfs_storage": "ide"}
    alone = webdisks.plan_for({"docroot": "ide"}, known, [fs], {}, 1)[0]  # one disk holds all
    p, lines = webdisks.plan_for(settings, known, [fs], {}, 1)
    assert p.servers == ("pvfs-io1", "pvfs-io2", "pvfs-io3") and lines == []
    assert p.system.name == "ide" and p.layout == disks.Layout(3, 1, False)
    assert total / 3 * 1.1 <= p.device_bytes < alone.device_bytes - total / 2  # a third each
    assert p.image_bytes() == 3 * p.device_bytes
    for other in ({**settings, "pvfs_storage": "tmpfs"}, {**settings, "pvfs_storage": "disk"}):
        assert webdisks.plan_for(other, known, [fs], {}, 1) is None
    # the web tier's own docroot on ide ignores pvfs_storage (its servers are web's)
    assert webdisks.plan_for({**settings, "docroot": "ide"}, known, [fs], {}, 1)[0].servers == \
        ("web",)


def test_orangefs_storage_settings_and_words() -> None:
    known = disks.resolve()
    assert webdisks.pvfs_storage_problem("ide", known) is None
    assert webdisks.pvfs_storage_problem("tmpfs", known) is None
    assert "stack.pvfs_storage: must be tmpfs, disk" in webdisks.pvfs_storage_problem("nfs", known)
    words = {d: webdisks.label({"docroot": d, "pvfs_io_servers": 3, "pvfs_storage": st}, known)
             for d, st in (("tmpfs", None), ("disk", None), ("orangefs", "tmpfs"),
                           ("orangefs", "ide"), ("ide+hot-tmpfs", None))}
    assert "tmpfs (memory: never evicted" in words["tmpfs"]
    assert "Docker volume on the host's disk" in words["disk"]
    assert "OrangeFS over 3 I/O servers storing on disk system ide" in words["orangefs"] or \
        "storing on tmpfs" in words["orangefs"]
    assert "storing on disk system ide (emulated" in webdisks.label(
        {"docroot": "orangefs", "pvfs_io_servers": 3, "pvfs_storage": "ide"}, known)
    assert "35/39 MB/s" in words["ide+hot-tmpfs"] and "small files also on tmpfs" in \
        words["ide+hot-tmpfs"]


def test_orangefs_servers_mount_their_disks_at_data_throttled() -> None:
    built = diskbuild.Built(key={}, servers=[
        diskbuild.Server(f"pvfs-io{i}", f"/state/disks/pvfs-io{i}", [f"/dev/loop{i}"],
                         [f"/state/disks/pvfs-io{i}"]) for i in (1, 2)])
    services = orangefs.storage_services(built, disks.BUILTIN["ide"])
    assert set(services) == {"pvfs-io1", "pvfs-io2"}  # no fileset job: the copy job fills it
    assert services["pvfs-io2"]["volumes"] == [
        {"type": "bind", "source": "/state/disks/pvfs-io2", "target": "/data"}]
    assert services["pvfs-io1"]["blkio_config"]["device_read_bps"] == [
        {"path": "/dev/loop1", "rate": 35_000_000}]


def test_storage_reads_count_the_devices_sectors(tmp_path: Path) -> None:
    for name, sectors in (("loop1", 8), ("loop2", 2)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "stat").write_text(f"  5 0 {sectors} 1 0 0 0 0 0 0 0\n")
    built = diskbuild.Built(key={}, servers=[
        diskbuild.Server("pvfs-io1", "/x", ["/dev/loop1"], []),
        diskbuild.Server("pvfs-io2", "/y", ["/dev/loop2"], [])])
    assert diskbuild.device_read_bytes(built, str(tmp_path)) == 10 * 512
    built.servers[1].devices.append("/dev/loop9")  # no counter: nothing rather than a part
    assert diskbuild.device_read_bytes(built, str(tmp_path)) is None


def test_orangefs_on_a_disk_system_may_start_cold(tmp_path: Path) -> None:
    path = tmp_path / "x.yml"
    path.write_text(json.dumps({
        "name": "x", "kind": "web", "modes": ["offloads-on"],
        "traces": [{"name": "a", "kind": "single", "size": 4096}],
        "stack": {"docroot": "orangefs", "pvfs_storage": "ide", "page_cache": "cold",
                  "pvfs_memory": "512m"}}))
    exp = registry.load_experiment(str(path))
    assert exp.settings.stack.pvfs_memory == "512m"
    assert exp.settings.stack.page_cache == "cold"


def test_folders_on_one_file_system_add_up(tmp_path: Path) -> None:
    from tierbench import space

    (tmp_path / "a").mkdir()
    room = space.disk_room(tmp_path)
    half = max(room // 2 + 1, 1)
    images = space.on_disk("images", half, tmp_path / "a", "the images' folder", "fix a")
    volumes = space.on_disk("file sets", half, tmp_path / "b" / "not-yet", "Docker's", "fix b",
                            role="web")
    assert images.device == volumes.device == os.stat(tmp_path).st_dev
    assert space.problems([images]) == [] and space.problems([volumes]) == []
    both = space.problems([images, volumes])  # each fits alone, together they do not
    assert len(both) == 1 and "images" in both[0] and "file sets" in both[0]
    assert "fix a; fix b" in both[0]


def test_a_raid_striped_wider_than_004s_is_warned_on_every_point_of_the_report(
        tmp_path: Path) -> None:
    """The plan is not the only place: each point striped at btrfs' 64 KiB carries the
    raid_stripe check, which the report lists among the point's problems; 4 KiB is ok and
    points with nothing striped have no value and no warning."""
    import synthetic_runs
    from analysis import report

    assert disks.stripe_check("ext3 on md RAID-0, 4 KiB chunk") == "ok"
    assert disks.stripe_check("ext3 on device-mapper RAID-0, 4 KiB chunk") == "ok"
    assert disks.stripe_check("ext3") is None
    wide = disks.stripe_check("btrfs raid0, 64 KiB stripe (no md in this kernel)")
    assert wide and "64 KiB" in wide and "004 §3.2's 4 KiB" in wide
    rows, traces, modes, _web = synthetic_runs.family_rows("dc-placement")
    for row in rows:
        row["raid_stripe"] = wide if str(row["placement"]).startswith("raid") else None
    spec = disks.with_stripe_check(synthetic_runs.spec_of("dc-placement"))
    man = synthetic_runs.manifest("dc-placement", traces, modes, spec)
    page = report.write_report(synthetic_runs.write_run(tmp_path / "run", rows, man)).read_text()
    top = page[: page.index('id="figure"')]
    raid = sum(str(r["placement"]).startswith("raid") for r in rows)
    assert raid and top.count("raid_stripe: striped at btrfs") == raid
    assert "values missing" not in top and "raid_stripe</" not in top
    placed = {"name": "dc-placement", "stack": {"placement": ["single-disk", "raid"]}}
    assert registry.kind("web").report(placed)["checks"][-1] == "raid_stripe"
    assert "raid_stripe" not in registry.kind("web").report({"name": "quick"}).get("checks", [])
    assert "raid_stripe" in registry.kind("disk").report({"name": "dc-disk-basic"})["checks"]


@pytest.mark.parametrize("entry", ["tierbench.cli", "tierbench.runner", "tierbench.study",
                                   "tierbench.advise.run"])
def test_every_way_into_the_tool_brings_the_disk_systems_teardown_to_down(entry: str) -> None:
    """A placer's ``down`` removes the disk systems through the step tierbench.tiers.diskbuild
    registers on import (the placement cannot import the floor above it): whatever a user or
    a script imports to bring a stack up must bring that step, or disk images stay mounted."""
    code = (f"import {entry}\nfrom tierbench.placement import placer\n"
            "print([f'{s.__module__}.{s.__name__}' for s in placer.AFTER_DOWN])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "tierbench.tiers.diskbuild.after_down" in out
