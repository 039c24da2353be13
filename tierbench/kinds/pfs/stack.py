"""The OrangeFS cluster a pfs point runs on (tiers.orangefs): 1 metadata + N I/O servers and
the clients the test needs, brought up anew for each N (with pfs.storage naming a disk system,
each I/O server's device(s) and the client's local disk built first, their limits read back and
their reads sampled), found wherever they run; a server that stopped during a point."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierbench.kinds.contract import CLIENT, SERVER, Deployment, Point, RunEnds, Tier, log
from tierbench.kinds.pfs.settings import Pfs, PfsSettings, client_disk_bytes, cluster_clients
from tierbench.tiers import orangefs
from tierbench.placement import model, placer
from tierbench import space
from tierbench.tiers import diskbuild, disks
from tierbench.tiers.orangefs import PfsError, label

TIERS = ("pfs-client", "pfs-server")


@dataclass
class PfsInfo:
    """An OrangeFS cluster's own handles: its number of I/O servers, its server (metadata
    first) and client containers, and the record of the disk system it stores on (empty on
    tmpfs or volumes)."""

    io_servers: int
    servers: list[model.Container]
    clients: list[model.Container]
    disk: dict[str, Any] = field(default_factory=dict)


@dataclass
class PfsPrepared:
    """A pfs run's state: its id (file names) and whether the experiment's fault fired."""

    run_id: str
    fault_done: bool = False


# pvfs2-cp never overwrites: a native write phase repeated until measure_s has passed leaves a
# new copy of the file each time (removed after the point). OrangeFS wrote at most about 350 MB/s
# on this testbed (docs/tiers.md); a disk system under the servers is sized for this rate.
NATIVE_WRITE_BOUND_B_S = 500_000_000


def storage_plan(s: PfsSettings, n: int) -> disks.Plan | None:
    """The disk system a cluster of ``n`` I/O servers stores on (None on tmpfs or volumes):
    each server's share of what the largest point leaves on them, and the basic test's local
    disk."""
    system = s.storage_system()
    if system is None:
        return None
    p = s.pfs
    return orangefs.storage_plan(system, n, servers_bytes(p, n), client_disk_bytes(p))


def servers_bytes(p: Pfs, n: int) -> int:
    """Bytes of a point's OrangeFS files on all ``n`` I/O servers, at most: its files, and with
    native writes repeated for measure_s, the copies they leave (NATIVE_WRITE_BOUND_B_S)."""
    if p.test == "basic":
        files = int(p.file_mb * (1 << 20))
        repeated = "orangefs-native" in p.filesystems and not p.single_pass
    else:
        streams = max(p.clients) if p.test == "concurrent" else max(p.streams)
        files = int(p.region_mb_per_server * n * (1 << 20)) * p.regions_per_stream * streams
        repeated = p.access == "native" and p.test == "concurrent"  # streams only reads
    return files + (int(p.measure_s * NATIVE_WRITE_BOUND_B_S) if repeated else 0)


def deploy(where: placer.Placer, s: PfsSettings, n: int,
           previous: Deployment[PfsInfo] | None) -> Deployment[PfsInfo]:
    """A new cluster of 1 metadata + ``n`` I/O servers and the clients the test needs, on the
    disk system pfs.storage names when it names one (built after the old cluster is down)."""
    p = s.pfs
    if previous is None:
        log(f"tierbench: bringing the OrangeFS cluster up (1 metadata + {n} I/O servers)")
    else:
        log(f"tierbench: new cluster with {n} I/O servers")
    where.down()
    made = storage_plan(s, n)
    built = None
    overlays: list[Path] = []
    if made is not None:
        try:
            built = orangefs.build_storage(made, space.settings(), log,
                                           orangefs.storage_hosts(where, made))
        except disks.DiskError as exc:
            raise model.StackError(str(exc)) from None
        overlays.append(disks.overlay_path())
    where.up(orangefs.cluster_spec(n, cluster_clients(p), strip_size=p.strip_size,
                                   storage=p.storage, job_timeout_s=p.job_timeout_s,
                                   extra=overlays))
    servers, clients = orangefs.cluster_containers(where.replicas())
    dep = cluster_deployment(where, n, servers, clients)
    if built is not None and made is not None:
        try:
            dep.info.disk = diskbuild.verify(built, made.system, servers + clients)
        except disks.DiskError as exc:
            raise model.StackError(str(exc)) from None
        dep.probes["storage"] = diskbuild.StorageReads(built)
    return dep


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
        except model.StackError as exc:
            raise RunEnds(f"{exc} during {point.id}; the run ends here") from None
        down = orangefs.stopped_servers(deployment.info.io_servers, found)
        if down:
            raise RunEnds(f"OrangeFS server {', '.join(down)} stopped during {point.id}: "
                          f"{row['error']}; the run ends here")


def cluster_deployment(where: placer.Placer, n: int, servers: list[model.Container],
                       clients: list[model.Container]) -> Deployment[PfsInfo]:
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

