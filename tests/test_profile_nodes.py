"""--profile categories on a cluster (issue 43: "a point's categories come per node and per
tier"), without a lab: perf script's text captured on two nodes categorised per node and tier,
each node's clock offset applied, and the node protocol (perf record until the session's input
closes, perf script's text back, the tiers' processes from their containers' cgroups read on
the node) run through a transport whose "ssh" is a local shell and whose perf is a fake that
replays a capture; a node without perf, or whose perf fails, said in one sentence."""

from __future__ import annotations

import csv
import os
import subprocess
from pathlib import Path

import pytest

from tierbench.config.errors import ConfigError
from tierbench.measure import profile
from tierbench.placement.cluster import NodeCgroup
from tierbench.transport import Transport

DATA = Path(__file__).parent / "data" / "kernel"
CAPTURE = (DATA / "perf-script.txt").read_text()
CAPTURED_PID = 30867  # the transfer's process in the capture (94 busy samples of its 110)
T0 = 1796595205.0  # the capture's samples are within a few seconds after this (wall clock)

# A stand-in for perf: `record ... -o FILE -- CMD` runs CMD (the node's workload, cat, which
# reads the session's input) and then writes the capture FAKE_PERF_TEXT names into FILE, or
# fails with FAKE_PERF_FAIL's text; `script ... -i FILE` prints FILE.
FAKE_PERF = """#!/bin/sh
case "$1" in
record)
  if [ -n "$FAKE_PERF_FAIL" ]; then echo "$FAKE_PERF_FAIL" >&2; exit 1; fi
  out=
  while [ $# -gt 0 ]; do
    case "$1" in -o) out=$2; shift 2;; --) shift; break;; *) shift;; esac
  done
  [ $# -gt 0 ] && "$@"
  cp "$FAKE_PERF_TEXT" "$out";;
script)
  while [ $# -gt 0 ]; do
    case "$1" in -i) cat "$2"; exit 0;; *) shift;; esac
  done;;
esac
"""


@pytest.fixture(scope="module")
def table() -> profile.Table:
    return profile.load_table()


NO_PID = 4194305  # above any pid_max (2^22): no process here has it


def shifted(text: str, pid: int, seconds: float) -> str:
    """The capture as another node's perf would print it: the transfer's process as ``pid``,
    every other process as NO_PID (the capture's other PIDs may be live processes of this
    machine's) and every time stamp ``seconds`` later (that node's clock)."""
    out = []
    for line in text.splitlines():
        head = profile.HEADER.match(line) if not line[:1].isspace() else None
        if head:
            mine = int(head["pid"]) == CAPTURED_PID
            line = (line.replace(f" {head['pid']}/", f" {pid if mine else NO_PID}/", 1)
                    .replace(head["t"], f"{float(head['t']) + seconds:.6f}"))
        out.append(line)
    return "\n".join(out) + "\n"


def test_two_nodes_captures_are_counted_per_node_and_tier(table: profile.Table) -> None:
    """node1's capture with its transfer in the web tier, node2's (the same work on a clock
    100 s ahead, its process 4242) in the db tier: each node's rows carry its own tier, the
    columns count both nodes, and node2's samples fall in the window once its offset is
    taken off (without it none would)."""
    one = list(profile.parse_script(CAPTURE))
    two = list(profile.parse_script(shifted(CAPTURE, 4242, 100.0)))
    for s in two:
        s.t -= 100.0  # what Node.stop() does with the node's offset
    span = (T0, T0 + 10)
    cols, rows, folded = profile.breakdown_nodes(
        {"node1": (one, {CAPTURED_PID: "web"}), "node2": (two, {4242: "db"})}, table, span)
    assert cols["cat_samples"] == 220 and cols["cat_tiers_samples"] == 188
    per = {(r["node"], r["tier"]): 0 for r in rows}
    for r in rows:
        per[(r["node"], r["tier"])] += r["samples"]
    assert per[("node1", "web")] == 94 and per[("node2", "db")] == 94
    assert ("node1", "db") not in per and ("node2", "web") not in per
    assert per[("node1", profile.OTHERS)] == per[("node2", profile.OTHERS)] == 16
    copy1 = {r["tier"]: r["samples"] for r in rows if r["category"] == "data copy"
             and r["node"] == "node1"}
    copy2 = {r["tier"]: r["samples"] for r in rows if r["category"] == "data copy"
             and r["node"] == "node2"}
    assert copy1["web"] == copy2["db"] >= 20
    assert {k.split(";")[0] for k in folded} == {"node1", "node2"}
    alone, _, _ = profile.breakdown(one, table, {CAPTURED_PID: "web"}, span)
    assert cols["cat_data_copy_pct"] == pytest.approx(alone["cat_data_copy_pct"])
    late = list(profile.parse_script(shifted(CAPTURE, 4242, 100.0)))
    unshifted, _, _ = profile.breakdown_nodes({"node2": (late, {4242: "db"})}, table, span)
    assert unshifted["cat_samples"] == 0


