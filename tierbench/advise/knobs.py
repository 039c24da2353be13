"""What the interfaces that carry the tiers' traffic can change, and the modes that change it.

For every endpoint (a container's veth and its host peer on one host; a node's data-plane NIC on
a cluster) the advisor reads ``ethtool -k/-l/-c/-g`` and ``ip -d -j link`` (``read_endpoint``,
through tierbench.interfaces) and decides per knob of the catalogue (``KNOBS``) whether the
interface can change it, its current state, and the settings of its two states, "on" and "off"
(``view``, pure: tested on captured output of real drivers). Across the endpoints a knob is
planned only when every endpoint can change it (``plan``); its mode sets the state it is not in
now, one knob at a time, over the current configuration (``modes``), beside a baseline that
sets nothing, all-on and all-off.

BIG TCP (``gso_max_size``/``gro_max_size``, and the IPv4 sizes of Linux 6.3+) is read and
reported, but not varied: the tiers' traffic is IPv4, whose sizes this iproute2 cannot set,
and tierbench's modes cannot set them yet (docs/advise.md). RPS and XPS are read from sysfs
(``queues``) and set through the modes' ``rps_cpus``/``xps_cpus``.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

from tierbench.interfaces import ethtool, netif, queues
from tierbench.interfaces.netif import Endpoint, NicSettings
from tierbench.modes.model import Knobs, Mode, of_parts

JUMBO_MTU = 9000
STANDARD_MTU = 1500
SMALL_RING = 64
SOURCE = "tierbench advise"
BASELINE = "baseline"

# knob -> (what it is, its ethtool -k features); the order is the advice's
FEATURES: dict[str, tuple[str, tuple[str, ...]]] = {
    "tso": ("TCP segmentation offload (TSO)", ("tcp-segmentation-offload",)),
    "gso": ("generic segmentation offload (GSO)", ("generic-segmentation-offload",)),
    "gro": ("generic receive offload (GRO)", ("generic-receive-offload",)),
    "lro": ("large receive offload (LRO)", ("large-receive-offload",)),
    "hw-gro": ("hardware GRO", ("rx-gro-hw",)),
    "checksum": ("rx and tx checksum offload", ("rx-checksumming", "tx-checksumming")),
    "sg": ("scatter-gather", ("scatter-gather",)),
}
OTHERS: dict[str, str] = {
    "jumbo": "jumbo frames (MTU 9000)",
    "coalescing": "interrupt coalescing",
    "channels": "RSS channels (queues)",
    "rings": "ring sizes",
    "header-split": "header-data split",
    "rps": "receive packet steering (RPS) over every CPU",
    "xps": "transmit packet steering (XPS) over every CPU",
    "big-tcp": "BIG TCP (gso/gro_max_size)",
}
QUEUE_FILES = {"rps": ("rx-", "rps_cpus"), "xps": ("tx-", "xps_cpus")}
KNOBS: tuple[str, ...] = (*FEATURES, *OTHERS)
# The sides of a knob: where the servers' interfaces and the clients' (the load generator's)
# are separate (on one host every tier's veth is its own; on a cluster a node's NIC that
# carries tiers of both roles is both), each knob is planned once per side ("tso.server",
# "tso.client": the mode covers that role's tiers only), since an operator usually owns one
# side; PATH_KNOBS stay one knob over both sides: the MTU must match along the path.
SIDES = ("server", "client")
BOTH = "both"
PATH_KNOBS = ("jumbo",)
SIZE_KEYS = ("gso_max_size", "gro_max_size", "tso_max_size", "gso_ipv4_max_size",
             "gro_ipv4_max_size")


def base(knob: str) -> str:
    """The catalogue's knob of a planned one ("tso" of "tso.server")."""
    return knob.split(".", 1)[0]


def side_of(knob: str) -> str:
    """The side a planned knob changes: server, client or both."""
    return knob.split(".", 1)[1] if "." in knob else BOTH


def label(knob: str) -> str:
    """What a knob is, in words (with its side, when it has one)."""
    name = base(knob)
    text = FEATURES[name][0] if name in FEATURES else OTHERS[name]
    side = side_of(knob)
    return text if side == BOTH else f"{text}, {side} side"


