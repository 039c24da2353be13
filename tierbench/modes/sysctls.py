"""A mode's sysctls: where each goes (a container's network namespace, the host, or each
cluster node's host), read (a snapshot), checked against the kernel, set, read back and
restored, through :mod:`tierbench.interfaces.ethtool`'s sysctl helpers.

The snapshot's part is the mode state's "sysctls": per target its process (None: the host),
its namespace's inode (to tell a reused PID), its node and the saved values.

A congestion control set in the containers' namespaces (net.ipv4.tcp_congestion_control) must
be in the host's allowed list (net.ipv4.tcp_allowed_congestion_control, one for the whole
machine: a namespace may pick only an allowed algorithm, EPERM otherwise, even for root). When
it is not, the host target carries the allowed list too: the algorithm is added to it before
the namespaces are set and the saved list is put back with the rest. Widening the list changes
no connection, it only lets namespaces choose; on a cluster the nodes' own namespace is set,
which needs no allowance.
"""

from __future__ import annotations

import os
from typing import Any

from tierbench.interfaces import ethtool, netif
from tierbench.interfaces.netif import Endpoint, NetifError
from tierbench.modes.model import Mode
from tierbench.transport import Transport, node_of

__all__ = ["change", "mismatches", "nodes", "problems", "restore", "restore_commands", "snapshot",
           "targets"]

CONGESTION = "net.ipv4.tcp_congestion_control"
ALLOWED = "net.ipv4.tcp_allowed_congestion_control"
AVAILABLE = "net.ipv4.tcp_available_congestion_control"


def nodes(endpoints: list[Endpoint]) -> list[Transport]:
    """The cluster nodes the endpoints are on (in order; none on a single host)."""
    return list(dict.fromkeys(ep.via for ep in endpoints if ep.via.remote))


def targets(mode: Mode, endpoints: list[Endpoint]) -> dict[str, dict[str, Any]]:
    """Where each sysctl goes: {target: {"pid": pid|None, "netns_ino": ino, "keys": [...]}};
    on a cluster, each node's host (its tiers share it: host networking), with the node and
    the ssh command that reaches it."""
    on = nodes(endpoints)
    if on:
        return {f"node:{n.name}": {"pid": None, "netns_ino": None, **n.record(),
                                   "keys": list(mode.knobs.sysctls)}
                for n in on if mode.knobs.sysctls}
    pids: dict[int, int] = {}
    for ep in endpoints:
        if ep.netns_pid is not None:
            ino = netif.netns_inode(ep.netns_pid)
            if ino is not None and ino not in pids.values():
                pids[ep.netns_pid] = ino
    out: dict[str, dict[str, Any]] = {}
    if CONGESTION in mode.knobs.sysctls and pids:  # first: allowed before the namespaces pick
        out["host"] = {"pid": None, "netns_ino": netif.netns_inode(None), "keys": [ALLOWED]}
    for key in mode.knobs.sysctls:
        scope = ethtool.sysctl_scope(key)
        if scope.startswith("netns") and pids:
            for pid, ino in pids.items():
                t = out.setdefault(f"netns:{pid}", {"pid": pid, "netns_ino": ino, "keys": []})
                t["keys"].append(key)
        else:
            t = out.setdefault(
                "host", {"pid": None, "netns_ino": netif.netns_inode(None), "keys": []})
            t["keys"].append(key)
    return out


def allowed_with(allowed: str, algorithm: str) -> str:
    """The host's allowed congestion controls with ``algorithm`` added (unchanged if there)."""
    names = allowed.split()
    return " ".join(names if algorithm in names else [*names, algorithm])


def snapshot(mode: Mode, endpoints: list[Endpoint]) -> dict[str, dict[str, Any]]:
    """The mode state's "sysctls": every target with the current values of its keys (a key
    the kernel lacks is left out: the check refuses it)."""
    out = {}
    for target, info in targets(mode, endpoints).items():
        values = {}
        node = node_of(info)
        for key in info["keys"]:
            scope = ethtool.sysctl_on_node(key, node) if node else ethtool.sysctl_scope(key)
            if scope != "missing":
                values[key] = ethtool.read_sysctl(info["pid"], key, target, node)
        where = node.record() if node else {}
        out[target] = {"pid": info["pid"], "netns_ino": info["netns_ino"], **where,
                       "values": values}
    return out


