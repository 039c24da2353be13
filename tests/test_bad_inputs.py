"""Bad inputs, each refused with one clear sentence, a non-zero exit, and nothing changed: no
result written, no container, volume or network started, no interface setting touched, no state
left behind. Experiment, mode, trace, log and cluster files; out-of-range values; absent features
and interfaces; a kernel without netem; missing Docker; sizes that do not fit (a small tmpfs)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tierbench.placement import model

ROOT = Path(__file__).resolve().parent.parent
TIERBENCH = [sys.executable, "-m", "tierbench.cli"]
NODES = [*TIERBENCH, "nodes"]
GOOD_TRACE = {"name": "a", "kind": "single", "size": 4096}


def experiment(**keys: object) -> dict:
    return {"name": "bad", "modes": ["offloads-on", "offloads-off"], "traces": [GOOD_TRACE],
            **keys}


def docker(*args: str) -> list[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60)
    return sorted(done.stdout.split()) if done.returncode == 0 else []


PROJECT = f"label=com.docker.compose.project={model.PROJECT}"


def host_state() -> dict:
    """What a refused input must not change: the Compose project's containers, volumes and
    networks, the interfaces of the host (names, MTU, flags) but for other programs' veths,
    tierbench's mounts and the loop devices over its disk images. (Only tierbench's own
    things: other programs on a shared machine may change theirs meanwhile.)"""
    links = json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True,
                                      timeout=30).stdout or "[]")
    return {
        "links": sorted((ln["ifname"], ln.get("mtu"), tuple(ln.get("flags", []))) for ln in links
                        if not ln["ifname"].startswith(("veth", "br-", "docker"))),
        "containers": docker("ps", "-a", "--filter", PROJECT, "--format", "{{.Names}}"),
        "volumes": docker("volume", "ls", "-q", "--filter", PROJECT),
        "networks": docker("network", "ls", "--filter", PROJECT, "--format", "{{.Name}}"),
        "mounts": sorted(m for line in Path("/proc/mounts").read_text().splitlines()
                         if "tierbench" in (m := line.split()[1])),
        "loop devices": sorted(line for line in subprocess.run(
            ["losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE"],
            capture_output=True, text=True, timeout=30).stdout.splitlines()
            if "tierbench-disk-" in line),
    }


@pytest.fixture
def env(tmp_path: Path) -> Iterator[dict[str, str]]:
    # the lock folder the test's own: a run of tierbench beside the suite holds the host's
    e = dict(os.environ, TIERBENCH_RESULTS=str(tmp_path / "results"),
             TIERBENCH_STATE_DIR=str(tmp_path / "state"),
             TIERBENCH_LOCK_DIR=str(tmp_path / "locks"))
    before = host_state()
    yield e
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir()), \
        "a refused input wrote results"
    assert not (tmp_path / "state" / "netif-state.json").exists()
    assert host_state() == before, "a refused input changed the host"


def refused(env: dict[str, str], *args: str, fragment: str, code: int = 2,
            argv: list[str] | None = None) -> str:
    done = subprocess.run([*(argv or TIERBENCH), *args], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    err = done.stderr.strip()
    assert done.returncode == code, (done.returncode, err, done.stdout)
    assert "Traceback" not in done.stderr + done.stdout
    lines = [ln for ln in (err or done.stdout.strip()).splitlines() if ln.strip()
             and not ln.startswith("tierbench: checking ")]  # progress, not an error
    assert len(lines) == 1, lines
    assert fragment in lines[0], lines[0]
    return lines[0]


def write(tmp_path: Path, data: object, name: str = "exp.yml") -> Path:
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    elif isinstance(data, str):
        path.write_text(data)
    else:
        path.write_text(yaml.safe_dump(data))
    return path


# --------------------------------------------------------------------------- experiment files

BAD_EXPERIMENTS = [
    (experiment(colour="blue"), "unknown key 'colour'"),
    # names that become paths: the results folder, a trace's file
    (experiment(name=".."), "name: may hold only letters, digits, '.', '_' and '-', and never '..'"),
    (experiment(name="a/b"), "name: may hold only letters, digits"),
    (experiment(traces=[{**GOOD_TRACE, "name": "../../x"}]),
     "traces[0].name: may hold only letters, digits, '.', '_' and '-', and never '..'"),
    (experiment(traces=[GOOD_TRACE, {**GOOD_TRACE, "name": ".hidden"}]),
     "traces[1].name: may hold only"),
    (b"\x7fELF\x02\x01\x01\x00" * 8, "is a binary file"),
    ("name: caf\xe9\n".encode("latin-1"), "is not UTF-8 text"),
    ("name: [unclosed\n", "not valid YAML at line"),
    ("- just\n- a list\n", "expected a mapping"),
    ({"name": "bad", "traces": [GOOD_TRACE]}, "modes: required"),
    (experiment(modes="offloads-on"), "modes: must be a non-empty list of mode names"),
    (experiment(modes=["no-such-mode"]), "modes: no mode named 'no-such-mode'"),
    (experiment(modes=["offloads-on", "offloads-on"]), "modes: lists a mode twice"),
    (experiment(kind="quantum"), "no workload kind named 'quantum'"),
    (experiment(traces=[{"name": "a", "kind": "pareto"}]),
     "traces[0].kind: must be single, hit-ratio, zipf, worldcup or mix"),
    (experiment(traces=[{"name": "a", "kind": "single", "size": -1}]),
     "traces[0].size: must be a whole number >= 1, got -1"),
    (experiment(load={"users": 0}), "load.users[0]: must be a whole number >= 1, got 0"),
    (experiment(load={"measure_s": 0.5}), "load.measure_s: must be a number >= 2"),
    (experiment(engine="ab"), "engine: must be one of locust, wrk, got 'ab'"),
    (experiment(engine="wrk", load={"rate": 100}), "think and rate need engine: locust"),
    (experiment(load={"arrival": "poisson"}),
     "load.arrival: arrival sets an open loop's arrival process: give rate"),
    (experiment(load={"rate": 50, "arrival": "bursty"}),
     "load.arrival: must be one of constant, poisson, got 'bursty'"),
    (experiment(load={"requests_per_client": 1000}),
     "load.measure_s: a request-count run (requests_per_client) needs a time limit"),
    (experiment(load={"requests_per_client": 1000, "measure_s": 60, "rate": 50}),
     "load.requests_per_client: an open-loop run (rate) sends at a fixed rate"),
    (experiment(load={"warmup_max_s": 30}),
     "load.warmup_max_s: warmup_max_s bounds a warm-up found by steady state"),
    (experiment(load={"warmup": "steady", "warmup_s": 40, "warmup_max_s": 30}),
     "load.warmup_max_s: warmup_max_s (30) is shorter than the least warm-up"),
    (experiment(load={"warmup": "steady", "requests_per_client": 100, "measure_s": 60}),
     "load.warmup: a request-count run (requests_per_client) warms up in a run of its own"),
    (experiment(target="http://192.0.2.1/"), "target:"),
    (experiment(stack={"docroot": "nfs"}), "stack.docroot[0]: must be one of disk, tmpfs"),
    (experiment(stack={"docroot": "orangefs", "pvfs_io_servers": 9}),
     "stack.pvfs_io_servers: must be a whole number from 1 to 8"),
    (experiment(stack={"docroot": "tmpfs", "page_cache": "cold"}),
     "stack.page_cache: cold needs docroot: disk"),
    (experiment(stack={"web_memory": "lots"}), "stack.web_memory: must"),
    (experiment(stack={"docroot": "orangefs", "pvfs_storage": "nfs"}),
     "stack.pvfs_storage: must be tmpfs, disk (a Docker volume on the host's disk) or a disk"),
    (experiment(stack={"docroot": "ide", "pvfs_memory": "512m"}),
     "stack.pvfs_memory: limits the OrangeFS I/O servers, which run only with a docroot on"),
    (experiment(stack={"docroot": "orangefs", "page_cache": "cold"}),
     "stack.page_cache: cold needs docroot: disk or a disk system, or orangefs with"),
    (experiment(traces=[{"name": "h", "kind": "hit-ratio", "size": 4096, "hit_ratio": 1.5,
                         "requests": 10}]),
     "traces[0].hit_ratio: must be a number from 0 to 1"),
    (experiment(repetitions=0), "repetitions: must be a whole number >= 1, got 0"),
    (experiment(seed=-3), "seed: must be a whole number >= 0"),
    (experiment(fault={"stop": "loadgen"}), "fault.stop: must be one of web, proxy"),
    (experiment(stack={"db": {"rows": 10}}),
     "stack.db: the application and database tiers run only with dynamic requests"),
    (experiment(fault={"stop": "db"}), "fault.stop: the db tier runs only with dynamic requests"),
    (experiment(traces=[{**GOOD_TRACE, "dynamic": {"query": "join"}}]),
     "traces[0].dynamic.query: must be one of point, range, write, got 'join'"),
    (experiment(traces=[{**GOOD_TRACE, "dynamic": {"share": 2}}]),
     "traces[0].dynamic.share: must be a number from 0 to 1, got 2"),
    (experiment(traces=[{"name": "h", "kind": "hit-ratio", "size": 4096, "hit_ratio": 0.5,
                         "requests": 10, "dynamic": {}}]),
     "traces[0]: unknown key 'dynamic'"),
    (experiment(traces=[{**GOOD_TRACE, "dynamic": {}}],
                stack={"db": {"shared_buffers": "lots"}}),
     "stack.db.shared_buffers: must look like 128MB"),
    ({"name": "p", "kind": "pfs", "modes": ["offloads-on"], "pfs": {"test": "scatter"}},
     "pfs.test: must be one of concurrent, streams, basic"),
    ({"name": "p", "kind": "pfs", "modes": ["offloads-on"],
      "pfs": {"test": "concurrent", "io_servers": 9}},
     "pfs.io_servers[0]: must be a whole number from 1 to 8, got 9"),
    ({"name": "p", "kind": "pfs", "modes": ["sendfile-off"], "pfs": {"test": "concurrent"}},
     "sets server options (web_sendfile), which the pfs kind's services do not have"),
    ({"name": "p", "kind": "pfs", "modes": ["offloads-on"],
      "pfs": {"test": "concurrent", "fault": {"stop": "web"}}}, "pfs.fault.stop: must be one of"),
    (experiment(stack={"docroot": "raid0", "placement": "size"}),
     "stack.placement: needs docroot to be a one-device disk system"),
    (experiment(stack={"web_servers": 2}), "stack.web_servers: must be 1 or 3"),
    (experiment(stack={"proxy": "haproxy", "web_servers": 3}), "need proxy: apache"),
    (experiment(stack={"docroot": "mine"},
                disk_systems={"mine": {"devices": ["/dev/sdz"]}}),
     "disk_systems.mine: wipe: tierbench makes a new file system on /dev/sdz"),
    (experiment(stack={"docroot": "mine"},
                disk_systems={"mine": {"devices": ["/dev/tierbench-no-such-disk"],
                                       "wipe": True}}),
     "disk_systems.mine.devices: /dev/tierbench-no-such-disk does not exist on this host"),
    ({"name": "d", "kind": "disk", "modes": ["offloads-on"], "disk": {"systems": ["floppy"]}},
     "disk.systems[0]: no disk system 'floppy'"),
    ({"name": "d", "kind": "disk", "modes": ["offloads-on"], "disk": {"systems": ["mine"]},
      "disk_systems": {"mine": {"devices": ["/dev/tierbench-no-such-disk"], "wipe": True}}},
     "disk_systems.mine.devices: /dev/tierbench-no-such-disk does not exist on this host"),
]


@pytest.mark.parametrize("data, fragment", BAD_EXPERIMENTS,
                         ids=[f"exp-{i}" for i in range(len(BAD_EXPERIMENTS))])
def test_bad_experiment_files_are_one_sentence(tmp_path: Path, env: dict[str, str],
                                               data: object, fragment: str) -> None:
    path = write(tmp_path, data)
    line = refused(env, "plan", str(path), fragment=fragment)
    assert str(path) in line
    refused(env, "run", str(path), fragment=fragment)


def test_no_such_experiment(env: dict[str, str]) -> None:
    refused(env, "plan", "no-such-experiment", fragment="no experiment named 'no-such-experiment'")


# --------------------------------------------------------------------------- sizes that do not fit


def test_a_file_set_larger_than_the_disk_is_refused_at_plan_and_run(
        tmp_path: Path, env: dict[str, str]) -> None:
    """The issue's case: {kind: single, size: 10^15} used to fill the disk."""
    path = write(tmp_path, experiment(traces=[{"name": "huge", "kind": "single",
                                               "size": 1000000000000000}]))
    fragment = "in Docker's data folder"
    refused(env, "plan", str(path), fragment=fragment)
    refused(env, "run", str(path), fragment=fragment)


