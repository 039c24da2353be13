"""The OrangeFS tier without its image: config generation, compose wiring, the experiment schema,
the client stream script on a local directory, result parsing, CPU arithmetic and the report."""

import hashlib
import json
import os
import shutil
import subprocess
import time
import zlib
from pathlib import Path

import pytest

from tierbench import runner
from tierbench.config.errors import ConfigError
from tierbench.kinds import registry
from tierbench.kinds.pfs import phases, settings, streams
from tierbench.kinds.contract import Experiment
from tierbench.measure.sampler import PROC_STAT_FIELDS
from tierbench.tiers import orangefs

ROOT = Path(__file__).resolve().parent.parent
IMAGE_DIR = ROOT / "images" / "orangefs"
IO_SCRIPT = ROOT / "workloads" / "pfs" / "pfs-io.sh"


# --------------------------------------------------------------------------- config generation


@pytest.fixture
def fake_genconfig(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A pvfs2-genconfig stand-in that records its arguments and writes its output file."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    tool = bindir / "pvfs2-genconfig"
    tool.write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS_OUT"\n'
                    'for last; do :; done\necho "<Defaults>" > "$last"\n')
    tool.chmod(0o755)
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}",
               ARGS_OUT=str(tmp_path / "args"), PVFS_CONF_DIR=str(tmp_path / "conf"))
    (tmp_path / "conf").mkdir()
    return tmp_path, env


def genconfig(env: dict[str, str], **settings: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", str(IMAGE_DIR / "pvfs-genconfig.sh")], env={**env, **settings},
                          capture_output=True, text=True, timeout=30, check=False)


def test_genconfig_names_n_io_servers_strip_and_timeouts(fake_genconfig) -> None:
    tmp, env = fake_genconfig
    done = genconfig(env, PVFS_IO_SERVERS="3", PVFS_STRIP_SIZE="131072", PVFS_JOB_TIMEOUT="7")
    assert done.returncode == 0, done.stderr
    args = (tmp / "args").read_text().split("\n")
    value = {args[i]: args[i + 1] for i in range(len(args) - 1) if args[i].startswith("--")}
    assert value["--ioservers"] == "pvfs-io1,pvfs-io2,pvfs-io3"
    assert value["--metaservers"] == "pvfs-meta"
    assert value["--dist-params"] == "strip_size:131072"
    assert value["--client-job-timeout"] == value["--server-job-timeout"] == "7"
    assert value["--protocol"] == "tcp" and value["--tcpport"] == "3334"
    # written to a file (genconfig on stdout adds a stray line), then moved into place
    assert args[-2].endswith("pvfs2.conf.new")
    # every server listens only on its alias's address, not on every address of its host
    assert (tmp / "conf" / "pvfs2.conf").read_text() == "<Defaults>\n\tTCPBindSpecific yes\n"
    assert (tmp / "conf" / "pvfs2tab").read_text().split()[:3] == [
        "tcp://pvfs-meta:3334/tierbench", "/mnt/orangefs", "pvfs2"]


@pytest.mark.parametrize("n", ["0", "9", "two"])
def test_genconfig_refuses_a_server_count_the_overlay_lacks(fake_genconfig, n: str) -> None:
    tmp, env = fake_genconfig
    done = genconfig(env, PVFS_IO_SERVERS=n)
    assert done.returncode == 2
    assert "PVFS_IO_SERVERS" in done.stderr
    assert not (tmp / "args").exists()


# --------------------------------------------------------------------------- compose wiring


