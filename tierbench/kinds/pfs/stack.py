"""The OrangeFS cluster a pfs point runs on (kinds.pfs.orangefs): 1 metadata + N I/O servers and
the clients the test needs, brought up anew for each N, found wherever they run; a server that
stopped during a point."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tierbench.kinds.contract import CLIENT, SERVER, Deployment, Point, RunEnds, Tier, log
from tierbench.kinds.pfs.settings import Pfs, cluster_clients
from tierbench.kinds.pfs import orangefs
from tierbench.placement import compose, placer
from tierbench.kinds.pfs.orangefs import PfsError, label

TIERS = ("pfs-client", "pfs-server")


@dataclass
class PfsInfo:
    """An OrangeFS cluster's own handles: its number of I/O servers, its server (metadata
    first) and client containers."""

    io_servers: int
    servers: list[compose.Container]
    clients: list[compose.Container]


@dataclass
class PfsPrepared:
    """A pfs run's state: its id (file names) and whether the experiment's fault fired."""

    run_id: str
    fault_done: bool = False


def deploy(where: placer.Placer, p: Pfs, n: int,
           previous: Deployment[PfsInfo] | None) -> Deployment[PfsInfo]:
    """A new cluster of 1 metadata + ``n`` I/O servers and the clients the test needs."""
    if previous is None:
        log(f"tierbench: bringing the OrangeFS cluster up (1 metadata + {n} I/O servers)")
    else:
        log(f"tierbench: new cluster with {n} I/O servers")
    where.down()
    where.up(orangefs.cluster_spec(n, cluster_clients(p), strip_size=p.strip_size,
                                   storage=p.storage, job_timeout_s=p.job_timeout_s))
    servers, clients = orangefs.cluster_containers(where.replicas())
    return cluster_deployment(where, n, servers, clients)


def running(where: placer.Placer) -> Deployment[PfsInfo] | None:
    """The OrangeFS cluster, when one is up."""
    try:
        servers, clients = orangefs.cluster_containers(where.replicas())
    except PfsError:
        return None
    return cluster_deployment(where, len(servers) - 1, servers, clients)


def after_point(point: Point, row: dict[str, Any], deployment: Deployment[PfsInfo]) -> None:
    """A stopped server ends the run with one sentence naming it."""
    if row.get("error"):
        try:
            found = deployment.placer.replicas()
        except compose.StackError as exc:
            raise RunEnds(f"{exc} during {point.id}; the run ends here") from None
        down = orangefs.stopped_servers(deployment.info.io_servers, found)
        if down:
            raise RunEnds(f"OrangeFS server {', '.join(down)} stopped during {point.id}: "
                          f"{row['error']}; the run ends here")


def cluster_deployment(where: placer.Placer, n: int, servers: list[compose.Container],
                       clients: list[compose.Container]) -> Deployment[PfsInfo]:
    """The running cluster as a deployment: a client tier and a server tier."""
    everyone = servers + clients
    counters = {label(c): where.counter(c) for c in everyone}
    eps = {label(c): where.endpoints(label(c), c) for c in everyone}
    tiers = {"pfs-client": Tier("pfs-client", CLIENT,
                                [ep for c in clients for ep in eps[label(c)]], clients),
             "pfs-server": Tier("pfs-server", SERVER,
                                [ep for c in servers for ep in eps[label(c)]], servers)}
    ifaces = where.ifaces([ep for c in everyone for ep in eps[label(c)]])
    return Deployment(n, tiers, counters, ifaces, containers={label(c): c for c in everyone},
                      info=PfsInfo(n, servers, clients), placer=where)

