"""The sampler reads real counters of this host: its own cgroup, /proc/stat, loopback."""

import os
import time
from pathlib import Path

from tierbench.measure import sampler


def test_cgroup_cpu_of_this_process_grows_with_work() -> None:
    cg = sampler.CgroupCpu(os.getpid())
    before = cg.read()
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    after = cg.read()
    assert after["usage_s"] - before["usage_s"] >= 0.2
    assert after["user_s"] >= before["user_s"] and after["system_s"] >= before["system_s"]


def test_host_cpu_has_every_field() -> None:
    cpu = sampler.host_cpu()
    assert set(cpu) == set(sampler.PROC_STAT_FIELDS)
    assert cpu["idle"] > 0


def test_sampler_writes_one_json_line_per_sample(tmp_path: Path) -> None:
    out = tmp_path / "samples.jsonl"
    cg = sampler.CgroupCpu(os.getpid())
    s = sampler.Sampler(out, {"me": cg}, {"host:lo": "lo"}, interval=0.1).start()
    time.sleep(0.45)
    samples = s.stop()
    assert 4 <= len(samples) <= 8
    assert len(out.read_text().splitlines()) == len(samples)
    times = [x["t"] for x in samples]
    assert times == sorted(times)
    assert samples[-1]["net"]["host:lo"]["rx_bytes"] >= samples[0]["net"]["host:lo"]["rx_bytes"]
    assert "me" in samples[0]["cpu"] and s.error is None


def test_marks_give_a_short_window_two_samples_between_slow_ticks(tmp_path: Path) -> None:
    # ticks 5 s apart stand for a loaded host that delays them: a 1 s window between two
    # ticks holds none of them, and only the marks taken at its start and middle bracket it
    out = tmp_path / "samples.jsonl"
    s = sampler.Sampler(out, {"me": sampler.CgroupCpu(os.getpid())}, {}, interval=5).start()
    time.sleep(0.2)
    start = time.time()
    s.mark()
    time.sleep(0.5)
    s.mark()
    end = start + 1.0
    time.sleep(0.5)
    samples = s.stop()
    times = [x["t"] for x in samples]
    assert times == sorted(times)
    assert len([t for t in times if start <= t <= end]) == 2
    assert len(out.read_text().splitlines()) == len(samples) == 4


def test_marks_at_instants_come_from_a_thread_and_the_rest_are_cancelled(tmp_path: Path
                                                                         ) -> None:
    # the web kind's case: its engine run blocks, a thread marks its window; when the run
    # ends early the marks not yet due are never taken
    s = sampler.Sampler(tmp_path / "samples.jsonl", {"me": sampler.CgroupCpu(os.getpid())}, {},
                        interval=5).start()
    now = time.time()
    stop = sampler.marks_at(s, [now + 0.2, now + 0.4, now + 30])
    time.sleep(0.8)
    began = time.monotonic()
    stop()
    assert time.monotonic() - began < 1
    samples = s.stop()
    marked = [x["t"] for x in samples if now + 0.1 < x["t"] < now + 0.8]
    assert len(marked) == 2 and marked[0] >= now + 0.2 and marked[1] >= now + 0.4, marked


def test_a_mark_that_fails_ends_the_marks_quietly(capsys) -> None:
    class Failing:
        calls = 0

        def mark(self) -> None:
            self.calls += 1
            raise OSError("the cgroup went away")

    failing = Failing()
    now = time.time()
    stop = sampler.marks_at(failing, [now, now + 0.05])
    time.sleep(0.3)
    stop()
    assert failing.calls == 1
    assert "Traceback" not in capsys.readouterr().err


def test_storage_reads_of_a_cgroup_sum_its_processes(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid, read in (("10", 4096), ("11", 1000)):
        (proc / pid).mkdir(parents=True)
        (proc / pid / "io").write_text(f"rchar: 99999\nwchar: 1\nread_bytes: {read}\n"
                                       "write_bytes: 512\ncancelled_write_bytes: 0\n")
    procs = tmp_path / "cgroup.procs"
    procs.write_text("10\n11\n12\n")  # 12 exited: skipped
    assert sampler.disk_read_bytes(procs, proc) == 5096
    procs.write_text("12\n")
    assert sampler.disk_read_bytes(procs, proc) is None
    assert sampler.disk_read_bytes(tmp_path / "absent", proc) is None


def test_this_process_cgroup_counts_storage_reads() -> None:
    sample = sampler.CgroupCpu(os.getpid()).read()
    assert isinstance(sample["read_bytes"], int) and sample["read_bytes"] >= 0


def test_a_container_that_stops_is_left_out_and_sampling_goes_on(tmp_path: Path) -> None:
    class Stopped:
        def read(self) -> dict:
            raise FileNotFoundError("cpuacct.stat")  # its cgroup went with the container

    me = sampler.CgroupCpu(os.getpid())
    s = sampler.Sampler(tmp_path / "s.jsonl", {"me": me, "db": Stopped()}, {}, interval=0.05)
    s.start()
    time.sleep(0.2)
    samples = s.stop()
    assert s.error is None and len(samples) >= 3
    assert all(set(x["cpu"]) == {"me"} and x["gone"] == ["db"] for x in samples)


def test_memory_counters_read_the_page_cache_and_the_limit(tmp_path: Path) -> None:
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir(), v2.mkdir()
    (v1 / "memory.stat").write_text("cache 999\nrss 5\ntotal_cache 4096\ntotal_rss 7\n")
    (v1 / "memory.limit_in_bytes").write_text("536870912\n")
    (v2 / "memory.stat").write_text("anon 12\nfile 8192\nkernel 3\n")
    (v2 / "memory.max").write_text("max\n")
    assert sampler.memory_counters((1, v1)) == {"file_bytes": 4096, "mem_limit_bytes": 1 << 29}
    assert sampler.memory_counters((2, v2)) == {"file_bytes": 8192}  # no limit: left out
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "unlimited"
    assert sampler.memory_counters((1, v1)) == {"file_bytes": 4096}
    assert sampler.memory_counters((1, tmp_path / "gone")) == {}
    assert sampler.memory_counters(None) == {}


def test_this_process_cgroup_reports_its_page_cache() -> None:
    got = sampler.CgroupCpu(os.getpid()).read()
    assert got["file_bytes"] >= 0 and isinstance(got["file_bytes"], int)


def test_a_tiers_memory_is_the_sum_of_its_servers() -> None:
    class Fixed:
        def __init__(self, **values: float) -> None:
            self.values = values

        def read(self) -> dict:
            return {"usage_s": 1.0, "user_s": 0.5, "system_s": 0.5, **self.values}

    group = sampler.CgroupGroup({"web": Fixed(file_bytes=10, mem_limit_bytes=100),
                                 "web2": Fixed(file_bytes=5, mem_limit_bytes=100)})
    got = group.read()
    assert (got["file_bytes"], got["mem_limit_bytes"], got["usage_s"]) == (15, 200, 2.0)
    one_unlimited = sampler.CgroupGroup({"web": Fixed(file_bytes=1, mem_limit_bytes=100),
                                         "web2": Fixed(file_bytes=1)})
    assert "mem_limit_bytes" not in one_unlimited.read()