def compose_config(*files: str, env: dict[str, str] | None = None) -> dict:
    args = [a for f in ("docker-compose.yml", *files) for a in ("-f", f)]
    done = subprocess.run(["docker", "compose", *args, "--profile", "pfs", "config",
                           "--format", "json"], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False, env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_overlay_wires_config_job_servers_and_clients() -> None:
    cfg = compose_config("compose/pvfs.yml", env={"PVFS_IO_SERVERS": "6",
                                                  "PVFS_STRIP_SIZE": "262144"})
    services = cfg["services"]
    servers = ["pvfs-meta"] + [f"pvfs-io{i}" for i in range(1, 9)]
    for name in servers:
        s = services[name]
        assert s["hostname"] == name and s["environment"]["PVFS_ALIAS"] == name
        assert s["environment"]["PVFS_IO_SERVERS"] == "6"
        assert s["environment"]["PVFS_STRIP_SIZE"] == "262144"
        assert s["depends_on"]["pvfs-config"]["condition"] == "service_completed_successfully"
        assert s["healthcheck"]["test"][-1] == "--healthcheck"
        assert any(t.startswith("/data") for t in s["tmpfs"])
        assert s["cap_drop"] == ["ALL"] and "cap_add" not in s
        assert s["profiles"] == ["pfs"] and list(s["networks"]) == ["pfs"]
    client = services["pvfs-client"]
    assert client["cap_add"] == ["SYS_ADMIN"]
    assert client["devices"][0]["source"] == "/dev/fuse"
    assert client["depends_on"]["pvfs-meta"]["condition"] == "service_healthy"
    assert services["pvfs-config"]["command"] == ["pvfs-genconfig.sh"]
    assert cfg["networks"]["pfs"]["ipam"]["config"][0]["subnet"] == "198.18.3.0/24"


def test_disk_overlay_moves_server_storage_to_volumes() -> None:
    services = compose_config("compose/pvfs.yml", "compose/pvfs-disk.yml")["services"]
    for name in ["pvfs-meta"] + [f"pvfs-io{i}" for i in range(1, 9)]:
        s = services[name]
        assert not s.get("tmpfs")
        mounts = {v["target"]: v for v in s["volumes"]}
        assert mounts["/data"]["type"] == "volume" and mounts["/data"]["source"] == f"{name}-data"
        assert mounts["/etc/pvfs"]["read_only"] is True


def test_cluster_services_start_exactly_n_io_servers() -> None:
    assert orangefs.server_services(3) == ["pvfs-meta", "pvfs-io1", "pvfs-io2", "pvfs-io3"]
    args = orangefs.compose_args("disk")
    assert [a.rsplit("/", 1)[-1] for a in args[1::2]] == [
        "docker-compose.yml", "pvfs.yml", "pvfs-disk.yml"]
    with pytest.raises(orangefs.PfsError, match="1-8 I/O servers"):
        orangefs.cluster_up(9, 1)


# --------------------------------------------------------------------------- experiments


def write_exp(tmp_path: Path, pfs_block: dict, **top) -> Path:
    import yaml

    data = {"name": "t", "seed": 2, "repetitions": 2, "modes": ["offloads-on", "offloads-off"],
            "pfs": pfs_block, **top}
    path = tmp_path / "exp.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def load(path: Path) -> Experiment:
    exp = registry.load_experiment(str(path))
    assert exp.kind == "pfs" and isinstance(exp.settings, settings.PfsSettings)
    return exp


def test_shipped_pfs_experiments_load_and_plan() -> None:
    for name in ("pfs-concurrent", "pfs-streams", "pfs-basic"):
        exp = load(ROOT / "experiments" / f"{name}.yml")
        lines = runner.plan_lines(exp)
        assert len([ln for ln in lines if ln.strip().startswith("p0")]) == \
            len(runner.points_of(exp))
    conc = load(ROOT / "experiments" / "pfs-concurrent.yml").settings.pfs
    assert conc.io_servers == [5, 6] and max(conc.clients) == 6 and conc.storage == "tmpfs"


def test_points_cover_every_combination_grouped_by_cluster_size(tmp_path: Path) -> None:
    exp = load(write_exp(tmp_path, {"test": "concurrent", "io_servers": [2, 3],
                                    "clients": [1, 2, 4]}))
    points = runner.points_of(exp)
    assert len(points) == 2 * 3 * 2 * 2
    sizes = [p["io_servers"] for p in points]
    assert sizes == sorted(sizes, key=[2, 3].index)  # one cluster per N, N in the given order
    combos = {(p["io_servers"], p["clients"], p.mode, p.repetition) for p in points}
    assert len(combos) == len(points)
    assert [p["clients"] for p in points] != sorted(p["clients"] for p in points)  # shuffled
    assert settings.cluster_clients(exp.settings.pfs) == 4


def test_streams_spread_over_the_client_containers(tmp_path: Path) -> None:
    exp = load(write_exp(tmp_path, {"test": "streams", "streams": [1, 8, 64],
                                    "client_containers": 4}))
    by_streams = {p["streams"]: p["clients"] for p in runner.points_of(exp)}
    assert by_streams == {1: 1, 8: 4, 64: 4}


@pytest.mark.parametrize("block, top, message", [
    ({"test": "scatter"}, {}, "pfs.test: must be one of concurrent, streams, basic"),
    ({"test": "concurrent", "io_servers": 9}, {},
     "pfs.io_servers[0]: must be a whole number from 1 to 8, got 9"),
    ({"test": "concurrent", "clients": [0]}, {}, "pfs.clients[0]: must be a whole number"),
    ({"test": "concurrent", "buffers": [4096]}, {}, "unknown key 'buffers' for test concurrent"),
    ({"test": "basic", "filesystems": ["nfs"]}, {},
     "pfs.filesystems[0]: must be one of tmpfs, disk, orangefs, orangefs-native, got 'nfs'"),
    ({"test": "concurrent", "storage": "ramfs"}, {}, "pfs.storage: must be tmpfs, disk (a Docker "
     "volume on the host's disk) or a disk system (ide, scsi, raid0, or one of disk_systems), "
     "got 'ramfs'"),
    ({"test": "concurrent", "storage": "My Disk"}, {}, "pfs.storage: must look like tmpfs, disk "
     "or ide"),
    ({"test": "concurrent", "storage": "fast"}, {"disk_systems": {"slow": {"read_mb_s": 10, "write_mb_s": 10}}},
     "pfs.storage: must be tmpfs, disk (a Docker volume on the host's disk) or a disk system "
     "(ide, scsi, raid0, slow, or one of disk_systems), got 'fast'"),
    ({"test": "concurrent"}, {"disk_systems": {"disk": {"read_mb_s": 10, "write_mb_s": 10}}},
     "disk_systems: 'disk' is a storage of its own"),
    ({"test": "concurrent", "fault": {"stop": "web"}}, {}, "pfs.fault.stop: must be one of "
     "pvfs-meta, pvfs-io1"),
    ({"test": "concurrent", "job_timeout_s": 1}, {}, "job_timeout_s: must be a whole number"),
    ({"test": "concurrent"}, {"modes": ["sendfile-off"]}, "sets server options (web_sendfile), which the pfs kind's services do not have"),
    ({"test": "concurrent"}, {"modes": ["web-only"]},
     "web-only applies to tier web, which a pfs experiment does not have"),
])
def test_bad_pfs_experiments_are_refused_naming_the_key(tmp_path: Path, block: dict, top: dict,
                                                        message: str) -> None:
    modes_dir = tmp_path / "modes"
    modes_dir.mkdir()
    for name in ("offloads-on", "offloads-off", "sendfile-off"):
        shutil.copy(ROOT / "modes" / f"{name}.yml", modes_dir)
    (modes_dir / "web-only.yml").write_text("tiers: [web]\nnic: {features: {tso: off}}\n")
    with pytest.raises(ConfigError) as err:
        registry.load_experiment(str(write_exp(tmp_path, block, **top)), modes_dir)
    assert message in str(err.value) and str(tmp_path / "exp.yml") in str(err.value)


# --------------------------------------------------------------------------- client script


def io(tmp_path: Path, op: str, file: Path, offset: int, nbytes: int, buf: int, local: Path,
       duration: float = 0.3) -> dict:
    start = time.time() + 0.2
    done = subprocess.run(["sh", str(IO_SCRIPT), op, "posix", str(file), str(offset),
                           str(nbytes), str(buf), f"{start:.6f}", str(duration), str(local)],
                          capture_output=True, text=True, timeout=60, check=False)
    result = streams.parse_io_line(done.stdout)
    assert result["start"] >= start - 0.01, "the stream began before the common start"
    return result


def test_io_script_writes_and_reads_regions_of_a_shared_file(tmp_path: Path) -> None:
    shared, n = tmp_path / "shared", 3 * 65536
    sources = {}
    for s in (1, 2):
        sources[s] = tmp_path / f"src-{s}"
        subprocess.run(["sh", "-c", streams.make_source_cmd(s, n, 9, str(sources[s]))], check=True)
        assert hashlib.sha256(sources[s].read_bytes()).hexdigest() == streams.sha256(s, n, 9)
    for s in (1, 2):
        w = io(tmp_path, "write", shared, (s - 1) * n, n, 65536, sources[s])
        assert w["status"] == "ok" and w["iterations"] >= 1 and w["bytes"] == w["iterations"] * n
    assert shared.stat().st_size == 2 * n
    for s in (1, 2):
        out = tmp_path / f"in-{s}"
        r = io(tmp_path, "read", shared, (s - 1) * n, n, 4096, out)
        assert r["status"] == "ok" and r["end"] > r["start"]
        assert r["end"] - r["start"] >= 0.3, "the stream stopped before its duration"
        assert hashlib.sha256(out.read_bytes()).hexdigest() == streams.sha256(s, n, 9)


def test_a_duration_of_zero_moves_the_file_once(tmp_path: Path) -> None:
    """single_pass (004 Fig. 4b): the phases give pfs-io.sh a duration of 0, one transfer."""
    n = 4 * 65536
    source = tmp_path / "src"
    subprocess.run(["sh", "-c", streams.make_source_cmd(1, n, 9, str(source))], check=True)
    w = io(tmp_path, "write", tmp_path / "file", 0, n, 65536, source, duration=0)
    r = io(tmp_path, "read", tmp_path / "file", 0, n, 65536, tmp_path / "in", duration=0)
    assert (w["iterations"], w["bytes"], r["iterations"], r["bytes"]) == (1, n, 1, n)
    # and with a duration the transfer repeats (a 256 KB file takes far less than 0.3 s)
    assert io(tmp_path, "read", tmp_path / "file", 0, n, 65536, tmp_path / "in")["iterations"] > 1


def test_the_uncached_16mb_experiment_reads_once_after_dropping_the_caches() -> None:
    exp = registry.load_experiment("pfs-basic-16mb-uncached")
    p = exp.settings.pfs
    assert (p.single_pass, p.drop_caches, p.storage, p.file_mb) == (True, True, "ide", 16)
    kind = registry.kind("pfs")
    header = kind.plan_header(exp, kind.points(exp, exp.seed))
    assert any("each phase moves the file once, the page caches dropped before the read and "
               "each send" in line for line in header), header
    cached = registry.load_experiment("pfs-basic-16mb")
    assert not any("moves the file once" in line for line in kind.plan_header(cached, []))


def test_table_1_drops_the_caches_between_write_and_read_and_says_where_it_cannot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """004 Table 1's reads are disk-bound: pfs-basic drops the page caches after the write (the
    plan says so), and a host where /proc/sys/vm/drop_caches is not writable is refused in one
    sentence before anything starts."""
    exp = registry.load_experiment("pfs-basic")
    assert exp.settings.pfs.drop_caches and not exp.settings.pfs.single_pass
    kind = registry.kind("pfs")
    assert any("page caches dropped after the write" in line
               for line in kind.plan_header(exp, kind.points(exp, exp.seed)))
    monkeypatch.setattr(orangefs, "check_image", lambda: None)
    real = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if path == "/proc/sys/vm/"
                        "drop_caches" else real(path, mode))
    with pytest.raises(ConfigError, match="pfs.drop_caches needs /proc/sys/vm/drop_caches "
                                          "writable"):
        kind.preflight(exp, [])


