"""The file-server kind without Docker: dbench's and fio's command lines and parsers on output
captured from the real tools (tests/data/fs/), the think-time load file made by the real awk,
the experiment model's refusals, the plan, the space checks and the report families."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tierbench import runner
from tierbench.config.errors import ConfigError
from tierbench.kinds import families, registry
from tierbench.kinds.fs import roles as fs_roles
from tierbench.kinds.fs import sequence, settings, tools

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "fs"


# --------------------------------------------------------------------------- dbench


def test_dbench_report_of_a_real_run_is_read() -> None:
    report = tools.parse_dbench((DATA / "dbench-fileio-2clients-t5.txt").read_text())
    assert report["mb_per_s"] == pytest.approx(147.33)
    assert (report["clients"], report["procs"]) == (2, 2)
    assert report["max_latency_ms"] == pytest.approx(58.538)
    assert report["operations"]["ReadX"] == {"count": 36706, "avg_ms": 0.005, "max_ms": 8.651}
    assert len(report["operations"]) == 14 and "Flush" in report["operations"]
    # the progress lines: four seconds of the timed part, the last one equal to the result
    execute = [p for p in report["progress"] if p.phase == "execute"]
    assert [p.second for p in execute] == [1, 2, 3, 4]
    assert execute[-1].mb_per_s == report["mb_per_s"]
    # "failed to create barrier semaphore" is dbench's own fallback, not an error of the run
    assert report["errors"] == []


def test_dbench_without_a_result_is_one_sentence() -> None:
    text = ("dbench version 4.00 - Copyright Andrew Tridgell 1999-2004\n\n"
            "Running for 10 seconds with load 'client.txt' and minimum warmup 2 secs\n"
            "[1] open ./clients/client0/~dmtmp/COREL/GRAPH1.CDR failed for handle 9941 "
            "(Permission denied)\nChild failed with status 1\n")
    with pytest.raises(tools.FsParseError, match=r"^dbench printed no Throughput line; it "
                       r"said: Child failed with status 1$"):
        tools.parse_dbench(text)
    with pytest.raises(tools.FsParseError, match="it said: nothing"):
        tools.parse_dbench("")


def test_dbench_window_comes_from_the_stamped_execute_lines() -> None:
    lines = (DATA / "dbench-fileio-2clients-t5.txt").read_text().splitlines()
    stamped = [(100.0 + 0.25 * i, line) for i, line in enumerate(lines)]
    first = next(t for t, line in stamped if "execute   1 sec" in line)
    last = next(t for t, line in stamped if "execute   4 sec" in line)
    assert tools.dbench_window(stamped) == (first - 1, last)
    warm = [(1.0, "   1       331   105.63 MB/sec  warmup   1 sec  latency 11.519 ms")]
    with pytest.raises(tools.FsParseError, match="ended before its warm-up did"):
        tools.dbench_window(warm)


def test_progress_lines_and_others() -> None:
    line = tools.parse_dbench_line("   8     12345    54.21 MB/sec  warmup   2 sec  latency "
                                     "7.500 ms")
    assert line == tools.DbenchLine(8, 12345, 54.21, "warmup", 2, 7.5)
    assert tools.parse_dbench_line("   2  cleanup   5 sec") is None
    assert tools.parse_dbench_line("Throughput 147.33 MB/sec  2 clients  2 procs  "
                                     "max_latency=58.538 ms") is None


def test_dbench_command_and_warmup() -> None:
    assert tools.dbench_command(4, 10, "/tmp/x.txt", "/mnt/share/r-p001") == [
        "dbench", "-t", "10", "-c", "/tmp/x.txt", "-D", "/mnt/share/r-p001", "4"]
    assert tools.dbench_warmup_s(10) == 2 and tools.dbench_warmup_s(4) == 0


def test_think_time_load_file_puts_a_sleep_before_every_operation(tmp_path: Path) -> None:
    """The real awk on the first 300 lines of Debian's client.txt."""
    out = tmp_path / "think.txt"
    cmd = tools.think_loadfile(1500, str(out), source=str(DATA / "client-head.txt"))
    subprocess.run(["sh", "-c", cmd], check=True)
    original = (DATA / "client-head.txt").read_text().splitlines()
    made = out.read_text().splitlines()
    assert made[0::2] == ["Sleep 1500 NT_STATUS_OK"] * len(original)
    assert made[1::2] == original
    assert tools.think_loadfile(0, "/tmp/a b.txt").endswith("> '/tmp/a b.txt'")


