"""net.profile on a cluster without nodes: the check perf must pass (here or on the sender node,
over SSH), the refusals it gives, the senders' CPUs read on their node, perf record started
there over SSH for the window, and perf script / perf report run there with only their text
copied back (the node's commands answered by a stand-in for ssh)."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tierbench.config.errors import ConfigError
from tierbench.kinds import registry
from tierbench.kinds.net import flows, profile
from tierbench.measure.counters import MeasureError
from tierbench.placement import cluster, compose, nodes
from tierbench.placement.model import PROJECT, Container
from tierbench.placement.clusterfile import parse_cluster
from tierbench import transport

LAB = {
    "version": 1, "workdir": "/srv/tb",
    "nodes": [{"name": f"node{i}", "address": f"198.18.16.{10 + i}",
               "interfaces": [{"name": "eth0", "address": f"198.18.16.{10 + i}/24"}]}
              for i in range(1, 3)],
    "roles": {"net_client": "node1", "net_server": "node2"},
}
KALLSYMS_OK = "ffffffffb0000000 T _stext\nffffffffb0000010 T tcp_sendmsg\n"
KALLSYMS_HIDDEN = "0000000000000000 T _stext\n0000000000000000 T tcp_sendmsg\n"


@pytest.fixture
def on_lab() -> Any:
    """A ClusterPlacer over two nodes (none reachable): the placement experiments run on."""
    return cluster.ClusterPlacer(parse_cluster(copy.deepcopy(LAB), registry.roles(), "lab.yml"))


class Node:
    """Stands in for the nodes' SSH: records each command and answers from ``answers``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, answers: dict[str, str]) -> None:
        self.calls: list[tuple[str, str]] = []
        self.answers = answers

        def run(via: transport.Transport, command: str, **kw: Any
                ) -> subprocess.CompletedProcess:
            self.calls.append((str(via.name), command))
            out = next((v for k, v in answers.items() if k in command), "")
            return subprocess.CompletedProcess(command, 0, out, "")

        monkeypatch.setattr(transport.Transport, "run", run)


def test_perf_probe_output_gives_one_sentence_per_problem() -> None:
    ok = "RECORD-OK\nKALLSYMS\n" + KALLSYMS_OK
    assert profile.perf_problem("x.yml", ok) is None
    assert "needs perf on this host" in profile.perf_problem("x.yml", "NO-PERF\n")
    failed = profile.perf_problem("x.yml", "RECORD-FAILED\nNo permission to enable cpu-clock "
                                  "event.\nKALLSYMS\n" + KALLSYMS_OK, "node node1")
    assert "perf cannot sample the CPU clock on node node1 (No permission" in failed
    hidden = profile.perf_problem("x.yml", "RECORD-OK\nKALLSYMS\n" + KALLSYMS_HIDDEN)
    assert "kernel's symbol addresses are hidden" in hidden and "kptr_restrict" in hidden
    for text in (failed, hidden):
        assert text.endswith("nothing was run") and "\n" not in text


