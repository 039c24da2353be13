"""The advice's persistent forms (tierbench.advise.forms) on the plans of captured ethtool states
(tests/data/ethtool: veth, ixgbe, a ConnectX-4 Lx with mlx5_core, bnxt_en's rings): every
.link file parses as systemd's ini syntax with only keys systemd.link(5) defines, every nmcli
property is one of nm-settings-nmcli(5)'s, every setting a form has no key for is named in it,
and the ethtool scripts set and revert what the plan says."""

from __future__ import annotations

import configparser
import re
from pathlib import Path
from typing import Any

import pytest

from tierbench.advise import forms, knobs
from tierbench.interfaces import ethtool
import test_advise as ta

# systemd.link(5) keys the forms may write (the [Match] and [Link] sections)
LINK_KEYS = {"OriginalName", "Driver", "NamePolicy", "AlternativeNamesPolicy",
             "MACAddressPolicy", "ReceiveChecksumOffload", "TransmitChecksumOffload",
             "TCPSegmentationOffload", "TCP6SegmentationOffload", "GenericSegmentationOffload",
             "GenericReceiveOffload", "GenericReceiveOffloadHardware", "LargeReceiveOffload",
             "RxChannels", "TxChannels", "CombinedChannels", "RxBufferSize", "TxBufferSize",
             "UseAdaptiveRxCoalesce", "UseAdaptiveTxCoalesce", "RxCoalesceSec", "TxCoalesceSec",
             "MTUBytes"}
# nm-settings-nmcli(5): the ethtool setting's properties the forms may write, and the MTU
NM_PROPS = {"ethtool.feature-rx", "ethtool.feature-tx", "ethtool.feature-sg",
            "ethtool.feature-tso", "ethtool.feature-gso", "ethtool.feature-gro",
            "ethtool.feature-rx-gro-hw", "ethtool.feature-lro", "ethtool.channels-rx",
            "ethtool.channels-tx", "ethtool.channels-combined", "ethtool.ring-rx",
            "ethtool.ring-tx", "ethtool.coalesce-adaptive-rx", "ethtool.coalesce-adaptive-tx",
            "ethtool.coalesce-rx-usecs", "ethtool.coalesce-tx-usecs", "802-3-ethernet.mtu"}


def snaps() -> dict[str, dict[str, Any]]:
    """The captured states: veth, ixgbe, ConnectX-4 Lx, and bnxt_en's rings (its only capture)."""
    bnxt = {"label": "n:eth0", "ifname": "eth0", "driver": "bnxt_en", "features": {},
            "mtu": 1500, "max_mtu": 1500,
            "rings": ethtool.parse_rings((ta.DATA / "bnxt_en-g.txt").read_text())}
    return {"veth": ta.veth(),
            "ixgbe": ta.captured("ixgbe.txt", "ixgbe-l.txt", "ixgbe-c.txt", "ixgbe-g.txt"),
            "mlx5": ta.captured("mlx5_core-cx4lx.txt", "mlx5_core-cx4lx-l.txt",
                                "mlx5_core-cx4lx-c.txt", "mlx5_core-cx4lx-g.txt"),
            "bnxt": bnxt}


def parse_link(text: str) -> configparser.ConfigParser:
    """A .link file as systemd reads it (ini sections, Key=Value, # comments)."""
    cp = configparser.ConfigParser(interpolation=None, delimiters=("=",),
                                   comment_prefixes=("#",), strict=True)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string(text)
    return cp


@pytest.mark.parametrize("name", ["veth", "ixgbe", "mlx5", "bnxt"])
def test_every_state_of_every_knob_has_valid_forms(name: str) -> None:
    plans = [p for p in knobs.plan([snaps()[name]]) if p.changeable]
    assert plans
    for p in plans:
        for state in ("on", "off"):
            nic = p.setting(state)
            text = forms.link_file("eth0", nic, "drv")
            cp = parse_link(text)
            assert cp.sections() == ["Match", "Link"]
            assert cp["Match"]["OriginalName"] == "eth0"
            keys = {k for s in cp.sections() for k in cp[s]}
            assert keys <= LINK_KEYS, (p.knob, state, keys - LINK_KEYS)
            for key, value in cp["Link"].items():
                assert value and not value.startswith(" ")
                if key.endswith(("Offload", "Hardware", "Coalesce")):
                    assert value in ("yes", "no"), (key, value)
            # every setting is in the .link file or named as having no key there
            written = len([k for k in cp["Link"] if k not in {
                "NamePolicy", "AlternativeNamesPolicy", "MACAddressPolicy",
                "TCP6SegmentationOffload"}])
            missing = re.search(r"# no systemd.link key .*: (.*)", text)
            named = len(missing.group(1).split("; ")) if missing else 0
            assert written + named == len(forms._items(nic)), (p.knob, state, text)
            lines = forms.nmcli_lines("eth0", nic)
            props = re.findall(r" ((?:ethtool|802-3-ethernet)\.[a-z0-9-]+) ", " ".join(lines)
                               + " ")
            assert set(props) <= NM_PROPS, (p.knob, state, props)


