"""A mode's sysctls: where each goes (a container's network namespace, the host, or each
cluster node's host), read (a snapshot), checked against the kernel, set, read back and
restored; a target's sysctls read in one command and written in one (``read_sysctls``: ``sysctl
-e KEY...``, a key the kernel lacks named in one sentence; ``write_sysctls``: ``sysctl -q -w
KEY=VALUE...``), and probed for where the kernel keeps them (``sysctl_scope`` here,
``sysctls_on_node`` on a node: all of a mode's keys in one probe, remembered for the process)
through :func:`tierbench.interfaces.netif.run_ns`.

The snapshot's part is the mode state's "sysctls": per target its process (None: the host),
its namespace's inode (to tell a reused PID), its node and the saved values; on a cluster node
whose mode sets the congestion control, also "routes": the node's host routes to its peers as
they were (tierbench.modes.congctl).

A congestion control set in the containers' namespaces (net.ipv4.tcp_congestion_control) must
be in the host's allowed list (net.ipv4.tcp_allowed_congestion_control, one for the whole
machine: a namespace may pick only an allowed algorithm, EPERM otherwise, even for root). When
it is not, the host target carries the allowed list too: the algorithm is added to it before
the namespaces are set and the saved list is put back with the rest. Widening the list changes
no connection, it only lets namespaces choose.

On a cluster the tiers share each node's own namespace (host networking), where the sysctl
would switch every connection of the node: there the congestion control goes on the routes to
the run's other nodes instead (tierbench.modes.congctl), which needs no allowance and no
writable /proc/sys. The other sysctls are written on the node; a node whose /proc/sys is
read-only (a lab node) refuses them before the run starts (:func:`node_problems`).
"""

from __future__ import annotations

import os
import re
import shlex
from functools import lru_cache
from typing import Any

from tierbench.interfaces import netif
from tierbench.interfaces.netif import Endpoint, NetifError
from tierbench.modes import congctl
from tierbench.modes.model import Mode
from tierbench.transport import LOCAL, Transport, node_of, run_argv

__all__ = ["change", "clear_probes", "mismatches", "node_problems", "nodes", "problems",
           "read_sysctls", "restore", "restore_commands", "snapshot", "sysctls_on_node",
           "targets", "view", "write_sysctls"]

CONGESTION = "net.ipv4.tcp_congestion_control"
ALLOWED = "net.ipv4.tcp_allowed_congestion_control"
AVAILABLE = "net.ipv4.tcp_available_congestion_control"


def sysctl_path(key: str) -> str:
    return "/proc/sys/" + key.replace(".", "/")


_ON_NODE: dict[tuple[str, Transport], str] = {}


def sysctls_on_node(keys: list[str], node: Transport) -> dict[str, str]:
    """Per key, ``host`` when it exists on a cluster node (whose tiers share its namespace: host
    networking), ``readonly`` when it exists but cannot be written there (a node whose /proc/sys
    is mounted read-only, as in a container), ``missing`` when it does not: the keys not yet
    known probed in one command, remembered for the process."""
    unknown = [k for k in dict.fromkeys(keys) if (k, node) not in _ON_NODE]
    if unknown:
        script = "; ".join(
            f"if ! test -e {shlex.quote(sysctl_path(k))}; then echo {shlex.quote(k)} missing; "
            f"elif test -w {shlex.quote(sysctl_path(k))}; then echo {shlex.quote(k)} host; "
            f"else echo {shlex.quote(k)} readonly; fi" for k in unknown)
        out = netif.run_ns(None, ["sh", "-c", script], str(node.name), node)
        said = {w[0]: w[1] for line in out.splitlines() if len(w := line.split()) == 2}
        for k in unknown:
            _ON_NODE[(k, node)] = said.get(k, "missing")
    return {k: _ON_NODE[(k, node)] for k in keys}


def sysctl_on_node(key: str, node: Transport) -> str:
    """:func:`sysctls_on_node` of one key."""
    return sysctls_on_node([key], node)[key]


def clear_probes() -> None:
    """Forget what the probes found (a test's faked kernels)."""
    _ON_NODE.clear()
    sysctl_scope.cache_clear()


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
    return read_sysctls(pid, [key], who, node)[key]