@pytest.mark.parametrize("name", ["pfs-basic-16mb", "pfs-basic-16mb-uncached"])
def test_the_16mb_experiments_send_the_file_with_both_methods_but_not_natively(
        name: str) -> None:
    """004 Fig. 4-5: after the read, sendrw and sendfile from the local disk and through FUSE;
    the native library has no file descriptor to send from; the plan says so, the summary has
    the send phases' columns and the estimate counts their time."""
    exp = registry.load_experiment(name)
    kind = registry.kind("pfs")
    assert exp.settings.pfs.send is True
    factors = {"id": "p001", "mode": "offloads-on", "repetition": 1, "io_servers": 3}
    for fs, expected in (("disk", ["write", "read", "sendrw", "sendfile"]),
                         ("orangefs", ["write", "read", "sendrw", "sendfile"]),
                         ("orangefs-native", ["write", "read"])):
        assert phases.phase_names(exp.settings.pfs, streams.PointFactors(
            **factors, filesystem=fs, buffer=65536)) == expected, fs
    header = "\n".join(kind.plan_header(exp, kind.points(exp, exp.seed)))
    assert "sent to a TCP sink on 127.0.0.1" in header and "not for orangefs-native" in header
    columns = [c.name for c in kind.columns(exp)]
    assert columns[-1] == "integrity"
    for phase in ("sendrw", "sendfile"):
        for col in ("mb_per_s", "storage_read_mb", "sender_cpu_ms_per_mb", "sink_cpu_s"):
            assert f"{phase}_{col}" in columns
    assert kind.resolved(exp)["pfs"]["send"] is True
    without = exp.settings.model_copy(update={"pfs": exp.settings.pfs.model_copy(
        update={"send": False})})
    plain = Experiment(**{**vars(exp), "settings": without})
    assert not any(c.name.startswith("send") for c in kind.columns(plain))
    # four timed phases against two
    lead = phases.START_DELAY_S + exp.placer.exec_lead_s
    assert kind.point_seconds(exp) - kind.point_seconds(plain) == pytest.approx(
        2 * (exp.settings.pfs.measure_s + lead))