def test_a_database_seed_larger_than_the_disk_is_refused_at_plan_and_run(
        tmp_path: Path, env: dict[str, str]) -> None:
    """A seeded data set of 10^9 rows of 1 MiB would fill Docker's data folder: refused before
    the seed job (or anything else) starts."""
    path = write(tmp_path, experiment(traces=[{**GOOD_TRACE, "dynamic": {}}],
                                      stack={"db": {"rows": 1_000_000_000,
                                                    "row_bytes": 1 << 20}}))
    for command in ("plan", "run"):
        line = refused(env, command, str(path), fragment="the database of")
        assert "Docker's data folder" in line and "lower stack.db.rows" in line, line


def test_database_shared_buffers_larger_than_memory_are_refused(
        tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, experiment(traces=[{**GOOD_TRACE, "dynamic": {}}],
                                      stack={"db": {"shared_buffers": "100000GB"}}))
    refused(env, "plan", str(path), fragment="lower stack.db.shared_buffers")
    refused(env, "run", str(path), fragment="lower stack.db.shared_buffers")


def test_a_dynamic_request_larger_than_the_application_tier_takes_is_refused(
        tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, experiment(traces=[{"name": "big", "kind": "single",
                                               "size": 64 << 20, "dynamic": {}}]))
    refused(env, "plan", str(path), fragment="a dynamic request is at most 16 MiB")


