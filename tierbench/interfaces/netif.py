"""Snapshot, check, apply, verify and restore NIC offload settings on endpoints.

An endpoint is one network interface in one network namespace (the host's, or the
namespace of a given PID), on this machine or on a cluster node.  Everything goes through the
``ethtool``, ``ip`` and ``tc`` command-line tools; endpoints in another namespace are reached
with ``nsenter -t PID -n``, endpoints on a node over SSH (the endpoint carries the node's
transport, tierbench.transport, and snapshots record it, so that a later process can restore from
the state file alone). sysfs is never read, because inside ``nsenter -n`` it still
shows the host's interfaces.

The decision logic (capability check, verification, restore plan) is written as pure
functions over snapshot dicts (``feature_problems``, ``feature_mismatches``, ``restore_plan``,
``restore_differences``) so it can be tested against captured ``ethtool -k`` output.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from tierbench import transport
from tierbench.config.errors import TierbenchError
from tierbench.config.files import state_dir
from tierbench.transport import LOCAL, Transport

__all__ = [
    "FEATURE_ALIASES",
    "Endpoint",
    "NetifError",
    "NicSettings",
    "StateFile",
    "apply",
    "check",
    "driver",
    "endpoint_of",
    "feature_mismatches",
    "feature_problems",
    "netns_inode",
    "onoff",
    "parse_features",
    "read_features",
    "restore",
    "restore_differences",
    "restore_commands",
    "restore_endpoint",
    "restore_plan",
    "run_in",
    "run_ns",
    "set_features",
    "set_mtu",
    "settings_view",
    "snapshot",
    "verify",
    "veth_endpoints",
    "wanted_feature_args",
]

COMMAND_TIMEOUT_S = 30.0
RESTORE_PASSES = 3
APPLY_PASSES = 2

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


class NetifError(TierbenchError):
    """A network-interface operation failed; the message is one sentence for the user."""


@dataclass(frozen=True)
class Endpoint:
    """One network interface (``ifname``) inside the netns of ``netns_pid`` (None = host), on
    this machine or, through ``via``, on a cluster node reached over SSH; ``peers``: on a
    cluster, the data-plane addresses of the run's other nodes (a congestion control is set on
    the routes to them, tierbench.modes.congctl)."""

    tier: str
    ifname: str
    netns_pid: int | None
    via: Transport = LOCAL
    peers: tuple[str, ...] = ()

    @property
    def node(self) -> str | None:
        """The cluster node the interface is on (None: this machine)."""
        return self.via.name

    @property
    def label(self) -> str:
        """Return the display name, e.g. ``web:eth0`` or ``host:veth12ab``."""
        return f"{self.tier}:{self.ifname}"


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


# --------------------------------------------------------------------------- commands

def run_ns(pid: int | None, argv: list[str], who: str, via: Transport = LOCAL) -> str:
    """Run ``argv`` in the netns of ``pid`` (None: the host's), on this machine or on the node
    ``via`` reaches; return stdout, raise NetifError naming ``who`` on any failure."""
    shown = " ".join(argv)
    try:
        proc = via.run(argv, netns=pid, timeout=COMMAND_TIMEOUT_S)
    except transport.TransportError as exc:
        if exc.missing:
            raise NetifError(
                f"{who}: cannot run `{shown}` because {exc.missing} is not installed") from None
        if exc.timeout:
            raise NetifError(
                f"{who}: `{shown}` did not finish within {COMMAND_TIMEOUT_S:.0f} s") from None
        raise NetifError(f"{who}: cannot run `{shown}`: {exc}") from None
    if proc.returncode != 0:
        err = " ".join((proc.stderr or proc.stdout or "").split()) or "no error output"
        if via.unreachable(proc):
            raise NetifError(f"{who}: cannot reach node {via.name} over SSH to run `{shown}`: "
                             f"{err}")
        raise NetifError(f"{who}: `{shown}` failed (exit {proc.returncode}): {err}")
    return proc.stdout


def run_in(ep: Endpoint, argv: list[str]) -> str:
    """Run ``argv`` in the endpoint's netns and return stdout; raise NetifError on failure."""
    return run_ns(ep.netns_pid, argv, ep.label, ep.via)


def try_run(ep: Endpoint, argv: list[str]) -> tuple[str | None, str | None]:
    """``run_in``, but a command that fails gives (None, the tool's own complaint)."""
    try:
        return run_in(ep, argv), None
    except NetifError as exc:
        return None, short_error(str(exc))


def short_error(msg: str) -> str:
    """The tool's own complaint, without the label and command prefix."""
    m = re.search(r"failed \(exit \d+\): (.*)$", msg)
    return m.group(1) if m else msg


def _links(pid: int | None, who: str, ifname: str | None = None,
           via: Transport = LOCAL) -> list[dict]:
    """``ip -d -j link show [dev IF]`` in the netns of ``pid`` (None = host), parsed."""
    argv = ["ip", "-d", "-j", "link", "show"] + (["dev", ifname] if ifname else [])
    out = run_ns(pid, argv, who, via)
    try:
        data = json.loads(out or "[]")
    except json.JSONDecodeError:
        raise NetifError(f"{who}: `{' '.join(argv)}` printed output that is not JSON") from None
    return data if isinstance(data, list) else []


def _kind(link: dict) -> str | None:
    info = link.get("linkinfo") or {}
    return info.get("info_kind")


def veth_endpoints(tier: str, pid: int) -> list[Endpoint]:
    """List every non-loopback interface in ``pid``'s netns, each followed by its host peer.

    A veth's host-side peer is the host interface whose ifindex equals the container
    side's ``link_index`` (and, when reported, whose own ``link_index`` points back).
    Host peers get the tier ``host``.  A PID that shares the host's netns (e.g. a
    container with host networking) is refused, so host NICs are never touched by mistake.
    """
    who = f"{tier} (netns of pid {pid})"
    ino = netns_inode(pid)
    if ino is None:
        raise NetifError(f"{who}: process {pid} does not exist, so its interfaces are unknown")
    if ino == netns_inode(None):
        raise NetifError(
            f"{who}: process {pid} uses the host network namespace, so it has no own interfaces"
        )
    links = _links(pid, who)
    host_links: list[dict] | None = None
    result: list[Endpoint] = []
    for link in links:
        name = link.get("ifname")
        if not name or name == "lo" or link.get("link_type") == "loopback":
            continue
        result.append(Endpoint(tier, name, pid))
        if _kind(link) != "veth" or link.get("link_index") is None:
            continue
        if host_links is None:
            host_links = _links(None, "host")
        for peer in host_links:
            if peer.get("ifindex") != link["link_index"] or _kind(peer) != "veth":
                continue
            back = peer.get("link_index")
            if back is not None and back != link.get("ifindex"):
                continue
            result.append(Endpoint("host", peer["ifname"], None))
            break
    return result


def netns_inode(pid: int | None) -> int | None:
    path = f"/proc/{pid}/ns/net" if pid is not None else "/proc/self/ns/net"
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _read_state(ep: Endpoint) -> dict:
    """Read features and MTU (the parts verify/restore compare) of one endpoint."""
    links = _links(ep.netns_pid, ep.label, ep.ifname, ep.via)
    if not links:
        raise NetifError(f"{ep.label}: `ip link show dev {ep.ifname}` returned no interface")
    link = links[0]
    return {
        "features": parse_features(run_in(ep, ["ethtool", "-k", ep.ifname])),
        "mtu": link.get("mtu"),
        "min_mtu": link.get("min_mtu"),
        "max_mtu": link.get("max_mtu"),
        "ifindex": link.get("ifindex"),
    }


def driver(ep: Endpoint) -> str:
    try:
        out = run_in(ep, ["ethtool", "-i", ep.ifname])
    except NetifError:
        return "unknown"
    for line in out.splitlines():
        if line.startswith("driver:"):
            return line.split(":", 1)[1].strip() or "unknown"
    return "unknown"


def snapshot(ep: Endpoint) -> dict:
    """Record driver, ethtool -k features, MTU (with min/max) and qdisc of one endpoint.

    Besides the documented keys it stores ``min_mtu``, ``max_mtu``, ``ifindex`` and
    ``netns_ino`` (inode of the netns), which check() and restore() use.
    """
    state = _read_state(ep)
    try:
        qdisc = run_in(ep, ["tc", "qdisc", "show", "dev", ep.ifname])
    except NetifError as exc:
        qdisc = f"unavailable: {exc}"
    where = ep.via.record()
    return {
        "label": ep.label,
        "tier": ep.tier,
        "ifname": ep.ifname,
        **where,
        "netns_pid": ep.netns_pid,
        "netns_ino": netns_inode(ep.netns_pid) if ep.node is None else None,
        "driver": driver(ep),
        "features": state["features"],
        "mtu": state["mtu"],
        "min_mtu": state["min_mtu"],
        "max_mtu": state["max_mtu"],
        "ifindex": state["ifindex"],
        "qdisc": qdisc.strip(),
    }


def _snap_for(ep: Endpoint, snaps: dict[str, dict]) -> dict:
    snap = snaps.get(ep.label)
    if snap is None:
        raise NetifError(f"{ep.label}: no snapshot was taken of this interface before changing it")
    return snap


def check(eps: list[Endpoint], want: NicSettings, snaps: dict[str, dict]) -> None:
    """Raise NetifError if ``want`` is impossible on any endpoint; changes nothing."""
    problems: list[str] = []
    for ep in eps:
        problems += feature_problems(_snap_for(ep, snaps), want)
    if problems:
        raise NetifError("; ".join(problems))


def features_argv(ifname: str, args: list[tuple[str, bool]]) -> list[str]:
    """``ethtool -K IFNAME name on|off ...``."""
    return ["ethtool", "-K", ifname] + [a for name, value in args for a in (name, onoff(value))]


def mtu_argv(ifname: str, mtu: int) -> list[str]:
    return ["ip", "link", "set", "dev", ifname, "mtu", str(mtu)]


def set_features(ep: Endpoint, args: list[tuple[str, bool]]) -> None:
    if args:
        run_in(ep, features_argv(ep.ifname, args))


def set_mtu(ep: Endpoint, mtu: int) -> None:
    run_in(ep, mtu_argv(ep.ifname, mtu))


def restore_commands(snap: dict) -> list[list[str]]:
    """The commands that put the snapshot's MTU and features back whatever the interface holds
    now (restore_plan without a current state), in the order restore_endpoint runs them: the
    rollback guard's part for one interface (run in the endpoint's namespace, on its node)."""
    out = [mtu_argv(snap["ifname"], int(snap["mtu"]))] if snap.get("mtu") is not None else []
    plan = restore_plan(snap, None)
    return out + ([features_argv(snap["ifname"], plan)] if plan else [])


def read_features(ep: Endpoint, snap: dict | None = None) -> dict:
    state = _read_state(ep)
    state["label"] = ep.label
    state["driver"] = (snap or {}).get("driver", "unknown")
    return state


def apply(eps: list[Endpoint], want: NicSettings, snaps: dict[str, dict]) -> None:
    """Check, then set ``want`` on every endpoint and verify; on any failure restore ``snaps``.

    Raises NetifError listing the failures and mismatches (after restoring).
    """
    check(eps, want, snaps)
    failures: list[str] = []
    mismatches: list[str] = []
    for _ in range(APPLY_PASSES):  # a second pass helps drivers that need dependencies first
        failures = []
        for ep in eps:
            snap = _snap_for(ep, snaps)
            name = snap.get("driver", "unknown")
            try:
                set_features(ep, wanted_feature_args(snap, want))
            except NetifError as exc:
                failures.append(f"{exc} (driver {name})")
            if want.mtu is not None:
                try:
                    set_mtu(ep, want.mtu)
                except NetifError as exc:
                    failures.append(f"{exc} (driver {name})")
        mismatches = verify(eps, want, snaps)
        if not failures and not mismatches:
            return
    leftovers = restore({ep.label: _snap_for(ep, snaps) for ep in eps})
    msg = "could not apply the requested settings: " + "; ".join(failures + mismatches)
    if leftovers:
        msg += "; restoring the snapshot also failed: " + "; ".join(leftovers)
    else:
        msg += "; the previous settings were restored"
    raise NetifError(msg)


def verify(
    eps: list[Endpoint], want: NicSettings, snaps: dict[str, dict] | None = None
) -> list[str]:
    """Re-read every endpoint and return mismatches against ``want`` ([] = all as wanted).

    ``snaps`` is optional and only supplies driver names for the messages.
    """
    out: list[str] = []
    for ep in eps:
        snap = (snaps or {}).get(ep.label)
        try:
            fresh = read_features(ep, snap)
        except NetifError as exc:
            out.append(f"{ep.label}: could not re-read the settings: {exc}")
            continue
        if snap is None:
            fresh["driver"] = driver(ep)
        out += feature_mismatches(fresh, want)
    return out


def endpoint_of(snap: dict) -> Endpoint:
    """The endpoint a snapshot was taken of (on a node: through the transport it recorded)."""
    return Endpoint(snap["tier"], snap["ifname"], snap.get("netns_pid"), transport.of(snap))


def _gone(ep: Endpoint, snap: dict) -> bool:
    if ep.netns_pid is not None and ep.node is None:
        if not os.path.exists(f"/proc/{ep.netns_pid}"):
            return True
        ino = snap.get("netns_ino")
        if ino is not None and netns_inode(ep.netns_pid) != ino:
            return True  # the PID was reused by a process in another netns
    try:
        links = _links(ep.netns_pid, ep.label, ep.ifname, ep.via)
    except NetifError as exc:
        if "does not exist" in str(exc) or "No such file" in str(exc):
            return True
        raise
    if not links:
        return True
    ifindex = snap.get("ifindex")
    return ifindex is not None and links[0].get("ifindex") != ifindex


def restore_endpoint(snap: dict) -> list[str]:
    ep = endpoint_of(snap)
    if _gone(ep, snap):
        return [f"{ep.label}: gone, nothing to restore"]
    errors: list[str] = []
    for _ in range(RESTORE_PASSES):
        try:
            current = read_features(ep, snap)
        except NetifError as exc:
            return [f"{ep.label}: could not re-read the settings while restoring: {exc}"]
        plan = restore_plan(snap, current)
        mtu: int | None = snap.get("mtu")
        mtu_differs = mtu is not None and current.get("mtu") != mtu
        if not plan and not mtu_differs:
            if not restore_differences(snap, current):
                return []
            break  # differences remain that no ethtool -K argument can fix
        if mtu is not None and mtu_differs:
            try:
                set_mtu(ep, int(mtu))
            except NetifError as exc:
                errors.append(str(exc))
        try:
            set_features(ep, plan)
        except NetifError as exc:
            errors.append(str(exc))
    try:
        remaining = restore_differences(snap, read_features(ep, snap))
    except NetifError as exc:
        return [f"{ep.label}: could not re-read the settings after restoring: {exc}"]
    if remaining and errors:
        remaining.append(f"{ep.label}: last error: {errors[-1]}")
    return remaining


def restore(snaps: dict[str, dict]) -> list[str]:
    """Put features and MTU back to the snapshots; return remaining problems ([] = done).

    Endpoints that disappeared are reported as "<label>: gone, nothing to restore";
    one endpoint's failure never stops the others.  A whole mode's state is restored by
    ``tierbench.modes.apply.restore_state``, which calls this for the features and MTU.
    """
    problems: list[str] = []
    for label, snap in snaps.items():
        try:
            problems += restore_endpoint(snap)
        except Exception as exc:  # noqa: BLE001 - restore must carry on with the others
            problems.append(f"{label}: restore failed unexpectedly: {exc}")
    return problems


def settings_view(snap: dict) -> dict:
    """Return a compact manifest form: mtu, qdisc and features as "on"/"off" [+ " [fixed]"]."""
    feats = {
        name: onoff(f["on"]) + (" [fixed]" if f.get("fixed") else "")
        for name, f in snap.get("features", {}).items()
    }
    return {"mtu": snap.get("mtu"), "qdisc": snap.get("qdisc"), "features": feats}


# --------------------------------------------------------------------------- state file


class StateFile:
    """Crash-safe JSON record of pre-change snapshots, so `tierbench clean` can restore."""

    def __init__(self, path: Path | None = None) -> None:
        """Use ``path`` or $TIERBENCH_STATE_DIR (default /run/tierbench)/netif-state.json."""
        if path is None:
            path = state_dir() / "netif-state.json"
        self.path = Path(path)

    def save(self, snaps: dict[str, dict]) -> None:
        """Atomically write ``snaps`` (temp file, fsync, rename, fsync of the directory)."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({"version": 1, "snapshots": snaps}, fh, indent=1, sort_keys=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            self._sync_dir()
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise NetifError(f"cannot save the interface state file {self.path}: {exc}") from None

    def load(self) -> dict[str, dict] | None:
        """Return the saved snapshots, or None when no state file exists."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise NetifError(f"cannot read the interface state file {self.path}: {exc}") from None
        try:
            data = json.loads(text)
            snaps = data["snapshots"]
            if not isinstance(snaps, dict):
                raise TypeError("snapshots is not an object")
        except (ValueError, KeyError, TypeError) as exc:
            raise NetifError(
                f"the interface state file {self.path} is unreadable ({exc}); "
                "delete it after restoring the interfaces by hand"
            ) from None
        return snaps

    def clear(self) -> None:
        """Delete the state file (no error if it does not exist)."""
        try:
            self.path.unlink(missing_ok=True)
            self._sync_dir()
        except OSError as exc:
            raise NetifError(f"cannot delete the interface state file {self.path}: {exc}") from None

    def _sync_dir(self) -> None:
        try:
            fd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)
