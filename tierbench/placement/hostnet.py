"""Where each service goes on a cluster, decided from the Compose files alone (no node is
reached here; tierbench.placement.cluster brings the services up where this says).

The host-networking overlays (``compose/host*.yml``, one beside each compose file that defines
services, named after it: tierbench.placement.model.host_overlay; the files with their
overlays: host_files) give each service ``network_mode: host``, its listening address and
port, and the label ``org.tierbench.role`` naming the cluster file's role it runs on
(``org.tierbench.port`` the port it serves). Services of a list role (``pfs_io``; ``web`` with
three web servers) go round the role's nodes; the replicas of a scaled one are
shared out among them. A one-shot job of a role (``fileset``) runs on every node of the role's
other services (on the first only with the label ``org.tierbench.once``: ``pvfs-docroot`` fills
the one OrangeFS); one without a role (``pvfs-config``) on every node of the services that
depend on it or share a volume with it (:func:`place`). Every service's node address reaches
the others as ``TIERBENCH_ADDR_<SERVICE>`` (:func:`env_name`), as Compose's DNS would on one
host; services start level by level in dependency order (:func:`topo_levels`).
"""

from __future__ import annotations

import re
from typing import Any

from tierbench.placement.clusterfile import Cluster
from tierbench.placement.model import StackError

ROLE_LABEL = "org.tierbench.role"
PORT_LABEL = "org.tierbench.port"
# a one-shot job of a role that runs on the role's first node of services only (it fills
# something every node shares: OrangeFS), not on each
ONCE_LABEL = "org.tierbench.once"


def env_name(service: str) -> str:
    """TIERBENCH_ADDR_<SERVICE>: the variable holding a service's node address."""
    return "TIERBENCH_ADDR_" + re.sub(r"[^A-Za-z0-9]", "_", service).upper()


def natural(name: str) -> tuple:
    """A sort key that puts web2 before web10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def topo_levels(services: list[str], deps: dict[str, list[str]]) -> list[list[str]]:
    """Services in dependency order, level by level (a level depends only on earlier ones)."""
    left = list(services)
    done: set[str] = set()
    levels = []
    while left:
        level = [s for s in left if all(d in done or d not in services for d in deps.get(s, []))]
        if not level:
            raise StackError(f"the services {', '.join(left)} depend on each other in a cycle")
        levels.append(sorted(level, key=natural))
        done.update(level)
        left = [s for s in left if s not in done]
    return levels


def place(config: dict[str, Any], wanted: list[str], scale: dict[str, int],
          cluster: Cluster) -> dict[str, dict[str, int]]:
    """Each wanted service's nodes and how many replicas on each: by its role label (see the
    module's doc). ClusterError names every role the cluster file does not place."""
    services = config["services"]
    where: dict[str, dict[str, int]] = {}
    missing: list[str] = []
    by_role: dict[str, list[str]] = {}
    for name in sorted(wanted, key=natural):
        role = (services[name].get("labels") or {}).get(ROLE_LABEL)
        if role:
            by_role.setdefault(role, []).append(name)
    known = cluster.declared
    for role, names in by_role.items():
        if role not in known:
            raise StackError(f"service {names[0]} has the role {role!r}, which cluster files do "
                             f"not know (roles: {', '.join(known.names)})")
        placed = [n.name for n in cluster.nodes_for(role)]
        if not placed:
            missing.append(role)
            continue
        jobs = [n for n in names if is_job(n, config, wanted)]
        servers = [n for n in names if n not in jobs]
        for i, name in enumerate(servers):
            count = scale.get(name, 1)
            if len(servers) > 1:  # several services of one role: one after the other round it
                where[name] = {placed[i % len(placed)]: count}
            else:  # one service's replicas shared out among the role's nodes
                share = {n: count // len(placed) + (j < count % len(placed))
                         for j, n in enumerate(placed)}
                where[name] = {n: k for n, k in share.items() if k}
        # a one-shot job of the role (the file sets) runs on every node of the role's services
        used = [n for n in placed if any(n in where[s] for s in servers)] or placed[:1]
        for name in jobs:
            once = (services[name].get("labels") or {}).get(ONCE_LABEL) == "true"
            where[name] = dict.fromkeys(used[:1] if once else used, 1)
    if missing:
        cluster.require_roles(*missing)
    for name in wanted:  # one-shot jobs without a role: beside those who need them
        if name in where:
            continue
        volumes = named_volumes(services[name])
        hosts: dict[str, int] = {}
        for other in wanted:
            spec = services[other]
            needs = name in (spec.get("depends_on") or {})
            shares = bool(volumes & named_volumes(spec))
            if other != name and (needs or shares) and other in where:
                hosts.update(dict.fromkeys(where[other], 1))
        if not hosts:
            raise StackError(f"service {name} has no {ROLE_LABEL} label and no service on a node "
                             "needs it: give it a role in its host overlay")
        where[name] = hosts
    return where


def named_volumes(spec: dict[str, Any]) -> set[str]:
    """The named volumes a service's (resolved) Compose entry mounts."""
    return {v["source"] for v in spec.get("volumes") or []
            if isinstance(v, dict) and v.get("type") == "volume" and v.get("source")}


def is_job(name: str, config: dict[str, Any], wanted: list[str]) -> bool:
    """A one-shot job: a service others wait for to complete."""
    return any((config["services"][o].get("depends_on") or {}).get(name, {}).get("condition")
               == "service_completed_successfully" for o in wanted)