def test_send_is_a_key_of_the_basic_test_only(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown key 'send' for test concurrent"):
        load(write_exp(tmp_path, {"test": "concurrent", "send": True}))


def test_io_script_reports_a_failing_transfer(tmp_path: Path) -> None:
    r = io(tmp_path, "read", tmp_path / "missing", 0, 4096, 4096, tmp_path / "out")
    assert r["status"] == "error" and r["iterations"] == 0 and r["bytes"] == 0
    assert "missing" in r["error"]


def test_pattern_matches_what_the_shell_makes() -> None:
    if shutil.which("yes") is None:
        pytest.fail("coreutils yes is missing")
    done = subprocess.run(["sh", "-c", "yes 'tierbench pfs stream 4 seed 1' | head -c 1000"],
                          capture_output=True, check=True)
    assert done.stdout == streams.pattern(4, 1000, 1)
    assert streams.sha256(4, 1000, 1) != streams.sha256(5, 1000, 1)


# --------------------------------------------------------------------------- results


def test_parse_io_line_ok_error_and_garbage() -> None:
    ok = streams.parse_io_line("noise\nstart=10.5 end=12.0 iterations=3 bytes=300 last=/f.3 "
                           "status=ok error=\n")
    assert ok == {"start": 10.5, "end": 12.0, "iterations": 3, "bytes": 300, "last": "/f.3",
                  "status": "ok", "error": ""}
    bad = streams.parse_io_line("start=1 end=2 iterations=0 bytes=0 last=/f status=error "
                            "error=PVFS_sys_read: Unknown host (error class: 128)")
    assert bad["status"] == "error" and bad["error"].startswith("PVFS_sys_read: Unknown host")
    assert streams.parse_io_line("Segmentation fault")["status"] == "error"


SEND_LINE = ("stream=1 method=sendfile chunk=65536 file_bytes=16777216 passes=2 calls=512 "
             "bytes=33554432 received=33554432 adler32=6737a2db start=100.5 end=101.0 "
             "seconds=0.5 user_s=0.010000 sys_s=0.030000 sink_user_s=0.005 sink_sys_s=0.045 "
             "status=ok error=")


def test_parse_send_line_ok_error_and_garbage() -> None:
    ok = streams.parse_send_line("noise\n" + SEND_LINE + "\n")
    assert ok == {"stream": "1", "method": "sendfile", "chunk": 65536, "file_bytes": 16777216,
                  "iterations": 2, "calls": 512, "bytes": 33554432, "received": 33554432,
                  "adler32": "6737a2db", "start": 100.5, "end": 101.0, "seconds": 0.5,
                  "sender_cpu_s": pytest.approx(0.04), "sink_cpu_s": pytest.approx(0.05),
                  "status": "ok", "error": ""}
    bad = streams.parse_send_line("method=sendfile chunk=65536 file_bytes=0 passes=0 calls=0 "
                                  "bytes=0 status=error error=open: No such file or directory")
    assert (bad["status"], bad["error"], bad["iterations"], bad["bytes"]) == (
        "error", "open: No such file or directory", 0, 0)
    assert bad["sender_cpu_s"] == 0 and bad["received"] == 0
    garbage = streams.parse_send_line("filesend: not found")
    assert garbage["status"] == "error" and garbage["error"] == "filesend: not found"


def test_send_figures_are_the_senders_cpu_per_mb_sent() -> None:
    r = streams.parse_send_line(SEND_LINE)
    failed = {"status": "error", "bytes": 0, "sender_cpu_s": 9.0, "sink_cpu_s": 9.0}
    figures = streams.send_figures([r, failed])
    assert figures["sender_cpu_s"] == pytest.approx(0.04)
    assert figures["sender_cpu_ms_per_mb"] == pytest.approx(40 / 33.554432)
    assert figures["sink_cpu_s"] == pytest.approx(0.05)
    assert streams.send_figures([failed])["sender_cpu_ms_per_mb"] != \
        streams.send_figures([failed])["sender_cpu_ms_per_mb"]  # NaN: nothing sent


def test_send_problems_name_a_short_pass_a_lost_byte_and_other_data() -> None:
    n = 4096
    good = {"stream": 1, "status": "ok", "file_bytes": n, "iterations": 3, "bytes": 3 * n,
            "received": 3 * n, "adler32": streams.adler32(1, n, 7)}
    sizes, sums = {1: n}, {1: streams.adler32(1, n, 7)}
    assert streams.send_problems("sendfile", [good], sizes, sums) == []
    assert streams.send_problems("sendfile", [{**good, "status": "error"}], sizes, sums) == []
    for wrong, words in (({"file_bytes": n - 1}, "found 4095 bytes in the file, not the 4096"),
                         ({"bytes": 3 * n - 1}, "sent 12287 bytes in 3 pass(es) of 4096"),
                         ({"received": 3 * n - 1}, "its sink received 12287"),
                         ({"adler32": streams.adler32(2, n, 7)}, "differs from what was")):
        [problem] = streams.send_problems("sendfile", [{**good, **wrong}], sizes, sums)
        assert problem.startswith("sendfile: stream 1") and words in problem, problem
    # the checksum is filesend's: zlib's Adler-32 of the stream's pattern, 8 hex digits
    assert streams.adler32(1, n, 7) == f"{zlib.adler32(streams.pattern(1, n, 7)):08x}"


def test_aggregate_is_all_bytes_over_common_start_to_last_end() -> None:
    results = [{"status": "ok", "bytes": 40 * streams.MB, "end": 102.0},
               {"status": "ok", "bytes": 60 * streams.MB, "end": 104.0},
               {"status": "error", "bytes": 0, "end": 103.0}]
    agg = streams.aggregate(results, start=100.0)
    assert agg["mb_per_s"] == pytest.approx(25.0) and agg["s"] == pytest.approx(4.0)
    assert agg["failed_streams"] == 1 and agg["bytes"] == 100 * streams.MB


def test_phase_cpu_splits_clients_servers_and_host() -> None:
    before = {"c1": {"usage_s": 1.0}, "c2": {"usage_s": 0.0}, "io1": {"usage_s": 5.0}}
    after = {"c1": {"usage_s": 2.0}, "c2": {"usage_s": 0.5}, "io1": {"usage_s": 5.5}}
    h0 = dict.fromkeys(PROC_STAT_FIELDS, 0)
    h1 = {**h0, "user": 30, "system": 20, "softirq": 10, "idle": 40}
    cpu = streams.phase_cpu(before, after, h0, h1, ["c1", "c2"], ["io1"], span_s=2.0,
                        nbytes=1024 * 1024)
    assert cpu["client_cpu_s"] == pytest.approx(1.5) and cpu["server_cpu_s"] == pytest.approx(0.5)
    assert cpu["client_cpu_pct"] == pytest.approx(75.0)
    assert cpu["client_cpu_us_per_kb"] == pytest.approx(1.5e6 / 1024)
    assert (cpu["host_usr_pct"], cpu["host_sys_pct"], cpu["host_softirq_pct"],
            cpu["host_idle_pct"]) == pytest.approx((30, 20, 10, 40))


def test_a_docroot_on_orangefs_stores_on_tmpfs_or_on_volumes() -> None:
    from tierbench.kinds.web import services

    base = {"proxy": "apache", "docroot": "orangefs", "pvfs_io_servers": 3}
    tmpfs = [f.rsplit("/", 1)[-1] for f in services.compose_files(base)[1::2]]
    disk = [f.rsplit("/", 1)[-1] for f in
            services.compose_files({**base, "pvfs_storage": "disk"})[1::2]]
    assert "pvfs-disk.yml" not in tmpfs and "pvfs-disk.yml" in disk
    assert {"pvfs.yml", "docroot-pvfs.yml"} <= set(tmpfs) & set(disk)


def test_orangefs_on_a_disk_system_puts_its_mounts_over_the_volumes_and_caps_memory() -> None:
    from tierbench.kinds.web import services

    base = {"proxy": "apache", "docroot": "orangefs", "pvfs_io_servers": 3,
            "pvfs_storage": "ide"}
    files = [f.rsplit("/", 1)[-1] for f in services.stack_files(base, extra=[Path("/s/c.yml")])]
    assert files.index("pvfs-disk.yml") < files.index("c.yml")  # the disks' binds win
    assert "pvfs-memory.yml" not in files
    capped = {**base, "pvfs_memory": "512m"}
    assert "pvfs-memory.yml" in [f.rsplit("/", 1)[-1] for f in services.stack_files(capped)]
    assert services.stack_env({**capped, "proxy_cache": False, "web_sendfile": False,
                              "web_mmap": True}, [])["PVFS_SERVER_MEMORY"] == "512m"


def test_memory_overlay_caps_each_io_server() -> None:
    services = compose_config("compose/pvfs.yml", "compose/pvfs-memory.yml",
                              env={"PVFS_SERVER_MEMORY": "512m"})["services"]
    for i in range(1, 9):
        assert services[f"pvfs-io{i}"]["mem_limit"] in ("536870912", 536870912)
        assert services[f"pvfs-io{i}"]["memswap_limit"] in ("536870912", 536870912)
    assert "mem_limit" not in services["pvfs-meta"]


def test_three_web_servers_get_what_the_overlays_give_web() -> None:
    from tierbench.kinds.web import services as web_stack

    def names(settings: dict) -> list[str]:
        return [f.rsplit("/", 1)[-1] for f in web_stack.stack_files(settings)]

    assert names({"docroot": "orangefs+hot-tmpfs", "web_servers": 3, "db_rows": 10}) == [
        "docker-compose.yml", "web-servers.yml", "pvfs.yml", "docroot-pvfs.yml",
        "web-servers-pvfs.yml", "hot-tmpfs.yml", "web-servers-hot.yml", "app-db.yml",
        "web-servers-app.yml"]
    assert not any(n.startswith("web-servers") for n in names(
        {"docroot": "orangefs+hot-tmpfs", "db_rows": 10}))
    services = compose_config(*[f"compose/{n}" for n in names(
        {"docroot": "orangefs+hot-tmpfs", "web_servers": 3})[1:]],
        env={"WEB_MEMORY": "512m"})["services"]
    for web in ("web", "web2", "web3"):
        s = services[web]
        assert s["image"].startswith("tierbench-web-pvfs:"), web
        assert [v["target"] for v in s["volumes"]] == ["/srv/hot"], web  # no plain docroot
        assert "pfs" in s["networks"] and "SYS_ADMIN" in s["cap_add"], web
        assert s["depends_on"]["pvfs-docroot"]["condition"] == \
            "service_completed_successfully", web
        assert s["environment"]["WEB_HOT"] == "on", web
    assert services["web2"]["networks"]["back"]["ipv4_address"] == "198.18.2.11"
    app = compose_config("compose/web-servers.yml", "compose/app-db.yml",
                         "compose/web-servers-app.yml",
                         env={"DB_PASSWORD": "x", "APP_CLIENTS": "198.18.2.10",
                              "DB_CLIENTS": "198.18.2.30"})["services"]
    # each web server forwards to its own application server
    for web, own in (("web", "app"), ("web2", "app2"), ("web3", "app3")):
        assert app[web]["environment"]["WEB_APP"] == "on", web
        assert app[web]["environment"]["APP_BACKEND"] == f"{own}:9000", web
        assert app[web]["depends_on"][own]["condition"] == "service_healthy", web


# --------------------------------------------------------------------------- storage on disk systems


def test_storage_may_name_a_builtin_or_declared_disk_system(tmp_path: Path) -> None:
    exp = load(write_exp(tmp_path, {"test": "basic", "storage": "ide"}))
    assert exp.settings.storage_system().name == "ide"
    assert load(write_exp(tmp_path, {"test": "basic", "storage": "disk"})).settings \
        .storage_system() is None
    own = load(write_exp(tmp_path, {"test": "concurrent", "storage": "slow"},
                         disk_systems={"slow": {"read_mb_s": 10, "write_mb_s": 12}}))
    system = own.settings.storage_system()
    assert (system.name, system.read_bps, system.write_bps) == ("slow", 10_000_000, 12_000_000)
    assert registry.kind("pfs").resolved(own)["disk_systems"]["slow"]["read_mb_s"] == 10


def sized_for(nbytes: float) -> float:
    """A device's least size for nbytes of files (tiers/disks.py's room for ext3)."""
    from tierbench.tiers import disks

    return nbytes * (1 + disks.OVERHEAD) + disks.SPARE


def test_each_io_server_and_the_local_disk_get_their_own_device(tmp_path: Path) -> None:
    from tierbench.kinds.pfs import stack

    exp = load(write_exp(tmp_path, {"test": "basic", "storage": "ide", "io_servers": [2, 4],
                                    "filesystems": ["disk", "orangefs"], "file_mb": 64}))
    two = stack.storage_plan(exp.settings, 2)
    assert two.servers == ("pvfs-io1", "pvfs-io2", "pvfs-client")
    assert two.layout.servers == 3 and two.layout.disks == 1
    # every device holds the largest: the client's whole 64 MiB file (a server holds half),
    # plus the file system's own room
    assert sized_for(64 << 20) <= two.device_bytes < sized_for(64 << 20) + (1 << 20)
    assert stack.storage_plan(exp.settings, 4).servers[-2:] == ("pvfs-io4", "pvfs-client")
    # no local disk among the file systems: the I/O servers only, each sized for its share
    only = load(write_exp(tmp_path, {"test": "basic", "storage": "ide", "io_servers": 4,
                                     "filesystems": ["orangefs"], "file_mb": 256}))
    plan = stack.storage_plan(only.settings, 4)
    assert plan.servers == ("pvfs-io1", "pvfs-io2", "pvfs-io3", "pvfs-io4")
    share = orangefs.io_server_bytes(256 << 20, 4)
    assert share == (64 << 20) + (64 << 20) // 10  # a quarter each, and a tenth for OrangeFS's records
    assert sized_for(share) <= plan.device_bytes < sized_for(share) + (1 << 20)
    # native writes repeated for measure_s leave a copy each time (pvfs2-cp never overwrites):
    # the servers hold what NATIVE_WRITE_BOUND_B_S writes in that time, besides the file
    native = {"test": "basic", "storage": "ide", "io_servers": 2, "file_mb": 16,
              "filesystems": ["orangefs-native"], "measure_s": 2}
    share = orangefs.io_server_bytes((16 << 20) + 2 * stack.NATIVE_WRITE_BOUND_B_S, 2)
    plan = stack.storage_plan(load(write_exp(tmp_path, native)).settings, 2)
    assert sized_for(share) <= plan.device_bytes < sized_for(share) + (1 << 20)
    once = stack.storage_plan(load(write_exp(tmp_path, {**native, "single_pass": True}))
                              .settings, 2)
    assert once.device_bytes < sized_for(orangefs.io_server_bytes(16 << 20, 2)) + (1 << 20)
    assert stack.storage_plan(load(write_exp(tmp_path, {"test": "basic"})).settings, 2) is None


def test_the_overlay_binds_servers_at_data_and_the_client_at_disk_throttled() -> None:
    from tierbench.tiers import diskbuild, disks

    built = diskbuild.Built(key={}, servers=[
        diskbuild.Server(name, f"/state/disks/{name}", [f"/dev/loop{i}"], [])
        for i, name in enumerate(("pvfs-io1", "pvfs-client"))])
    services = orangefs.storage_services(built, disks.BUILTIN["ide"])
    assert services["pvfs-io1"]["volumes"] == [
        {"type": "bind", "source": "/state/disks/pvfs-io1", "target": "/data"}]
    assert services["pvfs-client"]["volumes"] == [
        {"type": "bind", "source": "/state/disks/pvfs-client", "target": "/disk"}]
    assert services["pvfs-client"]["blkio_config"] == {
        "device_read_bps": [{"path": "/dev/loop1", "rate": 35_000_000}],
        "device_write_bps": [{"path": "/dev/loop1", "rate": 39_000_000}],
        "device_read_iops": [{"path": "/dev/loop1", "rate": 75}]}
    # the disk overlay's volumes come first, the built system's binds over them last
    files = orangefs.compose_files("ide", [Path("/state/disks.yml")])
    assert [f.rsplit("/", 1)[-1] for f in files] == [
        "docker-compose.yml", "pvfs.yml", "pvfs-disk.yml", "disks.yml"]
    assert orangefs.compose_files("tmpfs")[-1].endswith("pvfs.yml")


def test_plan_shows_the_disk_system_per_cluster_and_per_point() -> None:
    exp = registry.load_experiment("pfs-basic-16mb-uncached")
    lines = runner.plan_lines(exp)
    assert any("storage: disk system ide (emulated" in ln and "35/39 MB/s" in ln
               and "client's local disk" in ln for ln in lines), lines[:6]
    cluster = next(ln for ln in lines if "-- cluster:" in ln)
    assert "on disk system ide: 4 x 1 device(s)" in cluster
    assert "pvfs-io1, pvfs-io2, pvfs-io3, pvfs-client" in cluster
    points = [ln for ln in lines if ln.strip().startswith("p0")]
    assert points and all("storage=ide" in ln for ln in points)
    mem = registry.load_experiment("pfs-basic")
    tmpfs_points = [ln for ln in runner.plan_lines(mem) if "fs=tmpfs" in ln]
    assert tmpfs_points and all("storage=memory" in ln for ln in tmpfs_points)
    # storage on tmpfs: no disk system said anywhere
    conc = runner.plan_lines(registry.load_experiment("pfs-concurrent"))
    assert not any("disk system" in ln or "storage=" in ln for ln in conc)


def test_the_images_are_the_space_need_on_a_disk_system() -> None:
    exp = registry.load_experiment("pfs-basic")
    kind = registry.kind("pfs")
    needs = kind.needs(exp, kind.points(exp, exp.seed))
    images = [n for n in needs if "loop-device images of disk system ide (4 devices)" in n.what]
    assert len(images) == 1 and images[0].bytes > 4 * 256 * (1 << 20)
    # nothing on Docker's data folder: the servers and the local disk are on the devices
    assert not any("Docker's data folder" in n.where for n in needs)


def test_a_disk_system_under_the_servers_runs_on_a_cluster(tmp_path: Path) -> None:
    from types import SimpleNamespace

    exp = load(write_exp(tmp_path, {"test": "basic", "storage": "ide"}))
    exp.placer = SimpleNamespace(cluster=object())
    registry.kind("pfs").check(exp)  # each server's disks on its own node (test_disks_cluster)


def test_a_phase_counts_the_devices_reads_between_its_edges() -> None:
    from tierbench.kinds.pfs.phases import storage_read_mb

    assert storage_read_mb({"read_bytes": 1_000_000}, {"read_bytes": 17_777_216}) == 16.777216
    assert storage_read_mb({}, {"read_bytes": 5}) != storage_read_mb({}, {"read_bytes": 5})  # NaN
