"""Safe to lose the controller, safe to share a rack (markers ``stack`` and ``lab_full``: `make
test-cluster` runs them; one 2-node lab for the module, `setup/lab.sh up 2` with the cluster
file's rollback_timeout_s set to 10 s): node1 runs the load generator, node2 the proxy and the
web tier. A point of tests/data/modes/rollback-all.yml changes, on both nodes, eth0's features
(TSO, GSO, GRO off) and MTU (1400), the routes to the other node (congctl cubic: a lab node's
/proc/sys is read-only) and every tier's CPU limit (half a CPU, its cgroup).

- the controller SIGKILLed mid-point: each node's eth0, routes and CPU limits are back to the
  snapshot within the timeout plus a few seconds, read on the node (`docker exec` into the node
  container, never through tierbench), with no `tierbench clean`;
- node2's sshd killed mid-point (the listener and every session, so the controller's renewals
  and its own restore cannot reach it): node2 puts its settings back by itself, read the same
  way while its sshd is still down;
- the controller sent SIGHUP mid-point (as a dropped SSH session to it would): the controller
  itself puts every node back at once, long before the nodes' agents would, says it was
  interrupted and leaves nothing for `tierbench clean` (its state file gone, no agent fired);
- a second checkout (its own Compose project, state, results and controller lock folder, as on
  another controller) starting a run on the nodes the first one holds is refused in one sentence
  naming the holder, while the first run's results come out complete; once the first has ended
  with its stack up, the second's run is refused on the nodes the first's stack holds, and the
  second's `tierbench clean --cluster` leaves the first's stack up."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
from stack_env import (EXPERIMENTS, ROOT, TIERBENCH, lab_cluster, last_run, node_container,
                       summary_rows, tierbench)

from tierbench.interfaces import cpu
from tierbench.placement import compose
from tierbench.transport import Transport

pytestmark = [pytest.mark.stack, pytest.mark.lab_full]

TIMEOUT_S = 10.0  # the cluster file's rollback_timeout_s for this module
GRACE_S = 8.0  # the agent's poll, its restore commands (ethtool, ip, python3) and this test's
EXPERIMENT = "rollback-lab"
NODES = ("node1", "node2")
# eth0's features and MTU, and the main routing table (the congctl routes), as the node sees them
# every sshd process of a node (OpenSSH 9.8 and later: sshd-session and sshd-auth per session)
KILL_SSHD = ("for p in /proc/[0-9]*; do case $(cat $p/comm 2>/dev/null) in "
             "sshd|sshd-session|sshd-auth) kill -9 ${p#/proc/};; esac; done; true")
READ = ("ethtool -k eth0 | grep -v fixed; ip -o link show dev eth0 | grep -o 'mtu [0-9]*'; "
        "echo ==; ip route show table main")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with lab_cluster(tmp_path_factory, size=2,
                     settings={"rollback_timeout_s": TIMEOUT_S}) as lab:
        yield lab


def on_node(node: str) -> Transport:
    """The node reached with `docker exec` into its container: no SSH, no tierbench."""
    return Transport(node, ("docker", "exec", "-i", node_container(node), "sh", "-c"))


def node_view(node: str) -> str:
    done = on_node(node).run(READ, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def cpu_targets(state_dir: str) -> list[dict]:
    """The tiers' CPU targets the run saved before its change: node, pid, the values before."""
    snaps = json.loads((Path(state_dir) / "netif-state.json").read_text())["snapshots"]
    return list(snaps.get("cpu", {}).values())


def cpu_now(targets: list[dict]) -> list[dict]:
    return [cpu.read(int(t["pid"]), on_node(t["node"])) for t in targets]