# --------------------------------------------------------------------------- the kind


def write_exp(tmp_path: Path, fs: str, modes: str = "[offloads-on]") -> str:
    path = tmp_path / "exp.yml"
    path.write_text(f"name: fs-x\nkind: fs\nmodes: {modes}\nfs: {fs}\n")
    return str(path)


@pytest.mark.parametrize("fs, message", [
    ("{test: dbench, think_ms: [0, -1]}", "fs.think_ms[1]: must be a number from 0 to 1000, got -1"),
    ("{test: dbench, programs: 0}", "fs.programs[0]: must be a whole number from 1 to 64, got 0"),
    ("{test: dbench, warmup_s: 3}", "unknown key 'warmup_s' for test dbench"),
    ("{test: randread, workloads: [1-seqread-uncached]}", "unknown key 'workloads' for "
     "test randread"),
    ("{test: dbench, server: orangefs}", "test dbench runs against the GlusterFS server"),
    ("{test: iozone, io_servers: 2}", "io_servers is a setting of the OrangeFS tier"),
    ("{test: filebench, workloads: [10-stream-read]}", "fs.workloads[0]: must be one of"),
    ("{test: dbench, load: [idle, heavy]}", "fs.load[1]: must be one of idle, busy"),
    ("{test: scatter}", "fs.test: must be one of dbench, randread, filebench, iozone"),
])
def test_bad_settings_are_one_sentence(tmp_path: Path, fs: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        registry.load_experiment(write_exp(tmp_path, fs))
    text = str(err.value)
    assert message in text and "\n" not in text and text.startswith(str(tmp_path))


def test_a_mode_with_server_options_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"sets server options \(web_sendfile\), which the fs kind.s services do not have"):
        registry.load_experiment(write_exp(tmp_path, "{test: dbench}", "[sendfile-off]"))


def test_points_group_by_server_load_and_keep_every_combination() -> None:
    exp = registry.load_experiment("fs-thinktime")
    kind = registry.kind("fs")
    points = runner.points_of(exp)
    loads = [p["load"] for p in points]
    assert loads == sorted(loads, key=["idle", "busy"].index)  # one switch of the hog
    assert len(points) == 2 * 5 * 2 * exp.repetitions  # loads x think times x modes x reps
    assert {kind.deployment_key(exp, p) for p in points} == {("gluster", "idle"), ("gluster", "busy")}
    iozone = registry.load_experiment("pfs-iozone")
    assert {kind.deployment_key(iozone, p) for p in runner.points_of(iozone)} == {("orangefs", 4)}


def test_iozone_against_the_file_server_has_no_load_factor(tmp_path: Path) -> None:
    exp = registry.load_experiment(write_exp(tmp_path, "{test: iozone, sessions: [1, 2]}"))
    kind = registry.kind("fs")
    points = runner.points_of(exp)
    assert [p["sessions"] for p in points] and "load" not in points[0].factors
    assert {kind.deployment_key(exp, p) for p in points} == {("gluster", "idle")}
    assert "file server (GlusterFS)" in "\n".join(runner.plan_lines(exp))


def test_sessions_spread_over_client_containers() -> None:
    assert sequence.sessions_per_client(1, 4) == [1]
    assert sequence.sessions_per_client(6, 4) == [2, 2, 1, 1]
    assert sequence.sessions_per_client(8, 4) == [2, 2, 2, 2]


