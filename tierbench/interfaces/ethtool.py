"""Read and write one interface's link settings beyond features and MTU: channels (ethtool -L),
RSS (-X), coalescing (-C), rings and header-data split (-G), RPS/XPS queue masks (sysfs), a root
qdisc (tc), and sysctls, in the host or in a container's network namespace.

Parsers of ``ethtool -l/-c/-g/-x`` output are pure functions, tested against captured output.
Everything here acts on one endpoint (or one namespace's sysctls); what a whole mode means is
:mod:`tierbench.modes.apply`'s business.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any

from tierbench.interfaces import netif
from tierbench.interfaces.netif import Endpoint, NetifError
from tierbench.transport import LOCAL, Transport, TransportError, run_argv

_CHANNEL_LABELS = {"RX": "rx", "TX": "tx", "Other": "other", "Combined": "combined"}


_RING_LABELS = {
    "RX": "rx", "RX Mini": "rx-mini", "RX Jumbo": "rx-jumbo", "TX": "tx",
    "RX Buf Len": "rx-buf-len", "CQE Size": "cqe-size", "TX Push": "tx-push",
    "TCP data split": "tcp-data-split",
}


_PAIR = re.compile(r"^(Adaptive|CQE mode) RX:\s*(\S+)\s+TX:\s*(\S+)", re.I)


def _value(text: str) -> int | bool | str | None:
    text = text.strip()
    if text in ("n/a", ""):
        return None
    if text in ("on", "off"):
        return text == "on"
    try:
        return int(text)
    except ValueError:
        return text


def _two_blocks(text: str, labels: dict[str, str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {"max": {}, "current": {}}
    block: str | None = None
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("Pre-set maximums"):
            block = "max"
        elif s.startswith("Current hardware settings"):
            block = "current"
        elif block and ":" in s:
            label, val = s.split(":", 1)
            if label.strip() in labels:
                out[block][labels[label.strip()]] = _value(val)
    return out


def parse_channels(text: str) -> dict[str, dict[str, Any]]:
    """Parse ``ethtool -l``: {"max": {rx, tx, other, combined}, "current": {...}}; n/a = None."""
    return _two_blocks(text, _CHANNEL_LABELS)


def parse_rings(text: str) -> dict[str, dict[str, Any]]:
    """Parse ``ethtool -g`` into max and current ring sizes, tx-push and tcp-data-split.

    tcp-data-split is True/False, or the string "unknown" when the driver does not say;
    a key is absent when the driver (or this ethtool) does not report it at all.
    """
    return _two_blocks(text, _RING_LABELS)


def parse_coalesce(text: str) -> dict[str, int | bool | None]:
    """Parse ``ethtool -c`` into {adaptive-rx, adaptive-tx, rx-usecs, ...}; n/a = None."""
    out: dict[str, int | bool | None] = {}
    for line in text.splitlines():
        s = line.strip()
        m = _PAIR.match(s)
        if m:
            prefix = "adaptive" if m.group(1).lower() == "adaptive" else "cqe-mode"
            for side, val in (("rx", m.group(2)), ("tx", m.group(3))):
                v = _value(val)
                out[f"{prefix}-{side}"] = v if isinstance(v, bool) else None
            continue
        if ":" not in s or s.startswith("Coalesce parameters"):
            continue
        key, val = s.split(":", 1)
        key = key.strip().replace("-frame-", "-frames-")  # ethtool prints rx-frame-low
        if re.match(r"^[a-z][a-z0-9-]*$", key):
            v = _value(val)
            out[key] = v if not isinstance(v, str) else None
    return out


def parse_indirection(text: str) -> list[int]:
    """Parse the indirection table of ``ethtool -x`` into a list of queue numbers."""
    table: list[int] = []
    in_table = False
    for line in text.splitlines():
        if "indirection table" in line:
            in_table = True
            continue
        if not in_table:
            continue
        m = re.match(r"^\s*\d+:\s+((?:\d+\s*)+)$", line)
        if m:
            table += [int(x) for x in m.group(1).split()]
        elif line.strip():
            break
    return table


def mask_int(mask: str) -> int:
    return int(mask.replace(",", "").lower().removeprefix("0x") or "0", 16)


@lru_cache(maxsize=64)
def online_cpu_mask(node: Transport | None = None) -> str:
    """Hex mask of the online CPUs (from /sys/devices/system/cpu/online), of this machine or of
    a cluster node."""
    if node is None:
        text = Path("/sys/devices/system/cpu/online").read_text().strip()
    else:
        text = netif.run_ns(None, ["cat", "/sys/devices/system/cpu/online"], str(node.name),
                            node).strip()
    mask = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        for cpu in range(int(lo), int(hi or lo) + 1):
            mask |= 1 << cpu
    return format(mask, "x")


def queue_value(fname: str, value: str) -> int:
    """A queue file's value as a number: CPU masks are hex, rps_flow_cnt is decimal."""
    return int(value) if fname == "rps_flow_cnt" else mask_int(value)


def wanted_mask(value: str, node: Transport | None = None) -> str:
    return online_cpu_mask(node) if value == "all" else format(mask_int(value), "x")


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


def sh_argv(script: str, in_netns: bool) -> list[str]:
    """``sh -c SCRIPT``, with /sys showing the namespace it runs in when that is a container's
    (a fresh sysfs mount in a mount namespace of its own: run it inside ``nsenter -n``)."""
    if not in_netns:
        return ["sh", "-c", script]
    return ["unshare", "-m", "--", "sh", "-c", f"mount -t sysfs none /sys && {script}"]


