"""Apply a whole mode to endpoints, all or nothing: snapshot, check, apply, verify, restore.

Builds on :mod:`tierbench.interfaces` (features and MTU in ``netif``; channels, RSS, RPS/XPS,
coalescing, rings, qdiscs and sysctls in ``ethtool``), per network namespace where the kernel
keeps a setting per namespace and on the host otherwise.

The state dict written to :class:`netif.StateFile` before the first change holds everything
``restore_state`` needs, so a later process (``tierbench clean``) can restore after a SIGKILL.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from tierbench import transport
from tierbench.interfaces import cpu, ethtool, netif
from tierbench.interfaces.netif import Endpoint, NetifError
from tierbench.modes.model import Mode
from tierbench.transport import Transport

__all__ = [
    "STATE_KIND",
    "apply_mode",
    "check_mode",
    "endpoint_problems",
    "mode_applied",
    "restore_state",
    "snapshot_mode",
    "state_view",
    "verify_mode",
]


STATE_KIND = "tierbench-mode-state"


APPLY_PASSES = 2


def _nodes(endpoints: list[Endpoint]) -> list[Transport]:
    """The cluster nodes the endpoints are on (in order; none on a single host)."""
    return list(dict.fromkeys(ep.via for ep in endpoints if ep.via.remote))


def _node(record: dict[str, Any]) -> Transport | None:
    """The node a state record names, as a transport (None: this host)."""
    return transport.of(record) if record.get("node") else None


def _ep_node(ep: Endpoint) -> Transport | None:
    """The node an endpoint is on (None: this host)."""
    return ep.via if ep.via.remote else None


def _sysctl_targets(mode: Mode, endpoints: list[Endpoint]) -> dict[str, dict[str, Any]]:
    """Where each sysctl goes: {target: {"pid": pid|None, "netns_ino": ino, "keys": [...]}};
    on a cluster, each node's host (its tiers share it: host networking), with the node and
    the ssh command that reaches it."""
    nodes = _nodes(endpoints)
    if nodes:
        return {f"node:{n.name}": {"pid": None, "netns_ino": None, **n.record(),
                                   "keys": list(mode.knobs.sysctls)}
                for n in nodes if mode.knobs.sysctls}
    pids: dict[int, int] = {}
    for ep in endpoints:
        if ep.netns_pid is not None:
            ino = netif.netns_inode(ep.netns_pid)
            if ino is not None and ino not in pids.values():
                pids[ep.netns_pid] = ino
    targets: dict[str, dict[str, Any]] = {}
    for key in mode.knobs.sysctls:
        scope = ethtool.sysctl_scope(key)
        if scope.startswith("netns") and pids:
            for pid, ino in pids.items():
                t = targets.setdefault(f"netns:{pid}", {"pid": pid, "netns_ino": ino, "keys": []})
                t["keys"].append(key)
        else:
            t = targets.setdefault(
                "host", {"pid": None, "netns_ino": netif.netns_inode(None), "keys": []})
            t["keys"].append(key)
    return targets


def _qdisc_problem(mode: Mode, node: Transport | None = None) -> str | None:
    q = mode.knobs.qdisc
    if not q:
        return None
    try:
        err = ethtool.probe_qdisc(tuple(sorted((k, v) for k, v in q.items())), node)
    except NetifError as exc:
        return f"qdisc {q['kind']}: {exc}"
    if err is None:
        return None
    if "kind is unknown" in err or "No such file" in err:
        where = f"the kernel of {node.name}" if node else "this kernel"
        return (f"qdisc {q['kind']} is not available in {where} (module sch_{q['kind']} "
                f"missing): use a kernel with CONFIG_NET_SCH_{q['kind'].upper()} or drop "
                f"{q['kind']} from mode {mode.name}")
    return f"qdisc {q['kind']} with {q} is refused by tc: {err}; fix qdisc in mode {mode.name}"


def _snapshot_endpoint(ep: Endpoint, mode: Mode) -> dict[str, Any]:
    snap = netif.snapshot(ep)
    k = mode.knobs
    if k.channels:
        text, err = ethtool.try_run(ep, ["ethtool", "-l", ep.ifname])
        snap["channels"] = ethtool.parse_channels(text) if text is not None else {"error": err}
    if k.coalesce:
        text, err = ethtool.try_run(ep, ["ethtool", "-c", ep.ifname])
        snap["coalesce"] = {"current": ethtool.parse_coalesce(text)} if text is not None else {
            "error": err}
    if k.rings:
        text, err = ethtool.try_run(ep, ["ethtool", "-g", ep.ifname])
        snap["rings"] = ethtool.parse_rings(text) if text is not None else {"error": err}
    if k.rss:
        text, err = ethtool.try_run(ep, ["ethtool", "-x", ep.ifname])
        snap["rss"] = {"table": ethtool.parse_indirection(text)} if text is not None else {"error": err}
    if k.rps_cpus is not None or k.xps_cpus is not None or k.rps_flow_cnt is not None:
        try:
            snap["queues"] = ethtool.read_queues(ep)
        except NetifError as exc:
            snap["queues"] = {"error": ethtool.short_error(str(exc))}
    if k.qdisc:
        snap["qdisc_root"] = ethtool.qdisc_root(ep)
    return snap


def snapshot_mode(mode: Mode, endpoints: list[Endpoint],
                  containers: list[tuple[str, Transport, int]] | None = None) -> dict[str, Any]:
    """Everything ``mode`` may touch on ``endpoints`` and in their netns/host sysctls (JSON);
    ``containers`` (label, node, PID on the node): on a cluster, the containers a cpu: mode
    covers (on one host they are those behind the endpoints' namespaces)."""
    state: dict[str, Any] = {"version": 2, "kind": STATE_KIND, "mode": mode.name,
                             "endpoints": {}, "sysctls": {}}
    for ep in endpoints:
        state["endpoints"][ep.label] = _snapshot_endpoint(ep, mode)
    for target, info in _sysctl_targets(mode, endpoints).items():
        values = {}
        node = _node(info)
        for key in info["keys"]:
            scope = ethtool.sysctl_on_node(key, node) if node else ethtool.sysctl_scope(key)
            if scope != "missing":
                values[key] = ethtool.read_sysctl(info["pid"], key, target, node)
        where = node.record() if node else {}
        state["sysctls"][target] = {"pid": info["pid"], "netns_ino": info["netns_ino"],
                                    **where, "values": values}
    if mode.cpu:
        state["cpu"] = _cpu_state(endpoints, containers)
        for target in state["cpu"].values():
            target["values"] = cpu.read(target["pid"], _node(target))
        if per_platform(mode):
            state["platform"] = _platform_state(state["cpu"])
    return state


def per_platform(mode: Mode) -> bool:
    """Whether the mode's cpu: is one platform's, shared by the server tiers."""
    return mode.cpu.get("per") == "platform"


def _platform_state(targets: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The platforms a per-platform cpu: mode sets: the parent cgroup of the covered
    containers, one per node (or this host), with the containers it must hold ("own") and
    those it does ("members")."""
    out: dict[str, dict[str, Any]] = {}
    for target in targets.values():
        node = target.get("node")
        info = cpu.platform_of(target["pid"], _node(target))
        key = f"{node or 'host'}:{info['dirs']['cpu']}"
        entry = out.setdefault(key, {
            "node": node, **({"ssh": target["ssh"]} if node else {}), "dirs": info["dirs"],
            "label": f"platform ({node or 'this host'})", "members": info["members"],
            "own": [], "tiers": [], "pid": target["pid"]})
        entry["own"].append(info["own"])
        entry["tiers"].append(target["label"])
        target["platform"] = key
    for entry in out.values():
        entry["values"] = cpu.read_platform(entry["dirs"], _node(entry))
    return out


def _cpu_state(endpoints: list[Endpoint],
               containers: list[tuple[str, Transport, int]] | None
               ) -> dict[str, dict[str, Any]]:
    """Where a cpu: mode's settings go: each covered container's process (on its node)."""
    if containers:
        return {f"{node.name}:pid:{pid}": {"pid": pid, **node.record(), "label": label}
                for label, node, pid in containers}
    return {f"pid:{pid}": {"pid": pid, "netns_ino": netif.netns_inode(pid), "label": label}
            for pid, label in _cpu_targets(endpoints).items()}


def _cpu_targets(endpoints: list[Endpoint]) -> dict[int, str]:
    """The containers (by pid) whose interfaces a mode covers: its CPU settings go there."""
    out: dict[int, str] = {}
    for ep in endpoints:
        if ep.netns_pid is not None and ep.netns_pid not in out:
            out[ep.netns_pid] = ep.tier
    return out


def _platform_problems(mode: Mode, state: dict) -> list[str]:
    """A platform must hold the covered server tiers and nothing else (the load generator
    outside it), one per node."""
    problems = []
    platforms = state.get("platform") or _platform_state(state.get("cpu", {}))
    per_node: dict[str | None, list[str]] = {}
    for key, entry in platforms.items():
        per_node.setdefault(entry["node"], []).append(key)
        others = sorted(set(entry["members"]) - set(entry["own"]))
        if others:
            problems.append(
                f"mode {mode.name} sets one platform for the server tiers "
                f"({', '.join(entry['tiers'])}), and their parent cgroup {entry['dirs']['cpu']} "
                f"on {entry['node'] or 'this host'} also holds {len(others)} other container(s) "
                f"({', '.join(o[:12] for o in others)}): bring the stack up with tierbench, which "
                "starts only the server tiers under their own parent (compose setting "
                "SERVERS_CGROUP), and leave SERVERS_CGROUP unset")
    for node, keys in per_node.items():
        if len(keys) > 1:
            problems.append(f"mode {mode.name} sets one platform for the server tiers, and on "
                            f"{node or 'this host'} they are under {len(keys)} parent cgroups: "
                            "bring the stack up again with tierbench (tierbench clean, then run)")
    return problems


def _cpu_problems(mode: Mode, state: dict) -> list[str]:
    problems = _platform_problems(mode, state) if per_platform(mode) else []
    want = mode.cpu.get("cpuset")
    if not want:
        return problems
    for target in state.get("cpu", {}).values():
        try:
            allowed = cpu.allowed(target["pid"], _node(target),
                                  platform=per_platform(mode))
        except NetifError as exc:
            problems.append(str(exc))
            continue
        extra = sorted(cpu.parse(want) - allowed)
        if extra:
            problems.append(f"cpu.cpuset {want} of mode {mode.name} names CPU {extra[0]}, which "
                            f"{target['label']} may not use (its parent cgroup allows "
                            f"{','.join(map(str, sorted(allowed)))}); change the mode's cpuset")
    return problems


def _cpu_mismatches(mode: Mode, state: dict) -> list[str]:
    out = []
    want_set, want_limit = mode.cpu.get("cpuset"), mode.cpu.get("limit")
    for entry in state.get("platform", {}).values():
        try:
            have = cpu.read_platform(entry["dirs"], _node(entry))
        except NetifError as exc:
            out.append(str(exc))
            continue
        if want_set and cpu.parse(str(have["cpuset"])) != cpu.parse(want_set):
            out.append(f"{entry['label']}: cpuset is {have['cpuset']}, wanted {want_set}")
        if "limit" in mode.cpu and have["limit"] != round(mode.cpu["limit"], 4):
            out.append(f"{entry['label']}: CPU limit is {have['limit']}, wanted {want_limit}")
    for target in state.get("cpu", {}).values():
        try:
            have = cpu.read(target["pid"], _node(target))
        except NetifError as exc:
            out.append(str(exc))
            continue
        if want_set and cpu.parse(str(have["cpuset"])) != cpu.parse(want_set):
            out.append(f"{target['label']}: cpuset is {have['cpuset']}, wanted {want_set}")
        if "limit" in mode.cpu and not per_platform(mode) and have["limit"] != round(
                mode.cpu["limit"], 4):
            out.append(f"{target['label']}: CPU limit is {have['limit']}, wanted {want_limit}")
    return out


def _who(snap: dict) -> str:
    return f"{snap.get('label', '?')} (driver {snap.get('driver', 'unknown')})"


def endpoint_problems(snap: dict, mode: Mode) -> list[str]:
    """Why ``mode`` cannot be applied to the endpoint of ``snap`` ([] = possible); pure."""
    k = mode.knobs
    who = _who(snap)
    problems = netif.feature_problems(snap, mode.nic)
    fix = f"drop it from mode {mode.name} or use an interface whose driver supports it"
    if k.channels:
        ch = snap.get("channels", {})
        if "error" in ch:
            problems.append(f"channels (ethtool -L {ethtool.ethtool_args(k.channels)}) are not supported by "
                            f"{who}: {ch['error']}; {fix}")
        else:
            for key, want in k.channels.items():
                hi = ch.get("max", {}).get(key)
                if hi is None:
                    problems.append(f"channels {key} (ethtool -L {key} {want}) is not supported "
                                    f"by {who}: ethtool -l shows n/a; {fix}")
                elif want > hi:
                    problems.append(f"channels {key} {want} is more than {who} allows "
                                    f"(at most {hi}); lower it in mode {mode.name}")
    if k.coalesce:
        co = snap.get("coalesce", {})
        if "error" in co:
            problems.append(f"interrupt coalescing (ethtool -C {ethtool.ethtool_args(k.coalesce)}) is not "
                            f"supported by {who}: ethtool -c says {co['error']}; {fix}")
        else:
            for key, want in k.coalesce.items():
                if co.get("current", {}).get(key) is None:
                    problems.append(f"interrupt coalescing setting {key} (ethtool -C {key} "
                                    f"{ethtool.ethtool_args({key: want}).split()[-1]}) is not supported by "
                                    f"{who}: ethtool -c shows n/a; {fix}")
    if k.rings:
        rg = snap.get("rings", {})
        if "error" in rg:
            what = "header-data split and rings" if "tcp-data-split" in k.rings else "rings"
            problems.append(f"{what} (ethtool -G {ethtool.ethtool_args(k.rings)}) are not supported by {who}: "
                            f"ethtool -g says {rg['error']}; {fix}")
        else:
            for key, want in k.rings.items():
                cur = rg.get("current", {}).get(key)
                hi = rg.get("max", {}).get(key)
                if key == "tcp-data-split" and cur not in (True, False):
                    problems.append(f"header-data split (ethtool -G tcp-data-split "
                                    f"{netif.onoff(bool(want))}) is not supported by {who}: "
                                    f"ethtool -g reports {cur if cur else 'no such setting'}; "
                                    f"{fix}")
                elif key == "tx-push" and cur is None:
                    problems.append(f"rings setting tx-push is not supported by {who}; {fix}")
                elif key not in ("tcp-data-split", "tx-push"):
                    if cur is None or (hi is not None and want > hi):
                        limit = "n/a" if cur is None else f"at most {hi}"
                        problems.append(f"ring {key} {want} is not possible on {who} "
                                        f"(ethtool -g: {limit}); change mode {mode.name}")
    if k.rss:
        rss = snap.get("rss", {})
        if "error" in rss:
            problems.append(f"RSS indirection (ethtool -X {ethtool.ethtool_args(k.rss)}) is not supported by "
                            f"{who}: ethtool -x says {rss['error']}; {fix}")
    for key, kind, value in (("rps_cpus", "rx", k.rps_cpus), ("xps_cpus", "tx", k.xps_cpus),
                             ("rps_flow_cnt", "rx", k.rps_flow_cnt)):
        if value is None:
            continue
        qs = snap.get("queues", {})
        if "error" in qs:
            problems.append(f"{key} cannot be read on {who}: {qs['error']}")
            continue
        has = [q for q, files in qs.items() if q.startswith(kind + "-") and key in files]
        if not has:
            problems.append(f"{key} is not supported by {who}: no {kind} queue has {key} "
                            f"(kernel without CONFIG_RPS/CONFIG_XPS?); {fix}")
        elif key.endswith("_cpus") and value != "all" and (
                ethtool.mask_int(str(value))
                & ~ethtool.mask_int(ethtool.online_cpu_mask(_node(snap)))):
            problems.append(f"{key} {value} names CPUs that are not online (online mask "
                            f"{ethtool.online_cpu_mask(_node(snap))}); change mode "
                            f"{mode.name}")
    if k.qdisc:
        root = snap.get("qdisc_root", {})
        if root.get("handle") not in (None, "0:"):
            problems.append(f"{who} already has a configured root qdisc {root.get('kind')} "
                            f"{root.get('handle')}, which a restore could not rebuild; remove it "
                            f"(tc qdisc del dev {snap.get('ifname')} root) or run tierbench clean")
    return problems


def check_mode(mode: Mode, endpoints: list[Endpoint], state: dict | None = None,
               containers: list[tuple[str, Transport, int]] | None = None) -> list[str]:
    """Every reason ``mode`` cannot be applied to ``endpoints`` ([] = ok); changes nothing.

    ``state`` is a snapshot from :func:`snapshot_mode`; without one a snapshot is taken.
    ``containers``: as for snapshot_mode.
    """
    problems: list[str] = []
    if state is None:
        state = {"endpoints": {}}
        for ep in endpoints:
            try:
                state["endpoints"][ep.label] = _snapshot_endpoint(ep, mode)
            except NetifError as exc:
                problems.append(f"{ep.label} cannot be read: {exc}")
    for ep in endpoints:
        snap = state["endpoints"].get(ep.label)
        if snap is None:
            if not any(p.startswith(f"{ep.label} cannot be read") for p in problems):
                problems.append(f"{ep.label}: no snapshot was taken before checking")
            continue
        problems += endpoint_problems(snap, mode)
    nodes = _nodes(endpoints)
    for node in [*nodes] if nodes else [None]:
        qp = _qdisc_problem(mode, node)
        if qp and qp not in problems:
            problems.append(qp)
    if mode.cpu and nodes and not containers and "cpu" not in state:
        problems.append(f"mode {mode.name} sets the CPUs of containers (cpu:), and no container "
                        "it covers was given for the cluster's nodes")
    elif mode.cpu:
        problems += _cpu_problems(mode, state if "cpu" in state else
                                  {"cpu": _cpu_state(endpoints, containers)})
    in_netns = any(ep.netns_pid is not None for ep in endpoints)
    for key in mode.knobs.sysctls:
        for node in nodes:
            try:
                missing = ethtool.sysctl_on_node(key, node) == "missing"
            except NetifError as exc:
                problems.append(str(exc))
                continue
            if missing:
                problems.append(f"sysctl {key} does not exist on the kernel of {node.name} (no "
                                f"{ethtool.sysctl_path(key)}); drop it from mode {mode.name}")
        if nodes:
            continue
        scope = ethtool.sysctl_scope(key)
        if scope == "missing":
            problems.append(f"sysctl {key} does not exist on this kernel (no "
                            f"{ethtool.sysctl_path(key)}); drop it from mode {mode.name}")
        elif scope == "netns-readonly" and in_netns:
            problems.append(
                f"sysctl {key} is kept per network namespace but is read-only inside one on "
                f"this kernel (a namespace copies the host's value when it is created), so it "
                f"cannot change for running containers; drop it from mode {mode.name} (use "
                f"net.ipv4.tcp_rmem/tcp_wmem, writable per namespace) or set it on the host "
                f"before the stack starts")
    return problems


def _set_endpoint(ep: Endpoint, snap: dict, mode: Mode) -> None:
    k = mode.knobs
    netif.set_features(ep, netif.wanted_feature_args(snap, mode.nic))
    if mode.nic.mtu is not None:
        netif.set_mtu(ep, mode.nic.mtu)
    if k.channels:
        netif.run_in(ep, ["ethtool", "-L", ep.ifname] + ethtool.ethtool_args(k.channels).split())
    if k.rings:
        netif.run_in(ep, ["ethtool", "-G", ep.ifname] + ethtool.ethtool_args(k.rings).split())
    if k.coalesce:
        ordered = dict(sorted(k.coalesce.items(), key=lambda kv: not kv[0].startswith("adaptive")))
        netif.run_in(ep, ["ethtool", "-C", ep.ifname] + ethtool.ethtool_args(ordered).split())
    if k.rss:
        if "equal" in k.rss:
            rss_args = ["equal", str(k.rss["equal"])]
        elif "weights" in k.rss:
            rss_args = ["weight"] + [str(w) for w in k.rss["weights"]]
        else:
            rss_args = ["default"]
        netif.run_in(ep, ["ethtool", "-X", ep.ifname] + rss_args)
    writes: dict[str, str] = {}
    if k.rps_cpus is not None or k.xps_cpus is not None or k.rps_flow_cnt is not None:
        # re-read: a channel change above may have added queues the snapshot did not have
        writes = ethtool.mask_writes(ethtool.read_queues(ep), k.rps_cpus, k.xps_cpus,
                                     k.rps_flow_cnt, _ep_node(ep))
    if writes:
        ethtool.write_masks(ep, writes)
    if k.qdisc:
        for cmd in ethtool.qdisc_commands(ep.ifname, k.qdisc):
            netif.run_in(ep, cmd)


def _set_sysctls(mode: Mode, state: dict) -> None:
    for target, info in state.get("sysctls", {}).items():
        for key in info["values"]:
            ethtool.write_sysctl(info["pid"], key, mode.knobs.sysctls[key], target,
                                 _node(info))


def _set_cpu(mode: Mode, state: dict) -> None:
    """Each container's cpuset and limit; with a platform, its cpuset first widened to hold
    both the old and the new CPUs (cgroup v1 refuses a parent narrower than its children), the
    containers' cpusets, then the platform's cpuset and the limit they share."""
    want_set, want_limit = mode.cpu.get("cpuset"), mode.cpu.get("limit")
    platforms = state.get("platform", {})
    for entry in platforms.values():
        _widen(entry, want_set)
    for target in state.get("cpu", {}).values():
        cpu.write(target["pid"], want_set, want_limit,
                  set_limit="limit" in mode.cpu and not platforms, node=_node(target))
    for entry in platforms.values():
        cpu.write_platform(entry["dirs"], want_set, want_limit, set_limit="limit" in mode.cpu,
                           node=_node(entry))


def _widen(entry: dict, cpuset: str | None) -> None:
    """A platform's cpuset made the union of what it has and ``cpuset`` ('' = every CPU)."""
    if not cpuset:
        return
    have = str(cpu.read_platform(entry["dirs"], _node(entry))["cpuset"])
    if have:
        both = ",".join(str(c) for c in sorted(cpu.parse(have) | cpu.parse(cpuset)))
        cpu.write_platform(entry["dirs"], both, None, set_limit=False, node=_node(entry))


def apply_mode(mode: Mode, endpoints: list[Endpoint], state: dict) -> None:
    """Check, apply, read back; on any failure restore ``state`` and raise NetifError."""
    problems = check_mode(mode, endpoints, state)
    if problems:
        raise NetifError(f"mode {mode.name} cannot be applied, nothing was changed: "
                         + "; ".join(problems))
    failure: str | None = None
    mismatches: list[str] = []
    for _ in range(APPLY_PASSES):
        try:
            for ep in endpoints:
                _set_endpoint(ep, state["endpoints"][ep.label], mode)
            _set_sysctls(mode, state)
            _set_cpu(mode, state)
        except NetifError as exc:
            failure = str(exc)
            ep_snap = next((s for s in state["endpoints"].values()
                            if failure.startswith(s.get("label", "") + ":")), None)
            if ep_snap is not None:
                failure += f" (driver {ep_snap.get('driver', 'unknown')})"
            break
        mismatches = verify_mode(mode, endpoints, state)
        if not mismatches:
            return
    leftovers = [p for p in restore_state(state) if "gone, nothing to restore" not in p]
    msg = f"could not apply mode {mode.name}: " + "; ".join(
        ([failure] if failure else []) + mismatches)
    if leftovers:
        msg += "; restoring the snapshot also failed: " + "; ".join(leftovers)
    else:
        msg += "; the previous settings were restored"
    raise NetifError(msg)


def _endpoint_mismatches(ep: Endpoint, mode: Mode, snap: dict | None) -> list[str]:
    k = mode.knobs
    fresh = netif.read_features(ep, snap)
    if snap is None:
        fresh["driver"] = netif.driver(ep)
    who = _who(fresh)
    out = netif.feature_mismatches(fresh, mode.nic)
    if k.channels:
        cur = ethtool.parse_channels(netif.run_in(ep, ["ethtool", "-l", ep.ifname]))["current"]
        out += [f"{who}: channels {key} is {cur.get(key)}, wanted {v}"
                for key, v in k.channels.items() if cur.get(key) != v]
    if k.coalesce:
        cur = ethtool.parse_coalesce(netif.run_in(ep, ["ethtool", "-c", ep.ifname]))
        out += [f"{who}: coalescing {key} is {cur.get(key)}, wanted {v}"
                for key, v in k.coalesce.items() if cur.get(key) != v]
    if k.rings:
        cur = ethtool.parse_rings(netif.run_in(ep, ["ethtool", "-g", ep.ifname]))["current"]
        out += [f"{who}: ring setting {key} is {cur.get(key)}, wanted {v}"
                for key, v in k.rings.items() if cur.get(key) != v]
    if k.rss and "equal" in k.rss:
        table = ethtool.parse_indirection(netif.run_in(ep, ["ethtool", "-x", ep.ifname]))
        if set(table) != set(range(k.rss["equal"])):
            out.append(f"{who}: RSS table uses queues {sorted(set(table))}, wanted "
                       f"0-{k.rss['equal'] - 1}")
    if k.rps_cpus is not None or k.xps_cpus is not None or k.rps_flow_cnt is not None:
        queues = ethtool.read_queues(ep)
        for path, want in ethtool.mask_writes(queues, k.rps_cpus, k.xps_cpus, k.rps_flow_cnt,
                                              _ep_node(ep)).items():
            q, f = path.split("/")
            have = queues[q][f]
            if have == "unreadable" or ethtool.queue_value(f, have) != ethtool.queue_value(f, want):
                out.append(f"{who}: {q} {f} is {have}, wanted {want}")
    if k.qdisc:
        root = ethtool.qdisc_root(ep)
        if root.get("kind") != k.qdisc["kind"] or root.get("handle") != "1:":
            out.append(f"{who}: root qdisc is {root.get('kind')} {root.get('handle')}, "
                       f"wanted {k.qdisc['kind']} 1:")
    return out


def verify_mode(mode: Mode, endpoints: list[Endpoint], state: dict | None = None) -> list[str]:
    """Re-read every setting of ``mode`` (sub-features included); return mismatches."""
    out: list[str] = []
    snaps = (state or {}).get("endpoints", {})
    for ep in endpoints:
        try:
            out += _endpoint_mismatches(ep, mode, snaps.get(ep.label))
        except NetifError as exc:
            out.append(f"{ep.label}: could not re-read the settings: {exc}")
    targets = (state or {}).get("sysctls") or {
        t: {"pid": i["pid"], "node": i.get("node"), "ssh": i.get("ssh"),
            "values": dict.fromkeys(i["keys"])}
        for t, i in _sysctl_targets(mode, endpoints).items()}
    for target, info in targets.items():
        for key in info["values"]:
            want = mode.knobs.sysctls.get(key)
            if want is None:
                continue
            try:
                have = ethtool.read_sysctl(info["pid"], key, target, _node(info))
            except NetifError as exc:
                out.append(f"{target}: could not re-read {key}: {exc}")
                continue
            if have != want:
                out.append(f"{target}: sysctl {key} is {have!r}, wanted {want!r}")
    if mode.cpu:
        out += _cpu_mismatches(mode, state or snapshot_mode(mode, endpoints))
    return out


def _restore_extras(ep: Endpoint, snap: dict) -> list[str]:
    """Put channels, rings, coalescing, RSS, RPS/XPS and the root qdisc back; return problems."""
    problems: list[str] = []
    who = _who(snap)

    def attempt(argv: list[str]) -> None:
        try:
            netif.run_in(ep, argv)
        except NetifError as exc:
            problems.append(f"{exc} (driver {snap.get('driver', 'unknown')})")

    ch = snap.get("channels", {}).get("current")
    if ch:
        cur = ethtool.parse_channels(netif.run_in(ep, ["ethtool", "-l", ep.ifname]))["current"]
        diff = {k: v for k, v in ch.items() if v is not None and cur.get(k) != v}
        if diff:
            attempt(["ethtool", "-L", ep.ifname] + ethtool.ethtool_args(diff).split())
    rg = snap.get("rings", {}).get("current")
    if rg:
        cur = ethtool.parse_rings(netif.run_in(ep, ["ethtool", "-g", ep.ifname]))["current"]
        diff = {k: v for k, v in rg.items()
                if isinstance(v, (bool, int)) and cur.get(k) != v}
        if diff:
            attempt(["ethtool", "-G", ep.ifname] + ethtool.ethtool_args(diff).split())
    co = snap.get("coalesce", {}).get("current")
    if co:
        cur = ethtool.parse_coalesce(netif.run_in(ep, ["ethtool", "-c", ep.ifname]))
        diff = {k: v for k, v in co.items() if v is not None and cur.get(k) != v}
        diff = dict(sorted(diff.items(), key=lambda kv: not kv[0].startswith("adaptive")))
        if diff:
            attempt(["ethtool", "-C", ep.ifname] + ethtool.ethtool_args(diff).split())
    table = snap.get("rss", {}).get("table")
    if table:
        cur_t = ethtool.parse_indirection(netif.run_in(ep, ["ethtool", "-x", ep.ifname]))
        if cur_t != table:
            attempt(["ethtool", "-X", ep.ifname, "default"])
            if ethtool.parse_indirection(netif.run_in(ep, ["ethtool", "-x", ep.ifname])) != table:
                problems.append(f"{who}: RSS table is back to the driver default, which is "
                                "not the table the snapshot had")
    queues = snap.get("queues")
    if queues and "error" not in queues:
        cur_q = ethtool.read_queues(ep)
        writes = {f"{q}/{f}": v for q, files in queues.items() for f, v in files.items()
                  if v != "unreadable" and cur_q.get(q, {}).get(f) not in (None, v)
                  and ethtool.queue_value(f, cur_q[q][f]) != ethtool.queue_value(f, v)}
        if writes:
            try:
                ethtool.write_masks(ep, writes)
            except NetifError as exc:
                problems.append(str(exc))
    root = snap.get("qdisc_root")
    if root is not None:
        cur = ethtool.qdisc_root(ep)
        if cur != root:
            if root.get("handle") in (None, "0:"):
                attempt(["tc", "qdisc", "del", "dev", ep.ifname, "root"])
            else:
                problems.append(f"{who}: root qdisc was {root}, cannot rebuild it")
    return problems


def _remaining_extras(ep: Endpoint, snap: dict) -> list[str]:
    """Differences left after restoring the extras (pure reads)."""
    who = _who(snap)
    out: list[str] = []
    for key, opt, parse in (("channels", "-l", ethtool.parse_channels), ("rings", "-g", ethtool.parse_rings)):
        saved = snap.get(key, {}).get("current")
        if saved:
            cur = parse(netif.run_in(ep, ["ethtool", opt, ep.ifname]))["current"]
            out += [f"{who}: {key} {k} is {cur.get(k)}, snapshot had {v}"
                    for k, v in saved.items()
                    if isinstance(v, (bool, int)) and cur.get(k) != v]
    saved_co = snap.get("coalesce", {}).get("current")
    if saved_co:
        cur = ethtool.parse_coalesce(netif.run_in(ep, ["ethtool", "-c", ep.ifname]))
        out += [f"{who}: coalescing {k} is {cur.get(k)}, snapshot had {v}"
                for k, v in saved_co.items() if v is not None and cur.get(k) != v]
    queues = snap.get("queues")
    if queues and "error" not in queues:
        cur_q = ethtool.read_queues(ep)
        for q, files in queues.items():
            for f, v in files.items():
                have = cur_q.get(q, {}).get(f)
                if v != "unreadable" and have not in (None, "unreadable") and (
                        ethtool.queue_value(f, have) != ethtool.queue_value(f, v)):
                    out.append(f"{who}: {q} {f} is {have}, snapshot had {v}")
    root = snap.get("qdisc_root")
    if root is not None:
        cur = ethtool.qdisc_root(ep)
        if cur != root and root.get("handle") in (None, "0:") and cur.get("handle") != "0:":
            out.append(f"{who}: root qdisc is {cur}, snapshot had {root}")
    return out


def _restore_endpoint(snap: dict) -> list[str]:
    ep = netif.endpoint_of(snap)
    problems = netif.restore_endpoint(snap)
    if any("gone, nothing to restore" in p for p in problems):
        return problems
    problems += _restore_extras(ep, snap)
    try:
        remaining = _remaining_extras(ep, snap)
    except NetifError as exc:
        return problems + [f"{ep.label}: could not re-read the settings after restoring: {exc}"]
    return problems + [r for r in remaining if r not in problems]


def _restore_sysctls(target: str, info: dict) -> list[str]:
    pid = info.get("pid")
    if pid is not None:
        ino = info.get("netns_ino")
        if not os.path.exists(f"/proc/{pid}") or (
                ino is not None and netif.netns_inode(pid) != ino):
            return [f"{target}: gone, nothing to restore"]
    node = _node(info)
    problems: list[str] = []
    for key, value in info.get("values", {}).items():
        try:
            if ethtool.read_sysctl(pid, key, target, node) != value:
                ethtool.write_sysctl(pid, key, value, target, node)
                have = ethtool.read_sysctl(pid, key, target, node)
                if have != value:
                    problems.append(f"{target}: sysctl {key} is {have!r}, snapshot had {value!r}")
        except NetifError as exc:
            problems.append(str(exc))
    return problems


def restore_state(state: dict) -> list[str]:
    """Put back everything in ``state``; return problems ([] = done; gone ones are reported).

    Accepts the mode state of :func:`snapshot_mode` and the older {label: snapshot} form.
    Lines about endpoints or namespaces that no longer exist contain "gone, nothing to restore".
    """
    if state.get("kind") != STATE_KIND:
        return netif.restore(state)
    problems: list[str] = []
    for label, snap in state.get("endpoints", {}).items():
        try:
            problems += _restore_endpoint(snap)
        except Exception as exc:  # noqa: BLE001 - restore must carry on with the others
            problems.append(f"{label}: restore failed unexpectedly: {exc}")
    for target, info in state.get("sysctls", {}).items():
        try:
            problems += _restore_sysctls(target, info)
        except Exception as exc:  # noqa: BLE001
            problems.append(f"{target}: restore failed unexpectedly: {exc}")
    platforms = state.get("platform", {})
    for entry in platforms.values():
        try:
            if cpu.platform_exists(entry["dirs"], _node(entry)):
                _widen(entry, str(entry["values"]["cpuset"]))
        except NetifError as exc:
            problems.append(str(exc))
    for target, info in state.get("cpu", {}).items():
        problems += _restore_cpu(target, info)
    for entry in platforms.values():
        problems += _restore_platform(entry)
    return problems


def _restore_platform(entry: dict) -> list[str]:
    """A platform's saved cpuset and limit, even when its containers are gone (the parent
    cgroup outlives them, and the next bring-up would inherit what it holds)."""
    node, saved = _node(entry), entry["values"]
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


def _restore_cpu(target: str, info: dict) -> list[str]:
    pid, node = info["pid"], _node(info)
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


def state_view(state: dict) -> dict[str, Any]:
    """Compact manifest form: per endpoint settings_view plus the extras, and the sysctls."""
    if state.get("kind") != STATE_KIND:
        return {label: netif.settings_view(s) for label, s in state.items()}
    eps: dict[str, Any] = {}
    for label, snap in state.get("endpoints", {}).items():
        view = netif.settings_view(snap)
        for key in ("channels", "rings"):
            if key in snap:
                view[key] = snap[key].get("current", snap[key])
        if "coalesce" in snap:
            view["coalesce"] = {k: v for k, v in snap["coalesce"].get("current", snap[
                "coalesce"]).items() if v is not None}
        if "rss" in snap:
            view["rss"] = snap["rss"]
        if "queues" in snap:
            view["queues"] = snap["queues"]
        if "qdisc_root" in snap:
            view["qdisc_root"] = snap["qdisc_root"]
        eps[label] = view
    sysctls = {t: dict(i.get("values", {})) for t, i in state.get("sysctls", {}).items()}
    view = {"endpoints": eps, "sysctls": sysctls}
    if "cpu" in state:
        view["cpu"] = {i.get("label", t): dict(i["values"]) for t, i in state["cpu"].items()}
    if "platform" in state:
        view["platform"] = {i["label"]: {**i["values"], "tiers": list(i["tiers"])}
                            for i in state["platform"].values()}
    return view


@contextmanager
def mode_applied(mode: Mode, eps: list[Endpoint], watched: list[Endpoint],
                 state_file: netif.StateFile, record: dict, settle_s: float,
                 save: Callable[[], None],
                 containers: list[tuple[str, Transport, int]] | None = None) -> Iterator[None]:
    """Apply a mode to its endpoints for the body of the `with`, verified, and restore it after,
    whatever happens. ``record`` (the point's manifest entry) gets the interfaces and the mode's
    settings before, during and after; the pre-change state is on disk (``state_file``) before
    the first change, so `tierbench clean` can restore after a crash. ``containers``: as for
    snapshot_mode."""
    watched = watched + [ep for ep in eps if ep not in watched]

    def interfaces() -> dict:
        # An endpoint whose container stopped (a failure test, a crash) is recorded as gone.
        views = {}
        for ep in watched:
            try:
                views[ep.label] = netif.settings_view(netif.snapshot(ep))
            except NetifError as exc:
                views[ep.label] = {"gone": str(exc)}
        return views

    def present(views: dict) -> dict:
        return {k: v for k, v in views.items() if "gone" not in v}

    record["endpoints"] = [ep.label for ep in eps]
    record["interfaces_before"] = interfaces()
    state = snapshot_mode(mode, eps, containers)
    record["mode_state_before"] = state_view(state)
    state_file.save(state)
    save()
    problems: list[str] = []
    try:
        apply_mode(mode, eps, state)
        time.sleep(settle_s)
        record["interfaces_during"] = interfaces()
        record["mode_state_during"] = state_view(snapshot_mode(mode, eps, containers))
        mismatches = verify_mode(mode, eps, state)
        record["mode_verified"] = not mismatches
        if mismatches:
            raise NetifError(f"mode {mode.name} did not hold: {'; '.join(mismatches)}")
        yield
    finally:
        problems = [p for p in restore_state(state) if "gone, nothing to restore" not in p]
        record["interfaces_after"] = interfaces()
        live = [ep for ep in eps if "gone" not in record["interfaces_after"].get(ep.label, {})]
        try:
            record["mode_state_after"] = state_view(snapshot_mode(mode, live, containers))
        except NetifError as exc:  # a container (on a node) that stopped: nothing to read
            record["mode_state_after"] = {"error": str(exc)}
        after = present(record["interfaces_after"])
        record["restored"] = not problems and (
            after == {k: v for k, v in record["interfaces_before"].items() if k in after}
            and _endpoints_subset(record["mode_state_after"], record["mode_state_before"]))
        if problems:
            record["restore_problems"] = problems
        else:
            state_file.clear()
    if problems:
        raise NetifError("interfaces could not be restored after "
                         f"{record.get('point', 'the point')}: {'; '.join(problems)}; "
                         "run `tierbench clean`")


def _endpoints_subset(after: dict, before: dict) -> bool:
    """The mode's state after equals the state before wherever it could still be read (an
    endpoint or netns whose container stopped has nothing left to compare)."""
    return all({k: before.get(part, {}).get(k) for k in after.get(part, {})} == after.get(part, {})
               for part in ("endpoints", "sysctls", "cpu", "platform"))