def test_filebench_job_files_have_the_papers_threads_and_operations() -> None:
    for w in settings.FILEBENCH.values():
        text = (ROOT / "workloads" / "fs" / "filebench" / f"{w.name}.fio").read_text()
        keys = dict(line.split("=", 1) for line in text.splitlines()
                    if "=" in line and not line.startswith(";"))
        assert int(keys["numjobs"]) == w.threads, w.name
        assert keys["rw"] == {"read": ("read", "randread"),
                              "write": ("write", "randwrite")}[w.direction][w.metric == "iops"]
        assert keys["bs"] == ("8k" if w.metric == "iops" else "1m")
        assert keys["direct"] == "1"
        if w.fileset == "w":
            assert keys["filename_format"] == "write.$jobnum"
        else:
            named = keys.get("filename") or keys["filename_format"].replace(".$jobnum", ".0")
            assert named in sequence.set_files(w.fileset)


def test_the_filebench_family_follows_the_job_files_metrics() -> None:
    """The fs-filebench family file names each workload by what measures it (MB/s or IOPS) as
    FILEBENCH does, and gives 001's three numbers for each."""
    spec = families.load("fs-filebench")
    shown = {p["y"]: p["where"]["workload"] for p in spec["figures"] if p.get("where")}
    for metric in ("mb_per_s", "iops"):
        assert shown[metric] == [w.name for w in settings.FILEBENCH.values()
                                 if w.metric == metric]
    rows = spec["reference"]["rows"]
    assert [r["x"] for r in rows[::3]] == list(settings.FILEBENCH)
    for r in rows[::3]:
        assert r["column"] == settings.FILEBENCH[r["x"]].metric
    paper = {(r["x"], r["column"]): r["with"] for r in rows}
    assert paper[("9-syncwrite128", "iops")] == 24555
    assert paper[("1-seqread-uncached", "mb_per_s")] == 871.0
    assert all(isinstance(r["with"], (int, float)) for r in rows)


def test_space_is_checked_before_anything_is_written(tmp_path: Path) -> None:
    exp = registry.load_experiment(write_exp(tmp_path, "{test: filebench, set_mb: 500000}"))
    with pytest.raises(ConfigError, match=r"file sets of .* on the file server's share .* need"
                       r" .* in Docker's data folder .*lower fs.set_mb or fs.write_mb; nothing "
                       r"was written"):
        runner.check_space(exp)
    exp = registry.load_experiment(write_exp(
        tmp_path, "{test: iozone, server: orangefs, sessions: 8, file_mb: 60000}"))
    with pytest.raises(ConfigError, match="PVFS_TMPFS_SIZE"):
        runner.check_space(exp)


@pytest.mark.parametrize("name", ["fs-thinktime", "fs-clients", "fs-randread", "fs-filebench",
                                  "pfs-iozone"])
def test_report_families_name_the_papers_figures(name: str) -> None:
    exp = registry.load_experiment(name)
    kind = registry.kind("fs")
    spec = kind.report(kind.resolved(exp))
    assert spec["family"] == name
    columns = {c.name for c in kind.columns(exp)}
    phases = spec["phases"] or [""]
    for panel in spec["figures"]:
        for key in ("x", "y"):
            assert panel[key] in columns or any(f"{p}_{panel[key]}" in columns for p in phases)
    for row in spec["reference"]["rows"]:
        assert row.get("change") or row["with"] is not None
    json.dumps(spec)


# --------------------------------------------------------------------------- fio


