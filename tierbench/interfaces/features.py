"""Offload features and MTU of an interface as pure functions over snapshot dicts: ``ethtool -k``
parsed, what a wanted setting cannot do (``feature_problems``), what a re-read differs in
(``feature_mismatches``), and the ``ethtool -K`` arguments of a change or a restore
(``wanted_feature_args``, ``restore_plan``), tested against captured output. The commands that
read and set them are :mod:`tierbench.interfaces.netif`'s, which re-exports these names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FEATURE_ALIASES: dict[str, str] = {
    "tso": "tcp-segmentation-offload",
    "gso": "generic-segmentation-offload",
    "gro": "generic-receive-offload",
    "lro": "large-receive-offload",
    "sg": "scatter-gather",
    "rx": "rx-checksumming",
    "tx": "tx-checksumming",
    "rxvlan": "rx-vlan-offload",
    "txvlan": "tx-vlan-offload",
    "ntuple": "ntuple-filters",
    "rxhash": "receive-hashing",
}

# Features that others depend on: when turning features on, these go first in the
# ethtool -K argument list (checksums and scatter-gather before segmentation offloads).
_ON_ORDER: tuple[str, ...] = (
    "rx-checksumming",
    "tx-checksumming",
    "scatter-gather",
    "tcp-segmentation-offload",
    "generic-segmentation-offload",
    "generic-receive-offload",
    "large-receive-offload",
)

_FEATURE_LINE = re.compile(
    r"^(?P<indent>\s*)(?P<name>[A-Za-z0-9_.-]+):\s+(?P<state>on|off)"
    r"(?:\s+\[(?P<note>[^\]]*)\])?\s*$"
)


@dataclass(frozen=True)
class NicSettings:
    """Wanted offload features (short alias or long ethtool name -> on) and optional MTU."""

    features: dict[str, bool] = field(default_factory=dict)
    mtu: int | None = None


# --------------------------------------------------------------------------- parsing


def parse_features(text: str) -> dict[str, dict]:
    """Parse ``ethtool -k`` output into {long_name: {on, fixed, parent, requested}}.

    ``requested`` is the value the kernel was asked for when ethtool reports
    ``[requested on|off]`` (the feature is wanted but could not be made active),
    otherwise None.  Indented lines are children of the preceding top-level line.
    """
    features: dict[str, dict] = {}
    parent: str | None = None
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip() or line.startswith("Features for "):
            continue
        if line.strip() == "Actual changes:":
            break  # output of ethtool -K, not part of a -k listing
        m = _FEATURE_LINE.match(line)
        if m is None:
            continue
        name = m.group("name")
        note = (m.group("note") or "").strip()
        requested: bool | None = None
        if note.startswith("requested "):
            requested = note.split()[1] == "on"
        entry = {
            "on": m.group("state") == "on",
            "fixed": note == "fixed",
            "parent": None,
            "requested": requested,
        }
        if m.group("indent"):
            entry["parent"] = parent
        else:
            parent = name
        features[name] = entry
    return features


def _canonical(name: str) -> str:
    """Map a short alias (tso, gro, ...) to the long ethtool -k name; others unchanged."""
    return FEATURE_ALIASES.get(name, name)


def _children(features: dict[str, dict], name: str) -> list[str]:
    return [n for n, f in features.items() if f.get("parent") == name]


def _leaves(features: dict[str, dict]) -> list[str]:
    """Features that are real kernel bits: every child line and every childless top line."""
    parents = {f["parent"] for f in features.values() if f.get("parent")}
    return [n for n in features if n not in parents]


def _state(feat: dict) -> str:
    text = "on" if feat["on"] else "off"
    if feat.get("fixed"):
        text += " [fixed]"
    elif feat.get("requested") is not None and feat["requested"] != feat["on"]:
        text += f" [requested {'on' if feat['requested'] else 'off'}]"
    return text


def onoff(value: bool) -> str:
    return "on" if value else "off"


def _who(snap: dict) -> str:
    return f"{snap.get('label', '?')} (driver {snap.get('driver', 'unknown')})"


# --------------------------------------------------------------------------- pure logic


def feature_problems(snap: dict, want: NicSettings) -> list[str]:
    """Return why ``want`` cannot be applied to the endpoint of ``snap`` ([] = possible)."""
    problems: list[str] = []
    features = snap.get("features", {})
    for name, value in want.features.items():
        long = _canonical(name)
        feat = features.get(long)
        if feat is None:
            alias = f" (alias of '{long}')" if long != name else ""
            problems.append(f"{_who(snap)} has no feature '{name}'{alias}")
            continue
        if feat.get("fixed") and bool(feat["on"]) != bool(value):
            problems.append(
                f"{_who(snap)} cannot turn {long} {onoff(value)}: it is fixed {onoff(feat['on'])}"
            )
    if want.mtu is not None:
        lo, hi = snap.get("min_mtu"), snap.get("max_mtu")
        if (lo is not None and want.mtu < lo) or (hi is not None and want.mtu > hi):
            problems.append(
                f"{_who(snap)} cannot use mtu {want.mtu}: "
                f"the allowed range is {lo if lo is not None else '?'}"
                f"-{hi if hi is not None else '?'}"
            )
    return problems


def feature_mismatches(snap: dict, want: NicSettings) -> list[str]:
    """Compare a (fresh) snapshot against ``want``; return human-readable mismatches.

    A requested "off" needs the feature off and every non-fixed child off (a parent shown
    "on" only because of fixed-on children is accepted).  A requested "on" needs the
    feature on and no child left "off [requested on]" (the kernel refused it, usually
    because a feature it depends on is off).
    """
    out: list[str] = []
    who = _who(snap)
    features = snap.get("features", {})
    for name, value in want.features.items():
        long = _canonical(name)
        feat = features.get(long)
        if feat is None:
            out.append(f"{who}: feature {long} is missing, wanted {onoff(value)}")
            continue
        kids = _children(features, long)
        if not value:
            left_on = [k for k in kids if features[k]["on"] and not features[k]["fixed"]]
            for k in left_on:
                out.append(f"{who}: {k} (under {long}) is {_state(features[k])}, wanted off")
            fixed_on_kid = any(features[k]["on"] and features[k]["fixed"] for k in kids)
            if feat["on"] and not left_on and not fixed_on_kid:
                out.append(f"{who}: {long} is {_state(feat)}, wanted off")
        else:
            if not feat["on"]:
                out.append(f"{who}: {long} is {_state(feat)}, wanted on")
            for k in kids:
                kf = features[k]
                if not kf["on"] and kf.get("requested") is True:
                    out.append(f"{who}: {k} (under {long}) is {_state(kf)}, wanted on")
    if want.mtu is not None and snap.get("mtu") != want.mtu:
        out.append(f"{who}: mtu is {snap.get('mtu')}, wanted {want.mtu}")
    return out


def restore_differences(saved: dict, current: dict) -> list[str]:
    """Non-fixed features and MTU where ``current`` differs from ``saved`` (pure)."""
    diffs: list[str] = []
    who = _who(saved)
    cur_feats = current.get("features", {})
    for name, feat in saved.get("features", {}).items():
        if feat.get("fixed"):
            continue
        now = cur_feats.get(name)
        if now is None:
            diffs.append(f"{who}: {name} has disappeared, snapshot had {_state(feat)}")
        elif bool(now["on"]) != bool(feat["on"]):
            diffs.append(f"{who}: {name} is {_state(now)}, snapshot had {_state(feat)}")
    if saved.get("mtu") is not None and current.get("mtu") != saved.get("mtu"):
        diffs.append(f"{who}: mtu is {current.get('mtu')}, snapshot had {saved.get('mtu')}")
    return diffs


def restore_plan(saved: dict, current: dict | None) -> list[tuple[str, bool]]:
    """ethtool -K arguments (long kernel-level names) that bring ``current`` back to ``saved``
    (``current`` None: unknown, every feature the snapshot can set, as the rollback guard
    runs them without reading the interface first).

    Only leaf features are sent (aggregates like tx-checksumming follow their children).
    A feature the snapshot shows as "off [requested on]" is requested on again, so the
    kernel's wanted state is restored too.  Features switched on are listed first,
    checksum/scatter-gather ones before segmentation ones.
    """
    saved_feats = saved.get("features", {})
    cur_feats = (current or {}).get("features", {})
    plan: list[tuple[str, bool]] = []
    for name in _leaves(saved_feats):
        feat = saved_feats[name]
        if current is None:
            if not feat.get("fixed"):
                plan.append((name, bool(feat["on"] if feat.get("requested") is None
                                        else feat["requested"])))
            continue
        now = cur_feats.get(name)
        if feat.get("fixed") or now is None or now.get("fixed"):
            continue
        same_active = bool(now["on"]) == bool(feat["on"])
        req = feat.get("requested")
        if same_active and (req is None or now.get("requested") == req):
            continue
        wanted = feat["requested"] if feat.get("requested") is not None else feat["on"]
        plan.append((name, bool(wanted)))
    return _order_args(plan, saved_feats)


def _dep_rank(name: str, features: dict[str, dict]) -> int:
    top = features.get(name, {}).get("parent") or name
    try:
        return _ON_ORDER.index(top)
    except ValueError:
        return len(_ON_ORDER)


def _order_args(args: list[tuple[str, bool]], features: dict[str, dict]) -> list[tuple[str, bool]]:
    """Order ethtool -K arguments: "on" ones first, dependencies (csum, sg) before TSO/GSO."""
    ons = sorted((a for a in args if a[1]), key=lambda a: _dep_rank(a[0], features))
    offs = [a for a in args if not a[1]]
    return ons + offs


def wanted_feature_args(snap: dict, want: NicSettings) -> list[tuple[str, bool]]:
    args = [(_canonical(n), bool(v)) for n, v in want.features.items()]
    return _order_args(args, snap.get("features", {}))