def problems(mode: Mode, endpoints: list[Endpoint]) -> list[str]:
    """Sysctls this kernel (or a node's) lacks, or keeps read-only in the containers'
    namespaces ([] = every one can be set)."""
    found: list[str] = []
    on = nodes(endpoints)
    in_netns = any(ep.netns_pid is not None for ep in endpoints)
    for key in mode.knobs.sysctls:
        for node in on:
            try:
                missing = ethtool.sysctl_on_node(key, node) == "missing"
            except NetifError as exc:
                found.append(str(exc))
                continue
            if missing:
                found.append(f"sysctl {key} does not exist on the kernel of {node.name} (no "
                             f"{ethtool.sysctl_path(key)}); drop it from mode {mode.name}")
        if on:
            continue
        scope = ethtool.sysctl_scope(key)
        if scope == "missing":
            found.append(f"sysctl {key} does not exist on this kernel (no "
                         f"{ethtool.sysctl_path(key)}); drop it from mode {mode.name}")
        elif key == CONGESTION:
            available = ethtool.read_sysctl(None, AVAILABLE, "host").split()
            if mode.knobs.sysctls[key] not in available:
                found.append(f"sysctl {key}: {mode.knobs.sysctls[key]!r} is not available on "
                             f"this kernel (it has {', '.join(available)}); load its module "
                             f"(modprobe tcp_{mode.knobs.sysctls[key]}) or change mode "
                             f"{mode.name}")
        elif scope == "netns-readonly" and in_netns:
            found.append(
                f"sysctl {key} is kept per network namespace but is read-only inside one on "
                f"this kernel (a namespace copies the host's value when it is created), so it "
                f"cannot change for running containers; drop it from mode {mode.name} (use "
                f"net.ipv4.tcp_rmem/tcp_wmem, writable per namespace) or set it on the host "
                f"before the stack starts")
    return found


def change(mode: Mode, state: dict) -> None:
    """Every sysctl of the mode written at each target of ``state``."""
    for target, info in state.get("sysctls", {}).items():
        for key in info["values"]:
            if key == ALLOWED:  # the algorithm the namespaces are given, added
                have = ethtool.read_sysctl(None, key, target)
                want = allowed_with(have, mode.knobs.sysctls[CONGESTION])
                if want != have:
                    ethtool.write_sysctl(None, key, want, target)
                continue
            ethtool.write_sysctl(info["pid"], key, mode.knobs.sysctls[key], target,
                                 node_of(info))


def mismatches(mode: Mode, endpoints: list[Endpoint], state: dict | None) -> list[str]:
    """The mode's sysctls read back that differ from it (at the targets of ``state``, or
    where they would go)."""
    out: list[str] = []
    chosen = (state or {}).get("sysctls") or {
        t: {"pid": i["pid"], "node": i.get("node"), "ssh": i.get("ssh"),
            "values": dict.fromkeys(i["keys"])}
        for t, i in targets(mode, endpoints).items()}
    for target, info in chosen.items():
        for key in info["values"]:
            want = mode.knobs.sysctls.get(CONGESTION if key == ALLOWED else key)
            if want is None:
                continue
            try:
                have = ethtool.read_sysctl(info["pid"], key, target, node_of(info))
            except NetifError as exc:
                out.append(f"{target}: could not re-read {key}: {exc}")
                continue
            if key == ALLOWED:
                if want not in have.split():
                    out.append(f"{target}: sysctl {key} is {have!r}, without {want!r}")
            elif have != want:
                out.append(f"{target}: sysctl {key} is {have!r}, wanted {want!r}")
    return out


def restore(target: str, info: dict) -> list[str]:
    """The saved values of one target written back where they differ (a namespace whose
    process is gone, or whose PID now names another, has nothing to restore)."""
    pid = info.get("pid")
    if pid is not None:
        ino = info.get("netns_ino")
        if not os.path.exists(f"/proc/{pid}") or (
                ino is not None and netif.netns_inode(pid) != ino):
            return [f"{target}: gone, nothing to restore"]
    node = node_of(info)
    found: list[str] = []
    for key, value in info.get("values", {}).items():
        try:
            if ethtool.read_sysctl(pid, key, target, node) != value:
                ethtool.write_sysctl(pid, key, value, target, node)
                have = ethtool.read_sysctl(pid, key, target, node)
                if have != value:
                    found.append(f"{target}: sysctl {key} is {have!r}, snapshot had {value!r}")
        except NetifError as exc:
            found.append(str(exc))
    return found


def restore_commands(info: dict) -> list[list[str]]:
    """The commands that write one target's saved values back (in its namespace, on its node):
    the rollback guard's plan for it."""
    return [ethtool.sysctl_argv(key, value) for key, value in info.get("values", {}).items()]