def read_sysctls(pid: int | None, keys: list[str], who: str, node: Transport | None = None
                 ) -> dict[str, str]:
    """The values of ``keys`` in the netns of ``pid`` (on ``node``), in one command, their
    whitespace as one space; NetifError, one sentence naming it, when a key does not exist
    there (:func:`missing_sentence`)."""
    values, missing = read_present(pid, keys, who, node)
    if missing:
        raise NetifError(missing_sentence(who, missing))
    return values


def read_present(pid: int | None, keys: list[str], who: str, node: Transport | None = None
                 ) -> tuple[dict[str, str], list[str]]:
    """The values of those of ``keys`` that exist there, and the keys that do not (``sysctl
    -e``: a key the kernel lacks is left out of its output, where ``sysctl -n`` of several keys
    would leave it impossible to tell which value is whose)."""
    if not keys:
        return {}, []
    values = parse_sysctls(netif.run_ns(pid, ["sysctl", "-e", *keys], who, node or LOCAL),
                           keys)
    return values, [k for k in keys if k not in values]


def parse_sysctls(text: str, keys: list[str]) -> dict[str, str]:
    """``sysctl KEY...`` output ("KEY = VALUE" lines; a value of several lines goes on without
    its key) as {key: value}, the value's whitespace as one space."""
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        m = re.match(r"^(\S+) =(?: (.*))?$", line)
        if m and m.group(1) in keys:
            current = parts.setdefault(m.group(1), [])
            current.append(m.group(2) or "")
        elif current is not None:
            current.append(line)
    return {k: " ".join(" ".join(v).split()) for k, v in parts.items()}


def missing_sentence(who: str, keys: list[str]) -> str:
    """One sentence naming the sysctls the kernel of ``who`` lacks."""
    paths = ", ".join(sysctl_path(k) for k in keys)
    if len(keys) == 1:
        return f"{who}: sysctl {keys[0]} does not exist there (no {paths})"
    return f"{who}: sysctls {', '.join(keys)} do not exist there (no {paths})"


def write_sysctls(pid: int | None, values: dict[str, str], who: str,
                  node: Transport | None = None) -> None:
    """Write every key of ``values`` in one command (sysctl writes each, whatever the others
    did, and says which key it could not set)."""
    if values:
        netif.run_ns(pid, sysctl_argv(values), who, node or LOCAL)


def sysctl_argv(values: dict[str, str]) -> list[str]:
    """``sysctl -q -w KEY=VALUE...`` (a value with spaces stays one argument)."""
    return ["sysctl", "-q", "-w", *(f"{k}={v}" for k, v in values.items())]


def nodes(endpoints: list[Endpoint]) -> list[Transport]:
    """The cluster nodes the endpoints are on (in order; none on a single host)."""
    return list(dict.fromkeys(ep.via for ep in endpoints if ep.via.remote))


def peers(node: Transport, endpoints: list[Endpoint]) -> list[str]:
    """The data-plane peers of a node's endpoints (where its tiers connect)."""
    return list(dict.fromkeys(p for ep in endpoints if ep.via == node for p in ep.peers))


def targets(mode: Mode, endpoints: list[Endpoint]) -> dict[str, dict[str, Any]]:
    """Where each sysctl goes: {target: {"pid": pid|None, "netns_ino": ino, "keys": [...]}};
    on a cluster, each node's host (its tiers share it: host networking), with the node and
    the ssh command that reaches it, the congestion control left out of the keys and its
    routes' peers under "peers"."""
    on = nodes(endpoints)
    if on:
        keys = [k for k in mode.knobs.sysctls if k != CONGESTION]
        on_nodes: dict[str, dict[str, Any]] = {}
        for n in on:
            info: dict[str, Any] = {"pid": None, "netns_ino": None, **n.record(), "keys": keys}
            if CONGESTION in mode.knobs.sysctls:
                info["peers"] = peers(n, endpoints)
            if keys or "peers" in info:
                on_nodes[f"node:{n.name}"] = info
        return on_nodes
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
        scope = sysctl_scope(key)
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
    """The mode state's "sysctls": every target with the current values of its keys, read in
    one command per target (a key the kernel lacks is left out: the check refuses it)."""
    out = {}
    for target, info in targets(mode, endpoints).items():
        node = node_of(info)
        scopes = (sysctls_on_node(info["keys"], node) if node
                  else {k: sysctl_scope(k) for k in info["keys"]})
        values = read_sysctls(info["pid"], [k for k in info["keys"] if scopes[k] != "missing"],
                              target, node)
        where = node.record() if node else {}
        out[target] = {"pid": info["pid"], "netns_ino": info["netns_ino"], **where,
                       "values": values}
        if node and "peers" in info:
            out[target]["routes"] = congctl.read(node, info["peers"], target)
    return out