@dataclass(frozen=True)
class View:
    """One knob on one endpoint: can it change, where is it now, what each state sets (a
    mode file's `nic:` block), and each state in words."""

    knob: str
    changeable: bool
    why: str = ""
    state: str = ""  # on | off | other
    current: str = ""
    on: dict[str, Any] = field(default_factory=dict)
    off: dict[str, Any] = field(default_factory=dict)
    on_text: str = "on"
    off_text: str = "off"


@dataclass
class Plan:
    """One knob across every endpoint: planned when each can change it; the state it is in
    (``mixed`` when the endpoints differ), the state its mode tests (the other one), the
    settings of both states and the commands that set them on each endpoint."""

    knob: str
    changeable: bool
    why: str = ""
    state: str = ""
    current: dict[str, str] = field(default_factory=dict)
    on: dict[str, Any] = field(default_factory=dict)
    off: dict[str, Any] = field(default_factory=dict)
    on_text: str = "on"
    off_text: str = "off"
    mode: str | None = None
    commands: dict[str, list[str]] = field(default_factory=dict)
    features_asked: list[str] = field(default_factory=list)  # its features and their children
    side: str = BOTH  # server, client or both: the interfaces its mode changes
    endpoints: list[str] = field(default_factory=list)  # their labels

    @property
    def target(self) -> str:
        """The state the knob's mode tests: the one it is not in now (on when mixed)."""
        return "off" if self.state == "on" else "on"

    def setting(self, state: str) -> dict[str, Any]:
        """The `nic:` settings of a state."""
        return self.on if state == "on" else self.off

    def as_dict(self) -> dict[str, Any]:
        """The plan as the advice's record holds it."""
        return {"knob": self.knob, "label": label(self.knob), "changeable": self.changeable,
                "why": self.why, "state": self.state, "current": self.current,
                "target": self.target if self.changeable else None, "mode": self.mode,
                "on_text": self.on_text, "off_text": self.off_text, "on": self.on,
                "off": self.off, "commands": self.commands,
                "features_asked": self.features_asked, "side": self.side,
                "endpoints": self.endpoints}


# --------------------------------------------------------------------------- one endpoint


def _leaves(features: dict[str, dict], name: str) -> list[str]:
    kids = [n for n, f in features.items() if f.get("parent") == name]
    return kids or [name]


def family(features: dict[str, dict], names: tuple[str, ...]) -> list[str]:
    """Features and every feature under them (ethtool -k's indented children), as shown."""
    out, todo = [], [n for n in names if n in features]
    while todo:
        name = todo.pop()
        out.append(name)
        todo += [n for n, f in features.items() if f.get("parent") == name and n not in out]
    return out


def feature_view(snap: dict, knob: str) -> View:
    """A feature knob: changeable when some kernel bit under each of its features is not
    fixed; on when all of them are on."""
    features = snap.get("features", {})
    usable, reasons = [], []
    for name in FEATURES[knob][1]:
        feat = features.get(name)
        if feat is None:
            reasons.append(f"ethtool -k shows no {name}")
        elif all(features[leaf].get("fixed") for leaf in _leaves(features, name)):
            reasons.append(f"{name} is fixed {netif.onoff(feat['on'])}")
        else:
            usable.append(name)
    shown = ", ".join(f"{n} {netif.onoff(features[n]['on'])}" for n in FEATURES[knob][1]
                      if n in features)
    if not usable:
        return View(knob, False, "; ".join(reasons), current=shown)
    ons = [bool(features[n]["on"]) for n in usable]
    state = "on" if all(ons) else "off" if not any(ons) else "other"
    return View(knob, True, state=state, current=shown,
                on={"features": dict.fromkeys(usable, True)},
                off={"features": dict.fromkeys(usable, False)})


def mtu_view(snap: dict) -> View:
    """Jumbo frames: MTU 9000 (or the largest below it the interface allows) against 1500."""
    mtu, lo, hi = snap.get("mtu"), snap.get("min_mtu"), snap.get("max_mtu")
    current = f"MTU {mtu}"
    if hi is None or hi <= STANDARD_MTU:
        return View("jumbo", False, f"the largest MTU is {hi if hi is not None else 'unknown'}",
                    current=current)
    if lo is not None and lo > STANDARD_MTU:
        return View("jumbo", False, f"the smallest MTU is {lo}", current=current)
    jumbo = min(JUMBO_MTU, hi)
    state = "on" if mtu is not None and mtu >= jumbo else "off" if mtu == STANDARD_MTU \
        else "other"
    return View("jumbo", True, state=state, current=current, on={"mtu": jumbo},
                off={"mtu": STANDARD_MTU}, on_text=f"MTU {jumbo}",
                off_text=f"MTU {STANDARD_MTU}")