def test_a_tmpfs_docroot_too_small_for_the_file_sets_is_refused(
        tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, experiment(stack={"docroot": "tmpfs"},
                                      traces=[{"name": "big", "kind": "single",
                                               "size": 64 << 20}]))
    env = {**env, "DOCROOT_TMPFS_SIZE": "16m"}
    refused(env, "plan", str(path), fragment="raise DOCROOT_TMPFS_SIZE")
    refused(env, "run", str(path), fragment="raise DOCROOT_TMPFS_SIZE")


def test_a_tmpfs_larger_than_free_memory_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, experiment(stack={"docroot": "tmpfs"},
                                      traces=[{"name": "big", "kind": "single",
                                               "size": 1 << 50}]))
    env = {**env, "DOCROOT_TMPFS_SIZE": "2000t"}
    refused(env, "plan", str(path), fragment="in memory (a tmpfs lives in memory)")


def test_a_proxy_cache_too_small_for_the_responses_in_flight_is_refused(
        tmp_path: Path, env: dict[str, str]) -> None:
    """The proxy cache's guard stops storing at 70 % of its tmpfs; 8 connections storing 8 MiB
    files at that moment need 64 MiB, more than the 4.8 MiB the other 30 % of 16m hold (the
    tmpfs would fill and Apache's children crash)."""
    path = write(tmp_path, experiment(stack={"proxy_cache": True}, load={"users": 8},
                                      traces=[{"name": "big", "kind": "single",
                                               "size": 8 << 20}]))
    env = {**env, "PROXY_CACHE_SIZE": "16m"}
    for command in ("plan", "run"):
        line = refused(env, command, str(path), fragment="PROXY_CACHE_SIZE=16.0 MiB")
        assert "(64.0 MiB)" in line and "4.8 MiB for it" in line, line
        assert "raise PROXY_CACHE_SIZE in .env" in line and "smaller files" in line, line