def view(info: dict[str, Any]) -> dict[str, Any]:
    """A target's saved values for the manifest, its routes as "route PEER" keys."""
    return {**info.get("values", {}),
            **{f"route {p}": congctl.canonical(line) for p, line in info.get("routes", {}).items()}}


def node_problems(mode: Mode, node: Transport, peers: list[str] | None = None) -> list[str]:
    """Why ``mode``'s sysctls cannot be set on a cluster node ([] = they can): a sysctl its
    kernel lacks or its /proc/sys keeps read-only, a congestion control it does not have, or
    (``peers`` given: the run's other nodes) no peer to set one on. Run before anything starts
    (the runner's preflight, every node of the run) and again on the deployment's nodes."""
    found: list[str] = []
    keys = [k for k in mode.knobs.sysctls if k != CONGESTION]
    try:
        scopes = sysctls_on_node(keys, node)
    except NetifError as exc:
        return [str(exc)]
    if CONGESTION in mode.knobs.sysctls:
        value = mode.knobs.sysctls[CONGESTION]
        try:
            available = read_sysctl(None, AVAILABLE, f"node:{node.name}", node).split()
        except NetifError as exc:
            available = None
            found.append(str(exc))
        if available is not None and value not in available:
            found.append(f"mode {mode.name} sets the congestion control {value!r}, "
                         f"which the kernel of {node.name} does not have (it has "
                         f"{', '.join(available)}); load its module there (modprobe "
                         f"tcp_{value}) or change the mode")
        elif available is not None and peers is not None and not peers:
            found.append(f"mode {mode.name} sets the congestion control, which "
                         f"tierbench sets on {node.name}'s routes to the run's other "
                         f"nodes, and no other node of the run has a data-plane "
                         f"address (tiers on one node talk over its local routes)")
    for key in keys:
        if scopes[key] == "missing":
            found.append(f"sysctl {key} does not exist on the kernel of {node.name} (no "
                         f"{sysctl_path(key)}); drop it from mode {mode.name}")
        elif scopes[key] == "readonly":
            found.append(f"mode {mode.name} cannot run on {node.name}: its /proc/sys is "
                         f"read-only (a container, such as a lab node), so sysctl {key} cannot "
                         f"be set there; drop the sysctl from the mode or run it on nodes whose "
                         f"/proc/sys is writable")
    return found


def problems(mode: Mode, endpoints: list[Endpoint]) -> list[str]:
    """Sysctls this kernel (or a node's) lacks, or keeps read-only in the containers'
    namespaces ([] = every one can be set)."""
    found: list[str] = []
    on = nodes(endpoints)
    for node in on:
        found += node_problems(mode, node, peers(node, endpoints))
    if on:
        return found
    in_netns = any(ep.netns_pid is not None for ep in endpoints)
    for key in mode.knobs.sysctls:
        scope = sysctl_scope(key)
        if scope == "missing":
            found.append(f"sysctl {key} does not exist on this kernel (no "
                         f"{sysctl_path(key)}); drop it from mode {mode.name}")
        elif key == CONGESTION:
            available = read_sysctl(None, AVAILABLE, "host").split()
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
    """Every sysctl of the mode written at each target of ``state``, in one command per target
    (on a cluster node, the congestion control on its routes to the peers)."""
    for target, info in state.get("sysctls", {}).items():
        node = node_of(info)
        if node and "routes" in info:
            congctl.set_routes(node, info["routes"], mode.knobs.sysctls[CONGESTION], target)
        writes = {key: str(mode.knobs.sysctls[key]) for key in info["values"] if key != ALLOWED}
        if ALLOWED in info["values"]:  # the algorithm the namespaces are given, added
            have = read_sysctl(None, ALLOWED, target)
            want = allowed_with(have, mode.knobs.sysctls[CONGESTION])
            if want != have:
                writes = {ALLOWED: want, **writes}
        write_sysctls(info["pid"], writes, target, node)