def start(env: dict[str, str], lab: dict) -> subprocess.Popen:
    return subprocess.Popen([*TIERBENCH, "run", str(EXPERIMENTS / f"{EXPERIMENT}.yml"),
                             "--cluster", str(lab["path"])], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_the_mode(proc: subprocess.Popen, before: dict[str, str], state_dir: str,
                      timeout: float = 600) -> list[dict]:
    """Once the whole mode holds on every node (MTU 1400, a congctl route, then the tiers' CPU
    limits, applied last): the tiers' CPU targets, whose saved limit was another."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        views = {n: node_view(n) for n in NODES}
        if all("mtu 1400" in v and "congctl cubic" in v for v in views.values()):
            targets = cpu_targets(state_dir)
            now = cpu_now(targets)
            if all(n["limit"] == 0.5 for n in now):
                break
        assert time.monotonic() < deadline, f"the mode did not hold on the nodes: {views}"
        time.sleep(0.5)
    assert all(views[n] != before[n] for n in NODES)
    assert {t["node"] for t in targets} == set(NODES), targets
    assert all(t["values"]["limit"] != 0.5 for t in targets), targets
    return targets


def restored_by(nodes_: tuple[str, ...], before: dict[str, str], targets: list[dict],
                since: float) -> float:
    """Seconds after `since` until every named node reads its snapshot again (eth0, routes, the
    CPU limits of its tiers); fails after the timeout plus GRACE_S."""
    mine = [t for t in targets if t["node"] in nodes_]
    while True:
        views = {n: node_view(n) for n in nodes_}
        cpus = cpu_now(mine)
        took = time.monotonic() - since
        if all(views[n] == before[n] for n in nodes_) and \
                all(now == t["values"] for t, now in zip(mine, cpus)):
            return took
        assert took < TIMEOUT_S + GRACE_S, (
            f"not restored {took:.1f} s after the controller was cut off: " + "; ".join(
                f"{n}: {views[n]}" for n in nodes_ if views[n] != before[n])
            + f"; CPU {cpus} against {[t['values'] for t in mine]}")
        time.sleep(0.5)


def fired(node: str) -> int:
    """How many of the node's guard agents restored by themselves (their folders under /run
    stay, with their log, until a controller disarms them)."""
    done = on_node(node).run("grep -l 'no renewal for' /run/tierbench-guard.*/log 2>/dev/null",
                             timeout=60)
    return len(done.stdout.split())


def clean(lab: dict) -> None:
    done = tierbench(lab["env"], "clean", "--cluster", str(lab["path"]), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_killed_controller_leaves_the_nodes_to_restore_themselves(lab) -> None:
    before = {n: node_view(n) for n in NODES}
    had = {n: fired(n) for n in NODES}
    proc = start(lab["env"], lab)
    try:
        targets = wait_for_the_mode(proc, before, lab["env"]["TIERBENCH_STATE_DIR"])
        proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        proc.communicate(timeout=60)
        took = restored_by(NODES, before, targets, killed)
        print(f"restored by the nodes {took:.1f} s after SIGKILL (timeout {TIMEOUT_S:g} s)")
        assert took > TIMEOUT_S * 0.5  # by the nodes' agents, not by anything right away
        assert {n: fired(n) for n in NODES} == {n: had[n] + 1 for n in NODES}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    clean(lab)  # the stack the killed run left up, and its state file
    assert {n: node_view(n) for n in NODES} == before


def test_a_node_cut_off_from_the_controller_restores_itself(lab) -> None:
    before = {n: node_view(n) for n in NODES}
    had = fired("node2")
    proc = start(lab["env"], lab)
    container = node_container("node2")
    try:
        targets = wait_for_the_mode(proc, before, lab["env"]["TIERBENCH_STATE_DIR"])
        # node2's sshd: the listener and every session (the lab's own processes, in its container)
        cut = subprocess.run(["docker", "exec", container, "sh", "-c", KILL_SSHD],
                             capture_output=True, text=True, timeout=60)
        assert cut.returncode == 0, cut.stderr
        since = time.monotonic()
        took = restored_by(("node2",), before, targets, since)
        print(f"node2 restored itself {took:.1f} s after its sshd was killed")
        assert fired("node2") == had + 1
        assert proc.poll() is None or proc.returncode != 0
    finally:
        subprocess.run(["docker", "exec", container, "/usr/sbin/sshd"], capture_output=True,
                       timeout=60)
        try:
            out, err = proc.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    print(err[-2000:])
    assert proc.returncode != 0  # node2's point was not measured under the mode
    clean(lab)
    assert {n: node_view(n) for n in NODES} == before


def test_a_hung_up_controller_restores_every_node_itself(lab) -> None:
    before = {n: node_view(n) for n in NODES}
    had = {n: fired(n) for n in NODES}
    state_dir = lab["env"]["TIERBENCH_STATE_DIR"]
    proc = start(lab["env"], lab)
    try:
        targets = wait_for_the_mode(proc, before, state_dir)
        proc.send_signal(signal.SIGHUP)  # what a dropped SSH session to the controller sends
        hung_up = time.monotonic()
        took = restored_by(NODES, before, targets, hung_up)
        out, err = proc.communicate(timeout=120)
        ended = time.monotonic() - hung_up
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    print(f"both nodes restored {took:.1f} s after SIGHUP, the controller ended {ended:.1f} s "
          f"after it (timeout {TIMEOUT_S:g} s)")
    assert took < TIMEOUT_S * 0.5, took  # by the controller, long before the nodes' agents
    assert proc.returncode == 130, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("tierbench: interrupted by SIGHUP: interfaces restored; partial "
                           "results in "), last
    assert not (Path(state_dir) / "netif-state.json").exists()  # nothing left for `clean`
    # the agents were disarmed, not left to fire: once their timeout is over, none has
    time.sleep(max(0.0, hung_up + TIMEOUT_S + GRACE_S - time.monotonic()))
    assert {n: fired(n) for n in NODES} == had
    assert {n: node_view(n) for n in NODES} == before
    assert cpu_now(targets) == [t["values"] for t in targets]


def test_a_second_checkout_is_refused_on_the_nodes_the_first_holds(lab, tmp_path) -> None:
    first = compose.PROJECT
    second = dict(lab["env"], TIERBENCH_PROJECT="tierbench-second",
                  TIERBENCH_RESULTS=str(tmp_path / "results"),
                  TIERBENCH_STATE_DIR=str(tmp_path / "state"),
                  TIERBENCH_LOCK_DIR=str(tmp_path / "locks"))  # as from another controller
    before = {n: node_view(n) for n in NODES}
    proc = start(lab["env"], lab)
    try:
        wait_for_the_mode(proc, before, lab["env"]["TIERBENCH_STATE_DIR"])
        refused = tierbench(second, "run", str(EXPERIMENTS / f"{EXPERIMENT}.yml"), "--cluster",
                            str(lab["path"]), timeout=300)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert refused.returncode != 0
    last = refused.stderr.strip().splitlines()[-1]
    assert "Traceback" not in refused.stderr
    assert last.startswith("tierbench: node node1 is in use by another tierbench run, held by "
                           "user root on host "), last
    assert f"(pid {proc.pid}, checkout {ROOT}, `tierbench run " in last, last
    assert not (tmp_path / "results" / EXPERIMENT).exists()
    # the first run's results complete
    assert proc.returncode == 0, err[-3000:]
    run_dir = last_run(lab, EXPERIMENT)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    [row] = summary_rows(run_dir)
    assert not row.get("error") and float(row["tps"]) > 0
    assert all(p["mode_verified"] and p["restored"] for p in manifest["points"].values())

    def running(project: str) -> dict[str, list[str]]:
        return {n: on_node(n).run(f"docker ps -q --filter label=com.docker.compose.project="
                                  f"{project}", timeout=60).stdout.split() for n in NODES}

    up = running(first)
    assert up["node2"], up  # the first's proxy and web tier stay up after its run
    # the nodes are free now, but the first's stack holds their ports
    again = tierbench(second, "run", str(EXPERIMENTS / f"{EXPERIMENT}.yml"), "--cluster",
                      str(lab["path"]), timeout=600)
    assert again.returncode != 0
    last = again.stderr.strip().splitlines()[-1]
    assert f"another checkout's stack ({first}) is up on node node" in last, last
    assert running("tierbench-second") == {n: [] for n in NODES}
    cleaned = tierbench(second, "clean", "--cluster", str(lab["path"]), timeout=300)
    assert cleaned.returncode == 0, cleaned.stderr[-2000:]
    assert running(first) == up
    clean(lab)
    assert running(first) == {n: [] for n in NODES}