def run_sh(ep: Endpoint, script: str) -> str:
    """Run a shell script with /sys showing the endpoint's netns (fresh sysfs mount if needed)."""
    if ep.netns_pid is None:
        return netif.run_ns(None, sh_argv(script, False), ep.label, ep.via)
    argv = ["nsenter", "-t", str(ep.netns_pid), "-n", "--", *sh_argv(script, True)]
    return netif.run_ns(None, argv, ep.label)


def try_run(ep: Endpoint, argv: list[str]) -> tuple[str | None, str | None]:
    try:
        return netif.run_in(ep, argv), None
    except NetifError as exc:
        return None, short_error(str(exc))


def short_error(msg: str) -> str:
    """The tool's own complaint, without the label and command prefix."""
    m = re.search(r"failed \(exit \d+\): (.*)$", msg)
    return m.group(1) if m else msg


def read_queues(ep: Endpoint) -> dict[str, dict[str, str]]:
    d = shlex.quote(f"/sys/class/net/{ep.ifname}/queues")
    script = (f"cd {d} && for q in *; do for f in rps_cpus xps_cpus rps_flow_cnt; do "
              f"[ -e $q/$f ] && echo \"$q $f $(cat $q/$f 2>/dev/null || echo unreadable)\"; "
              "done; done; true")
    out: dict[str, dict[str, str]] = {}
    for line in run_sh(ep, script).splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.setdefault(parts[0], {})[parts[1]] = parts[2]
    return out


def qdisc_root(ep: Endpoint) -> dict[str, Any]:
    out = netif.run_in(ep, ["tc", "-j", "qdisc", "show", "dev", ep.ifname])
    try:
        entries = json.loads(out or "[]")
    except ValueError:
        raise NetifError(
            f"{ep.label}: `tc -j qdisc show` printed output that is not JSON") from None
    for e in entries:
        if e.get("root"):
            return {"kind": e.get("kind"), "handle": e.get("handle")}
    return {"kind": None, "handle": None}


def sysctl_path(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


@lru_cache(maxsize=256)
def sysctl_on_node(key: str, node: Transport) -> str:
    """``host`` when ``key`` exists on a cluster node (whose tiers share its namespace: host
    networking), ``readonly`` when it exists but cannot be written there (a node whose /proc/sys
    is mounted read-only, as in a container), ``missing`` when it does not."""
    path = shlex.quote(sysctl_path(key))
    script = (f"if ! test -e {path}; then echo missing; elif test -w {path}; then echo host; "
              "else echo readonly; fi")
    out = netif.run_ns(None, ["sh", "-c", script], str(node.name), node)
    return out.strip() or "missing"


@lru_cache(maxsize=256)
def sysctl_scope(key: str) -> str:
    """Where the kernel keeps ``key``, probed in a throw-away ``unshare -n``.

    ``netns``: per network namespace and writable there; ``netns-readonly``: per namespace
    but read-only inside one (copied from the host when the namespace is created, e.g.
    net.core.rmem_max on 6.18); ``host``: one host-wide value; ``missing``: no such sysctl.
    """
    path = sysctl_path(key)
    if not os.path.exists(path):
        return "missing"
    script = f'test -e {shlex.quote(path)} || exit 3; test -w {shlex.quote(path)} || exit 4'
    probe = run_argv(["unshare", "-n", "--", "sh", "-c", script], timeout=30, text=False)
    return {0: "netns", 4: "netns-readonly"}.get(probe.returncode, "host")


def read_sysctl(pid: int | None, key: str, who: str, node: Transport | None = None) -> str:
    return " ".join(netif.run_ns(pid, ["sysctl", "-n", key], who, node or LOCAL).split())


def write_sysctl(pid: int | None, key: str, value: str, who: str,
                 node: Transport | None = None) -> None:
    netif.run_ns(pid, sysctl_argv(key, value), who, node or LOCAL)


def sysctl_argv(key: str, value: str) -> list[str]:
    """``sysctl -q -w KEY=VALUE`` (a value with spaces stays one argument)."""
    return ["sysctl", "-q", "-w", f"{key}={value}"]


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


def ethtool_args(d: dict[str, Any]) -> str:
    return " ".join(f"{k} {netif.onoff(v) if isinstance(v, bool) else v}" for k, v in d.items())


def mask_writes(queues: dict, rps: str | None, xps: str | None,
                 flow_cnt: int | None = None, node: Transport | None = None) -> dict[str, str]:
    writes: dict[str, str] = {}
    for q, files in queues.items():
        if not isinstance(files, dict):
            continue
        if rps is not None and "rps_cpus" in files:
            writes[f"{q}/rps_cpus"] = wanted_mask(rps, node)
        if xps is not None and "xps_cpus" in files:
            writes[f"{q}/xps_cpus"] = wanted_mask(xps, node)
        if flow_cnt is not None and "rps_flow_cnt" in files:
            writes[f"{q}/rps_flow_cnt"] = str(flow_cnt)
    return writes


def masks_script(ifname: str, writes: dict[str, str]) -> str:
    """The shell script writing ``writes`` ({queue/file: value}) under the queues' folder (values
    and paths quoted)."""
    d = f"/sys/class/net/{ifname}/queues"
    return " && ".join(f"echo {shlex.quote(v)} > {shlex.quote(f'{d}/{f}')}"
                       for f, v in sorted(writes.items()))


def write_masks(ep: Endpoint, writes: dict[str, str]) -> None:
    run_sh(ep, masks_script(ep.ifname, writes))