def mismatches(mode: Mode, endpoints: list[Endpoint], state: dict | None,
               fresh: dict | None = None) -> list[str]:
    """The mode's sysctls read back (in one command per target; ``fresh``: the mode state's
    "sysctls" of a snapshot just taken, read instead) that differ from it (at the targets of
    ``state``, or where they would go)."""
    out: list[str] = []
    chosen = (state or {}).get("sysctls") or {
        t: {"pid": i["pid"], "node": i.get("node"), "ssh": i.get("ssh"),
            "values": dict.fromkeys(i["keys"]),
            **({"routes": dict.fromkeys(i["peers"])} if "peers" in i else {})}
        for t, i in targets(mode, endpoints).items()}
    for target, info in chosen.items():
        node = node_of(info)
        if node and "routes" in info:
            out += (route_mismatches(node, list(info["routes"]),
                                     mode.knobs.sysctls[CONGESTION], target)
                    if fresh is None or target not in fresh else
                    routes_differ(fresh[target].get("routes", {}),
                                  mode.knobs.sysctls[CONGESTION], target))
        keys = [k for k in info["values"]
                if mode.knobs.sysctls.get(CONGESTION if k == ALLOWED else k) is not None]
        if fresh is not None and target in fresh:
            have_all = fresh[target]["values"]
        else:
            try:
                have_all = read_sysctls(info["pid"], keys, target, node)
            except NetifError as exc:
                out.append(f"{target}: could not re-read its sysctls: {exc}")
                continue
        for key in keys:
            want = str(mode.knobs.sysctls[CONGESTION if key == ALLOWED else key])
            have = have_all.get(key)
            if have is None:
                out.append(f"{target}: sysctl {key} could not be re-read (no "
                           f"{sysctl_path(key)})")
            elif key == ALLOWED:
                if want not in have.split():
                    out.append(f"{target}: sysctl {key} is {have!r}, without {want!r}")
            elif have != want:
                out.append(f"{target}: sysctl {key} is {have!r}, wanted {want!r}")
    return out


def route_mismatches(node: Transport, peers: list[str], want: str, target: str) -> list[str]:
    """The node's routes to its peers read back that do not carry ``want``."""
    try:
        routes = congctl.read(node, peers, target)
    except NetifError as exc:
        return [f"{target}: could not re-read the routes to the peers: {exc}"]
    return routes_differ(routes, want, target)


def routes_differ(routes: dict[str, str | None], want: str, target: str) -> list[str]:
    return [f"{target}: the route to {p} has congctl {congctl.congctl_of(line)!r}, "
            f"wanted {want!r}" for p, line in routes.items()
            if congctl.congctl_of(line) != want]


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
    saved: dict[str, str] = info.get("values", {})
    found: list[str] = []
    try:  # one read, one write of what differs, one read back
        have, missing = read_present(pid, list(saved), target, node)
        if missing:
            found.append(missing_sentence(target, missing))
        differ = {k: v for k, v in saved.items() if k in have and have[k] != v}
        if differ:
            try:
                write_sysctls(pid, differ, target, node)
            except NetifError as exc:
                found.append(str(exc))
            have = read_present(pid, list(differ), target, node)[0]
            found += [f"{target}: sysctl {k} is {have.get(k)!r}, snapshot had {v!r}"
                      for k, v in differ.items() if have.get(k) != v]
    except NetifError as exc:
        found.append(str(exc))
    if node and info.get("routes"):
        found += congctl.restore(node, info["routes"], target)
    return found


def restore_commands(info: dict) -> list[list[str]]:
    """The commands that write one target's saved values back (in its namespace, on its node):
    the rollback guard's plan for it: each saved sysctl, and on a node the host routes to its
    peers as they were (congctl.restore_script, which needs no reading first)."""
    out = [sysctl_argv({key: value}) for key, value in info.get("values", {}).items()]
    if info.get("routes"):
        out.append(["sh", "-c", congctl.restore_script(info["routes"])])
    return out