def test_proxy_caches_larger_than_free_memory_are_refused(tmp_path: Path,
                                                          env: dict[str, str]) -> None:
    path = write(tmp_path, experiment(stack={"proxy_cache": True}))
    refused({**env, "PROXY_CACHE_SIZE": "2000t"}, "plan", str(path),
            fragment="in memory (a tmpfs lives in memory)")
    line = refused({**env, "PROXY_CACHE_SIZE": "2000t"}, "run", str(path),
                   fragment="lower PROXY_CACHE_SIZE")
    assert "the proxy cache" in line, line


def test_orangefs_storage_too_small_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, {"name": "p", "kind": "pfs", "modes": ["offloads-on"],
                            "pfs": {"test": "streams", "streams": [64], "client_containers": 1,
                                    "io_servers": 2}})
    refused(env, "plan", str(path), fragment="raise PVFS_SCRATCH_SIZE")
    refused({**env, "PVFS_SCRATCH_SIZE": "64g", "PVFS_TMPFS_SIZE": "8m"}, "plan", str(path),
            fragment="raise PVFS_TMPFS_SIZE")


def test_a_disk_image_larger_than_the_free_space_is_refused_before_anything_is_written(
        tmp_path: Path, env: dict[str, str]) -> None:
    """An emulated disk system holds the file sets: its images are checked against the free
    space of DISK_IMAGE_DIR at plan and at run (no image, loop device or mount made)."""
    images = tmp_path / "images"
    path = write(tmp_path, experiment(stack={"docroot": "ide"},
                                      traces=[{"name": "huge", "kind": "single",
                                               "size": 1000000000000000}]))
    env = {**env, "DISK_IMAGE_DIR": str(images)}
    fragment = f"in the disk images' folder ({images})"
    refused(env, "plan", str(path), fragment=fragment)
    refused(env, "run", str(path), fragment=fragment)
    path = write(tmp_path, {"name": "d", "kind": "disk", "modes": ["offloads-on"],
                            "disk": {"systems": ["raid0"], "file_mb": 1 << 20}}, "disk.yml")
    refused(env, "plan", str(path), fragment=fragment)
    refused(env, "run", str(path), fragment=fragment)
    assert not images.exists()


