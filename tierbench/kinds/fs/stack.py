"""The file-server tiers a point runs on: GlusterFS (compose/fs.yml: the server, 1-18 clients
and, for a busy server, the CPU hog) or an OrangeFS cluster (tiers.orangefs), brought up for
a deployment key and found wherever they run; a container that stopped during a point."""

from __future__ import annotations

import os
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, cast

from tierbench.config.files import ROOT, dotenv
from tierbench.interfaces import netif
from tierbench.kinds.contract import CLIENT, SERVER, Deployment, Tier, log
from tierbench.kinds.fs.roles import ADMISSIONS
from tierbench.kinds.fs.settings import MAX_CLIENTS, Fs
from tierbench.tiers import orangefs
from tierbench.measure.sampler import CgroupGroup
from tierbench.placement import model, placer

CLIENT_TIER, SERVER_TIER, HOG = "fs-client", "fs-server", "fs-hog"
TIERS = (CLIENT_TIER, SERVER_TIER)
IMAGE = "tierbench-fs"
OVERLAY = "compose/fs.yml"  # the file-server tier (profile fs)
SHARE = "/mnt/share"  # the GlusterFS volume in fs-client
PVFS_MOUNT = "/mnt/orangefs"
VOLUME = "fs-share"  # the brick's Docker volume
BRICK = "brick"  # the brick's folder in it
BRICK_PATH = "/srv/share/brick"  # the brick in fs-server (FS_BRICK)


@dataclass
class FsInfo:
    """A file-server deployment's own handles: which server runs (gluster or orangefs), its
    server and client containers, and the labels of the servers' sampled interfaces."""

    server: str
    servers: list[model.Container]
    clients: list[model.Container]
    server_net: list[str]


@dataclass
class FsPrepared:
    """A file-server run's state: its id (folder names on the share), the file sets laid out
    now, and how many points still read each set (a set is removed after its last one)."""

    run_id: str
    sets: set[str]
    uses: dict[str, int]


def client_services(clients: int) -> list[str]:
    """The services of the first N client machines: fs-client, fs-client2 .. fs-clientN."""
    return [CLIENT_TIER, *(f"{CLIENT_TIER}{i}" for i in range(2, clients + 1))]


CLIENT_SERVICES = client_services(MAX_CLIENTS)


def deploy(where: placer.Placer, f: Fs, key: Hashable, prepared: FsPrepared,
           previous: Deployment[FsInfo] | None) -> Deployment[FsInfo]:
    """GlusterFS: server and clients up (the hog too for a busy server; only the hog changes
    between loads), the server under its memory cap when the experiment sets one. OrangeFS: a cluster of 1 metadata + N I/O servers and the clients."""
    server, arg = cast(tuple[str, Any], key)  # deployment_key's
    if server == "orangefs":
        log(f"tierbench: bringing the OrangeFS cluster up on {where.name} (1 metadata + "
            f"{arg} I/O servers, {f.client_containers} clients)")
        where.down()
        where.up(orangefs.cluster_spec(int(arg), f.client_containers,
                                       strip_size=f.strip_size, storage=f.storage,
                                       job_timeout_s=f.job_timeout_s))
        servers, clients = orangefs.cluster_containers(where.replicas())
        return pvfs_deployment(where, key, servers, clients)
    busy = arg == "busy"
    # the server and the client (and the hog when busy): services already up as asked stay
    # the experiment's cap, or none (0), whatever the shell's environment says
    memory = {"FS_SERVER_MEMORY": f.server_memory.lower() if f.server_memory else "0"}
    spec = model.Services(fs_paths(), {**fs_env(), **memory},
                            services=[SERVER_TIER, *client_services(f.clients),
                                      *([HOG] if busy else [])],
                            timeout=300, admissions=ADMISSIONS)
    if previous is None or previous.info.server != "gluster":
        log(f"tierbench: bringing the file-server tier up on {where.name} (GlusterFS "
            "server" + (f" with {f.server_memory} of memory" if f.server_memory else "")
            + f", {f.clients} client{'s' if f.clients > 1 else ''}"
            + (", the CPU hog" if busy else "") + ")")
        where.down()
        prepared.sets.clear()
        where.up(spec)
    elif busy:
        log("tierbench: starting the CPU hog on the file server's CPUs")
        where.up(spec)
    else:
        log("tierbench: stopping the CPU hog")
        for c in where.replicas():
            if c.service == HOG:
                where.stop(c, 2)
    return gluster_deployment(where, key)

