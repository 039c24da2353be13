"""Integration tests of whole modes (tierbench.modes.apply) on real veth pairs (needs root).

Layout, all created and removed here: netns ``tbm-a`` holds ``tbm-a0`` (198.19.250.1/30) and
netns ``tbm-b`` holds its peer ``tbm-b0`` (198.19.250.2/30); a second veth has ``tbm-h0`` in
the host netns (for host-scope modes) and its peer ``tbm-h1`` in ``tbm-b``.  ``sleep``
processes started with ``ip netns exec`` give the PIDs for the nsenter path.  Traffic flows
only between tbm-a and tbm-b.  Host-wide sysctls are never changed here (they would affect
the whole machine); their code path is the same as the per-namespace one with no nsenter. The
one exception is the host's allowed congestion controls, widened for a moment and put back by
the congestion-control test (a wider list changes no connection).
These tests FAIL (never skip) when the machine cannot run them.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from netns_lab import require_environment, sh, start_sleep, stop

from tierbench import cli
from tierbench.interfaces import ethtool, netif, qdisc, queues
from tierbench.modes import apply as knobs
from tierbench.modes import model as modes
from tierbench.modes import sysctls
from tierbench.interfaces.netif import Endpoint, NetifError, StateFile

pytestmark = pytest.mark.netns

ROOT = Path(__file__).resolve().parent.parent
NS_A, NS_B = "tbm-a", "tbm-b"
A_IF, B_IF, H_IF, H_PEER = "tbm-a0", "tbm-b0", "tbm-h0", "tbm-h1"
A_IP, B_IP = "198.19.250.1", "198.19.250.2"
PORT = 5201




def _cleanup() -> None:
    if sh("ip", "link", "show", "dev", H_IF, check=False).returncode == 0:
        sh("ip", "link", "del", "dev", H_IF, check=False)
    for ns in (NS_A, NS_B):
        if Path(f"/run/netns/{ns}").exists():
            sh("ip", "netns", "del", ns, check=False)








@dataclass
class Lab:
    pid_a: int
    pid_b: int
    a: Endpoint
    b: Endpoint
    host: Endpoint

    @property
    def eps(self) -> list[Endpoint]:
        return [self.a, self.b]


@pytest.fixture
def lab() -> Iterator[Lab]:
    require_environment("test_knobs_veth",
                        ("ip", "ethtool", "nsenter", "unshare", "tc", "sysctl", "mount"), "tbm-")
    _cleanup()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        sh("ip", "netns", "add", NS_A)
        sh("ip", "netns", "add", NS_B)
        sh("ip", "link", "add", A_IF, "netns", NS_A, "type", "veth", "peer", "name", B_IF,
           "netns", NS_B)
        sh("ip", "-n", NS_A, "addr", "add", f"{A_IP}/30", "dev", A_IF)
        sh("ip", "-n", NS_B, "addr", "add", f"{B_IP}/30", "dev", B_IF)
        for ns, ifname in ((NS_A, A_IF), (NS_B, B_IF), (NS_A, "lo"), (NS_B, "lo")):
            sh("ip", "-n", ns, "link", "set", ifname, "up")
        sh("ip", "link", "add", H_IF, "type", "veth", "peer", "name", H_PEER, "netns", NS_B)
        sh("ip", "link", "set", H_IF, "up")
        procs = [start_sleep(NS_A), start_sleep(NS_B)]
        pa, pb = procs[0].pid, procs[1].pid
        yield Lab(pa, pb, Endpoint("web", A_IF, pa), Endpoint("proxy", B_IF, pb),
                  Endpoint("host", H_IF, None))
    finally:
        for p in procs:
            stop(p)
        _cleanup()


def write_mode(tmp_path: Path, name: str, text: str) -> modes.Mode:
    (tmp_path / f"{name}.yml").write_text(text)
    return modes.load_mode(name, tmp_path)


def ns_sysctl(ns: str, key: str) -> str:
    return " ".join(sh("ip", "netns", "exec", ns, "sysctl", "-n", key).stdout.split())


def ns_sys(ns: str, path: str) -> str:
    return sh("ip", "netns", "exec", ns, "cat", path).stdout.strip()


def channels(ns: str, ifname: str) -> dict:
    return ethtool.parse_channels(sh("ip", "netns", "exec", ns, "ethtool", "-l", ifname).stdout)


def host_sysctl(key: str) -> str:
    return " ".join(sh("sysctl", "-n", key).stdout.split())


# ----------------------------------------------------------------------------- apply/restore


def test_every_knob_veth_supports_applies_verifies_and_restores(
    lab: Lab, tmp_path: Path
) -> None:
    m = write_mode(tmp_path, "all", """
