"""The kernel's own counters the sampler reads besides cgroups: each CPU's line of /proc/stat,
the NET_RX and NET_TX softirqs each CPU ran (/proc/softirqs), a network namespace's protocol
counters (/proc/PID/net/snmp and netstat, a selection) and its interfaces' packets
(/proc/PID/net/dev, loopback left out), and a driver's own statistics (``ethtool -S``).

It imports only the standard library and tierbench.transport: it goes to cluster nodes in
tierbench's node bundle with the sampler (tierbench/nodeapp.py, measure/agent.py).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tierbench.transport import TransportError, run_argv

SOFTIRQS = ("NET_RX", "NET_TX")
# The protocol counters kept (of the hundred-odd the kernel gives): segments, retransmissions,
# reordering, drops and what decides them; ``Group.Name`` as /proc/net/snmp and netstat label them.
STACK_COUNTERS = (
    "Ip.InReceives", "Ip.InDiscards", "Ip.InDelivers", "Ip.OutRequests", "Ip.OutDiscards",
    "Tcp.ActiveOpens", "Tcp.PassiveOpens", "Tcp.InSegs", "Tcp.OutSegs", "Tcp.RetransSegs",
    "Tcp.InErrs", "Tcp.OutRsts", "Tcp.InCsumErrors",
    "Udp.InDatagrams", "Udp.OutDatagrams", "Udp.InErrors", "Udp.RcvbufErrors",
    "Udp.SndbufErrors",
    "TcpExt.TCPOFOQueue", "TcpExt.TCPOFODrop", "TcpExt.TCPOFOMerge", "TcpExt.TCPSACKReorder",
    "TcpExt.TCPFastRetrans", "TcpExt.TCPSlowStartRetrans", "TcpExt.TCPLostRetransmit",
    "TcpExt.TCPTimeouts", "TcpExt.TCPSpuriousRTOs", "TcpExt.ListenOverflows",
    "TcpExt.ListenDrops", "TcpExt.TCPBacklogDrop", "TcpExt.TCPRcvQDrop",
    "TcpExt.TCPZeroWindowDrop", "TcpExt.PruneCalled", "TcpExt.RcvPruned",
    "TcpExt.TCPRcvCoalesce", "TcpExt.TCPAutoCorking", "TcpExt.TCPOrigDataSent",
    "TcpExt.DelayedACKs", "TcpExt.TCPHPHits", "TcpExt.TCPPureAcks",
    "IpExt.InOctets", "IpExt.OutOctets",
)
# /proc/net/dev's columns: 8 receive then 8 transmit counters
DEV_FIELDS = ("rx_bytes", "rx_packets", "rx_errs", "rx_drop", "rx_fifo", "rx_frame",
              "rx_compressed", "rx_multicast", "tx_bytes", "tx_packets", "tx_errs", "tx_drop",
              "tx_fifo", "tx_colls", "tx_carrier", "tx_compressed")
DEV_KEPT = ("rx_bytes", "rx_packets", "rx_drop", "tx_bytes", "tx_packets", "tx_drop")
ETHTOOL_TIMEOUT_S = 2.0


def parse_cpu_lines(text: str) -> dict[str, list[int]]:
    """Each CPU's line of /proc/stat ('cpu0' -> its first 8 fields in clock ticks: user, nice,
    system, idle, iowait, irq, softirq, steal); the aggregate 'cpu' line left out."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("cpu") and parts[0][3:].isdigit():
            out[parts[0]] = [int(v) for v in parts[1:9]] + [0] * (9 - len(parts))
    return out


def parse_softirqs(text: str, names: tuple[str, ...] = SOFTIRQS) -> dict[str, list[int]]:
    """Per-CPU counts of the named softirqs from /proc/softirqs (one column per online CPU, in
    the order of the header's CPUn; the list follows the header)."""
    lines = text.splitlines()
    if not lines:
        return {}
    cpus = lines[0].split()
    out = {}
    for line in lines[1:]:
        name, _, rest = line.partition(":")
        if name.strip() in names:
            out[name.strip()] = [int(v) for v in rest.split()[:len(cpus)]]
    out["cpus"] = [int(c[3:]) for c in cpus if c.startswith("CPU") and c[3:].isdigit()]
    return out


