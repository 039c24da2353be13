"""The rollback guard (tierbench/modes/guard.py, deadman.py), SIGHUP during a run, and the
refusal of modes that would change the interface carrying SSH to a node.

The guard's logic runs here for real on this machine (no root needed): restore commands made
from a snapshot, an agent that restores by itself once its heartbeat is older than the
timeout, one kept alive by renewals, one disarmed. Restore commands are harmless here
(``touch`` of files in the test's folder) where the agent's behaviour is tested.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tierbench import interrupts
from tierbench.config.errors import ConfigError
from tierbench.interfaces import netif
from tierbench.interfaces.netif import Endpoint, NicSettings
from tierbench.modes import apply, deadman, guard
from tierbench.modes.model import Knobs, Mode
from tierbench.placement import nodes
from tierbench.placement.clusterfile import ClusterError, parse_cluster
from tierbench.placement.model import Role, Roles
from tierbench.transport import Transport

ETHTOOL_K = """Features for eth0:
rx-checksumming: on
tx-checksumming: on
\ttx-checksum-ipv4: off [fixed]
\ttx-checksum-ip-generic: on
scatter-gather: on
\ttx-scatter-gather: on
tcp-segmentation-offload: on
\ttx-tcp-segmentation: on
\ttx-tcp6-segmentation: on
generic-receive-offload: on
large-receive-offload: off [fixed]
"""


def mode(**kw: object) -> Mode:
    knobs = kw.pop("knobs", Knobs())
    nic = kw.pop("nic", NicSettings(features={"tso": False, "gro": False}, mtu=1400))
    return Mode(name="m", description="", tiers=(), nic=nic, source="test",  # type: ignore[arg-type]
                knobs=knobs, **kw)  # type: ignore[arg-type]


def snap(label: str = "web:eth0", ifname: str = "eth0", **extra: object) -> dict:
    return {"label": label, "tier": label.split(":")[0], "ifname": ifname, "netns_pid": None,
            "netns_ino": None, "driver": "veth", "features": netif.parse_features(ETHTOOL_K),
            "mtu": 1500, **extra}


# ------------------------------------------------------------------ restore commands from a snapshot


def test_restore_commands_put_back_every_settable_feature_and_the_mtu() -> None:
    cmds = netif.restore_commands(snap())
    assert cmds[0] == ["ip", "link", "set", "dev", "eth0", "mtu", "1500"]
    args = cmds[1][3:]
    pairs = dict(zip(args[::2], args[1::2], strict=True))
    # leaves only (aggregates follow their children), fixed ones never
    assert pairs == {"rx-checksumming": "on", "tx-checksum-ip-generic": "on",
                     "tx-scatter-gather": "on", "tx-tcp-segmentation": "on",
                     "tx-tcp6-segmentation": "on", "generic-receive-offload": "on"}
    assert cmds[1][:3] == ["ethtool", "-K", "eth0"]


def test_restore_commands_cover_the_extras_the_mode_sets_only() -> None:
    s = snap(channels={"max": {"combined": 8, "other": 1}, "current": {"combined": 4, "other": 1}},
             coalesce={"current": {"rx-usecs": 3, "adaptive-rx": True, "tx-usecs": 7}},
             queues={"rx-0": {"rps_cpus": "0", "rps_flow_cnt": "0"}},
             qdisc_root={"kind": None, "handle": None})
    m = mode(knobs=Knobs(channels={"combined": 1}, coalesce={"rx-usecs": 50},
                         rps_cpus="1", qdisc={"kind": "tbf", "rate": "1gbit"}))
    from tierbench.modes import endpoint
    cmds = endpoint.restore_commands(s, m)
    assert ["ethtool", "-L", "eth0", "combined", "4"] in cmds  # not "other": the mode left it
    assert ["ethtool", "-C", "eth0", "adaptive-rx", "on", "rx-usecs", "3"] in cmds
    masks = next(c for c in cmds if c[:2] == ["sh", "-c"])
    assert "echo 0 > /sys/class/net/eth0/queues/rx-0/rps_cpus" in masks[2]
    assert cmds[-1] == ["tc", "qdisc", "del", "dev", "eth0", "root"]


def test_plan_groups_commands_by_node_and_keeps_the_namespace_check() -> None:
    node = Transport("node1", ("ssh", "node1"))
    local = snap("web:eth0", netns_pid=4242, netns_ino=99)
    local["netns_pid"], local["netns_ino"] = 4242, 99
    state = {"kind": apply.STATE_KIND, "endpoints": {
        "web:eth0": local, "proxy:eth1": snap("proxy:eth1", "eth1", **node.record())},
        "sysctls": {"node:node1": {"pid": None, "netns_ino": None, **node.record(),
                                   "values": {"net.core.rmem_max": "212992"}},
                    "host": {"pid": None, "netns_ino": 1,
                             "values": {"net.ipv4.tcp_allowed_congestion_control": "reno cubic"}}}}
    p = guard.plan(state, mode())
    assert set(p) == {None, "node1"}
    assert p["node1"]["record"] == node.record()
    here = p[None]["commands"]
    assert {c["pid"] for c in here if c["what"] == "web:eth0"} == {4242}
    assert all(c["netns_ino"] == 99 for c in here if c["what"] == "web:eth0")
    assert ["sysctl", "-q", "-w", "net.ipv4.tcp_allowed_congestion_control=reno cubic"] in [
        c["argv"] for c in here]
    there = [c["argv"] for c in p["node1"]["commands"]]
    assert ["sysctl", "-q", "-w", "net.core.rmem_max=212992"] in there
    assert ["ip", "link", "set", "dev", "eth1", "mtu", "1500"] in there


# ------------------------------------------------------------------ the agent: expiry, renewal, disarm


def touch_plan(tmp: Path, name: str = "restored") -> list[dict]:
    return [{"argv": ["touch", str(tmp / name)], "what": "test", "pid": None,
             "netns_ino": None, "enter": True}]


def wait_for(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if path.exists():
            return True
        time.sleep(0.1)
    return path.exists()


def arm_here(tmp: Path, timeout_s: float, name: str = "restored") -> str:
    """An agent armed here as on a node: the node bundle put in a private folder of ``tmp``,
    then its ``deadman arm`` (tierbench.nodeapp)."""
    return guard.Guard(timeout_s, base=str(tmp)).start(Transport(), touch_plan(tmp, name))


def test_agent_restores_by_itself_when_not_renewed(tmp_path: Path) -> None:
    t0 = time.monotonic()
    folder = arm_here(tmp_path, 1.0)
    assert oct(os.stat(folder).st_mode & 0o777) == "0o700"
    plan = json.loads(Path(folder, "plan.json").read_text())
    assert plan["commands"][0]["argv"] == ["touch", str(tmp_path / "restored")]
    assert wait_for(tmp_path / "restored", 5), "the agent did not restore after its timeout"
    assert time.monotonic() - t0 >= 1.0
    assert wait_for(Path(folder, "fired"), 2)
    assert "touch" in Path(folder, "log").read_text()


def test_agent_kept_alive_by_renewals_then_disarmed(tmp_path: Path) -> None:
    g = guard.Guard(1.0, base=str(tmp_path))
    state = {"kind": apply.STATE_KIND, "endpoints": {},
             "sysctls": {"host": {"pid": None, "netns_ino": None,
                                  "values": {"kernel.tierbench_test": "1"}}}}
    g.arm(state, mode())  # restores nothing here: the key does not exist; its plan is sysctl -w
    assert len(g.armed) == 1
    folder = Path(g.armed[0][1])
    time.sleep(2.5)  # more than twice the timeout: the renewals keep it armed
    assert not (folder / "fired").exists(), (folder / "log").read_text() if (
        folder / "log").exists() else ""
    assert g.disarm() == []
    assert not folder.exists()


def test_disarm_reports_an_agent_that_fired(tmp_path: Path) -> None:
    g = guard.Guard(1.0, base=str(tmp_path))
    folder = arm_here(tmp_path, 1.0)
    g.armed = [(Transport(), folder)]  # never renewed: it fires
    assert wait_for(Path(folder, "fired"), 5)
    said = g.disarm()
    assert said and said[0].startswith("this host: ") and "restored" in said[0]
    assert not Path(folder).exists()


def test_expiry_and_gone_process() -> None:
    assert deadman.expired("/nonexistent/heartbeat", 1) is None
    assert deadman.expired(__file__, 1, now=os.stat(__file__).st_mtime + 2) is True
    assert deadman.expired(__file__, 5, now=os.stat(__file__).st_mtime + 2) is False
    me = {"pid": os.getpid(), "netns_ino": os.stat("/proc/self/ns/net").st_ino}
    assert deadman.still_there(me)
    assert not deadman.still_there({**me, "netns_ino": me["netns_ino"] + 1})  # a reused PID
    assert deadman.argv_of({**me, "argv": ["tc"]})[:4] == ["nsenter", "-t", str(os.getpid()),
                                                            "-n"]
    assert deadman.argv_of({**me, "argv": ["tc"], "enter": False}) == ["tc"]


# ------------------------------------------------------------------ SIGHUP


def test_sighup_during_a_run_restores_like_sigterm() -> None:
    program = (
        "import os, signal, time\n"
        "from tierbench import runner\n"
        "try:\n"
        "    with runner.signals_raise():\n"
        "        try:\n"
        "            os.kill(os.getpid(), signal.SIGHUP)\n"
        "            time.sleep(5)\n"
        "        finally:\n"
        "            print('restored', flush=True)\n"
        "except runner.RunInterrupted as exc:\n"
        "    print('interrupted', exc, flush=True)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=30, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert done.returncode == 0, f"killed by signal {-done.returncode}: {done.stderr}"
    assert done.stdout.split() == ["restored", "interrupted", "SIGHUP"]
    assert signal.SIGHUP in interrupts.RESTORING_SIGNALS


# ------------------------------------------------------------------ the management path


def test_a_mode_changing_the_ssh_interface_is_refused_in_one_sentence() -> None:
    node1 = Transport("node1", ("ssh", "node1"))
    eps = [Endpoint("node1", "eth0", None, node1)]
    said = guard.management_refusal(mode(), eps, {"node1": "eth0"}, False, "lab/cluster.yml")
    assert said is not None and "\n" not in said
    assert said.startswith("mode m would change eth0 on node1, the interface that carries")
    assert "allow_management_changes: true" in said and "lab/cluster.yml" in said
    # allowed on purpose, another interface, or a mode of sysctls only: not refused
    assert guard.management_refusal(mode(), eps, {"node1": "eth0"}, True) is None
    assert guard.management_refusal(mode(), eps, {"node1": "eth9"}, False) is None
    sysctls_only = mode(nic=NicSettings(), knobs=Knobs(sysctls={"net.core.rmem_max": "1"}))
    assert guard.management_refusal(sysctls_only, eps, {"node1": "eth0"}, False) is None
    mtu_only = mode(nic=NicSettings(mtu=9000))
    assert guard.management_refusal(mtu_only, eps, {"node1": "eth0"}, False) is not None


def test_management_interface_is_the_one_holding_the_ssh_server_address() -> None:
    done = subprocess.run(["sh", "-c", nodes.MANAGEMENT_SCRIPT], capture_output=True, text=True,
                          env={**os.environ, "SSH_CONNECTION": "127.0.0.1 40000 127.0.0.1 22"},
                          timeout=10, check=True)
    assert done.stdout.strip() == "lo"


ROLES = Roles((Role("web", "the web tier"),))


def cluster_data(**top: object) -> dict:
    return {"version": 1, **top, "nodes": [
        {"name": "node1", "address": "198.18.16.11",
         "interfaces": [{"name": "eth0", "address": "198.18.16.11/24"}]}],
        "roles": {"web": "node1"}}


def test_allow_management_changes_needs_an_explicit_rollback_timeout() -> None:
    with pytest.raises(ClusterError) as err:
        parse_cluster(cluster_data(allow_management_changes=True), ROLES, "c.yml")
    assert err.value.problems == [
        "c.yml: allow_management_changes: true lets modes change the interface that carries SSH "
        "to the nodes, so rollback_timeout_s must be set too (seconds after which a node that no "
        "longer hears from the controller puts the settings back, e.g. 30)"]
    c = parse_cluster(cluster_data(allow_management_changes=True, rollback_timeout_s=20.0),
                      ROLES, "c.yml")
    assert c.allow_management_changes and c.rollback_timeout_s == 20.0
    assert parse_cluster(cluster_data(), ROLES).rollback_timeout_s == 30.0
    with pytest.raises(ClusterError, match="rollback_timeout_s"):
        parse_cluster(cluster_data(rollback_timeout_s=1.0), ROLES, "c.yml")


def test_the_local_timeout_is_read_from_the_environment_and_checked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(guard.TIMEOUT_ENV, raising=False)
    assert guard.local_timeout() == 30.0
    monkeypatch.setenv(guard.TIMEOUT_ENV, "12")
    assert guard.local_timeout() == 12.0
    for bad in ("soon", "0", "1e9"):
        monkeypatch.setenv(guard.TIMEOUT_ENV, bad)
        with pytest.raises(ConfigError, match=f"^{guard.TIMEOUT_ENV}='{bad}' is not a number"):
            guard.local_timeout()


def test_a_nodes_own_restore_puts_its_congestion_control_routes_back() -> None:
    """On a node the congestion control is on the routes to the run's peers
    (modes/congctl.py): the agent's plan writes them back as saved, one it added deleted."""
    from tierbench.modes import sysctls

    saved = {"values": {"net.core.somaxconn": "4096"},
             "routes": {"198.18.16.12": "198.18.16.12 dev eth0 scope link", "198.18.16.13": None}}
    cmds = sysctls.restore_commands(saved)
    assert cmds[0][-1].endswith("net.core.somaxconn=4096")
    assert cmds[1][:2] == ["sh", "-c"]
    script = cmds[1][2]
    assert "ip -4 route replace 198.18.16.12" in script and "dev eth0" in script
    assert "ip -4 route del 198.18.16.13/32 proto" in script
