"""Integration tests of tierbench.interfaces.netif on a real veth pair (needs root and `ip netns`).

Layout: netns ``tbt-a`` holds ``tbt-c0``; its peer ``tbt-h0`` stays in the host netns.
A ``sleep`` started with ``ip netns exec tbt-a`` provides the PID for the nsenter path.
These tests FAIL (never skip) when the machine cannot run them.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from netns_lab import require_environment, sh, start_sleep, stop

from tierbench.interfaces import netif
from tierbench.interfaces.netif import Endpoint, NetifError, NicSettings, StateFile

pytestmark = pytest.mark.netns

NS = "tbt-a"
INNER = "tbt-c0"
OUTER = "tbt-h0"
OFFLOADS_OFF = NicSettings(
    features={"tso": False, "gso": False, "gro": False, "sg": False, "rx": False, "tx": False}
)
OFF_PARENTS = [netif.FEATURE_ALIASES[a] for a in ("tso", "gso", "gro", "sg", "rx", "tx")]




def _cleanup() -> None:
    if sh("ip", "link", "show", "dev", OUTER, check=False).returncode == 0:
        sh("ip", "link", "del", "dev", OUTER, check=False)
    if Path(f"/run/netns/{NS}").exists():
        sh("ip", "netns", "del", NS, check=False)








@dataclass
class Pair:
    pid: int
    inner: Endpoint
    outer: Endpoint

    @property
    def eps(self) -> list[Endpoint]:
        return [self.inner, self.outer]


@pytest.fixture
def pair() -> Iterator[Pair]:
    require_environment("test_netif_veth", ("ip", "ethtool", "nsenter", "tc"), "tbt-")
    _cleanup()
    proc: subprocess.Popen[bytes] | None = None
    try:
        sh("ip", "netns", "add", NS)
        sh("ip", "link", "add", INNER, "netns", NS, "type", "veth", "peer", "name", OUTER)
        sh("ip", "-n", NS, "link", "set", INNER, "up")
        sh("ip", "link", "set", OUTER, "up")
        proc = start_sleep(NS)
        yield Pair(proc.pid, Endpoint("web", INNER, proc.pid), Endpoint("host", OUTER, None))
    finally:
        if proc is not None:
            stop(proc)
        _cleanup()


def snaps_of(eps: list[Endpoint]) -> dict[str, dict]:
    return {ep.label: netif.snapshot(ep) for ep in eps}


def comparable(snaps: dict[str, dict]) -> dict[str, tuple]:
    """The parts restore() promises to bring back: active feature states and MTU."""
    return {
        label: ({n: (f["on"], f["fixed"]) for n, f in s["features"].items()}, s["mtu"])
        for label, s in snaps.items()
    }


# ----------------------------------------------------------------------------- tests


def test_veth_endpoints_finds_both_ends(pair: Pair) -> None:
    eps = netif.veth_endpoints("web", pair.pid)
    assert eps == [Endpoint("web", INNER, pair.pid), Endpoint("host", OUTER, None)]
    assert [e.label for e in eps] == ["web:tbt-c0", "host:tbt-h0"]


def test_veth_endpoints_refuses_host_netns_and_dead_pid(pair: Pair) -> None:
    with pytest.raises(NetifError, match="host network namespace"):
        netif.veth_endpoints("web", os.getpid())
    extra = start_sleep(NS)
    stop(extra)
    with pytest.raises(NetifError, match="does not exist"):
        netif.veth_endpoints("web", extra.pid)


def test_snapshot_contents(pair: Pair) -> None:
    s = netif.snapshot(pair.inner)
    assert s["label"] == "web:tbt-c0" and s["tier"] == "web" and s["ifname"] == INNER
    assert s["netns_pid"] == pair.pid and s["driver"] == "veth"
    assert s["mtu"] == 1500 and s["min_mtu"] == 68 and s["max_mtu"] >= 9000
    assert "tcp-segmentation-offload" in s["features"]
    assert s["features"]["tx-tcp6-segmentation"]["parent"] == "tcp-segmentation-offload"
    assert "qdisc" in s["qdisc"]
    # host side is read without nsenter and is a distinct interface
    h = netif.snapshot(pair.outer)
    assert h["driver"] == "veth" and h["netns_pid"] is None and h["ifname"] == OUTER


def test_apply_offloads_off_then_restore_exactly(pair: Pair) -> None:
    before = snaps_of(pair.eps)
    assert before["web:tbt-c0"]["features"]["tx-tcp6-segmentation"]["on"]
    netif.apply(pair.eps, OFFLOADS_OFF, before)
    assert netif.verify(pair.eps, OFFLOADS_OFF) == []
    during = snaps_of(pair.eps)
    for label, s in during.items():
        f = s["features"]
        for parent in OFF_PARENTS:
            assert not f[parent]["on"], f"{label}: {parent} still on"
            for name, e in f.items():
                if e["parent"] == parent and not e["fixed"]:
                    assert not e["on"], f"{label}: {name} still on"
        assert not f["tx-tcp6-segmentation"]["on"]
    assert netif.restore(before) == []
    assert snaps_of(pair.eps) == before  # exact: features incl. wanted state, mtu, qdisc


def test_turning_offloads_back_on_orders_dependencies(pair: Pair) -> None:
    before = snaps_of(pair.eps)
    netif.apply(pair.eps, OFFLOADS_OFF, before)
    mid = snaps_of(pair.eps)
    # tso/gso listed before tx/sg on purpose: apply() must put the dependencies first
    all_on = NicSettings(
        features={"tso": True, "gso": True, "gro": True, "sg": True, "rx": True, "tx": True}
    )
    netif.apply(pair.eps, all_on, mid)
    assert netif.verify(pair.eps, all_on) == []
    f = netif.snapshot(pair.inner)["features"]
    assert f["tx-tcp6-segmentation"]["on"] and f["generic-receive-offload"]["on"]
    assert netif.restore(before) == []
    assert snaps_of(pair.eps) == before


def test_mtu_change_and_restore(pair: Pair) -> None:
    before = snaps_of(pair.eps)
    netif.apply(pair.eps, NicSettings(mtu=9000), before)
    assert [netif.snapshot(ep)["mtu"] for ep in pair.eps] == [9000, 9000]
    assert netif.verify(pair.eps, NicSettings(mtu=9000)) == []
    assert netif.restore(before) == []
    assert [netif.snapshot(ep)["mtu"] for ep in pair.eps] == [1500, 1500]
    assert comparable(snaps_of(pair.eps)) == comparable(before)


def test_check_refuses_bogus_feature_and_changes_nothing(pair: Pair) -> None:
    before = snaps_of(pair.eps)
    bad = NicSettings(features={"tso": False, "bogus-offload": False})
    with pytest.raises(NetifError) as ei:
        netif.check(pair.eps, bad, before)
    msg = str(ei.value)
    assert "web:tbt-c0 (driver veth) has no feature 'bogus-offload'" in msg
    with pytest.raises(NetifError, match="bogus-offload"):
        netif.apply(pair.eps, bad, before)
    with pytest.raises(NetifError, match="large-receive-offload"):
        netif.apply(pair.eps, NicSettings(features={"lro": True}), before)
    with pytest.raises(NetifError, match="mtu 70000"):
        netif.apply(pair.eps, NicSettings(mtu=70000), before)
    after = snaps_of(pair.eps)
    assert after == before  # not even the wanted ("requested") state changed


def test_apply_rolls_back_when_kernel_refuses(pair: Pair) -> None:
    before = snaps_of(pair.eps)
    # passes check() (nothing fixed) but the kernel keeps TSO off while tx is off
    impossible = NicSettings(features={"tx": False, "tso": True}, mtu=1400)
    with pytest.raises(NetifError) as ei:
        netif.apply(pair.eps, impossible, before)
    msg = str(ei.value)
    assert "tx-tcp6-segmentation" in msg and "restored" in msg
    assert comparable(snaps_of(pair.eps)) == comparable(before)


def test_restore_skips_gone_endpoints_and_carries_on(pair: Pair) -> None:
    before = snaps_of(pair.eps)
    # a second netns holder that then exits: its snapshot points at a dead PID
    extra = start_sleep(NS)
    ghost_ep = Endpoint("proxy", INNER, extra.pid)
    ghost = netif.snapshot(ghost_ep)
    stop(extra)
    vanished = dict(before["host:tbt-h0"], ifname="tbt-zz9", label="host:tbt-zz9")
    netif.apply(pair.eps, OFFLOADS_OFF, before)
    snaps = {"proxy:tbt-c0": ghost, "host:tbt-zz9": vanished, **before}
    problems = netif.restore(snaps)
    assert problems == [
        "proxy:tbt-c0: gone, nothing to restore",
        "host:tbt-zz9: gone, nothing to restore",
    ]
    assert comparable(snaps_of(pair.eps)) == comparable(before)


def test_statefile_round_trip_and_clean_restore(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIERBENCH_STATE_DIR", str(tmp_path / "state"))
    sf = StateFile()
    assert sf.path == tmp_path / "state" / "netif-state.json"
    assert sf.load() is None
    before = snaps_of(pair.eps)
    sf.save(before)
    assert sf.path.exists()
    assert [p.name for p in sf.path.parent.iterdir()] == ["netif-state.json"]
    assert sf.load() == before
    # what `tierbench clean` does after a SIGKILL: load and restore from the file
    netif.apply(pair.eps, NicSettings(features={"gro": True, "tso": False}, mtu=4000), before)
    loaded = StateFile(sf.path).load()
    assert loaded is not None
    assert netif.restore(loaded) == []
    assert comparable(snaps_of(pair.eps)) == comparable(before)
    sf.clear()
    assert sf.load() is None
    sf.clear()  # idempotent
    sf.path.write_text("{not json")
    with pytest.raises(NetifError, match="unreadable"):
        sf.load()