def test_fio_reports_of_real_runs_are_summed_over_jobs() -> None:
    """fio 3.33 through the GlusterFS FUSE mount: 1 KB random reads by 2 jobs, 1 MB writes by
    2 jobs, and Filebench workload 3 (20 threads)."""
    rr = tools.parse_fio((DATA / "fio-randread-1k-2jobs.json").read_text())
    assert (rr["version"], rr["jobs"], rr["errors"]) == ("fio-3.33", 2, [])
    raw = json.loads((DATA / "fio-randread-1k-2jobs.json").read_text())
    assert rr["ended_s"] == raw["timestamp_ms"] / 1000 > 1.6e9  # when its jobs ended
    assert rr["read"]["bytes"] == 8693760 and rr["read"]["bytes"] == 1024 * rr["read"]["ios"]
    assert rr["read"]["bytes_per_s"] == pytest.approx(2896953, abs=2)
    assert rr["read"]["iops"] == pytest.approx(2829, abs=1)
    assert rr["read"]["clat_mean_ms"] == pytest.approx(0.704, abs=0.001)
    assert rr["write"]["bytes"] == 0 and rr["write"]["clat_mean_ms"] is None
    w = tools.parse_fio((DATA / "fio-write-1m-2jobs.json").read_text())
    assert w["write"]["bytes"] == 771751936 and w["read"]["bytes"] == 0
    assert w["write"]["clat_p99_ms"] == pytest.approx(37.487, abs=0.001)
    fb = tools.parse_fio((DATA / "fio-filebench-3.json").read_text())
    assert fb["jobs"] == 20 and fb["read"]["bytes_per_s"] == pytest.approx(353101694, abs=20)
    both = tools.sum_fio([rr, w])
    assert both["jobs"] == 4
    assert both["read"]["bytes"] == rr["read"]["bytes"]
    assert both["write"]["bytes_per_s"] == w["write"]["bytes_per_s"]
    assert both["read"]["clat_mean_ms"] == rr["read"]["clat_mean_ms"]


def test_fio_notes_before_the_report_are_skipped_and_no_report_is_one_sentence() -> None:
    text = "fio: this platform does not support process shared mutexes\n" + \
        (DATA / "fio-randread-1k-2jobs.json").read_text()
    assert tools.parse_fio(text)["read"]["bytes"] == 8693760
    with pytest.raises(tools.FsParseError, match=r"^fio printed no JSON report; it said: "
                       r"fio: pid=0, err=5/file:io_u.c:1889, func=io_u error, error=Input/"
                       r"output error$"):
        tools.parse_fio("fio: pid=0, err=5/file:io_u.c:1889, func=io_u error, "
                          "error=Input/output error\n")


def test_dbench_through_the_file_server_and_with_think_time() -> None:
    """dbench 4.0 on the GlusterFS FUSE mount: 2 programs, then 1 with 1 ms think time."""
    two = tools.parse_dbench((DATA / "dbench-gluster-2clients-t5.txt").read_text())
    think = tools.parse_dbench((DATA / "dbench-gluster-think1ms-t5.txt").read_text())
    assert two["mb_per_s"] == pytest.approx(11.2393) and two["clients"] == 2
    assert think["clients"] == 1 and think["mb_per_s"] < two["mb_per_s"]
    assert two["errors"] == [] and think["errors"] == []


def test_fio_command_lines() -> None:
    argv = tools.fio_command(name="randread", directory="/mnt/share/r", rw="randread",
                               block=1024, size=16 << 20, jobs=4, runtime_s=10, ramp_s=2,
                               direct=True)
    assert argv[:2] == ["fio", "--name=randread"]
    assert {"--rw=randread", "--bs=1024", "--size=16777216", "--numjobs=4", "--runtime=10",
            "--ramp_time=2", "--direct=1", "--time_based", "--output-format=json"} <= set(argv)
    assert "--sync=dsync" not in argv
    assert tools.at_start(12.5, ["fio", "x"]) == ["sh", "/app/workloads/fs/at.sh",
                                                     "12.500000", "fio", "x"]
    assert tools.filebench_command("5-seqwrite", {"FB_DIR": "/d", "FB_RAMP": 2}) == [
        "env", "FB_DIR=/d", "FB_RAMP=2", "fio", "--output-format=json",
        "/app/workloads/fs/filebench/5-seqwrite.fio"]


