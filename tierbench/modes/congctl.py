"""A congestion control set per route, on a cluster node: the routes to the run's other nodes
(the data-plane peers) carry ``congctl ALGORITHM``, and nothing else on the node changes.

A node's tiers share its network namespace (host networking), so the sysctl
net.ipv4.tcp_congestion_control would switch every connection the node opens, other users'
included, and it cannot be written at all where /proc/sys is read-only (a lab node). The kernel
also takes the algorithm from the route a connection uses (the route metric RTAX_CC_ALGO, read
when a connection is opened or accepted: net/ipv4/tcp_cong.c, iproute2's ``congctl``), without
the allowed list: a route ``PEER/32 ... congctl cubic`` gives CUBIC to the connections with that
peer only, in both directions of the peer's own route too.

Per peer: when a host route (``PEER/32``, or /128) already exists in the main table it is
replaced by itself with ``congctl`` added (every other attribute kept); otherwise one is added
on the path ``ip route get`` gives (its device, gateway and source), marked ``proto 250``
(:data:`PROTO`, a number no routing daemon uses), so a restore deletes only a route of ours.
The snapshot keeps each peer's host route as ``ip route show`` printed it (None: there was
none); the restore puts that back. Connections between tiers on the same node go over its local
routes and keep the node's default.

The command builders and parsers are pure functions, tested against captured output.
"""

from __future__ import annotations

import json
import shlex

from tierbench.interfaces import netif
from tierbench.interfaces.netif import NetifError
from tierbench.transport import Transport

__all__ = ["PROTO", "canonical", "change_argv", "congctl_of", "host_prefix", "parse_get", "parse_show",
           "read", "restore", "restore_argv", "restore_script", "route_args", "set_routes"]

PROTO = "250"
# words `ip route show` prints that are states, not arguments `ip route replace` takes
_STATES = {"linkdown", "dead", "offload", "trap", "notify", "rt_offload", "rt_trap",
           "rt_offload_failed", "pervasive"}


def family(peer: str) -> str:
    return "-6" if ":" in peer else "-4"


def host_prefix(peer: str) -> str:
    """The host route's prefix of a peer: ADDRESS/32 (or /128)."""
    return f"{peer}/128" if ":" in peer else f"{peer}/32"