def test_a_size_setting_that_is_not_a_size(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, experiment(stack={"docroot": "tmpfs"}))
    refused({**env, "DOCROOT_TMPFS_SIZE": "lots"}, "plan", str(path),
            fragment="DOCROOT_TMPFS_SIZE='lots' is not a size like 8g or 512m")


# --------------------------------------------------------------------------- traces and logs


def test_a_missing_world_cup_log_is_one_sentence(tmp_path: Path, env: dict[str, str]) -> None:
    path = write(tmp_path, experiment(engine="wrk", traces=[
        {"name": "wc", "kind": "worldcup", "log": "no-such-log.gz"}]))
    refused(env, "plan", str(path), fragment="no-such-log.gz")


def test_a_world_cup_log_outside_the_data_folder_is_refused_by_the_plan(
        tmp_path: Path, env: dict[str, str]) -> None:
    # The log exists and decodes, but the stack's fileset job cannot read it (only the
    # checkout's workloads/ is mounted into it): the run used to fail inside Compose (exit 2).
    log = tmp_path / "wc_day46_1"
    log.write_bytes(struct.pack(">IIIIBBBB", 894000000, 1, 2, 4096, 1, 1, 200, 1) * 3)
    for name in (str(log), "../../" + str(log).lstrip("/")):
        path = write(tmp_path, experiment(engine="wrk", traces=[
            {"name": "wc", "kind": "worldcup", "log": name}]))
        refused(env, "plan", str(path),
                fragment="is not in workloads/data/, the only folder of logs the stack's "
                         "fileset job can read")


