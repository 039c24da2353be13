"""Unit tests of tierbench.interfaces.netif decision logic against captured `ethtool -k` output.

Data files in tests/data/ethtool/:
- veth-default.txt, veth-tx-off.txt, veth-tso-partial.txt: captured on this project's
  machine (kernel 6.18, ethtool 6.1) from a veth in a tbt-* netns: default state, after
  `ethtool -K IF tx off`, and after turning off every TSO child except tx-tcp6-segmentation.
- ixgbe.txt, mlx5_core.txt: physical NICs (Intel 82599 / ixgbe, ConnectX-5 / mlx5_core)
  in the ethtool 6.x / kernel 6.1 format, written after publicly posted outputs of those
  drivers; mlx5_core-tx-off.txt is the mlx5 one after `ethtool -K IF tx off`.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from tierbench.interfaces import netif
from tierbench.interfaces.netif import FEATURE_ALIASES, Endpoint, NetifError, NicSettings

DATA = Path(__file__).parent / "data" / "ethtool"
ALL_FILES = [
    "veth-default.txt",
    "veth-tx-off.txt",
    "veth-tso-partial.txt",
    "ixgbe.txt",
    "mlx5_core.txt",
    "mlx5_core-tx-off.txt",
]
OFFLOADS_OFF = NicSettings(
    features={"tso": False, "gso": False, "gro": False, "sg": False, "rx": False, "tx": False}
)


def feats(name: str) -> dict[str, dict]:
    return netif.parse_features((DATA / name).read_text())


def snap(name: str, label: str = "web:eth0", driver: str = "veth", **extra: object) -> dict:
    tier, ifname = label.split(":", 1)
    base = {
        "label": label,
        "tier": tier,
        "ifname": ifname,
        "netns_pid": 4242,
        "driver": driver,
        "features": feats(name),
        "mtu": 1500,
        "min_mtu": 68,
        "max_mtu": 65535,
        "qdisc": "qdisc noqueue 0: root refcnt 2",
    }
    base.update(extra)
    return base


def set_feature(s: dict, name: str, on: bool, requested: bool | None = None) -> None:
    s["features"][name]["on"] = on
    s["features"][name]["requested"] = requested


# ------------------------------------------------------------------ parse_features


@pytest.mark.parametrize("name", ALL_FILES)
def test_every_line_is_parsed(name: str) -> None:
    text = (DATA / name).read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("Features for")]
    parsed = netif.parse_features(text)
    assert len(parsed) == len(lines)
    for entry in parsed.values():
        assert set(entry) == {"on", "fixed", "parent", "requested"}


def test_parent_child_structure_veth() -> None:
    f = feats("veth-default.txt")
    tso_kids = [n for n, e in f.items() if e["parent"] == "tcp-segmentation-offload"]
    assert tso_kids == [
        "tx-tcp-segmentation",
        "tx-tcp-ecn-segmentation",
        "tx-tcp-mangleid-segmentation",
        "tx-tcp6-segmentation",
        "tx-tcp-accecn-segmentation",
    ]
    assert f["tx-checksum-ip-generic"]["parent"] == "tx-checksumming"
    assert f["tx-scatter-gather-fraglist"]["parent"] == "scatter-gather"
    for top in ("tcp-segmentation-offload", "generic-receive-offload", "hsr-dup-offload"):
        assert f[top]["parent"] is None
    # a top-level line after the children ends the group
    assert f["generic-segmentation-offload"]["parent"] is None


def test_fixed_and_state_detection() -> None:
    f = feats("veth-default.txt")
    assert f["large-receive-offload"] == {
        "on": False,
        "fixed": True,
        "parent": None,
        "requested": None,
    }
    assert f["tx-checksum-ipv4"]["fixed"] and not f["tx-checksum-ipv4"]["on"]
    assert f["tx-checksum-ip-generic"]["on"] and not f["tx-checksum-ip-generic"]["fixed"]
    assert f["generic-receive-offload"] == {
        "on": False,
        "fixed": False,
        "parent": None,
        "requested": None,
    }
    x = feats("ixgbe.txt")
    assert x["tx-fcoe-segmentation"]["on"] and x["tx-fcoe-segmentation"]["fixed"]
    assert x["tx-checksum-fcoe-crc"] == {
        "on": True,
        "fixed": True,
        "parent": "tx-checksumming",
        "requested": None,
    }
    m = feats("mlx5_core.txt")
    assert m["rx-gro-hw"]["fixed"] and not m["rx-gro-hw"]["on"]
    assert not m["hw-tc-offload"]["fixed"] and not m["hw-tc-offload"]["on"]
    assert m["rx-vlan-stag-filter"]["on"] and m["rx-vlan-stag-filter"]["fixed"]


def test_requested_on_is_off_not_fixed() -> None:
    f = feats("veth-tx-off.txt")
    e = f["tx-tcp6-segmentation"]
    assert e == {
        "on": False,
        "fixed": False,
        "parent": "tcp-segmentation-offload",
        "requested": True,
    }
    assert f["tx-udp-segmentation"]["requested"] is True
    m = feats("mlx5_core-tx-off.txt")
    assert m["tx-tcp-segmentation"]["requested"] is True
    assert m["tx-tcp-mangleid-segmentation"]["requested"] is None


def test_parse_handles_spaces_and_stops_at_actual_changes() -> None:
    text = (
        "Features for eth9:\n"
        "tcp-segmentation-offload: off\n"
        "        tx-tcp-segmentation: off [fixed]\n"
        "        tx-tcp6-segmentation: on [requested off]\n"
        "udp-fragmentation-offload: off [fixed]\n"
        "Cannot get device udp-fragmentation-offload settings: Operation not supported\n"
        "Actual changes:\n"
        "tx-tcp6-segmentation: off\n"
    )
    f = netif.parse_features(text)
    assert list(f) == [
        "tcp-segmentation-offload",
        "tx-tcp-segmentation",
        "tx-tcp6-segmentation",
        "udp-fragmentation-offload",
    ]
    assert f["tx-tcp6-segmentation"] == {
        "on": True,
        "fixed": False,
        "parent": "tcp-segmentation-offload",
        "requested": False,
    }
    assert f["udp-fragmentation-offload"]["parent"] is None


def test_aliases_map_to_names_present_in_every_capture() -> None:
    assert FEATURE_ALIASES["tso"] == "tcp-segmentation-offload"
    assert FEATURE_ALIASES["gro"] == "generic-receive-offload"
    assert FEATURE_ALIASES["rxhash"] == "receive-hashing"
    assert len(FEATURE_ALIASES) == 11
    for name in ALL_FILES:
        f = feats(name)
        missing = [long for long in FEATURE_ALIASES.values() if long not in f]
        assert missing == [], f"{name} lacks {missing}"


# ------------------------------------------------------------------ check


def test_check_accepts_offloads_off_on_all_drivers() -> None:
    for name in ("veth-default.txt", "ixgbe.txt", "mlx5_core.txt"):
        assert netif.feature_problems(snap(name), OFFLOADS_OFF) == []
    ep = Endpoint("web", "eth0", 4242)
    netif.check([ep], OFFLOADS_OFF, {"web:eth0": snap("veth-default.txt")})


def test_check_refuses_unknown_feature_naming_label_driver_feature() -> None:
    ep = Endpoint("proxy", "eth0", 1)
    snaps = {"proxy:eth0": snap("ixgbe.txt", label="proxy:eth0", driver="ixgbe")}
    with pytest.raises(NetifError) as ei:
        netif.check([ep], NicSettings(features={"foo": False}), snaps)
    msg = str(ei.value)
    assert "proxy:eth0" in msg and "driver ixgbe" in msg and "'foo'" in msg
    assert "\n" not in msg


def test_check_refuses_fixed_feature_at_other_value() -> None:
    ep = Endpoint("host", "veth12ab", None)
    snaps = {"host:veth12ab": snap("veth-default.txt", label="host:veth12ab")}
    with pytest.raises(NetifError) as ei:
        netif.check([ep], NicSettings(features={"lro": True}), snaps)
    msg = str(ei.value)
    assert "host:veth12ab" in msg and "driver veth" in msg
    assert "large-receive-offload" in msg and "fixed off" in msg
    # the fixed value itself is fine
    netif.check([ep], NicSettings(features={"lro": False, "rxhash": False}), snaps)
    # mlx5 has rx-gro-hw fixed off: turning it on is refused, hw-tc-offload on is fine
    m = snap("mlx5_core.txt", driver="mlx5_core")
    assert netif.feature_problems(m, NicSettings(features={"hw-tc-offload": True})) == []
    probs = netif.feature_problems(m, NicSettings(features={"rx-gro-hw": True, "bar": True}))
    assert len(probs) == 2
    assert all("web:eth0 (driver mlx5_core)" in p for p in probs)


def test_check_refuses_mtu_out_of_range() -> None:
    s = snap("veth-default.txt", min_mtu=68, max_mtu=9000)
    assert netif.feature_problems(s, NicSettings(mtu=9000)) == []
    probs = netif.feature_problems(s, NicSettings(mtu=9001))
    assert len(probs) == 1 and "mtu 9001" in probs[0] and "68-9000" in probs[0]
    assert netif.feature_problems(s, NicSettings(mtu=67))


def test_check_without_snapshot_is_an_error() -> None:
    with pytest.raises(NetifError, match="web:eth1"):
        netif.check([Endpoint("web", "eth1", 7)], OFFLOADS_OFF, {})


# ------------------------------------------------------------------ verify logic


def _all_off(s: dict) -> dict:
    """Turn off every non-fixed feature under the six offloads-off parents (as a NIC would)."""
    s = copy.deepcopy(s)
    for long in (FEATURE_ALIASES[a] for a in ("tso", "gso", "gro", "sg", "rx", "tx")):
        for n, e in s["features"].items():
            if (n == long or e["parent"] == long) and not e["fixed"]:
                e["on"] = False
    return s


def test_verify_ok_when_everything_off() -> None:
    for name in ("veth-default.txt", "ixgbe.txt", "mlx5_core.txt"):
        assert netif.feature_mismatches(_all_off(snap(name)), OFFLOADS_OFF) == []


def test_verify_catches_tso_child_left_on_even_if_parent_reads_off() -> None:
    s = _all_off(snap("veth-default.txt"))
    s["features"]["tx-tcp6-segmentation"]["on"] = True  # old-ethtool style: parent says off
    out = netif.feature_mismatches(s, NicSettings(features={"tso": False}))
    assert len(out) == 1
    assert "tx-tcp6-segmentation" in out[0] and "web:eth0" in out[0] and "wanted off" in out[0]


def test_verify_catches_real_partial_tso_capture() -> None:
    s = snap("veth-tso-partial.txt")
    out = netif.feature_mismatches(s, NicSettings(features={"tso": False}))
    assert [m.split(":")[2].split()[0] for m in out] == ["tx-tcp6-segmentation"]


def test_verify_accepts_fixed_on_children() -> None:
    # ixgbe: tx-checksum-fcoe-crc is on [fixed]; "tx off" can only turn off the rest
    s = _all_off(snap("ixgbe.txt", driver="ixgbe"))
    assert s["features"]["tx-checksum-fcoe-crc"]["on"]
    s["features"]["tx-checksumming"]["on"] = True  # aggregate still reads on
    assert netif.feature_mismatches(s, NicSettings(features={"tx": False})) == []


def test_verify_on_needs_feature_on_and_no_refused_child() -> None:
    want = NicSettings(features={"tso": True, "gro": True})
    s = snap("veth-default.txt")
    out = netif.feature_mismatches(s, want)
    assert out == ["web:eth0 (driver veth): generic-receive-offload is off, wanted on"]
    # after `tx off` ethtool 6.1 still shows TSO "on" (tx-tcp-accecn-segmentation survives)
    # but the real TSO bits are "off [requested on]": that must count as a mismatch
    t = snap("veth-tx-off.txt")
    assert t["features"]["tcp-segmentation-offload"]["on"]
    out = netif.feature_mismatches(t, NicSettings(features={"tso": True}))
    assert len(out) == 4 and all("[requested on]" in m for m in out)


def test_verify_mtu_and_missing_feature() -> None:
    s = snap("mlx5_core.txt", driver="mlx5_core")
    out = netif.feature_mismatches(s, NicSettings(features={"nope": True}, mtu=9000))
    assert len(out) == 2 and "nope" in out[0] and "mtu is 1500, wanted 9000" in out[1]


# ------------------------------------------------------------------ restore plan / view


def test_restore_plan_sends_leaves_with_dependencies_first() -> None:
    saved = snap("veth-default.txt")
    current = _all_off(saved)
    plan = netif.restore_plan(saved, current)
    names = [n for n, _ in plan]
    assert all(v for _, v in plan)
    assert "tcp-segmentation-offload" not in names  # aggregates are never sent
    assert "tx-tcp6-segmentation" in names and "tx-checksum-ipv4" not in names
    assert names.index("tx-checksum-ip-generic") < names.index("tx-tcp6-segmentation")
    assert names.index("tx-scatter-gather") < names.index("tx-tcp-segmentation")
    assert netif.restore_plan(saved, copy.deepcopy(saved)) == []
    assert netif.restore_differences(saved, copy.deepcopy(saved)) == []
    diffs = netif.restore_differences(saved, current)
    assert any(d.startswith("web:eth0 (driver veth): tx-tcp6-segmentation is off") for d in diffs)


def test_restore_plan_rerequests_wanted_state() -> None:
    saved = snap("veth-tx-off.txt")  # TSO children "off [requested on]"
    current = copy.deepcopy(saved)
    for n in ("tx-tcp-segmentation", "tx-tcp6-segmentation"):
        set_feature(current, n, False, None)
    plan = dict(netif.restore_plan(saved, current))
    assert plan == {"tx-tcp-segmentation": True, "tx-tcp6-segmentation": True}
    assert netif.restore_differences(saved, current) == []


def test_settings_view() -> None:
    view = netif.settings_view(snap("veth-default.txt"))
    assert view["mtu"] == 1500 and view["qdisc"].startswith("qdisc noqueue")
    assert view["features"]["large-receive-offload"] == "off [fixed]"
    assert view["features"]["tcp-segmentation-offload"] == "on"
    assert view["features"]["generic-receive-offload"] == "off"


def test_endpoint_label() -> None:
    assert Endpoint("web", "eth0", 12).label == "web:eth0"
    assert Endpoint("host", "veth12ab", None).label == "host:veth12ab"


def test_run_in_wraps_failures() -> None:
    ep = Endpoint("host", "nope0", None)
    with pytest.raises(NetifError, match=r"host:nope0: `false` failed \(exit 1\)"):
        netif.run_in(ep, ["false"])
    with pytest.raises(NetifError, match="not installed"):
        netif.run_in(ep, ["tbt-no-such-binary-xyz"])
    assert netif.run_in(ep, ["echo", "hi"]) == "hi\n"
