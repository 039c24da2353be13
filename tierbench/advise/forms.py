"""Persistent forms of the advice: what an operator puts in place so that a recommended
configuration survives a reboot or a link reset.

For one interface and the `nic:` settings of the changes recommended (and of the states they
replace, for the revert), ``link_file`` writes a systemd-networkd ``.link`` file (systemd.link(5):
the ``[Link]`` keys of udev's net_setup_link), ``nmcli_lines`` the NetworkManager commands
(nm-settings-nmcli(5): the ``ethtool.*`` properties and ``802-3-ethernet.mtu``), and
``write`` a plain shell script of ethtool and ip commands (with its revert); ``notes`` the
safety notes that apply. A setting a form has no key for is listed in a comment of that form
(the ethtool script takes every setting). Pure functions: tested on the plans of captured
ethtool output (tests/test_advise_forms.py); written by ``write`` into the advise folder.
"""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path
from typing import Any

from tierbench.advise import knobs, merge
from tierbench.interfaces import ethtool

# ethtool -k feature -> systemd.link [Link] key
LINK_FEATURES = {
    "rx-checksumming": "ReceiveChecksumOffload",
    "tx-checksumming": "TransmitChecksumOffload",
    "tcp-segmentation-offload": "TCPSegmentationOffload",
    "generic-segmentation-offload": "GenericSegmentationOffload",
    "generic-receive-offload": "GenericReceiveOffload",
    "rx-gro-hw": "GenericReceiveOffloadHardware",
    "large-receive-offload": "LargeReceiveOffload",
}
LINK_SIZES = {("channels", "rx"): "RxChannels", ("channels", "tx"): "TxChannels",
              ("channels", "combined"): "CombinedChannels", ("rings", "rx"): "RxBufferSize",
              ("rings", "tx"): "TxBufferSize",
              ("coalesce", "adaptive-rx"): "UseAdaptiveRxCoalesce",
              ("coalesce", "adaptive-tx"): "UseAdaptiveTxCoalesce",
              ("coalesce", "rx-usecs"): "RxCoalesceSec", ("coalesce", "tx-usecs"): "TxCoalesceSec"}
# ethtool -k feature -> NetworkManager property (nm-settings-nmcli(5), setting "ethtool")
NM_FEATURES = {
    "rx-checksumming": "ethtool.feature-rx", "tx-checksumming": "ethtool.feature-tx",
    "scatter-gather": "ethtool.feature-sg", "tcp-segmentation-offload": "ethtool.feature-tso",
    "generic-segmentation-offload": "ethtool.feature-gso",
    "generic-receive-offload": "ethtool.feature-gro", "rx-gro-hw": "ethtool.feature-rx-gro-hw",
    "large-receive-offload": "ethtool.feature-lro",
}
NM_SIZES = {("channels", "rx"): "ethtool.channels-rx", ("channels", "tx"): "ethtool.channels-tx",
            ("channels", "combined"): "ethtool.channels-combined",
            ("rings", "rx"): "ethtool.ring-rx", ("rings", "tx"): "ethtool.ring-tx",
            ("coalesce", "adaptive-rx"): "ethtool.coalesce-adaptive-rx",
            ("coalesce", "adaptive-tx"): "ethtool.coalesce-adaptive-tx",
            ("coalesce", "rx-usecs"): "ethtool.coalesce-rx-usecs",
            ("coalesce", "tx-usecs"): "ethtool.coalesce-tx-usecs"}
# the default policy lines of systemd's 99-default.link: a matching .link file replaces it
DEFAULT_POLICY = ("NamePolicy=keep kernel database onboard slot path",
                  "AlternativeNamesPolicy=database onboard slot path",
                  "MACAddressPolicy=persistent")


def _items(nic: dict[str, Any]) -> list[tuple[str, str, Any]]:
    """A `nic:` block as (part, key, value): features, mtu, then the sizes."""
    out = [("features", k, v) for k, v in (nic.get("features") or {}).items()]
    if nic.get("mtu") is not None:
        out.append(("mtu", "mtu", nic["mtu"]))
    out += [(part, k, v) for part in ("channels", "rings", "coalesce")
            for k, v in (nic.get(part) or {}).items()]
    out += [("queues", k, nic[k]) for k in ("rps_cpus", "xps_cpus") if nic.get(k) is not None]
    return out


