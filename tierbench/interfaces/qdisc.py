"""An interface's root qdisc: the ``tc`` commands of a tbf, htb or netem qdisc, the root qdisc
an endpoint has, and whether a qdisc can be installed at all (probed on a throw-away veth)."""

from __future__ import annotations

import json
import re
import shlex
from functools import lru_cache
from typing import Any

from tierbench.interfaces import netif
from tierbench.interfaces.netif import Endpoint, NetifError
from tierbench.transport import LOCAL, Transport, TransportError


_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
               "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9, "tbps": 8e12}


def rate_bits(rate: str) -> float:
    """A tc rate such as ``1gbit`` or ``125mbps`` in bits per second."""
    m = re.match(r"^(\d+(?:\.\d+)?)([a-z]+)$", rate.lower())
    if not m or m.group(2) not in _RATE_UNITS:
        raise NetifError(f"cannot read the rate {rate!r}; write it like 1gbit")
    return float(m.group(1)) * _RATE_UNITS[m.group(2)]


def qdisc_commands(ifname: str, q: dict[str, Any]) -> list[list[str]]:
    """The ``tc`` commands that install the root qdisc ``q`` (tbf, htb or netem) on ``ifname``."""
    base = ["tc", "qdisc", "replace", "dev", ifname, "root", "handle", "1:"]
    kind = q["kind"]
    if kind == "tbf":
        burst = q.get("burst") or f"{max(int(rate_bits(q['rate']) / 8 / 1000), 131072)}b"
        return [base + ["tbf", "rate", q["rate"], "burst", burst,
                        "latency", q.get("latency", "50ms")]]
    if kind == "htb":
        cls = ["tc", "class", "replace", "dev", ifname, "parent", "1:", "classid", "1:1",
               "htb", "rate", q["rate"], "ceil", q.get("ceil", q["rate"])]
        if q.get("burst"):
            cls += ["burst", q["burst"]]
        return [base + ["htb", "default", "1"], cls]
    if kind == "netem":
        args = base + ["netem"]
        if q.get("limit"):
            args += ["limit", str(q["limit"])]
        if q.get("delay"):
            args += ["delay", q["delay"]] + ([q["jitter"]] if q.get("jitter") else [])
        if q.get("loss"):
            args += ["loss", q["loss"]]
        if q.get("rate"):
            args += ["rate", q["rate"]]
        return [args]
    raise NetifError(f"unknown qdisc kind {kind!r}")


def qdisc_root(ep: Endpoint) -> dict[str, Any]:
    return parse_root(netif.run_in(ep, root_argv(ep.ifname)), ep.label)


def root_argv(ifname: str) -> list[str]:
    return ["tc", "-j", "qdisc", "show", "dev", ifname]


def parse_root(out: str, who: str) -> dict[str, Any]:
    """The root qdisc's kind and handle from ``tc -j qdisc show`` (None: no root qdisc)."""
    try:
        entries = json.loads(out or "[]")
    except ValueError:
        raise NetifError(
            f"{who}: `tc -j qdisc show` printed output that is not JSON") from None
    for e in entries:
        if e.get("root"):
            return {"kind": e.get("kind"), "handle": e.get("handle")}
    return {"kind": None, "handle": None}


@lru_cache(maxsize=64)
def probe_qdisc(args: tuple[tuple[str, Any], ...], node: Transport | None = None) -> str | None:
    """Try a qdisc on a veth inside a throw-away ``unshare -n`` (on this machine or on a cluster
    node); return tc's error or None."""
    cmds = qdisc_commands("tbmprobe0", dict(args))
    script = "ip link add tbmprobe0 type veth peer name tbmprobe1 && " + " && ".join(
        shlex.join(c) for c in cmds)
    argv = ["unshare", "-n", "--", "sh", "-c", script]
    try:
        proc = (node or LOCAL).run(argv, timeout=30)
    except TransportError as exc:
        return f"the probe could not run ({exc})"
    if proc.returncode == 0:
        return None
    return " ".join((proc.stderr or proc.stdout or "no error output").split())
