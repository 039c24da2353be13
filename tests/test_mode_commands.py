"""How many commands a point's mode costs, and that the batched reads and writes keep the mode
all or nothing (tierbench/modes/apply.py's mode_applied over endpoint.py, sysctls.py and
interfaces/netif.py), on two cluster nodes faked in tests/fake_kernel.py, where every command
is one SSH round trip counted.

A target's sysctls are read in one ``sysctl -e KEY...`` and written in one ``sysctl -w``; an
endpoint's reads (link, features, qdisc, driver and the settings the mode sets) go in one
command; the point reads each endpoint once before, during and after. The count of a
representative mode is held here: `PYTHONPATH=.:tests python tests/fake_kernel.py` prints every
shipped mode's."""

from __future__ import annotations

from pathlib import Path

import pytest

from fake_kernel import FakeKernel, one_point, two_nodes

from tierbench.interfaces.netif import NetifError
from tierbench.modes import model, sysctls

SOCKOPT = "sockopt-4-jumbo"  # features, MTU and two sysctls: every kind of read and write


def state(kernels: dict[str | None, FakeKernel]) -> dict:
    """What a mode may change on the faked nodes."""
    return {n: ({i: (dict((k, f["on"]) for k, f in face.features.items()), face.mtu,
                     face.root, face.queues, face.channels)
                 for i, face in k.ifaces.items()}, dict(k.sysctls), dict(k.routes))
            for n, k in kernels.items()}


def test_a_point_of_a_mode_with_features_mtu_and_sysctls_costs_at_most_15_commands_a_node(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """sockopt-4-jumbo on two nodes: 108 round trips a point before the reads were batched
    (every sysctl and every interface setting read on its own, each endpoint read twice per
    step), 30 now. Per node: the endpoint and the sysctls read before, during (the read the
    point is verified against) and after; features and MTU changed in one command, the
    sysctls in one, both read back; the restore's read, its changes with their read back, and
    the sysctls' read, write and read back."""
    kernels, eps, seen = two_nodes(monkeypatch)
    before = state(kernels)
    mode = model.load_mode(SOCKOPT)
    record = one_point(mode, eps, tmp_path)  # the first point also probes the sysctls' keys
    assert record["mode_verified"] and record["restored"]
    seen.clear()
    record = one_point(mode, eps, tmp_path)
    assert record["mode_verified"] and record["restored"]
    assert state(kernels) == before
    assert len(seen) <= 30, "\n".join(f"{n}: {[' '.join(a) for a in argvs]}"
                                      for n, argvs in seen.calls)
    reads = [a for _, argvs in seen.calls for a in argvs if a[:2] == ["sysctl", "-e"]]
    assert reads and all(a[2:] == ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"] for a in reads)


def test_a_key_the_kernel_lacks_is_refused_naming_it_and_nothing_changes(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    kernels, eps, _ = two_nodes(monkeypatch)
    kernels["node2"].missing.add("net.ipv4.tcp_wmem")
    before = state(kernels)
    with pytest.raises(NetifError) as err:
        one_point(model.load_mode("big-socket-buffers"), eps, tmp_path)
    assert str(err.value) == (
        "mode big-socket-buffers cannot be applied, nothing was changed: sysctl "
        "net.ipv4.tcp_wmem does not exist on the kernel of node2 (no "
        "/proc/sys/net/ipv4/tcp_wmem); drop it from mode big-socket-buffers")
    assert state(kernels) == before


def test_a_key_gone_after_the_probe_fails_the_batched_read_naming_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The probe of the keys is remembered for the process; a key the kernel no longer has at a
    later point (its module unloaded) fails the one read of all keys with a sentence naming
    it, before anything changes: `sysctl -e` leaves it out of the output, which says whose
    value is whose."""
    kernels, eps, _ = two_nodes(monkeypatch)
    mode = model.load_mode("big-socket-buffers")
    assert one_point(mode, eps, tmp_path)["restored"]
    kernels["node2"].missing.add("net.ipv4.tcp_rmem")
    before = state(kernels)
    with pytest.raises(NetifError) as err:
        one_point(mode, eps, tmp_path)
    assert str(err.value) == ("node:node2: sysctl net.ipv4.tcp_rmem does not exist there (no "
                              "/proc/sys/net/ipv4/tcp_rmem)")
    assert state(kernels) == before


def test_a_restore_puts_back_every_key_it_can_and_names_the_one_gone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    kernels, eps, _ = two_nodes(monkeypatch)
    mode = model.load_mode("big-socket-buffers")
    saved = sysctls.snapshot(mode, eps)
    sysctls.change(mode, {"sysctls": saved})
    assert kernels["node1"].sysctls["net.ipv4.tcp_wmem"] == "4096 65536 16777216"
    kernels["node1"].missing.add("net.ipv4.tcp_rmem")
    assert sysctls.restore("node:node1", saved["node:node1"]) == [
        "node:node1: sysctl net.ipv4.tcp_rmem does not exist there (no "
        "/proc/sys/net/ipv4/tcp_rmem)"]
    assert kernels["node1"].sysctls["net.ipv4.tcp_wmem"] == "4096 16384 4194304"
    assert sysctls.restore("node:node2", saved["node:node2"]) == []
    assert kernels["node2"].sysctls["net.ipv4.tcp_rmem"] == "4096 131072 6291456"


@pytest.mark.parametrize("exits", [False, True], ids=["left-as-it-was", "ethtool-fails"])
def test_a_feature_the_kernel_refuses_is_named_and_everything_is_put_back(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, exits: bool) -> None:
    """One `ethtool -K` of every feature: the kernel keeping one as it was (the read back names
    it) or ethtool failing (its command names it) both restore the features, MTU and sysctls
    of both nodes."""
    kernels, eps, _ = two_nodes(monkeypatch)
    face = kernels["node2"].ifaces["eth0"]
    face.refuses.add("generic-segmentation-offload")
    face.refuse_exits = exits
    (tmp_path / "m.yml").write_text("nic:\n  features: {gso: off, gro: on}\n  mtu: 9000\n"
                                    "sysctls:\n  net.ipv4.tcp_rmem: [4096, 131072, 16777216]\n")
    before = state(kernels)
    with pytest.raises(NetifError) as err:
        one_point(model.load_mode("m", tmp_path), eps, tmp_path)
    said = str(err.value)
    assert said.startswith("could not apply mode m: ")
    assert said.endswith("; the previous settings were restored")
    if exits:
        assert ("proxy:eth0: `ethtool -K eth0 generic-receive-offload on "
                "generic-segmentation-offload off` failed (exit 1)") in said
    else:
        assert ("proxy:eth0 (driver veth): generic-segmentation-offload is on, wanted off"
                in said)
    assert state(kernels) == before


def test_an_endpoint_on_a_node_is_read_in_one_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from tierbench.modes import endpoint

    _, eps, seen = two_nodes(monkeypatch)
    mode = model.load_mode("rps-all-cpus+rate-1gbit")
    snap = endpoint.snapshot(eps[0], mode)
    assert len(seen) == 1 and snap["qdisc_root"] == {"kind": "noqueue", "handle": "0:"}
    assert snap["queues"]["rx-0"] == {"rps_cpus": "0", "rps_flow_cnt": "0"}
    assert endpoint.differences(snap, mode) != []
    # comparing reads nothing again but the node's online CPUs ("all"), once for the process
    assert [argvs for _, argvs in seen.calls[1:]] == [[["cat", "/sys/devices/system/cpu/online"]]]