def route_args(line: str) -> list[str]:
    """A route as ``ip route show`` printed it, as arguments of ``ip route replace`` (without
    its congctl: :func:`change_argv` sets its own)."""
    words = line.split()
    out: list[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        if w == "congctl":
            i += 3 if i + 1 < len(words) and words[i + 1] == "lock" else 2
            continue
        if w not in _STATES:
            out.append(w)
        i += 1
    return out


def canonical(line: str | None) -> str | None:
    """A route line without its states (linkdown: the link's, not the route's), congctl last:
    what a restore compares."""
    if line is None:
        return None
    cc = congctl_of(line)
    return " ".join(route_args(line) + (["congctl", cc] if cc else []))


def congctl_of(line: str | None) -> str | None:
    """The algorithm a route line carries (``congctl [lock] NAME``), None without one."""
    words = (line or "").split()
    for i, w in enumerate(words[:-1]):
        if w == "congctl":
            name = words[i + 1]
            return words[i + 2] if name == "lock" and i + 2 < len(words) else name
    return None


def proto_of(line: str) -> str | None:
    words = line.split()
    return next((words[i + 1] for i, w in enumerate(words[:-1]) if w == "proto"), None)


def parse_get(text: str, peer: str) -> dict[str, str]:
    """``ip -j route get PEER``: the path a connection to the peer takes ({"dev", "gateway",
    "prefsrc"}, the last two when set); NetifError when the peer is this node's own address."""
    try:
        entries = json.loads(text or "[]")
    except ValueError:
        raise NetifError(f"`ip -j route get {peer}` printed output that is not JSON") from None
    if not entries or not entries[0].get("dev"):
        raise NetifError(f"no route to the peer {peer}")
    got = entries[0]
    if got.get("type") == "local" or got.get("dev") == "lo":
        raise NetifError(f"{peer} is an address of the node itself, not a peer")
    return {k: got[k] for k in ("dev", "gateway", "prefsrc") if got.get(k)}


def change_argv(peer: str, saved: str | None, path: dict[str, str], algorithm: str) -> list[str]:
    """The command that gives the peer's connections ``algorithm``: its host route replaced by
    itself with congctl (``saved``), or a host route added on ``path`` (:func:`parse_get`)."""
    head = ["ip", family(peer), "route", "replace"]
    if saved:
        return [*head, *route_args(saved), "congctl", algorithm]
    return [*head, host_prefix(peer),
            *(["via", path["gateway"]] if path.get("gateway") else []),
            "dev", path["dev"], *(["src", path["prefsrc"]] if path.get("prefsrc") else []),
            "proto", PROTO, "congctl", algorithm]


def restore_argv(peer: str, saved: str | None, current: str | None) -> list[str] | None:
    """The command that puts the peer's host route back as the snapshot had it (None: it is);
    a route that was not there is deleted only when it is ours (proto 250)."""
    if canonical(current) == canonical(saved):
        return None
    if saved is None:
        if current is None or proto_of(current) != PROTO:
            return None
        return ["ip", family(peer), "route", "del", host_prefix(peer), "proto", PROTO]
    return ["ip", family(peer), "route", "replace", *route_args(saved)]


def restore_script(saved: dict[str, str | None]) -> str:
    """A shell script that puts the peers' host routes back as ``saved`` had them without
    reading them first (for a restore that runs on the node by itself): a route of ours
    deleted where there was none (nothing when it is gone already), a saved one replaced by
    itself; every command runs whatever the others did."""
    cmds = []
    for peer, line in saved.items():
        if line is None:
            cmds.append(shlex.join(["ip", family(peer), "route", "del", host_prefix(peer),
                                    "proto", PROTO]) + " 2>/dev/null")
        else:
            cmds.append(shlex.join(["ip", family(peer), "route", "replace", *route_args(line)]))
    return "; ".join([*cmds, "true"])


_SHOW = "ip {fam} route show table main exact {prefix}"
_GET = "ip {fam} -j route get {peer}"


def _script(template: str, peers: list[str]) -> str:
    """One shell script running ``template`` for every peer, each output after a line "== PEER"."""
    return "; ".join(
        f"echo {shlex.quote('== ' + p)}; " + template.format(
            fam=family(p), prefix=shlex.quote(host_prefix(p)), peer=shlex.quote(p))
        for p in peers)


def parse_show(text: str) -> dict[str, list[str]]:
    """The output of :func:`_script` as {peer: its lines}."""
    out: dict[str, list[str]] = {}
    peer: str | None = None
    for line in text.splitlines():
        if line.startswith("== "):
            peer = line[3:].strip()
            out[peer] = []
        elif peer is not None and line.strip():
            out[peer].append(" ".join(line.split()))
    return out


def read(node: Transport, peers: list[str], who: str) -> dict[str, str | None]:
    """Each peer's host route in the node's main table, as ``ip route show`` prints it (None:
    none); NetifError when a peer has several (a metric or TOS apart): tierbench would not know
    which one a connection takes."""
    if not peers:
        return {}
    lines = parse_show(netif.run_ns(None, ["sh", "-c", _script(_SHOW, peers)], who, node))
    out: dict[str, str | None] = {}
    for p in peers:
        found = lines.get(p, [])
        if len(found) > 1:
            raise NetifError(f"{who}: {len(found)} host routes to the peer {p} "
                             f"({'; '.join(found)}); leave one")
        out[p] = found[0] if found else None
    return out


def set_routes(node: Transport, saved: dict[str, str | None], algorithm: str, who: str) -> None:
    """Every peer's route given ``algorithm`` (``saved``: the snapshot of :func:`read`)."""
    peers = list(saved)
    if not peers:
        return
    paths = parse_show(netif.run_ns(None, ["sh", "-c", _script(_GET, peers)], who, node))
    cmds = [change_argv(p, saved[p], parse_get("".join(paths.get(p, [])), p), algorithm)
            for p in peers]
    netif.run_ns(None, ["sh", "-c", " && ".join(shlex.join(c) for c in cmds)], who, node)


def restore(node: Transport, saved: dict[str, str | None], who: str) -> list[str]:
    """The peers' host routes put back as ``saved`` had them, read back; the differences left."""
    try:
        current = read(node, list(saved), who)
        cmds = [c for p in saved if (c := restore_argv(p, saved[p], current.get(p)))]
        if cmds:  # each on its own: one failing must not keep the others back
            script = "; ".join(shlex.join(c) for c in cmds) + "; true"  # read back below
            netif.run_ns(None, ["sh", "-c", script], who, node)
            current = read(node, list(saved), who)
    except NetifError as exc:
        return [str(exc)]
    return [f"{who}: the route to {p} is {current.get(p)!r}, the snapshot had {saved[p]!r}"
            for p in saved
            if restore_argv(p, saved[p], current.get(p))]