def _link_value(part: str, key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if part == "coalesce" and key.endswith("-usecs"):
        return f"{int(value)}us"
    return str(value)


def link_file(ifname: str, nic: dict[str, Any], driver: str | None = None) -> str:
    """A systemd.link(5) file that sets ``nic`` on the interface first named ``ifname``."""
    lines = ["# written by tierbench advise: the recommended settings of this interface",
             "# takes effect when udev next sets the device up (boot, or",
             f"#   udevadm trigger --action=add /sys/class/net/{ifname}); a matching .link file",
             "# replaces 99-default.link for it, hence its naming policy lines below",
             "[Match]", f"OriginalName={ifname}"]
    if driver:
        lines.append(f"Driver={driver}")
    lines += ["", "[Link]", *DEFAULT_POLICY]
    missing = []
    for part, key, value in _items(nic):
        name = (LINK_FEATURES.get(key) if part == "features" else
                "MTUBytes" if part == "mtu" else LINK_SIZES.get((part, key)))
        if name is None:
            missing.append(f"{key} {value}" if part in ("mtu", "queues") else
                           f"{key} {ethtool.ethtool_args({key: value})}")
            continue
        lines.append(f"{name}={_link_value(part, key, value)}")
        if key == "tcp-segmentation-offload":
            lines.append(f"TCP6SegmentationOffload={_link_value(part, key, value)}")
    if missing:
        lines.append("# no systemd.link key (set by the ethtool script): " + "; ".join(missing))
    return "\n".join(lines) + "\n"


def _nm_value(part: str, value: Any) -> str:
    if isinstance(value, bool):
        return ("on" if value else "off") if part == "features" else ("1" if value else "0")
    return str(value)


def nmcli_lines(ifname: str, nic: dict[str, Any]) -> list[str]:
    """NetworkManager commands that set ``nic`` on the connection of ``ifname`` persistently
    (the connection is brought up again to apply it: the link goes down for a moment)."""
    conn = f"\"$(nmcli -g GENERAL.CONNECTION device show {shlex.quote(ifname)})\""
    props, missing = [], []
    for part, key, value in _items(nic):
        name = (NM_FEATURES.get(key) if part == "features" else
                "802-3-ethernet.mtu" if part == "mtu" else NM_SIZES.get((part, key)))
        if name is None:
            missing.append(key)
            continue
        props.append(f"{name} {_nm_value(part, value)}")
    out = []
    if props:
        out += [f"nmcli connection modify {conn} " + " ".join(props),
                f"nmcli connection up {conn}"]
    if missing:
        out.append("# no NetworkManager property (set by the ethtool script): "
                   + ", ".join(missing))
    return out


def notes(nic: dict[str, Any]) -> list[str]:
    """The safety notes that apply to a configuration."""
    feats, out = nic.get("features") or {}, []
    if feats.get("large-receive-offload") is True or feats.get("rx-gro-hw") is True:
        out.append("LRO (and hardware GRO on older kernels) merges received packets into ones "
                   "that cannot be forwarded unchanged: keep it off on a host that routes or "
                   "bridges (ip_forward, a Linux bridge or OVS, a container bridge); the kernel "
                   "turns LRO off on bridge ports itself, not for routing")
    if any(feats.get(k) is False for k in ("tx-checksumming", "scatter-gather")):
        out.append("tx checksumming or scatter-gather off also turns TSO off (ethtool shows "
                   "it 'off [requested on]'): the measured effect is of the group")
    if nic.get("mtu") is not None and int(nic["mtu"]) > knobs.STANDARD_MTU:
        out.append(f"MTU {nic['mtu']}: every host, switch port and router on the path must "
                   "carry it, or large frames are dropped silently (check with ping -M do)")
    if (nic.get("coalesce") or {}).get("rx-usecs") == 0:
        out.append("interrupt coalescing off: an interrupt per packet, more CPU under load")
    if nic.get("channels"):
        out.append("a change of channels re-spreads interrupts: check IRQ affinity "
                   "(irqbalance) and RPS/XPS masks afterwards")
    return out


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def write(folder: Path, workload: str, endpoints: list[dict[str, Any]],
          change: dict[str, Any], revert: dict[str, Any],
          unknown: list[str] | None = None, said: list[str] | None = None) -> list[Path]:
    """Every form of one workload's recommended changes, per interface, under
    ``folder/persist/<workload>/``: .link files, nmcli.sh, apply.sh, revert.sh, NOTES.txt
    (``said``: notes before the safety notes)."""
    out_dir = folder / "persist" / _safe(workload)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    nm, apply_, back = [], [], []
    for ep in endpoints:
        ifname = str(ep.get("ifname"))
        where = str(ep.get("label") or ifname) + where_side(ep)
        p = out_dir / f"10-tierbench-{_safe(str(ep.get('label') or ifname))}.link"
        p.write_text((f"# {where}\n" if where_side(ep) else "")
                     + link_file(ifname, change, ep.get("driver")), encoding="utf-8")
        paths.append(p)
        nm += [f"# {where}", *nmcli_lines(ifname, change)]
        cpus = ep.get("cpu_mask")
        apply_ += [f"# {where}", *knobs.ethtool_commands(ifname, change, cpus)]
        back += [f"# {where}", *knobs.ethtool_commands(ifname, revert, cpus)]
        back += [f"# {k}: its state before differed between interfaces or was neither on nor "
                 "off: see advice.csv's current column" for k in unknown or []]
    for name, lines in (("nmcli.sh", nm), ("apply.sh", apply_), ("revert.sh", back)):
        p = out_dir / name
        p.write_text("#!/bin/sh\n# written by tierbench advise\nset -e\n" + "\n".join(lines)
                     + "\n", encoding="utf-8")
        paths.append(p)
    p = out_dir / "NOTES.txt"
    p.write_text("\n".join(f"- {n}" for n in [*(said or []),
                                               *(notes(change) or ["no safety note applies"])])
                 + "\n", encoding="utf-8")
    return [*paths, p]


def where_side(ep: dict[str, Any]) -> str:
    """' (the server side)' for an interface of one side, else ''."""
    side = ep.get("side")
    return f" (the {side} side)" if side in knobs.SIDES else ""


def recommended(entry: dict[str, Any], table: list[dict[str, str]],
                side: str | None = None) -> tuple[dict, dict, list]:
    """A workload's recommended changes as one `nic:` block, the block of the states they
    replace (the revert), and the knobs whose current state no block can say (mixed or other:
    the revert names them); ``side`` (server or client): only the changes of knobs planned for
    that side or for both."""
    plans = {k["knob"]: k for k in entry.get("knobs") or []}
    rows = [r for r in table if r.get("workload") == entry.get("name") and r.get("row") == "knob"
            and r.get("commands") and r.get("knob") in plans and
            (side not in knobs.SIDES or plans[r["knob"]].get("side", knobs.BOTH)
             in (side, knobs.BOTH))]
    change, back, unknown = [], [], []
    for r in rows:
        k, state = plans[r["knob"]], r.get("recommended_state") or ""
        change.append(k.get(state) or {})
        if k.get("state") in ("on", "off"):
            back.append(k.get(k["state"]) or {})
        else:
            unknown.append(r["knob"])
    return knobs.merged(change), knobs.merged(back), unknown


def persist(folder: Path) -> list[Path]:
    """The persistent forms of every workload with a recommended change (advise.json and
    advice.csv of an advise folder)."""
    record = json.loads((folder / "advise.json").read_text(encoding="utf-8"))
    with (folder / "advice.csv").open(newline="", encoding="utf-8") as fh:
        table = list(csv.DictReader(fh))
    out = []
    start, since = merge.start_nic(record), since_note(record)
    for entry in record.get("workloads") or []:
        eps = entry.get("endpoints") or []
        sides = sorted({ep.get("side") for ep in eps})
        if not (set(sides) == set(knobs.SIDES)):  # one configuration for every interface
            change, back, unknown = recommended(entry, table)
            if change:
                out += write(folder, str(entry["name"]), eps, knobs.merged([start, change]),
                             back, unknown, since)
            continue
        for side in sides:  # the servers' and the clients' interfaces: persist/<w>-<side>-side/
            change, back, unknown = recommended(entry, table, side)
            if change:
                out += write(folder, f"{entry['name']}-{side}-side",
                             [ep for ep in eps if ep.get("side") == side],
                             knobs.merged([start, change]), back, unknown, since)
    return out


def persist_confirmed(folder: Path, record: dict[str, Any]) -> list[Path]:
    """The persistent forms of the confirmed configuration (merge.interfaces), under
    persist/confirmed/ (persist/confirmed-1/, -2/ ... when interfaces take different
    settings); when nothing is confirmed, those of the configuration kept (merge.kept: every
    measured knob's current state, pinned against a driver's or kernel's default changing
    it) under persist/kept/."""
    conf = record.get("confirmation") or {}
    changes = conf.get("confirmed") or {}
    since = since_note(record)
    if conf.get("is_confirmed") and changes:
        return grouped(folder, "confirmed", merge.interfaces(record, changes), since)
    if "merged" not in conf:  # the run ended before its confirmation: nothing was decided
        return []
    why = [f"nothing was confirmed ({conf.get('status')}): these files pin the configuration "
           "that was measured and kept (every knob the run measured, in its state during the "
           "run), so that a driver's or kernel's default cannot move it; revert.sh has "
           "nothing to put back", *since]
    return grouped(folder, "kept", merge.kept(record), why)


def since_note(record: dict[str, Any]) -> list[str]:
    """The note of a run from a stated configuration (advise --from), or none."""
    start = (record.get("from") or {}).get("mode")
    return [f"measured from the stated configuration {start} (advise --from), not from the "
            f"interfaces as they were: apply.sh sets {start}'s settings with the changes over "
            f"them; revert.sh puts back {start}'s states of the changed knobs, not the "
            "interfaces' own"] if start else []


def grouped(folder: Path, name: str, items: list[dict[str, Any]],
            said: list[str]) -> list[Path]:
    """The forms of a configuration per group of interfaces that take the same settings:
    persist/<name>/, or <name>-server-side/, <name>-client-side/, <name>-1/ ... when they
    differ; ``said``: notes first in each NOTES.txt."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for item in items:
        if item["nic"]:
            groups.setdefault(json.dumps([item["nic"], item["revert"]], sort_keys=True),
                              []).append(item)
    out = []
    named = [{i.get("side") for i in items} for items in groups.values()]
    for n, (items, sides) in enumerate(zip(groups.values(), named)):
        (side,) = sides if len(sides) == 1 else (None,)
        folder_name = name if len(groups) == 1 else f"{name}-{side}-side" \
            if side in knobs.SIDES and named.count(sides) == 1 else f"{name}-{n + 1}"
        out += write(folder, folder_name, items, items[0]["nic"], items[0]["revert"],
                     said=said)
    return out
