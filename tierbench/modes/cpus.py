"""A mode's cpu: part: the cpuset and CPU limit of the containers it covers, or of the platform
(the parent cgroup) the covered tiers share, read (a snapshot), checked, set, read back,
restored and viewed. The cgroup files are read and written by :mod:`tierbench.interfaces.cpu`,
here or on a cluster node over SSH.

The snapshot's part is two JSON dicts of the mode state: "cpu" (per container: its process,
node and saved values) and, for a per-platform mode, "platform" (per parent cgroup).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from tierbench.interfaces import cpu, netif
from tierbench.interfaces.netif import Endpoint, NetifError
from tierbench.modes import deadman
from tierbench.modes.model import Mode
from tierbench.transport import Transport, node_of

__all__ = ["change", "clock_line", "mismatches", "per_platform", "problems", "restore", "restore_commands",
           "snapshot", "targets", "view"]

Containers = list[tuple[str, Transport, int]]  # (label, node, PID on the node) of covered containers


CPUFREQ = Path("/sys/devices/system/cpu")


def clock_line(root: Path = CPUFREQ) -> str:
    """One sentence for the plan of a run whose modes set platforms: whether this host could
    lower its CPUs' clocks (cpufreq's scaling_max_freq), and that tierbench does not: a
    platform's speed is its CPU time (and its link rate where the mode shapes one)."""
    files = sorted(root.glob("cpu[0-9]*/cpufreq/scaling_max_freq"))
    where = (f"this host has cpufreq ({len(files)} CPUs' scaling_max_freq), which tierbench "
             "does not write" if files else f"this host has no cpufreq ({root}/cpu*/cpufreq)")
    return ("clock: the platforms' CPU clocks (004 §3.2: 2.4 GHz, 1 GHz, 700 MHz) are not set: "
            f"{where}; CPU time stands in for them")


def per_platform(mode: Mode) -> bool:
    """Whether the mode's cpu: is one platform's, shared by the tiers it covers."""
    return mode.cpu.get("per") == "platform"


def targets(endpoints: list[Endpoint], containers: Containers | None) -> dict[str, dict[str, Any]]:
    """Where a cpu: mode's settings go: each covered container's process (on its node; on one
    host, the processes whose namespaces the endpoints are in, each once, by its tier)."""
    if containers:
        return {f"{node.name}:pid:{pid}": {"pid": pid, **node.record(), "label": label}
                for label, node, pid in containers}
    pids: dict[int, str] = {}
    for ep in endpoints:
        if ep.netns_pid is not None and ep.netns_pid not in pids:
            pids[ep.netns_pid] = ep.tier
    return {f"pid:{pid}": {"pid": pid, "netns_ino": netif.netns_inode(pid), "label": label}
            for pid, label in pids.items()}


def snapshot(mode: Mode, endpoints: list[Endpoint], containers: Containers | None
             ) -> dict[str, Any]:
    """The mode state's "cpu" part (and "platform" for a per-platform mode), values read."""
    state: dict[str, Any] = {"cpu": targets(endpoints, containers)}
    for target in state["cpu"].values():
        target["values"] = cpu.read(target["pid"], node_of(target))
    if per_platform(mode):
        state["platform"] = platforms(state["cpu"])
    return state