def test_the_start_script_waits_for_its_time(tmp_path: Path) -> None:
    import time
    script = ROOT / "workloads" / "fs" / "at.sh"
    t0 = time.time()
    done = subprocess.run(["sh", str(script), f"{t0 + 1.2:.6f}", "date", "+%s.%N"],
                          capture_output=True, text=True, check=True)
    assert float(done.stdout) >= t0 + 1.2
    done = subprocess.run(["sh", str(script), f"{t0 - 100:.6f}", "true"], check=True)
    assert time.time() - t0 < 5


def test_each_file_set_counts_the_points_that_read_it(tmp_path: Path) -> None:
    """A set is removed from the share after the last point that reads it."""
    exp = registry.load_experiment("fs-filebench")
    prepared = registry.kind("fs").prepare(exp, tmp_path / "20260101T000000Z")
    assert prepared.run_id == "20260101T000000Z" and prepared.sets == set()
    # modes x repetitions x the workloads that read each set (2, 2, 2, 3)
    per_workload = len(exp.modes) * exp.repetitions
    assert prepared.uses == {"a": 2 * per_workload, "b": 2 * per_workload,
                                "w": 2 * per_workload, "c": 3 * per_workload}
    dbench = registry.load_experiment("fs-clients")
    assert registry.kind("fs").prepare(dbench, tmp_path / "x").uses == {}


# --------------------------------------------------------------------------- several clients


def test_the_filebench_plan_has_001s_clients_thread_totals_and_a_capped_server() -> None:
    """fs-filebench: 18 client machines, each with the workload's per-client threads, so the
    totals are 001's (workload 8: 18 x 128 = 2,304); every read set larger than the server's
    memory cap; workload 8 from storage."""
    exp = registry.load_experiment("fs-filebench")
    f = exp.settings.fs
    assert (f.clients, f.server_memory) == (18, "768m")
    lines = runner.plan_lines(exp)
    text = "\n".join(lines)
    assert "8: 18 x 128 = 2,304" in text and "3: 18 x 20 = 360" in text
    assert "each read set 18 x 128 MiB = 2,304 MiB, 3.0 x the cap" in text
    assert "-- file server (GlusterFS, 768m of memory) and 18 clients on 198.18.12.0/24" in text
    eight = [ln for ln in lines if " 8-randread128 " in ln]
    assert len(eight) == len(exp.modes) * exp.repetitions
    assert all("2,304 thr" in ln for ln in eight)
    assert settings.FILEBENCH["8-randread128"].cache == "uncached"
    resolved = registry.kind("fs").resolved(exp)["fs"]
    assert (resolved["clients"], resolved["server_memory"]) == (18, "768m")
    # --scale shortens the windows and the sets, never the clients, and the sets still exceed
    # the cap
    assert "fs.clients" not in registry.kind("fs").scalable
    least = registry.kind("fs").scalable["fs.set_mb"]
    assert f.clients * least * settings.MIB > settings.memory_bytes(f.server_memory)


def test_one_client_stays_as_before(tmp_path: Path) -> None:
    exp = registry.load_experiment(write_exp(tmp_path, "{test: filebench, workloads: "
                                                       "[8-randread128]}"))
    text = "\n".join(runner.plan_lines(exp))
    assert "and 1 client on 198.18.12.0/24" in text and " thr " not in text
    assert "clients:" not in text and "memory" not in text
    assert "clients" not in registry.kind("fs").resolved(exp)["fs"]
    assert sequence.client_folder("r-filebench", 0, 1) == "r-filebench"
    assert [sequence.client_folder("r-filebench", k, 3) for k in range(3)] == [
        "r-filebench/c1", "r-filebench/c2", "r-filebench/c3"]