nic:
  features: {tso: off, gro: on, rx: off}
  mtu: 9000
  channels: {rx: 2, tx: 2}
  rps_cpus: all
  xps_cpus: "1"
  rps_flow_cnt: 2048
qdisc: {kind: tbf, rate: 500mbit}
sysctls:
  net.ipv4.tcp_rmem: [4096, 131072, 16777216]
  net.core.somaxconn: 2048
""")
    host_rmem = host_sysctl("net.ipv4.tcp_rmem")
    before = knobs.snapshot_mode(m, lab.eps)
    assert set(before["sysctls"]) == {f"netns:{lab.pid_a}", f"netns:{lab.pid_b}"}
    assert knobs.check_mode(m, lab.eps, before) == []
    knobs.apply_mode(m, lab.eps, before)
    assert knobs.verify_mode(m, lab.eps, before) == []
    for ns, ifname in ((NS_A, A_IF), (NS_B, B_IF)):
        k = sh("ip", "netns", "exec", ns, "ethtool", "-k", ifname).stdout
        feats = netif.parse_features(k)
        assert not feats["tx-tcp6-segmentation"]["on"] and feats["generic-receive-offload"]["on"]
        assert not feats["rx-checksumming"]["on"]
        assert channels(ns, ifname)["current"]["rx"] == 2
        assert "mtu 9000" in sh("ip", "-n", ns, "link", "show", ifname).stdout
        assert ns_sys(ns, f"/sys/class/net/{ifname}/queues/rx-1/rps_cpus").strip("0,") == \
            queues.online_cpu_mask()
        assert int(ns_sys(ns, f"/sys/class/net/{ifname}/queues/tx-1/xps_cpus"), 16) == 1
        assert ns_sys(ns, f"/sys/class/net/{ifname}/queues/rx-0/rps_flow_cnt") == "2048"
        assert "tbf 1: root" in sh("tc", "-n", ns, "qdisc", "show", "dev", ifname).stdout
        assert ns_sysctl(ns, "net.ipv4.tcp_rmem") == "4096 131072 16777216"
        assert ns_sysctl(ns, "net.core.somaxconn") == "2048"
    assert host_sysctl("net.ipv4.tcp_rmem") == host_rmem  # per-namespace, host untouched
    assert knobs.restore_state(before) == []
    assert knobs.snapshot_mode(m, lab.eps) == before
    assert channels(NS_A, A_IF)["current"]["rx"] == 1


def test_a_mode_of_parts_sets_each_sides_interface_its_own_settings(
    lab: Lab, tmp_path: Path
) -> None:
    """One mode of two scoped parts (the advisor's configuration whose sides differ): the
    server's interface gets TSO off only, the client's GRO on and two channels only; applied,
    read back, restored with the rollback guard's plan made per endpoint, all through
    apply.mode_applied."""
    from tierbench.modes import guard

    server = write_mode(tmp_path, "srv", "roles: [servers]\nnic: {features: {tso: off}}\n")
    client = write_mode(tmp_path, "cli", "roles: [clients]\n"
                        "nic: {features: {gro: on}, channels: {rx: 2}}\n")
    split = modes.bind(modes.of_parts("split", "two sides", [server, client]),
                       [("web", "server", [lab.a]), ("generator", "client", [lab.b])])
    before = knobs.snapshot_mode(split, lab.eps)
    assert "channels" in before["endpoints"][lab.b.label]
    assert "channels" not in before["endpoints"][lab.a.label]
    # the guard's restore plan: the client's channels put back, nothing of them on the server
    cmds = [c for where in guard.plan(before, split).values() for c in where["commands"]]
    assert any("-L" in c["argv"] for c in cmds if c["what"] == lab.b.label)
    assert not any("-L" in c["argv"] for c in cmds if c["what"] == lab.a.label)
    record: dict = {}
    with knobs.mode_applied(split, lab.eps, lab.eps, StateFile(tmp_path / "state.json"),
                            record, 0.0, lambda: None):
        fa = netif.parse_features(sh("ip", "netns", "exec", NS_A, "ethtool", "-k",
                                     A_IF).stdout)
        fb = netif.parse_features(sh("ip", "netns", "exec", NS_B, "ethtool", "-k",
                                     B_IF).stdout)
        assert not fa["tcp-segmentation-offload"]["on"] and not fa["generic-receive-offload"]["on"]
        assert fb["tcp-segmentation-offload"]["on"] and fb["generic-receive-offload"]["on"]
        assert channels(NS_B, B_IF)["current"]["rx"] == 2
        assert channels(NS_A, A_IF)["current"]["rx"] == 1
    assert record["mode_verified"] and record["restored"]
    assert knobs.snapshot_mode(split, lab.eps) == before


@pytest.mark.parametrize("name", [
    "offloads-off", "offloads-on", "sockopt-1-default", "sockopt-2-socket-buffers",
    "sockopt-3-tso", "sockopt-4-jumbo", "tso-off", "gro-off", "checksum-off", "jumbo-mtu",
    "big-socket-buffers", "channels-2", "rate-1gbit", "rate-10gbit", "sendfile-off", "tcp-cubic",
    "checksum-on-tso-off", "checksum-off-tso-off",  # NET-csum's baseline and its checksum-off
])
def test_shipped_mode_round_trip_on_veth(lab: Lab, name: str) -> None:
    m = modes.load_mode(name)
    before = knobs.snapshot_mode(m, lab.eps)
    assert knobs.check_mode(m, lab.eps, before) == []
    knobs.apply_mode(m, lab.eps, before)
    assert knobs.verify_mode(m, lab.eps, before) == []
    assert knobs.restore_state(before) == []
    assert knobs.snapshot_mode(m, lab.eps) == before


@pytest.mark.parametrize("name,rate", [
    ("servers-1cpu", "500Mbit"), ("servers-2cpus-half", "914Mbit"), ("servers-2cpus", "1748Mbit"),
    ("platform-1000mhz", "500Mbit"), ("platform-700mhz", "914Mbit"),
    ("platform-2400mhz", "1748Mbit")])
def test_a_platform_modes_link_rate_is_on_the_interface(lab: Lab, name: str, rate: str) -> None:
    """004 Fig. 14b's rate of each platform, read back with `tc -s qdisc show` (the mode's
    link part alone: its cpu: part needs the stack's platform cgroups, test_platform.py)."""
    m = dataclasses.replace(modes.load_mode(name), cpu={}, roles=())
    before = knobs.snapshot_mode(m, lab.eps)
    assert knobs.check_mode(m, lab.eps, before) == []
    knobs.apply_mode(m, lab.eps, before)
    try:
        assert knobs.verify_mode(m, lab.eps, before) == []
        for ns, ifname in ((NS_A, A_IF), (NS_B, B_IF)):
            shown = sh("tc", "-n", ns, "-s", "qdisc", "show", "dev", ifname).stdout
            assert "tbf 1: root" in shown and f"rate {rate} " in shown, shown
    finally:
        assert knobs.restore_state(before) == []
    assert f"rate {rate}" not in sh("tc", "-n", NS_A, "qdisc", "show", "dev", A_IF).stdout


REFUSALS = {
    "sockopt-5-coalescing": "interrupt coalescing (ethtool -C adaptive-rx on rx-usecs 50 "
                            "rx-frames 64) is not supported by web:tbm-a0 (driver veth): "
                            "ethtool -c says netlink error: Operation not supported",
    "coalescing-adaptive": "interrupt coalescing (ethtool -C adaptive-rx on adaptive-tx on) is "
                           "not supported by web:tbm-a0 (driver veth)",
    "header-split": "header-data split and rings (ethtool -G tcp-data-split on) are not "
                    "supported by web:tbm-a0 (driver veth)",
    "rss-equal": "RSS indirection (ethtool -X equal 2) is not supported by web:tbm-a0 "
                 "(driver veth)",
    "netem-delay": "qdisc netem is not available in this kernel (module sch_netem missing): "
                   "use a kernel with CONFIG_NET_SCH_NETEM or drop netem from mode netem-delay",
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refused_modes_name_setting_interface_driver_and_change_nothing(
    lab: Lab, name: str
) -> None:
    m = modes.load_mode(name)
    before = knobs.snapshot_mode(m, lab.eps)
    problems = knobs.check_mode(m, lab.eps, before)
    assert any(p.startswith(REFUSALS[name]) for p in problems), problems
    with pytest.raises(NetifError) as err:
        knobs.apply_mode(m, lab.eps, before)
    assert f"mode {name} cannot be applied, nothing was changed" in str(err.value)
    assert knobs.snapshot_mode(m, lab.eps) == before
    if name == "sockopt-5-coalescing":  # only case 5's own knob is refused
        assert all("coalescing" in p for p in problems) and len(problems) == 2


def test_netem_probe_touches_no_real_interface(lab: Lab) -> None:
    links_before = sh("ip", "-j", "link", "show").stdout
    qdiscs_before = sh("tc", "qdisc", "show").stdout
    qdisc.probe_qdisc.cache_clear()
    assert "netem" in knobs.check_mode(modes.load_mode("netem-delay"), [])[0]
    assert sh("ip", "-j", "link", "show").stdout == links_before
    assert sh("tc", "qdisc", "show").stdout == qdiscs_before


def test_netns_readonly_socket_limits_are_refused_in_containers(
    lab: Lab, tmp_path: Path
) -> None:
    m = write_mode(tmp_path, "rmem", "sysctls: {net.core.rmem_max: 16777216}\n")
    problems = knobs.check_mode(m, lab.eps)
    assert len(problems) == 1
    assert problems[0].startswith("sysctl net.core.rmem_max is kept per network namespace but "
                                  "is read-only inside one")
    assert sysctls.sysctl_scope("net.core.busy_poll") == "host"
    assert sysctls.sysctl_scope("net.ipv4.tcp_rmem") == "netns"
    assert sysctls.sysctl_scope("net.core.no_such_knob") == "missing"


def test_a_congestion_control_the_host_does_not_allow_is_allowed_set_and_put_back(
    lab: Lab, tmp_path: Path
) -> None:
    """A namespace may pick only an algorithm in the host's allowed list (EPERM otherwise):
    the mode adds it there first, and the host's list and the namespaces' choice go back."""
    allowed = host_sysctl("net.ipv4.tcp_allowed_congestion_control")
    available = host_sysctl("net.ipv4.tcp_available_congestion_control").split()
    algorithm = next((a for a in available if a not in allowed.split()), "cubic")
    assert algorithm in available, f"no {algorithm} on this kernel: {available}"
    own = [ns_sysctl(ns, "net.ipv4.tcp_congestion_control") for ns in (NS_A, NS_B)]
    m = write_mode(tmp_path, "cc", f"sysctls: {{net.ipv4.tcp_congestion_control: {algorithm}}}\n")
    before = knobs.snapshot_mode(m, lab.eps)
    # the host's list first, saved as it was; then each namespace
    assert list(before["sysctls"]) == ["host", f"netns:{lab.pid_a}", f"netns:{lab.pid_b}"]
    assert before["sysctls"]["host"]["values"] == {
        "net.ipv4.tcp_allowed_congestion_control": allowed}
    try:
        assert knobs.check_mode(m, lab.eps, before) == []
        knobs.apply_mode(m, lab.eps, before)
        assert knobs.verify_mode(m, lab.eps, before) == []
        widened = host_sysctl("net.ipv4.tcp_allowed_congestion_control").split()
        assert set(widened) == set(allowed.split()) | {algorithm}
        assert [ns_sysctl(ns, "net.ipv4.tcp_congestion_control") for ns in (NS_A, NS_B)] == \
            [algorithm, algorithm]
        assert knobs.restore_state(before) == []
        assert host_sysctl("net.ipv4.tcp_allowed_congestion_control") == allowed
        assert [ns_sysctl(ns, "net.ipv4.tcp_congestion_control") for ns in (NS_A, NS_B)] == own
    finally:  # whatever failed above, the host's list as it was
        sh("sysctl", "-q", "-w", f"net.ipv4.tcp_allowed_congestion_control={allowed}")
    bad = write_mode(tmp_path, "nocc", "sysctls: {net.ipv4.tcp_congestion_control: nosuchcc}\n")
    assert knobs.check_mode(bad, lab.eps) == [
        f"sysctl net.ipv4.tcp_congestion_control: 'nosuchcc' is not available on this kernel (it "
        f"has {', '.join(available)}); load its module (modprobe tcp_nosuchcc) or change mode "
        f"nocc"]


def test_apply_rolls_back_everything_when_the_kernel_refuses(lab: Lab, tmp_path: Path) -> None:
    # passes the check, but the kernel keeps TSO off while tx checksumming is off
    m = write_mode(tmp_path, "bad", """
nic: {features: {tx: off, tso: on}, mtu: 4000, channels: {rx: 2}}
qdisc: {kind: htb, rate: 1gbit}
sysctls: {net.ipv4.tcp_wmem: [4096, 65536, 8388608]}
""")
    before = knobs.snapshot_mode(m, lab.eps)
    assert knobs.check_mode(m, lab.eps, before) == []
    with pytest.raises(NetifError) as err:
        knobs.apply_mode(m, lab.eps, before)
    assert "tx-tcp6-segmentation" in str(err.value)
    assert "the previous settings were restored" in str(err.value)
    assert knobs.snapshot_mode(m, lab.eps) == before


# ----------------------------------------------------------------------------- traffic


RECEIVER = """
import socket, sys, time
srv = socket.create_server((sys.argv[1], int(sys.argv[2])))
srv.settimeout(20)
print("listening", flush=True)
conn, _ = srv.accept()
conn.settimeout(20)
total, first, last = 0, None, None
while True:
    data = conn.recv(1 << 20)
    if not data:
        break
    now = time.monotonic()
    first = first or now
    last = now
    total += len(data)
print(total * 8 / max(last - first, 1e-6), flush=True)
"""

SENDER = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
buf = b"x" * (1 << 16)
end = time.monotonic() + float(sys.argv[3])
while time.monotonic() < end:
    s.sendall(buf)
s.close()
"""


def throughput_bits(seconds: float = 2.0) -> float:
    """Bulk TCP from tbm-a to tbm-b for ``seconds``; bits per second seen by the receiver."""
    rx = subprocess.Popen(["ip", "netns", "exec", NS_B, sys.executable, "-c", RECEIVER, B_IP,
                           str(PORT)], stdout=subprocess.PIPE, text=True)
    try:
        assert rx.stdout is not None and rx.stdout.readline().strip() == "listening"
        sh("ip", "netns", "exec", NS_A, sys.executable, "-c", SENDER, B_IP, str(PORT),
           str(seconds), timeout=seconds + 30)
        out, _ = rx.communicate(timeout=30)
        return float(out.strip())
    finally:
        stop(rx)


def test_tbf_rate_is_measured_by_traffic(lab: Lab, tmp_path: Path) -> None:
    rate = 200e6
    m = write_mode(tmp_path, "slow", "qdisc: {kind: tbf, rate: 200mbit}\n")
    baseline = throughput_bits()
    before = knobs.snapshot_mode(m, lab.eps)
    knobs.apply_mode(m, lab.eps, before)
    try:
        shaped = throughput_bits()
    finally:
        assert knobs.restore_state(before) == []
    after = throughput_bits()
    assert 0.6 * rate <= shaped <= 1.1 * rate, f"shaped to {shaped / 1e6:.0f} Mbit/s"
    assert baseline > 2 * rate, f"unshaped only {baseline / 1e6:.0f} Mbit/s"
    assert after > 2 * rate, f"after restore only {after / 1e6:.0f} Mbit/s"


# ----------------------------------------------------------------------------- host scope


def test_host_scope_check_and_apply_on_a_host_veth(
    lab: Lab, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_mode(tmp_path, "hostmode", f"host_interfaces: [{H_IF}]\n"
               "nic: {features: {tso: off}, mtu: 9000, channels: {tx: 2}}\n"
               "qdisc: {kind: tbf, rate: 1gbit}\n")
    m = modes.load_mode("hostmode", tmp_path)
    eps = modes.host_endpoints(m)
    assert eps == [lab.host]
    assert knobs.check_mode(m, eps) == []
    assert cli.main(["modes", "--modes-dir", str(tmp_path), "check", "hostmode"]) == 0
    assert "every setting is possible on host:tbm-h0" in capsys.readouterr().out
    before = knobs.snapshot_mode(m, eps)
    knobs.apply_mode(m, eps, before)
    assert "mtu 9000" in sh("ip", "link", "show", H_IF).stdout
    assert knobs.restore_state(before) == []
    assert knobs.snapshot_mode(m, eps) == before

    write_mode(tmp_path, "hostco", f"host_interfaces: [{H_IF}]\n"
               "nic: {coalesce: {adaptive-rx: on}}\n")
    assert cli.main(["modes", "--modes-dir", str(tmp_path), "check", "hostco"]) == 1
    out = capsys.readouterr().out
    assert ("interrupt coalescing (ethtool -C adaptive-rx on) is not supported by host:tbm-h0 "
            "(driver veth)") in out
    write_mode(tmp_path, "hostgone", "host_interfaces: [tbm-nowhere]\nnic: {mtu: 1500}\n")
    assert cli.main(["modes", "--modes-dir", str(tmp_path), "check", "hostgone"]) == 1
    assert "host:tbm-nowhere cannot be read" in capsys.readouterr().out


# ----------------------------------------------------------------------------- signals


HOLDER = """
import json, sys, time
from pathlib import Path
from tierbench import runner
from tierbench.interfaces.netif import Endpoint, StateFile
from tierbench.modes import apply
from tierbench.modes import model as modes
mode = modes.load_mode(sys.argv[1], Path(sys.argv[1]).parent)
eps = [Endpoint("web", "tbm-a0", int(sys.argv[2])), Endpoint("proxy", "tbm-b0", int(sys.argv[3]))]
record = {}
rollback_s = float(sys.argv[5]) if len(sys.argv) > 5 else None
try:
    # what the runner does around every point: signals become RunInterrupted, the mode is
    # applied for the body and restored on the way out
    with runner.signals_raise(), apply.mode_applied(
            mode, eps, eps, StateFile(Path(sys.argv[4])), record, 0, lambda: None,
            rollback_s=rollback_s):
        print("applied", flush=True)
        if rollback_s:
            print(json.dumps(record["rollback"]), flush=True)
        time.sleep(120)
except runner.RunInterrupted:
    assert record["restored"], record
    print("restored", flush=True)
    sys.exit(130)
"""

SIGNAL_MODE = """
nic: {features: {tso: off, gso: off}, mtu: 9000, channels: {rx: 2}, rps_cpus: all}
qdisc: {kind: tbf, rate: 1gbit}
sysctls: {net.ipv4.tcp_rmem: [4096, 131072, 16777216]}
"""


def _hold(lab: Lab, mode_path: Path, state_path: Path,
          rollback_s: float | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(mode_path), str(lab.pid_a),
                             str(lab.pid_b), str(state_path),
                             *([str(rollback_s)] if rollback_s else [])], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if line != "applied":
        stop(proc)
        pytest.fail(f"the mode holder did not apply the mode: {line} {proc.stderr.read()}")
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_signal_restores_everything(lab: Lab, tmp_path: Path, sig: signal.Signals) -> None:
    m = write_mode(tmp_path, "held", SIGNAL_MODE)
    before = knobs.snapshot_mode(m, lab.eps)
    state_path = tmp_path / "state" / "netif-state.json"
    proc = _hold(lab, tmp_path / "held.yml", state_path)
    try:
        assert state_path.exists()
        assert knobs.verify_mode(m, lab.eps) == []  # really applied
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        stop(proc)
    assert proc.returncode == 130 and out.strip() == "restored", err
    assert knobs.snapshot_mode(m, lab.eps) == before
    assert not state_path.exists()  # exact restore clears the state file


def test_sigkill_then_restore_from_the_state_file(lab: Lab, tmp_path: Path) -> None:
    m = write_mode(tmp_path, "held", SIGNAL_MODE)
    before = knobs.snapshot_mode(m, lab.eps)
    state_path = tmp_path / "state" / "netif-state.json"
    proc = _hold(lab, tmp_path / "held.yml", state_path)
    proc.kill()
    proc.wait(timeout=10)
    assert knobs.verify_mode(m, lab.eps) == []  # left applied by the killed process
    saved = StateFile(state_path).load()
    assert saved is not None and json.loads(state_path.read_text())["snapshots"] == saved
    assert saved == before
    # what `tierbench clean` does (restore_state puts back the whole mode's state)
    assert knobs.restore_state(saved) == []
    assert knobs.snapshot_mode(m, lab.eps) == before


def test_sigkill_then_the_nodes_guard_restores_by_itself(lab: Lab, tmp_path: Path) -> None:
    """The rollback guard (tierbench/modes/guard.py): a controller SIGKILLed with the mode
    applied, and no `tierbench clean`: this host's agent puts every setting back (features,
    MTU, channels, RPS, the qdisc, the namespaces' sysctls) within its timeout plus a few
    seconds, read back here."""
    timeout_s = 5.0
    m = write_mode(tmp_path, "held", SIGNAL_MODE)
    before = knobs.snapshot_mode(m, lab.eps)
    proc = _hold(lab, tmp_path / "held.yml", tmp_path / "state" / "netif-state.json", timeout_s)
    assert proc.stdout is not None
    agents = json.loads(proc.stdout.readline())["agents"]
    folder = Path(agents["this host"])
    try:
        assert oct(folder.stat().st_mode & 0o777) == "0o700"
        time.sleep(timeout_s + 1)  # renewed meanwhile: still applied
        assert knobs.verify_mode(m, lab.eps) == [] and not (folder / "fired").exists()
        proc.kill()
        proc.wait(timeout=10)
        killed = time.monotonic()
        assert knobs.verify_mode(m, lab.eps) == []  # left applied by the killed process
        deadline = killed + timeout_s + 5
        now = knobs.snapshot_mode(m, lab.eps)
        while now != before and time.monotonic() < deadline:
            time.sleep(0.5)
            now = knobs.snapshot_mode(m, lab.eps)
        log = (folder / "log").read_text() if (folder / "log").exists() else "no log"
        assert now == before, f"not restored {time.monotonic() - killed:.1f} s after SIGKILL: {log}"
        assert (folder / "fired").exists()
    finally:
        stop(proc)
        sh("rm", "-rf", "--", str(folder), check=False)


def test_restore_reports_gone_namespaces_and_carries_on(lab: Lab, tmp_path: Path) -> None:
    m = write_mode(tmp_path, "bufs", "nic: {mtu: 4000}\n"
                   "sysctls: {net.ipv4.tcp_rmem: [4096, 131072, 16777216]}\n")
    extra_ns = "tbm-c"
    sh("ip", "netns", "add", extra_ns)
    try:
        sh("ip", "-n", extra_ns, "link", "add", "tbm-c0", "type", "veth", "peer", "name",
           "tbm-c1")
        extra = start_sleep(extra_ns)
        eps = [*lab.eps, Endpoint("loadgen", "tbm-c0", extra.pid)]
        before = knobs.snapshot_mode(m, eps)
        knobs.apply_mode(m, eps, before)
        stop(extra)
    finally:
        sh("ip", "netns", "del", extra_ns, check=False)
    problems = knobs.restore_state(before)
    assert problems == ["loadgen:tbm-c0: gone, nothing to restore",
                        f"netns:{extra.pid}: gone, nothing to restore"]
    lab_only = {**before, "endpoints": {k: v for k, v in before["endpoints"].items()
                                        if not k.startswith("loadgen")},
                "sysctls": {k: v for k, v in before["sysctls"].items()
                            if k != f"netns:{extra.pid}"}}
    assert knobs.snapshot_mode(m, lab.eps) == lab_only


@pytest.mark.parametrize("name", ["rps-all-cpus", "busy-poll"])
def test_modes_with_host_wide_sysctls_pass_check(lab: Lab, name: str) -> None:
    """Checked only: applying them would change host-wide sysctls for the whole machine."""
    m = modes.load_mode(name)
    before = knobs.snapshot_mode(m, lab.eps)
    assert knobs.check_mode(m, lab.eps, before) == []
    assert set(before["sysctls"]) == {"host"}  # host-wide, not per namespace
    assert knobs.snapshot_mode(m, lab.eps) == before