def test_the_forms_of_known_changes() -> None:
    plans = {n: ta.by_knob(knobs.plan([s])) for n, s in snaps().items()}
    off = plans["veth"]["checksum"].setting("off")
    cp = parse_link(forms.link_file("eth0", off))
    assert cp["Link"]["ReceiveChecksumOffload"] == "no"
    assert cp["Link"]["TransmitChecksumOffload"] == "no"
    assert forms.nmcli_lines("eth0", off)[0].endswith(
        "ethtool.feature-rx off ethtool.feature-tx off")
    assert any("also turns TSO off" in n for n in forms.notes(off))
    sg = forms.link_file("eth0", plans["veth"]["sg"].setting("off"))
    assert "# no systemd.link key (set by the ethtool script): scatter-gather " \
           "scatter-gather off" in sg
    lro = plans["mlx5"]["lro"].setting("on")
    assert parse_link(forms.link_file("p0", lro))["Link"]["LargeReceiveOffload"] == "yes"
    assert any("routes or bridges" in n for n in forms.notes(lro))
    co = parse_link(forms.link_file("p0", plans["mlx5"]["coalescing"].setting("off")))["Link"]
    assert (co["UseAdaptiveRxCoalesce"], co["RxCoalesceSec"]) == ("no", "0us")
    ch = plans["ixgbe"]["channels"].setting("on")
    assert parse_link(forms.link_file("p0", ch))["Link"]["CombinedChannels"] == "63"
    assert "ethtool.channels-combined 63" in forms.nmcli_lines("p0", ch)[0]
    rings = plans["bnxt"]["rings"].setting("on")
    assert parse_link(forms.link_file("p0", rings))["Link"]["RxBufferSize"] == "2047"
    split = forms.link_file("p0", plans["bnxt"]["header-split"].setting("on"))
    assert "no systemd.link key" in split and "tcp-data-split" in split
    assert forms.nmcli_lines("p0", plans["bnxt"]["header-split"].setting("on")) == [
        "# no NetworkManager property (set by the ethtool script): tcp-data-split"]
    rps = plans["veth"]["rps"].setting("on")
    assert "# no systemd.link key (set by the ethtool script): rps_cpus all" in \
        forms.link_file("eth0", rps)
    assert forms.nmcli_lines("eth0", rps) == [
        "# no NetworkManager property (set by the ethtool script): rps_cpus"]
    assert knobs.ethtool_commands("eth0", rps, "3") == [
        'for q in /sys/class/net/eth0/queues/rx-*; do echo 3 > "$q/rps_cpus"; done']
    jumbo = plans["veth"]["jumbo"].setting("on")
    assert parse_link(forms.link_file("eth0", jumbo))["Link"]["MTUBytes"] == "9000"
    assert "802-3-ethernet.mtu 9000" in forms.nmcli_lines("eth0", jumbo)[0]


def test_written_forms_set_and_revert_the_recommended_changes(tmp_path: Path) -> None:
    plans = ta.by_knob(knobs.plan([ta.veth()]))
    entry = {"name": "w", "endpoints": [{"label": "web:eth0", "ifname": "eth0",
                                         "driver": "veth"}],
             "knobs": [p.as_dict() for p in plans.values()]}
    table = [{"workload": "w", "row": "knob", "knob": "gro", "commands": "x",
              "recommended_state": "on"},
             {"workload": "w", "row": "knob", "knob": "jumbo", "commands": "x",
              "recommended_state": "on"},
             {"workload": "w", "row": "knob", "knob": "tso", "commands": "",
              "recommended_state": "on"}]
    change, back, unknown = forms.recommended(entry, table)
    assert change == {"features": {"generic-receive-offload": True}, "mtu": 9000}
    assert back == {"features": {"generic-receive-offload": False}, "mtu": 1500}
    assert unknown == []
    paths = forms.write(tmp_path, "w", entry["endpoints"], change, back)
    names = sorted(p.name for p in paths)
    assert names == ["10-tierbench-web_eth0.link", "NOTES.txt", "apply.sh", "nmcli.sh",
                     "revert.sh"]
    folder = tmp_path / "persist" / "w"
    assert "ethtool -K eth0 generic-receive-offload on\nip link set dev eth0 mtu 9000" in \
        (folder / "apply.sh").read_text()
    assert "ethtool -K eth0 generic-receive-offload off\nip link set dev eth0 mtu 1500" in \
        (folder / "revert.sh").read_text()
    link = parse_link((folder / "10-tierbench-web_eth0.link").read_text())
    assert link["Link"]["GenericReceiveOffload"] == "yes" and link["Match"]["Driver"] == "veth"
    assert "MTU 9000" in (folder / "NOTES.txt").read_text()