@pytest.mark.parametrize("fs, message", [
    ("{test: filebench, clients: 19}", "fs.clients: must be a whole number from 1 to 18, got 19"),
    ("{test: filebench, clients: 0}", "fs.clients: must be a whole number from 1 to 18, got 0"),
    ("{test: dbench, clients: 2}", "unknown key 'clients' for test dbench"),
    ("{test: filebench, server_memory: 768}", "fs.server_memory: must look like 768m"),
])
def test_bad_client_and_memory_settings_are_one_sentence(tmp_path: Path, fs: str,
                                                         message: str) -> None:
    with pytest.raises(ConfigError) as err:
        registry.load_experiment(write_exp(tmp_path, fs))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_set_that_fits_in_the_cap_is_said_in_the_plan(tmp_path: Path) -> None:
    exp = registry.load_experiment(write_exp(
        tmp_path, "{test: filebench, clients: 2, set_mb: 64, server_memory: 1g}"))
    assert "each read set 2 x 64 MiB = 128 MiB, 0.1 x the cap (it fits: the sets can stay " \
        "cached)" in "\n".join(runner.plan_lines(exp))


def test_every_client_s_sets_are_checked_against_free_space(tmp_path: Path) -> None:
    one = registry.load_experiment(write_exp(tmp_path, "{test: filebench, set_mb: 100}"))
    many = registry.load_experiment(write_exp(tmp_path, "{test: filebench, set_mb: 100, "
                                                        "clients: 18}"))
    kind = registry.kind("fs")
    [a] = kind.needs(one, runner.points_of(one))
    [b] = kind.needs(many, runner.points_of(many))
    assert b.bytes == 18 * a.bytes
    # 3 sets of 100 MiB and 20 writers' files of 128 MiB per client
    assert a.bytes == (3 * 100 + 20 * 128) * settings.MIB
    huge = registry.load_experiment(write_exp(tmp_path, "{test: filebench, set_mb: 4000, "
                                                        "clients: 18}"))
    with pytest.raises(ConfigError, match=r"lower fs.set_mb or fs.write_mb or use fewer "
                       r"fs.clients; nothing was written"):
        runner.check_space(huge)


def compose_config(*files: str, **env: str) -> dict:
    argv = ["docker", "compose", *(a for f in files for a in ("-f", f)), "--profile", "fs",
            "config", "--format", "json"]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "TIERBENCH_TAG": "0.1.0", **env})
    return json.loads(done.stdout)


def test_compose_defines_18_client_machines_and_the_servers_memory_cap() -> None:
    from tierbench.kinds.fs import stack
    from tierbench.placement import access

    conf = compose_config("docker-compose.yml", "compose/fs.yml")
    services = conf["services"]
    assert stack.CLIENT_SERVICES == ["fs-client", *(f"fs-client{i}" for i in range(2, 19))]
    first = services["fs-client"]
    addresses = []
    for name in stack.CLIENT_SERVICES:
        spec = services[name]
        addresses.append(spec["networks"]["fs"]["ipv4_address"])
        # the same machine as fs-client: the image, FUSE, the mount's server, its cpuset
        for key in ("image", "command", "cap_add", "devices", "cpuset", "depends_on",
                    "healthcheck", "volumes", "tmpfs"):
            assert spec.get(key) == first.get(key), (name, key)
    assert len(set(addresses)) == 18
    # the server admits every one of them, and nobody else
    assert access.host_admitted(conf, fs_roles.ADMISSIONS)["FS_CLIENTS"] == addresses
    # no limit unless asked; the limit covers swap too
    assert "mem_limit" not in services["fs-server"]
    capped = compose_config("docker-compose.yml", "compose/fs.yml",
                            FS_SERVER_MEMORY="768m")["services"]["fs-server"]
    assert int(capped["mem_limit"]) == int(capped["memswap_limit"]) == 768 << 20
    # on a cluster every client machine runs on the fs_client node with host networking
    host = compose_config("docker-compose.yml", "compose/host.yml", "compose/fs.yml",
                          "compose/host-fs.yml", TIERBENCH_NODE_DIR="/srv/tb")["services"]
    for name in stack.CLIENT_SERVICES:
        spec = host[name]
        assert spec["network_mode"] == "host" and not spec.get("networks"), name
        assert spec["labels"]["org.tierbench.role"] == "fs_client", name
        assert spec["environment"]["FS_SERVER"] == "127.0.0.1", name
        assert [v["source"] for v in spec["volumes"]] == ["/srv/tb/workloads"], name
