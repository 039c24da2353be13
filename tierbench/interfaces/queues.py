"""RPS/XPS: an interface's receive and transmit queue CPU masks and flow counts (sysfs,
``/sys/class/net/IF/queues``), read and written with /sys showing the endpoint's network
namespace, and this machine's or a node's online CPUs as a mask."""

from __future__ import annotations

import shlex
from functools import lru_cache
from pathlib import Path

from tierbench.interfaces import netif
from tierbench.interfaces.netif import Endpoint
from tierbench.transport import Transport


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


def read_queues(ep: Endpoint) -> dict[str, dict[str, str]]:
    return parse_queues(run_sh(ep, read_script(ep.ifname)))


def read_script(ifname: str) -> str:
    """The shell script that prints "QUEUE FILE VALUE" for every RPS/XPS file of the queues."""
    d = shlex.quote(f"/sys/class/net/{ifname}/queues")
    return (f"cd {d} && for q in *; do for f in rps_cpus xps_cpus rps_flow_cnt; do "
            f"[ -e $q/$f ] && echo \"$q $f $(cat $q/$f 2>/dev/null || echo unreadable)\"; "
            "done; done; true")


def read_argv(ep: Endpoint) -> list[str]:
    """:func:`read_queues`' command as one to run in the endpoint's namespace (netif.run_all)."""
    return sh_argv(read_script(ep.ifname), ep.netns_pid is not None)


def parse_queues(text: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.setdefault(parts[0], {})[parts[1]] = parts[2]
    return out


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


def write_argv(ep: Endpoint, writes: dict[str, str]) -> list[str]:
    """:func:`write_masks`' command as one to run in the endpoint's namespace (netif.run_all)."""
    return sh_argv(masks_script(ep.ifname, writes), ep.netns_pid is not None)