def test_a_damaged_world_cup_log_is_one_sentence(tmp_path: Path, env: dict[str, str]) -> None:
    data = ROOT / "workloads" / "data"
    log = data / "tb-test-damaged.bin"
    record = struct.pack(">IIIIBBBB", 894000000, 1, 2, 4096, 1, 1, 200, 1)  # 20 bytes
    log.write_bytes(record * 3 + b"\x01\x02\x03")  # a partial record at the end
    try:
        path = write(tmp_path, experiment(engine="wrk", traces=[
            {"name": "wc", "kind": "worldcup", "log": log.name}]))
        refused(env, "plan", str(path), fragment="ends with a partial record")
    finally:
        log.unlink()


# --------------------------------------------------------------------------- mode files


BAD_MODES = [
    ("nic: {coalesce: {rx-usecs: fast}}\n", "nic.coalesce.rx-usecs: must be a whole number"),
    ("nic: {features: {warp: on}}\n", "nic.features.warp: not a feature name"),
    ("qdisc: {kind: tbf}\n", "qdisc.rate: required for tbf"),
    ("extends: bad\n", "extends: 'bad' makes a cycle"),
    ("roles: [routers]\n", "roles[0]: must be one of servers, clients"),
    (b"\x00\x01binary\x00", "is a binary file"),
]


@pytest.mark.parametrize("text, fragment", BAD_MODES, ids=[f"mode-{i}" for i in range(6)])
def test_bad_mode_files_are_one_sentence(tmp_path: Path, env: dict[str, str], text: object,
                                         fragment: str) -> None:
    modes = tmp_path / "modes"
    modes.mkdir()
    write(modes, text, "bad.yml")
    refused(env, "modes", "--modes-dir", str(modes), "show", "bad", fragment=fragment)