def running(where: placer.Placer) -> Deployment[FsInfo] | None:
    """The file-server tier, when it is up."""
    found = {c.service for c in where.replicas()}
    if {SERVER_TIER, CLIENT_TIER} <= found:
        return gluster_deployment(where, ("gluster", "busy" if HOG in found else "idle"))
    return None


def fs_paths() -> list[str]:
    """The file-server tier's compose files (the base file names the project's networks)."""
    return [str(ROOT / "docker-compose.yml"), str(ROOT / OVERLAY)]


def fs_env() -> dict[str, str]:
    """.env, then the environment (as docker compose reads them)."""
    return {**dotenv(), **os.environ}


def tier_deployment(key: Hashable, where: placer.Placer, server_kind: str,
                    servers: list[model.Container], clients: list[model.Container],
                    labels: dict[str, str], extra: dict[str, model.Container],
                    grouped: bool) -> Deployment[FsInfo]:
    """Client and server tiers wherever the placement runs them: their interfaces for modes,
    CPU counters (one per tier, or a group of the tier's containers when ``grouped`` or when
    it has several: their CPU summed) and
    sampled interfaces, with the server's named for its network figures."""
    def group(cs: list[model.Container]) -> Any:
        counters = {labels[c.id]: where.counter(c) for c in cs}
        return CgroupGroup(counters) if grouped or len(cs) > 1 else where.counter(cs[0])

    def named(tier: str, cs: list[model.Container]) -> dict[str, list[netif.Endpoint]]:
        return {labels[c.id] if labels[c.id] == tier else f"{tier}:{labels[c.id]}": eps[c.id]
                for c in cs}

    eps = {c.id: where.endpoints(labels[c.id], c) for c in servers + clients}
    tiers = {CLIENT_TIER: Tier(CLIENT_TIER, CLIENT, list(dict.fromkeys(
                 e for c in clients for e in eps[c.id])), clients),
             SERVER_TIER: Tier(SERVER_TIER, SERVER, list(dict.fromkeys(
                 e for c in servers for e in eps[c.id])), servers)}
    cpus: dict[str, Any] = {CLIENT_TIER: group(clients), SERVER_TIER: group(servers)}
    containers = {labels[c.id]: c for c in servers + clients}
    for name, c in extra.items():
        cpus[name] = where.counter(c)
        containers[name] = c
    server_ifaces = where.named_ifaces(named(SERVER_TIER, servers))
    ifaces = {**where.named_ifaces(named(CLIENT_TIER, clients)), **server_ifaces}
    return Deployment(key, tiers, cpus, ifaces, containers=containers,
                      info=FsInfo(server_kind, servers, clients, list(server_ifaces)),
                      placer=where)


def gluster_deployment(where: placer.Placer, key: Hashable) -> Deployment[FsInfo]:
    """The running GlusterFS tier: the server tier, the client tier (every client machine
    running, in number order: their CPU summed), the hog's CPU counter when it runs."""
    found = where.containers()
    missing = [s for s in (SERVER_TIER, CLIENT_TIER) if s not in found]
    if missing:
        raise model.StackError(f"{missing[0]} is not running{where.where(missing[0])}: see "
                               f"`docker{where.context_arg(missing[0])} logs "
                               f"{model.PROJECT}-{missing[0]}-1`")
    server = found[SERVER_TIER]
    clients = [found[s] for s in CLIENT_SERVICES if s in found]
    return tier_deployment(key, where, "gluster", [server], clients,
                           {server.id: SERVER_TIER, **{c.id: c.service for c in clients}},
                           {HOG: found[HOG]} if HOG in found else {}, grouped=False)


def pvfs_deployment(where: placer.Placer, key: Hashable, servers: list[model.Container],
                    clients: list[model.Container]) -> Deployment[FsInfo]:
    """The running OrangeFS cluster as the fs kind's client and server tiers."""
    labels = {c.id: orangefs.label(c) for c in servers + clients}
    return tier_deployment(key, where, "orangefs", servers, clients, labels, {},
                           grouped=True)