def _shown(snap: dict, key: str, knob: str, option: str) -> dict[str, Any] | View:
    """The snapshot's ethtool part ``key`` (channels, coalesce, rings), or, when ethtool
    ``option`` did not show it, the view of a knob that cannot change, saying why."""
    part = snap.get(key)
    if not isinstance(part, dict) or not part:
        return View(knob, False, f"ethtool {option}: not read")
    if "error" in part:
        return View(knob, False, f"ethtool {option}: {part['error']}")
    return part


def channels_view(snap: dict) -> View:
    """RSS channels: the most the driver allows against one (combined, or rx and tx)."""
    ch = _shown(snap, "channels", "channels", "-l")
    if isinstance(ch, View):
        return ch
    top, now = ch.get("max", {}), ch.get("current", {})
    keys = ["combined"] if top.get("combined") else [k for k in ("rx", "tx") if top.get(k)]
    if not keys or all(int(top[k]) <= 1 for k in keys):
        return View("channels", False, "the driver allows one channel only",
                    current=_sizes_now(now, keys))
    return _sizes_view("channels", now, {k: int(top[k]) for k in keys},
                       dict.fromkeys(keys, 1))


def _sizes_now(now: dict[str, Any], keys: list[str]) -> str:
    """Sizes per queue kind as ethtool shows them now: 'rx 4 tx 4' (n/a: none)."""
    return " ".join(f"{k} {now.get(k)}" for k in keys) or "n/a"


def _sizes_view(knob: str, now: dict[str, Any], on: dict[str, int], off: dict[str, int]) -> View:
    """A knob of sizes per queue kind (channels, rings: the mode file's key of the same name):
    on sets ``on``, off sets ``off``; its state is the one the current sizes are (else
    other)."""
    state = "on" if all(now.get(k) == v for k, v in on.items()) else \
        "off" if all(now.get(k) == v for k, v in off.items()) else "other"
    return View(knob, True, state=state, current=_sizes_now(now, list(on)), on={knob: on},
                off={knob: off}, on_text=" ".join(f"{k} {v}" for k, v in on.items()),
                off_text=" ".join(f"{k} {v}" for k, v in off.items()))


def coalescing_view(snap: dict) -> View:
    """Interrupt coalescing: adaptive (where the driver has it) or the current rx-usecs,
    against none (rx-usecs 0)."""
    co = _shown(snap, "coalesce", "coalescing", "-c")
    if isinstance(co, View):
        return co
    now = co.get("current", {})
    usecs = now.get("rx-usecs")
    if isinstance(now.get("adaptive-rx"), bool):
        sides = [s for s in ("rx", "tx") if isinstance(now.get(f"adaptive-{s}"), bool)]
        on = {f"adaptive-{s}": True for s in sides}
        off: dict[str, Any] = {f"adaptive-{s}": False for s in sides}
        if isinstance(usecs, int):
            off["rx-usecs"] = 0
        state = "on" if now["adaptive-rx"] else "off" if usecs == 0 else "other"
        return View("coalescing", True, state=state,
                    current=f"adaptive-rx {netif.onoff(now['adaptive-rx'])}, rx-usecs {usecs}",
                    on={"coalesce": on}, off={"coalesce": off}, on_text="adaptive",
                    off_text="adaptive off, rx-usecs 0" if "rx-usecs" in off else "adaptive off")
    if isinstance(usecs, int):
        value = usecs if usecs > 0 else 50
        return View("coalescing", True, state="on" if usecs > 0 else "off",
                    current=f"rx-usecs {usecs}", on={"coalesce": {"rx-usecs": value}},
                    off={"coalesce": {"rx-usecs": 0}}, on_text=f"rx-usecs {value}",
                    off_text="rx-usecs 0")
    return View("coalescing", False, "ethtool -c shows neither adaptive-rx nor rx-usecs")