def test_a_netem_mode_on_a_kernel_without_netem_changes_nothing(tmp_path: Path,
                                                                env: dict[str, str]) -> None:
    modes = tmp_path / "modes"
    modes.mkdir()
    write(modes, "host_interfaces: [lo]\nqdisc: {kind: netem, delay: 10ms}\n", "delay.yml")
    probe = subprocess.run(["unshare", "-n", "--", "sh", "-c", "ip link add tbx0 type veth peer "
                            "name tbx1 && tc qdisc add dev tbx0 root netem delay 1ms"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode == 0:
        pytest.skip("this kernel has sch_netem: the refusal cannot be shown here")
    refused(env, "modes", "--modes-dir", str(modes), "check", "delay", code=1,
            fragment="qdisc netem is not available in this kernel (module sch_netem missing)")


def test_an_absent_feature_is_refused_naming_the_driver(tmp_path: Path,
                                                        env: dict[str, str]) -> None:
    modes = tmp_path / "modes"
    modes.mkdir()
    write(modes, "host_interfaces: [lo]\nnic: {rings: {tcp-data-split: on}}\n", "split.yml")
    line = refused(env, "modes", "--modes-dir", str(modes), "check", "split", code=1,
                   fragment="header-data split and rings")
    assert "host:lo" in line


def test_an_absent_interface_is_refused(tmp_path: Path, env: dict[str, str]) -> None:
    modes = tmp_path / "modes"
    modes.mkdir()
    write(modes, "host_interfaces: [tbnosuch0]\nnic: {features: {tso: off}}\n", "gone.yml")
    refused(env, "modes", "--modes-dir", str(modes), "check", "gone", code=1,
            fragment="host:tbnosuch0 cannot be read")


# --------------------------------------------------------------------------- cluster files


@pytest.mark.parametrize("text, fragment", [
    (b"\xff\xfe\x00binary", "is a binary file"),
    ("version: 1\nnodes: [{name: a, address: 198.18.16.10, interfaces: [{name: eth0}]}]\n"
     "roles: {web: b}\n", "roles.web"),
], ids=["cluster-binary", "cluster-unknown-node"])
def test_bad_cluster_files_are_one_sentence_each(tmp_path: Path, env: dict[str, str],
                                                 text: object, fragment: str) -> None:
    path = write(tmp_path, text, "cluster.yml")
    done = subprocess.run([*NODES, "check", str(path)], env=env, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert fragment in done.stderr and str(path) in done.stderr


ONE_NODE = ("version: 1\nnodes: [{name: n1, address: 127.0.0.1, port: 1,\n"
            "  interfaces: [{name: lo, address: 127.0.0.1}]}]\n")


@pytest.mark.parametrize("text, command, fragment", [
    (ONE_NODE + "roles: {loadgen: n1, proxy: n1}\n", "run",
     "roles.web: not placed, and this needs the web tier (Apache httpd) on a node"),
    (ONE_NODE + "roles: {loadgen: n1, proxy: n1, web: x}\n", "plan",
     "roles.web: no node named 'x' (nodes: n1)"),
    (ONE_NODE + "roles: {loadgen: n1, proxy: n1, web: n1}\n", "run",
     "n1: cannot reach root@127.0.0.1 over SSH (port 1)"),
], ids=["cluster-role-missing", "cluster-role-unknown-node", "cluster-node-unreachable"])
def test_runs_on_a_bad_cluster_are_refused_before_anything_changes(
        tmp_path: Path, env: dict[str, str], text: str, command: str, fragment: str) -> None:
    path = write(tmp_path, text, "cluster.yml")
    refused(env, command, str(ROOT / "tests" / "data" / "experiments" / "two-modes.yml"),
            "--cluster", str(path), fragment=fragment)


@pytest.mark.parametrize("workdir, fragment", [
    ("/", "workdir: / is the root folder"),
    ("/etc/tierbench", "workdir: /etc/tierbench is inside the system folder /etc"),
    ("/var", "workdir: /var is a system folder"),
    ("/var/lib", "workdir: /var/lib is a system folder"),
    ("/usr/local/tierbench", "inside the system folder /usr"),
    ("/root", "workdir: /root is the system folder /root"),
    ("/tmp/tb", "inside the system folder /tmp"),
    ("//proc/", "workdir: /proc is the system folder /proc"),
    ("/srv/../etc", "is not an absolute folder"),
], ids=["root", "etc", "var", "var-lib", "usr", "root-home", "tmp", "proc", "dotdot"])
def test_a_system_folder_as_workdir_is_refused_before_anything_runs(
        tmp_path: Path, env: dict[str, str], workdir: str, fragment: str) -> None:
    """`tierbench clean --cluster` runs rm -rf WORKDIR/PROJECT/results on every node: a workdir of / or a
    system folder is refused by every command that reads the cluster file, before any node is
    reached."""
    path = write(tmp_path, ONE_NODE + f"workdir: {workdir}\nroles: {{loadgen: n1, proxy: n1, "
                 "web: n1}\n", "cluster.yml")
    line = refused(env, "check", str(path), fragment=fragment, argv=NODES)
    assert "give it a folder of its own" in line or "absolute folder" in line
    refused(env, "clean", "--cluster", str(path), fragment=fragment)
    refused(env, "run", str(ROOT / "tests" / "data" / "experiments" / "two-modes.yml"),
            "--cluster", str(path), fragment=fragment)


def test_the_default_workdir_and_a_folder_of_its_own_are_accepted(tmp_path: Path) -> None:
    from tierbench.kinds import registry
    from tierbench.placement import clusterfile

    for workdir in ("/var/lib/tierbench", "/srv/tierbench", "/data/tb"):
        path = write(tmp_path, ONE_NODE + f"workdir: {workdir}\n", "cluster.yml")
        assert clusterfile.load_cluster(path, registry.roles()).workdir == workdir


@pytest.mark.parametrize("mode, owner, fragment", [
    (0o755, 0, "has mode 0755"),
    (0o700, 65534, "owned by user 65534"),
], ids=["group-readable", "other-owner"])
def test_an_ssh_control_folder_others_may_use_is_refused(
        tmp_path: Path, env: dict[str, str], mode: int, owner: int, fragment: str) -> None:
    """ssh's shared connections to the nodes are sockets in a private folder (root's
    /run/tierbench/ssh, here TIERBENCH_SSH_DIR): one that another user owns, or others may
    enter, is refused before any ssh runs."""
    short = Path(tempfile.mkdtemp(prefix="tb-"))  # a socket's path is at most 107 bytes
    folder = short / "ssh"
    env = {**env, "TIERBENCH_SSH_DIR": str(folder)}
    folder.mkdir()
    folder.chmod(mode)
    os.chown(folder, owner, owner)
    path = write(tmp_path, ONE_NODE + "roles: {loadgen: n1, proxy: n1, web: n1}\n",
                 "cluster.yml")
    for argv, args in ((TIERBENCH, ["run", str(ROOT / "tests" / "data" / "experiments" /
                                            "two-modes.yml"), "--cluster", str(path)]),
                       (TIERBENCH, ["clean", "--cluster", str(path)]),
                       (NODES, ["check", str(path)])):
        line = refused(env, *args, argv=argv, fragment=f"the SSH control-socket folder {folder}")
        assert fragment in line and "remove it" in line
    assert sorted(folder.iterdir()) == []  # no socket: ssh never ran
    shutil.rmtree(short)


def test_a_control_folder_too_long_for_a_socket_is_one_sentence(tmp_path: Path,
                                                               env: dict[str, str]) -> None:
    folder = tmp_path / ("x" * 80) / "ssh"
    path = write(tmp_path, ONE_NODE + "roles: {loadgen: n1, proxy: n1, web: n1}\n",
                 "cluster.yml")
    refused({**env, "TIERBENCH_SSH_DIR": str(folder)}, "check", str(path), argv=NODES,
            fragment="is too long a path for a socket (at most 77 characters)")
    assert not folder.exists()


@pytest.mark.parametrize("bind, fragment", [
    (None, "load.remote_workers: workers on other nodes reach the Locust master at MASTER_BIND, "
           "which is not set"),
    ("0.0.0.0", "MASTER_BIND=0.0.0.0 would publish the Locust master, which admits any worker, "
                "on every address of this host"),
    ("192.0.2.77", "MASTER_BIND=192.0.2.77 is not an address of this host"),
], ids=["unset", "every-address", "not-ours"])
def test_remote_workers_on_one_host_need_one_address_of_it(
        tmp_path: Path, env: dict[str, str], bind: str | None, fragment: str) -> None:
    """Locust's master admits any worker: with load.remote_workers on one host it is published
    on the one address MASTER_BIND names, never on every address."""
    path = write(tmp_path, experiment(load={"remote_workers": 2}))
    env = {k: v for k, v in env.items() if k != "MASTER_BIND"}
    if bind is not None:
        env["MASTER_BIND"] = bind
    refused(env, "run", str(path), fragment=fragment)


# --------------------------------------------------------------------------- the host


def test_missing_docker_is_one_sentence(tmp_path: Path, env: dict[str, str]) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("ethtool", "nsenter", "ip", "tc"):  # everything but docker
        found = shutil.which(tool)
        if found:
            (bindir / tool).symlink_to(found)
    env = {**env, "PATH": str(bindir)}
    refused(env, "run", "quick", fragment="docker is missing: install the docker.io package")


def test_resume_of_a_folder_that_is_not_a_run(tmp_path: Path, env: dict[str, str]) -> None:
    refused(env, "run", "quick", "--resume", str(tmp_path / "nowhere"),
            fragment="--resume")
    other = tmp_path / "other"
    other.mkdir()
    (other / "experiment.yml").write_text(yaml.safe_dump({"name": "dc-single", "kind": "web"}))
    refused(env, "run", "quick", "--resume", str(other),
            fragment="the run was of a different experiment")