def parse_snmp(text: str, keep: tuple[str, ...] | None = STACK_COUNTERS) -> dict[str, int]:
    """/proc/net/snmp or /proc/net/netstat (pairs of lines: 'Group: names' then 'Group: values')
    as {'Group.Name': value}, only the names in ``keep`` (all with None)."""
    out: dict[str, int] = {}
    lines = text.splitlines()
    for head, values in zip(lines[::2], lines[1::2]):
        group, _, names = head.partition(":")
        group2, _, numbers = values.partition(":")
        if group != group2:
            continue
        for name, value in zip(names.split(), numbers.split()):
            key = f"{group}.{name}"
            if (keep is None or key in keep) and value.lstrip("-").isdigit():
                out[key] = int(value)
    return out


def parse_net_dev(text: str) -> dict[str, int]:
    """/proc/net/dev summed over the namespace's interfaces other than loopback, the counters in
    DEV_KEPT, as {'dev.rx_packets': n, ...}."""
    total = dict.fromkeys(DEV_KEPT, 0)
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        if not rest or name.strip() == "lo":
            continue
        values = dict(zip(DEV_FIELDS, (int(v) for v in rest.split())))
        for key in DEV_KEPT:
            total[key] += values.get(key, 0)
    return {f"dev.{k}": v for k, v in total.items()}


def parse_ethtool_stats(text: str) -> dict[str, int]:
    """``ethtool -S IF``'s numeric statistics ('name: value' lines under 'NIC statistics:')."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.strip().rpartition(":")
        value = value.strip()
        if sep and name and value.lstrip("-").isdigit():
            out[name.strip()] = int(value)
    return out


def cpu_lines(path: str = "/proc/stat") -> dict[str, list[int]]:
    """This kernel's per-CPU /proc/stat lines (parse_cpu_lines)."""
    with open(path) as fh:
        return parse_cpu_lines(fh.read())


def softirqs(path: str = "/proc/softirqs") -> dict[str, list[int]]:
    """This kernel's NET_RX and NET_TX softirq counts per CPU ({} where unreadable)."""
    try:
        with open(path) as fh:
            return parse_softirqs(fh.read())
    except OSError:
        return {}


def stack_counters(proc_net: Path) -> dict[str, int]:
    """A namespace's protocol and interface counters from its proc net folder (/proc/net for
    ours, /proc/PID/net for a process's); {} where it cannot be read."""
    out: dict[str, int] = {}
    try:
        for name in ("snmp", "netstat"):
            out.update(parse_snmp((proc_net / name).read_text()))
        out.update(parse_net_dev((proc_net / "dev").read_text()))
    except OSError:
        return {}
    return out


def netns(pid: int | str = "self") -> str:
    """The network namespace a process is in ('net:[4026531992]'), '' where unreadable."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return ""


ETHTOOL = shutil.which("ethtool") or (
    "/usr/sbin/ethtool" if os.path.exists("/usr/sbin/ethtool") else "")


def ethtool_stats(ifname: str) -> dict[str, int]:
    """The driver's statistics of an interface of our namespace, those not zero (a driver gives
    hundreds, most of them zero; a counter absent from a sample reads as zero); {} where the
    driver gives none or ethtool is not installed."""
    if not ETHTOOL:
        return {}
    try:
        done = run_argv([ETHTOOL, "-S", ifname], timeout=ETHTOOL_TIMEOUT_S)
    except TransportError:  # not startable, or did not finish
        return {}
    if done.returncode != 0:
        return {}
    return {k: v for k, v in parse_ethtool_stats(done.stdout).items() if v}