def test_preflight_checks_perf_on_the_sender_node_not_here(
        on_lab: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    exp = registry.load_experiment("net-txprofile", placer=on_lab)
    kind = registry.kind("net")
    monkeypatch.setattr(compose, "ensure_images", lambda names, how="": None)
    monkeypatch.setattr(flows, "daemon_nofile", lambda: None)
    fake = Node(monkeypatch, {"perf record": "RECORD-OK\nKALLSYMS\n" + KALLSYMS_OK})
    monkeypatch.setattr(transport, "run_argv", lambda *a, **k: pytest.fail(
        f"perf ran on the controller: {a}"))
    kind.preflight(exp, [])
    assert [n for n, _ in fake.calls] == ["node1"]
    assert "perf record -q -e cpu-clock -a -g" in fake.calls[0][1]
    assert "/proc/kallsyms" in fake.calls[0][1]
    fake.answers["perf record"] = "RECORD-OK\nKALLSYMS\n" + KALLSYMS_HIDDEN
    with pytest.raises(ConfigError, match=r"symbol addresses are hidden on node node1 \(the "
                       r"senders' node, net_client\)"):
        kind.preflight(exp, [])
    fake.answers["perf record"] = "NO-PERF\n"
    with pytest.raises(ConfigError, match="net.profile needs perf on node node1"):
        kind.preflight(exp, [])


def test_the_profile_is_recorded_and_reported_on_the_sender_node(
        on_lab: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    point_dir = tmp_path / "net-txprofile" / "run-1" / "points" / "p0003"
    point_dir.mkdir(parents=True)
    script = ("iperf3 1234 [001]\n\tffffffff81000000 tcp_sendmsg\n\tffffffff81000001 "
              "ksys_write\n\niperf3 1234 [001]\n\tffffffff81000002 tcp_write_xmit\n\n")
    fake = Node(monkeypatch, {"Cpus_allowed_list": "Cpus_allowed_list:\t0-1\n"
                              "Cpus_allowed_list:\t0-1\n",
                              "perf script": script, "perf report": "# Children  Self\n"})
    started: list[list[str]] = []

    class Popen:
        def __init__(self, argv: list[str], **kw: Any) -> None:
            started.append(argv)

        def wait(self, timeout: float | None = None) -> int:
            return 0

    monkeypatch.setattr(transport, "start_argv", Popen)
    senders = [Container("net-client", f"id{i}", f"tierbench-net-client-{i}", 4000 + i, "img",
                         "sha", "0-1", node="node1", context="tierbench-node1")
               for i in (1, 2)]
    ctx = SimpleNamespace(dir=point_dir, record={}, deployment=SimpleNamespace(placer=on_lab))
    prof = profile.start(ctx, senders, 3.0)  # type: ignore[arg-type]
    # the senders' CPUs read on their node, from their processes there
    assert fake.calls[0][0] == "node1"
    assert "/proc/4001/status" in fake.calls[0][1] and "/proc/4002/status" in fake.calls[0][1]
    assert ctx.record["profile"] == {"cpus": "0-1", "hz": profile.PROFILE_HZ,
                                     "event": "cpu-clock", "seconds": 3.0, "node": "node1"}
    # perf record over SSH to node1, into this checkout's folder in the workdir there
    argv = started[0]
    assert argv[:len(nodes.ssh_prefix(on_lab.node("node1")))] == \
        nodes.ssh_prefix(on_lab.node("node1"))
    remote = f"/srv/tb/{PROJECT}/perf/run-1-p0003"
    assert argv[-1] == (f"mkdir -p {remote} && exec perf record -q -e cpu-clock -F "
                        f"{profile.PROFILE_HZ} -g -C 0-1 -o {remote}/perf.data -- sleep 3.0")
    out = profile.finish(ctx, prof, "iperf3", 2000.0)  # type: ignore[arg-type]
    commands = [c for _, c in fake.calls[1:]]
    assert commands[0].startswith(f"perf script -i {remote}/perf.data -F comm,pid,cpu,ip,sym")
    assert commands[1].startswith(f"perf report -i {remote}/perf.data --stdio --children")
    assert commands[2] == f"rm -rf {remote}"
    assert (point_dir / "perf-script.txt").read_text() == script
    assert (point_dir / "perf-report.txt").read_text() == "# Children  Self\n"
    assert not (point_dir / "perf.data").exists()
    assert out["prof_samples"] == 2 and out["prof_write_pct"] == 50.0
    assert out["prof_tcp_output_pct"] == 50.0


def test_senders_cpus_unreadable_on_their_node_is_one_sentence(
        on_lab: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    Node(monkeypatch, {})
    senders = [Container("net-client", "id1", "c1", 4001, "img", "sha", "", node="node1")]
    ctx = SimpleNamespace(dir=tmp_path, record={}, deployment=SimpleNamespace(placer=on_lab))
    with pytest.raises(MeasureError, match="node1: the senders' CPUs could not be read"):
        profile.start(ctx, senders, 3.0)  # type: ignore[arg-type]