def test_one_hosts_rows_name_no_node(table: profile.Table) -> None:
    _, rows, folded = profile.breakdown(list(profile.parse_script(CAPTURE)), table,
                                        {CAPTURED_PID: "web"}, None)
    assert {r["node"] for r in rows} == {""}
    assert all(not k.startswith(";") and k.split(";")[0] != "" for k in folded)


@pytest.fixture
def fake_perf(tmp_path: Path) -> Path:
    """A folder holding the fake perf (put first on a fake node's PATH)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    perf = bin_dir / "perf"
    perf.write_text(FAKE_PERF)
    perf.chmod(0o755)
    return bin_dir


def node(name: str, bin_dir: Path, *env: str) -> Transport:
    """A "node" reached by running the command with sh here (what ssh would run there), perf
    being the fake."""
    return Transport(name, ("env", f"PATH={bin_dir}:{os.environ['PATH']}", *env, "sh", "-c"))


def test_a_point_on_two_nodes_gets_categories_per_node_and_tier(
        tmp_path: Path, fake_perf: Path) -> None:
    """The whole node path: the Recording starts perf on each node holding tiers, the tiers'
    processes are read from their containers' cgroups there, closing the session ends perf and
    brings perf script's text back, node2's clock offset is taken off, and categories.csv has
    each node's tiers."""
    busy = subprocess.Popen(["sleep", "60"])  # a tier's main process (this test's cgroup)
    try:
        (tmp_path / "n1.txt").write_text(shifted(CAPTURE, busy.pid, 0.0))
        (tmp_path / "n2.txt").write_text(shifted(CAPTURE, busy.pid, 100.0))
        counters = {
            "web": NodeCgroup("node1", busy.pid,
                              node("node1", fake_perf, f"FAKE_PERF_TEXT={tmp_path}/n1.txt")),
            "db": NodeCgroup("node2", busy.pid,
                             node("node2", fake_perf, f"FAKE_PERF_TEXT={tmp_path}/n2.txt"),
                             offset=100.0)}
        out = tmp_path / "point"
        out.mkdir()
        with profile.Recording(out, True, counters) as rec:
            cols = rec.finish((T0, T0 + 10))
    finally:
        busy.kill()
        busy.wait()
    assert "cat_note" not in cols, cols
    assert cols["cat_samples"] == 220 and cols["cat_tiers_samples"] == 188
    assert cols["cat_nodes"] == "node1 node2"
    with (out / profile.CATEGORIES_FILE).open() as fh:
        rows = list(csv.DictReader(fh))
    mine = {(r["node"], r["tier"]) for r in rows if r["tier"] != profile.OTHERS}
    assert mine == {("node1", "web"), ("node2", "db")}
    assert sum(int(r["samples"]) for r in rows
               if (r["node"], r["tier"]) == ("node2", "db")) == 94
    assert (out / profile.FOLDED_FILE).read_text().startswith("node1;")


def test_a_node_whose_perf_fails_gives_a_note_not_a_failed_point(
        tmp_path: Path, fake_perf: Path) -> None:
    busy = subprocess.Popen(["sleep", "60"])
    try:
        counters = {"web": NodeCgroup("node1", busy.pid, node(
            "node1", fake_perf, "FAKE_PERF_FAIL=Permission denied (perf_event_paranoid)"))}
        out = tmp_path / "point"
        out.mkdir()
        with profile.Recording(out, True, counters) as rec:
            cols = rec.finish(None)
    finally:
        busy.kill()
        busy.wait()
    assert cols["cat_samples"] == 0
    assert cols["cat_note"] == ("no profile from node1: perf record failed: Permission denied "
                                "(perf_event_paranoid)")


def test_a_node_without_perf_or_perf_events_is_refused_before_the_run(
        tmp_path: Path, fake_perf: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    without = Transport("node2", ("env", f"PATH={empty}", "/bin/sh", "-c"))
    with pytest.raises(ConfigError, match=r"^--profile categories needs perf on node node2 "
                       r"\(.*\); nothing was run$"):
        profile.check(without)
    denied = node("node3", fake_perf, "FAKE_PERF_FAIL=perf_event_open: Permission denied")
    with pytest.raises(ConfigError, match=r"perf cannot sample every CPU on node node3 "
                       r"\(perf_event_open: Permission denied\); run as root"):
        profile.check(denied)
    profile.check(node("node4", fake_perf, f"FAKE_PERF_TEXT={DATA}/perf-script.txt"))


def test_a_cluster_placers_counter_carries_its_nodes_transport_and_offset() -> None:
    """What the profile needs of a tier's counter on a node: its transport and clock offset
    (the same NodeCgroup the sampling agent reads)."""
    counters = {"web": NodeCgroup("node1", 11, Transport("node1", ("ssh", "x")), 0.25),
                "other": NodeCgroup("node2", 12)}  # no transport: not profiled there
    nodes = profile.cluster_nodes(counters)
    assert list(nodes) == ["node1"]
    assert nodes["node1"].offset == 0.25 and nodes["node1"].mains == [("web", 11)]