def rings_view(snap: dict) -> View:
    """Ring sizes: the largest the driver allows against the current (or a quarter of the
    largest when they are at the largest already)."""
    rg = _shown(snap, "rings", "rings", "-g")
    if isinstance(rg, View):
        return rg
    top, now = rg.get("max", {}), rg.get("current", {})
    keys = [k for k in ("rx", "tx") if isinstance(top.get(k), int) and
            isinstance(now.get(k), int) and not isinstance(now.get(k), bool)]
    if not keys:
        return View("rings", False, "ethtool -g shows no rx or tx ring size",
                    current=_sizes_now(now, keys))
    big = {k: int(top[k]) for k in keys}
    small = {k: int(now[k]) for k in keys} if any(now[k] < top[k] for k in keys) else \
        {k: max(SMALL_RING, int(top[k]) // 4) for k in keys}
    if big == small:
        return View("rings", False, "the rings have one size only", current=_sizes_now(now, keys))
    return _sizes_view("rings", now, big, small)


def split_view(snap: dict) -> View:
    """Header-data split (ethtool -G tcp-data-split), where the driver reports it on or off."""
    rg = _shown(snap, "rings", "header-split", "-g")
    if isinstance(rg, View):
        return rg
    now = rg.get("current", {}).get("tcp-data-split")
    if not isinstance(now, bool):
        shown = "no TCP data split" if now is None else f"TCP data split {now}"
        return View("header-split", False, f"ethtool -g shows {shown}")
    return View("header-split", True, state=netif.onoff(now),
                current=f"tcp-data-split {netif.onoff(now)}",
                on={"rings": {"tcp-data-split": True}}, off={"rings": {"tcp-data-split": False}})


def queue_view(snap: dict, knob: str) -> View:
    """RPS or XPS: every queue's mask set to every online CPU against none (0); on when every
    queue's mask has a CPU, off when none has (the sysfs queues/rx-N/rps_cpus, tx-N/xps_cpus)."""
    saved_q = snap.get("queues")
    if not isinstance(saved_q, dict) or not saved_q or "error" in saved_q:
        why = (saved_q or {}).get("error") if isinstance(saved_q, dict) else None
        return View(knob, False, f"/sys/class/net/IF/queues: {why or 'not read'}")
    prefix, name = QUEUE_FILES[knob]
    masks = {q: f[name] for q, f in sorted(saved_q.items())
             if q.startswith(prefix) and isinstance(f, dict) and name in f}
    if not masks or any(not re.fullmatch(r"[0-9a-fA-F,]+", m) for m in masks.values()):
        return View(knob, False, f"no queue shows a readable {name}")
    busy = [int(m.replace(",", ""), 16) != 0 for m in masks.values()]
    state = "on" if all(busy) else "off" if not any(busy) else "other"
    return View(knob, True, state=state, current=" ".join(f"{q} {m}" for q, m in masks.items()),
                on={name: "all"}, off={name: "0"}, on_text=f"{name} every CPU",
                off_text=f"{name} 0")


def big_tcp_view(snap: dict) -> View:
    """BIG TCP: reported (sizes, and whether the driver allows packets above 64 KB), not
    varied."""
    sizes = snap.get("sizes") or {}
    shown = ", ".join(f"{k} {sizes[k]}" for k in SIZE_KEYS if sizes.get(k) is not None)
    tso = sizes.get("tso_max_size")
    if tso is None:
        why = "ip -d link shows no tso_max_size (iproute2 or kernel older than 6.2)"
    elif tso <= 65536:
        why = f"the driver builds packets of at most {tso} bytes (tso_max_size): no BIG TCP"
    elif sizes.get("gso_ipv4_max_size") is None:
        why = (f"possible up to {tso} bytes, but not measured: the tiers' traffic is IPv4, "
               "whose BIG TCP sizes (gso_ipv4_max_size, gro_ipv4_max_size: Linux 6.3+) this "
               "ip cannot show or set (iproute2 6.3+ or netlink needed); gso_max_size and "
               "gro_max_size alone act on IPv6 only")
    else:
        why = (f"possible up to {tso} bytes, but not measured: tierbench's modes cannot set "
               "gso_ipv4_max_size/gro_ipv4_max_size yet")
    return View("big-tcp", False, why, current=shown or "not shown")


def view(snap: dict, knob: str) -> View:
    """One knob on the endpoint of a snapshot (``read_endpoint``'s, or one made of captured
    output)."""
    if knob in FEATURES:
        return feature_view(snap, knob)
    return {"jumbo": mtu_view, "coalescing": coalescing_view, "channels": channels_view,
            "rings": rings_view, "header-split": split_view,
            "big-tcp": big_tcp_view}[knob](snap) if knob not in QUEUE_FILES else \
        queue_view(snap, knob)


# --------------------------------------------------------------------------- every endpoint


def _common(parts: list[Any]) -> Any:
    """What every endpoint's settings have in common: equal values kept, whole numbers the
    smallest (a channel count or ring size every endpoint allows), mappings key by key; None
    when nothing is common."""
    first = parts[0]
    if all(isinstance(p, dict) for p in parts):
        keys = [k for k in first if all(k in p for p in parts)]
        out = {k: _common([p[k] for p in parts]) for k in keys}
        out = {k: v for k, v in out.items() if v is not None}
        return out or None
    if all(p == first for p in parts):
        return first
    if all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
        return min(parts)
    return None


def separate(snaps: list[dict]) -> bool:
    """Whether the servers' interfaces and the clients' are separate: every endpoint is of one
    side (``side``: server or client) and both sides have one."""
    sides = [s.get("side") for s in snaps]
    return all(s in SIDES for s in sides) and set(sides) == set(SIDES)


def plan(snaps: list[dict]) -> list[Plan]:
    """Every knob of the catalogue across the endpoints: planned when each endpoint can change
    it, with settings all of them take; otherwise why not (per endpoint). Where the sides are
    separate (``separate``), each knob but PATH_KNOBS once per side over that side's
    endpoints."""
    out = []
    for knob in KNOBS:
        if knob in PATH_KNOBS or not separate(snaps):
            out.append(_plan_one(knob, snaps, knob, BOTH))
            continue
        out += [_plan_one(knob, [s for s in snaps if s.get("side") == side], f"{knob}.{side}",
                          side) for side in SIDES]
    return out


def _plan_one(knob: str, snaps: list[dict], key: str, side: str) -> Plan:
    """One knob over some endpoints (``key``: its name in the plan, with its side)."""
    p = _planned(knob, snaps, key)
    p.side, p.endpoints = side, [str(s.get("label", "?")) for s in snaps]
    if knob in FEATURES:
        p.features_asked = sorted({n for s in snaps for n in family(s.get("features", {}),
                                                                     FEATURES[knob][1])})
    if p.changeable:
        p.commands = {state: [command(s, p.setting(state)) for s in snaps]
                      for state in ("on", "off")}
    return p


def _planned(knob: str, snaps: list[dict], key: str) -> Plan:
    """Whether every endpoint can change a knob, and the settings all of them take."""
    views = [view(s, knob) for s in snaps]
    current = {s.get("label", "?"): v.current for s, v in zip(snaps, views)}
    blocked = [(s.get("label", "?"), v.why) for s, v in zip(snaps, views) if not v.changeable]
    if blocked or not views:
        whys = list(dict.fromkeys(w for _, w in blocked))
        why = (f"every interface: {whys[0]}" if len(whys) == 1 and len(blocked) == len(views)
               else "; ".join(f"{lb}: {w}" for lb, w in blocked)) if views else \
            "no interface carries the tiers' traffic"
        return Plan(key, False, why, current=current)
    on, off = _common([v.on for v in views]), _common([v.off for v in views])
    if not on or not off or on == off:
        return Plan(key, False, "the interfaces allow no setting in common",
                    current=current)
    states = {v.state for v in views}
    texts = {v.on_text for v in views}, {v.off_text for v in views}
    return Plan(key, True, state=states.pop() if len(states) == 1 else "mixed",
                current=current, on=on, off=off,
                on_text=texts[0].pop() if len(texts[0]) == 1 else "on",
                off_text=texts[1].pop() if len(texts[1]) == 1 else "off")


def merged(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Several knobs' `nic:` settings as one (mappings merged key by key)."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict):
                out[key] = {**out.get(key, {}), **value}
            else:
                out[key] = value
    return out


def make_mode(name: str, description: str, nic: dict[str, Any], side: str = BOTH) -> Mode:
    """A mode that sets ``nic`` (a mode file's `nic:` block) over every tier's interfaces, or
    over one side's (``side`` server or client: the tiers of that role)."""
    return Mode(name=name, description=description, tiers=(),
                roles=() if side == BOTH else (f"{side}s",),
                nic=NicSettings(features=dict(nic.get("features", {})), mtu=nic.get("mtu")),
                source=SOURCE,
                knobs=Knobs(channels=dict(nic.get("channels", {})),
                            coalesce=dict(nic.get("coalesce", {})),
                            rings=dict(nic.get("rings", {})), rps_cpus=nic.get("rps_cpus"),
                            xps_cpus=nic.get("xps_cpus")))


def nic_block(mode: Mode) -> dict[str, Any]:
    """A mode's interface settings as a `nic:` block in the advice's terms (features by their
    long ethtool names, the other settings as a mode file writes them): what the persistent
    forms and `advise apply` take, beside the changes' blocks."""
    k = mode.knobs
    out: dict[str, Any] = {}
    if mode.nic.features:
        out["features"] = {netif.FEATURE_ALIASES.get(f, f): v
                           for f, v in mode.nic.features.items()}
    if mode.nic.mtu is not None:
        out["mtu"] = mode.nic.mtu
    out.update((key, dict(getattr(k, key))) for key in ("channels", "coalesce", "rings")
               if getattr(k, key))
    out.update((key, getattr(k, key)) for key in ("rps_cpus", "xps_cpus")
               if getattr(k, key) is not None)
    return out


def baseline() -> Mode:
    """The current configuration: a mode that sets nothing."""
    return make_mode(BASELINE, "the interfaces as they are: nothing is changed", {})


def modes(plans: list[Plan]) -> tuple[list[Mode], dict[str, str]]:
    """The baseline, one mode per planned knob (its other state, everything else as it is), and
    all-on and all-off; a mode that would change what another already changes is left out.
    Returns the modes and, for all-on and all-off, the mode that measures each (the baseline
    or a knob's own mode when they change nothing more)."""
    found = [baseline()]
    changes: dict[frozenset[tuple[str, str]], str] = {frozenset(): BASELINE}
    usable = [p for p in plans if p.changeable]
    for p in usable:
        name = f"{p.knob}-{p.target}"
        p.mode = name
        changes[frozenset({(p.knob, p.target)})] = name
        found.append(make_mode(name, f"{label(p.knob)} {p.target} "
                                     f"({p.on_text if p.target == 'on' else p.off_text}); "
                                     "every other setting as it is", p.setting(p.target),
                               p.side))
    ends: dict[str, str] = {}
    for state in ("on", "off"):
        differs = frozenset((p.knob, state) for p in usable if p.state != state)
        if differs in changes:
            ends[state] = changes[differs]
            continue
        name = f"all-{state}"
        changes[differs] = ends[state] = name
        found.append(make_mode(name, f"every knob the interfaces can change {state}",
                               merged([p.setting(state) for p in usable])))
    return found, ends


def pair_mode(a: Plan, b: Plan) -> Mode:
    """Two knobs' modes at once (the fourth corner of their 2 x 2): one mode over their side,
    or, when they change different sides, one mode of two parts (each knob over its side)."""
    name = f"{a.mode}_{b.mode}"
    description = (f"{label(a.knob)} {a.target} and {label(b.knob)} {b.target}; every other "
                   "setting as it is")
    if a.side != b.side:
        return of_parts(name, description, [make_mode(name, description, p.setting(p.target),
                                                      p.side) for p in (a, b)])
    return make_mode(name, description, merged([a.setting(a.target), b.setting(b.target)]),
                     a.side)


def side_mode(name: str, description: str, blocks: dict[str, dict[str, Any]]) -> Mode:
    """One mode that sets each side's `nic:` block (``blocks``: side -> block, empty blocks
    left out): over every interface when only "both" has one or the sides' are equal, over one
    side when only it has one, and of one part per side when the sides need different blocks
    (model.of_parts: each part over its side's tiers)."""
    parts = {s: b for s, b in blocks.items() if b}
    if not parts:
        return make_mode(name, description, {})
    if len(parts) == 1:
        ((side, block),) = parts.items()
        return make_mode(name, description, block, side)
    if BOTH not in parts and len({json.dumps(b, sort_keys=True) for b in parts.values()}) == 1:
        return make_mode(name, description, next(iter(parts.values())))
    return of_parts(name, description, [make_mode(name, description, b, s)
                                        for s, b in parts.items()])


def over(start: Mode | None, mode: Mode) -> Mode:
    """``mode`` over a stated starting configuration (``advise --from``): one mode of parts,
    the start's settings over its scope and the mode's over them (its name and description);
    the mode itself without one, or when it is over the start already."""
    if start is None or (mode.parts and mode.parts[0] == start):
        return mode
    return of_parts(mode.name, f"{mode.description} (over {start.name})", [start, mode])


# --------------------------------------------------------------------------- commands


def ethtool_commands(ifname: str, nic: dict[str, Any], all_cpus: str | None = None) -> list[str]:
    """The ethtool and ip commands (and sysfs writes) that set a `nic:` block on one interface;
    ``all_cpus``: the interface's host's online-CPU mask, for a mask of "all"."""
    out = []
    for prefix, name in QUEUE_FILES.values():
        value = nic.get(name)
        if value is not None:
            # without the host's mask: every CPU of up to 63 (nproc's count)
            mask = (all_cpus or "$(printf %x $(( (1 << $(nproc)) - 1 )))") \
                if value == "all" else value
            out.append(f"for q in /sys/class/net/{ifname}/queues/{prefix}*; do echo {mask} > "
                       f"\"$q/{name}\"; done")
    if nic.get("features"):
        out.append(f"ethtool -K {ifname} " + ethtool.ethtool_args(nic["features"]))
    if nic.get("mtu") is not None:
        out.append(f"ip link set dev {ifname} mtu {nic['mtu']}")
    for key, opt in (("channels", "-L"), ("coalesce", "-C"), ("rings", "-G")):
        if nic.get(key):
            out.append(f"ethtool {opt} {ifname} " + ethtool.ethtool_args(nic[key]))
    return out


def command(snap: dict, nic: dict[str, Any]) -> str:
    """One line that sets ``nic`` on the endpoint of ``snap``, run where the user is: in the
    container's namespace on one host, over SSH on a cluster node."""
    body = " && ".join(ethtool_commands(str(snap.get("ifname")), nic, snap.get("cpu_mask")))
    if snap.get("node"):
        argv = list(snap.get("ssh") or [snap["node"]])  # ssh and its options up to the address
        dest = argv[-1] if "-l" not in argv else f"{argv[argv.index('-l') + 1]}@{argv[-1]}"
        port = argv[argv.index("-p") + 1] if "-p" in argv else "22"
        return f"ssh {'' if port == '22' else f'-p {port} '}{dest} {shlex.quote(body)}"
    if snap.get("netns_pid") is not None:
        who = snap.get("container") or f"the {snap.get('tier')} container"
        pid = f"\"$(docker inspect -f '{{{{.State.Pid}}}}' {who})\""
        return f"nsenter -t {pid} -n sh -c {shlex.quote(body)}"
    return body


# --------------------------------------------------------------------------- reading


def parse_sizes(text: str) -> dict[str, int | None]:
    """The GSO/GRO sizes of ``ip -d -j link show dev IF`` output."""
    try:
        links = json.loads(text or "[]")
    except ValueError:
        return {}
    link = links[0] if isinstance(links, list) and links else {}
    return {k: link.get(k) for k in SIZE_KEYS}


def read_endpoint(ep: Endpoint, container: str | None = None) -> dict:
    """Everything the catalogue looks at on one endpoint: its snapshot (features, MTU and its
    range, driver), ethtool -l/-c/-g (or their error) and the GSO/GRO sizes."""
    snap = netif.snapshot(ep)
    for key, opt, parse in (("channels", "-l", ethtool.parse_channels),
                            ("rings", "-g", ethtool.parse_rings)):
        text, err = netif.try_run(ep, ["ethtool", opt, ep.ifname])
        snap[key] = parse(text) if text is not None else {"error": err}
    text, err = netif.try_run(ep, ["ethtool", "-c", ep.ifname])
    snap["coalesce"] = {"current": ethtool.parse_coalesce(text)} if text is not None else {
        "error": err}
    try:
        snap["queues"] = queues.read_queues(ep)
        snap["cpu_mask"] = queues.online_cpu_mask(ep.via if ep.node else None)
    except (netif.NetifError, OSError, ValueError) as exc:
        snap["queues"] = {"error": str(exc)}
    text, err = netif.try_run(ep, ["ip", "-d", "-j", "link", "show", "dev", ep.ifname])
    snap["sizes"] = parse_sizes(text) if text is not None else {}
    snap["container"] = container
    return snap