def platforms(cpu_targets: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The platforms a per-platform cpu: mode sets: the parent cgroup of the covered
    containers, one per node (or this host), with the containers it must hold ("own") and
    those it does ("members")."""
    out: dict[str, dict[str, Any]] = {}
    for target in cpu_targets.values():
        node = target.get("node")
        info = cpu.platform_of(target["pid"], node_of(target))
        key = f"{node or 'host'}:{info['dirs']['cpu']}"
        entry = out.setdefault(key, {
            "node": node, **({"ssh": target["ssh"]} if node else {}), "dirs": info["dirs"],
            "label": f"platform ({node or 'this host'})", "members": info["members"],
            "own": [], "tiers": [], "pid": target["pid"]})
        entry["own"].append(info["own"])
        entry["tiers"].append(target["label"])
        target["platform"] = key
    for entry in out.values():
        entry["values"] = cpu.read_platform(entry["dirs"], node_of(entry))
    return out


def platform_problems(mode: Mode, state: dict) -> list[str]:
    """A platform must hold the covered tiers and nothing else (the load generator outside it),
    one per node."""
    found = []
    chosen = state.get("platform") or platforms(state.get("cpu", {}))
    per_node: dict[str | None, list[str]] = {}
    for key, entry in chosen.items():
        per_node.setdefault(entry["node"], []).append(key)
        others = sorted(set(entry["members"]) - set(entry["own"]))
        if others:
            found.append(
                f"mode {mode.name} sets one platform for the tiers "
                f"{', '.join(entry['tiers'])}, and their parent cgroup {entry['dirs']['cpu']} "
                f"on {entry['node'] or 'this host'} also holds {len(others)} other container(s) "
                f"({', '.join(o[:12] for o in others)}): bring the stack up with tierbench, which "
                "starts the platform's tiers alone under their own parent (compose settings "
                "SERVERS_CGROUP and the kind's platforms), and leave those settings unset")
    for node, keys in per_node.items():
        if len(keys) > 1:
            found.append(f"mode {mode.name} sets one platform for its tiers, and on "
                         f"{node or 'this host'} they are under {len(keys)} parent cgroups: "
                         "bring the stack up again with tierbench (tierbench clean, then run)")
    return found


def problems(mode: Mode, state: dict) -> list[str]:
    """Why the mode's cpu: cannot be set on the targets of ``state`` ([] = it can)."""
    found = platform_problems(mode, state) if per_platform(mode) else []
    want = mode.cpu.get("cpuset")
    if not want:
        return found
    for target in state.get("cpu", {}).values():
        try:
            allowed = cpu.allowed(target["pid"], node_of(target),
                                  platform=per_platform(mode))
        except NetifError as exc:
            found.append(str(exc))
            continue
        extra = sorted(cpu.parse(want) - allowed)
        if extra:
            found.append(f"cpu.cpuset {want} of mode {mode.name} names CPU {extra[0]}, which "
                         f"{target['label']} may not use (its parent cgroup allows "
                         f"{','.join(map(str, sorted(allowed)))}); change the mode's cpuset")
    return found


def change(mode: Mode, state: dict) -> None:
    """Each container's cpuset and limit; with a platform, its cpuset first widened to hold
    both the old and the new CPUs (cgroup v1 refuses a parent narrower than its children), the
    containers' cpusets, then the platform's cpuset and the limit they share."""
    want_set, want_limit = mode.cpu.get("cpuset"), mode.cpu.get("limit")
    chosen = state.get("platform", {})
    for entry in chosen.values():
        widen(entry, want_set)
    for target in state.get("cpu", {}).values():
        cpu.write(target["pid"], want_set, want_limit,
                  set_limit="limit" in mode.cpu and not chosen, node=node_of(target))
    for entry in chosen.values():
        cpu.write_platform(entry["dirs"], want_set, want_limit, set_limit="limit" in mode.cpu,
                           node=node_of(entry))


def widen(entry: dict, cpuset: str | None) -> None:
    """A platform's cpuset made the union of what it has and ``cpuset`` ('' = every CPU)."""
    if not cpuset:
        return
    have = str(cpu.read_platform(entry["dirs"], node_of(entry))["cpuset"])
    if have:
        both = ",".join(str(c) for c in sorted(cpu.parse(have) | cpu.parse(cpuset)))
        cpu.write_platform(entry["dirs"], both, None, set_limit=False, node=node_of(entry))


def mismatches(mode: Mode, state: dict) -> list[str]:
    """The platforms' and containers' CPU settings read back that differ from the mode's (a
    per-platform limit is the platform's, not its containers')."""
    out: list[str] = []
    for entry in state.get("platform", {}).values():
        out += differences(mode, entry["label"], partial(cpu.read_platform, entry["dirs"],
                                                         node_of(entry)), with_limit=True)
    for target in state.get("cpu", {}).values():
        out += differences(mode, target["label"], partial(cpu.read, target["pid"],
                                                          node_of(target)),
                           with_limit=not per_platform(mode))
    return out


def differences(mode: Mode, label: str, read: Callable[[], dict[str, Any]],
                with_limit: bool) -> list[str]:
    """How the cpuset and limit ``read()`` returns differ from the mode's."""
    want_set, want_limit = mode.cpu.get("cpuset"), mode.cpu.get("limit")
    try:
        have = read()
    except NetifError as exc:
        return [str(exc)]
    out = []
    if want_set and cpu.parse(str(have["cpuset"])) != cpu.parse(want_set):
        out.append(f"{label}: cpuset is {have['cpuset']}, wanted {want_set}")
    if "limit" in mode.cpu and with_limit and have["limit"] != round(mode.cpu["limit"], 4):
        out.append(f"{label}: CPU limit is {have['limit']}, wanted {want_limit}")
    return out


def restore(state: dict) -> list[str]:
    """The saved cpusets and limits put back: platforms widened first (a parent must hold its
    children's CPUs), then the containers, then the platforms' own settings."""
    found: list[str] = []
    chosen = state.get("platform", {})
    for entry in chosen.values():
        try:
            if cpu.platform_exists(entry["dirs"], node_of(entry)):
                widen(entry, str(entry["values"]["cpuset"]))
        except NetifError as exc:
            found.append(str(exc))
    for target, info in state.get("cpu", {}).items():
        found += restore_container(target, info)
    for entry in chosen.values():
        found += restore_platform(entry)
    return found


def restore_platform(entry: dict) -> list[str]:
    """A platform's saved cpuset and limit, even when its containers are gone (the parent
    cgroup outlives them, and the next bring-up would inherit what it holds)."""
    node, saved = node_of(entry), entry["values"]
    try:
        if not cpu.platform_exists(entry["dirs"], node):
            return [f"{entry['label']} ({entry['dirs']['cpu']}): gone, nothing to restore"]
        cpu.write_platform(entry["dirs"], saved["cpuset"] or None, saved["limit"],
                           set_limit=True, node=node)
        have = cpu.read_platform(entry["dirs"], node)
    except NetifError as exc:
        return [str(exc)]
    if have != saved:
        return [f"{entry['label']}: CPU settings are {have}, snapshot had {saved}"]
    return []


def restore_container(target: str, info: dict) -> list[str]:
    """One container's saved cpuset and limit (gone: nothing to restore)."""
    pid, node = info["pid"], node_of(info)
    gone = [f"{info.get('label', target)} ({target}): gone, nothing to restore"]
    if node is None and (not os.path.exists(f"/proc/{pid}")
                         or netif.netns_inode(pid) != info.get("netns_ino")):
        return gone
    saved = info["values"]
    try:
        cpu.write(pid, saved["cpuset"] or None, saved["limit"], set_limit=True, node=node)
        have = cpu.read(pid, node)
    except NetifError as exc:
        return gone if node and "is gone" in str(exc) else [str(exc)]
    if have != saved:
        return [f"{info.get('label', target)}: CPU settings are {have}, snapshot had {saved}"]
    return []


def restore_commands(state: dict) -> list[tuple[dict[str, Any], list[str]]]:
    """The commands that put the saved cpusets and limits back, in restore's order (each
    platform widened to hold its saved CPUs too, the containers, the platforms' own settings),
    each with the target it runs for (its node, its process): the rollback guard's plan.
    They run the cgroup code of :mod:`tierbench.interfaces.cgroupcpu` there from the bundle the
    guard's agent runs from (:data:`deadman.BUNDLE`), with python3."""
    chosen = state.get("platform", {})
    out: list[tuple[dict[str, Any], list[str]]] = []
    for entry in chosen.values():
        saved = str(entry["values"]["cpuset"])
        if saved:
            out.append((entry, cpu.node_argv("python3", deadman.BUNDLE, "widen_dirs",
                                             strict=True, dirs=entry["dirs"], cpuset=saved)))
    for info in state.get("cpu", {}).values():
        saved_c = info["values"]
        out.append((info, cpu.node_argv(
            "python3", deadman.BUNDLE, "write_cgroup", strict=True, pid=int(info["pid"]),
            cpuset=saved_c["cpuset"] or None, limit=saved_c["limit"], set_limit=True)))
    for entry in chosen.values():
        saved_p = entry["values"]
        out.append((entry, cpu.node_argv(
            "python3", deadman.BUNDLE, "write_dirs", strict=True, dirs=entry["dirs"],
            cpuset=saved_p["cpuset"] or None, limit=saved_p["limit"], set_limit=True)))
    return out


def view(state: dict) -> dict[str, Any]:
    """The manifest's compact form of the cpu: part: values per container and platform."""
    out: dict[str, Any] = {}
    if "cpu" in state:
        out["cpu"] = {i.get("label", t): dict(i["values"]) for t, i in state["cpu"].items()}
    if "platform" in state:
        out["platform"] = {i["label"]: {**i["values"], "tiers": list(i["tiers"])}
                           for i in state["platform"].values()}
    return out
