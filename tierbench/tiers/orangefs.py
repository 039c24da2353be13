"""The OrangeFS cluster (compose/pvfs.yml): 1 metadata + N I/O servers and K clients brought up,
listed, labelled and checked; its storage on tmpfs, on volumes (compose/pvfs-disk.yml) or on a
disk system (004 §4.1: each PVFS I/O server's ext3 on its own IDE disk), whose plan, build and
Compose overlay (each server's mount bound at its /data, a client's at its /disk, throttled)
are here for every kind that runs OrangeFS on one; the cluster file's roles its services run on
and the CPU lists its compose files pin them to, which each kind running it declares."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tierbench.config.errors import TierbenchError
from tierbench.config.files import dotenv
from tierbench.placement import compose, model, placer
from tierbench.tiers import diskbuild, disks
from tierbench.placement.model import Role

ROLES = (
    Role("pfs_meta", "the OrangeFS metadata server", server=True),
    Role("pfs_io", "the OrangeFS I/O servers", nodes="list", server=True),
    Role("pfs_clients", "the OrangeFS clients", nodes="list"),
)

# The CPU-list variables compose/pvfs.yml reads (.env), with their defaults.
CPUSETS = {"PVFS_SERVER_CPUS": "1", "PVFS_CLIENT_CPUS": "0"}

MAX_IO_SERVERS = 8
STORAGE = ("tmpfs", "disk")  # besides a disk system's name
IO_SERVICE = "pvfs-io"  # the I/O servers' services: pvfs-io1 .. pvfs-ioN
CLIENT_SERVICE = "pvfs-client"
OVERLAY = "compose/pvfs.yml"  # the OrangeFS tier (profile pfs)
DISK_OVERLAY = "compose/pvfs-disk.yml"  # its storage on volumes (or disk systems bound over them)


IMAGE = "tierbench-orangefs"
# How the image is built by hand: only from a source at hand.
BUILD = ("`make orangefs-image` (with ORANGEFS_TARBALL=/path/to/orangefs-2.10.0.tar.gz "
         "and ORANGEFS_SHA256=<its sha256> where the upstream archive cannot be downloaded)")


class PfsError(TierbenchError):
    """The OrangeFS tier cannot run (or stopped running) a test; the message says why."""



def compose_args(storage: str) -> list[str]:
    """-f arguments of the OrangeFS tier (base file, pvfs.yml, and pvfs-disk.yml for disk)."""
    return [a for f in compose_files(storage) for a in ("-f", f)]


def compose_files(storage: str, extra: list[Path] | None = None) -> list[str]:
    """The OrangeFS tier's compose files: the base file, pvfs.yml, pvfs-disk.yml for storage
    other than tmpfs (volumes; a disk system's mounts are bound over them by the ``extra``
    overlay written when it is built)."""
    files = ["docker-compose.yml", OVERLAY]
    if storage != "tmpfs":
        files.append(DISK_OVERLAY)
    return [str(compose.ROOT / f) for f in files] + [str(p) for p in extra or []]


def cluster_env(io_servers: int, strip_size: int, job_timeout_s: int) -> dict[str, str]:
    """Environment for docker compose: .env, the shell's, then the cluster's settings."""
    return {**dotenv(), **os.environ, "PVFS_IO_SERVERS": str(io_servers),
            "PVFS_STRIP_SIZE": str(strip_size), "PVFS_JOB_TIMEOUT": str(job_timeout_s)}


def server_services(io_servers: int) -> list[str]:
    """Compose services of a cluster with N I/O servers."""
    return ["pvfs-meta", *io_services(io_servers)]


def io_services(io_servers: int) -> list[str]:
    """The I/O servers' services: pvfs-io1 .. pvfs-ioN."""
    return [f"{IO_SERVICE}{i}" for i in range(1, io_servers + 1)]


def check_image() -> None:
    """The OrangeFS image built and up to date, or one sentence saying how to build it."""
    compose.require_image(IMAGE, BUILD)


def cluster_spec(io_servers: int, clients: int, *, strip_size: int = 65536,
                 storage: str = "tmpfs", job_timeout_s: int = 15,
                 extra: list[Path] | None = None) -> model.Services:
    """1 metadata + N I/O servers and K clients, as a placement brings them up (``extra``: the
    overlay of a disk system built for their storage)."""
    if not 1 <= io_servers <= MAX_IO_SERVERS or clients < 1:
        raise PfsError(f"the overlay has 1-{MAX_IO_SERVERS} I/O servers and needs at least one "
                       f"client; asked for {io_servers} servers and {clients} clients")
    check_image()
    env = cluster_env(io_servers, strip_size, job_timeout_s)
    return model.Services(compose_files(storage, extra), env,
                            services=[*server_services(io_servers), CLIENT_SERVICE],
                            scale={CLIENT_SERVICE: clients}, timeout=300, cpusets=CPUSETS)


def cluster_up(io_servers: int, clients: int, *, strip_size: int = 65536,
               storage: str = "tmpfs", job_timeout_s: int = 15) -> None:
    """Bring up 1 metadata + N I/O servers and K clients on this host, waiting until all are
    healthy."""
    compose.up_spec(cluster_spec(io_servers, clients, strip_size=strip_size, storage=storage,
                                 job_timeout_s=job_timeout_s))


def cluster_containers(found: list[model.Container] | None = None,
                       ) -> tuple[list[model.Container], list[model.Container]]:
    """(servers, clients) of the running cluster (among ``found``, else this host's running
    containers), servers metadata first then pvfs-io1.."""
    found = compose.replicas() if found is None else found
    servers = [c for c in found if c.service == "pvfs-meta"]
    servers += sorted((c for c in found if c.service.startswith("pvfs-io")),
                      key=lambda c: int(c.service.removeprefix("pvfs-io")))
    clients = [c for c in found if c.service == "pvfs-client"]
    if not servers or not clients:
        raise PfsError("the OrangeFS cluster is not running: `tierbench pfs up` starts it")
    return servers, clients


def label(c: model.Container) -> str:
    """A container's name in results: pvfs-meta, pvfs-io2, pvfs-client-3."""
    if c.service == "pvfs-client":
        return f"pvfs-client-{c.name.rsplit('-', 1)[-1]}"
    return c.service


def stopped_servers(io_servers: int, found: list[model.Container] | None = None) -> list[str]:
    """Servers of the cluster that are not running (stopped or crashed), among ``found`` (else
    this host's running containers)."""
    running = {c.service for c in (compose.replicas() if found is None else found)}
    return [s for s in server_services(io_servers) if s not in running]


def remove(where: placer.Placer, what: str = "the OrangeFS cluster") -> list[str]:
    """Everything the placer runs removed at the end of a run that ran OrangeFS (its servers
    admit whoever connects; the next run makes a new cluster): the run's closing note."""
    where.down()
    return [f"removed {what} (its OrangeFS servers admit whoever connects)"]


def status_json() -> str:
    """The running cluster, for `tierbench pfs status`."""
    servers, clients = cluster_containers()
    return json.dumps({"servers": [label(c) for c in servers],
                       "clients": [label(c) for c in clients]}, indent=1)


# --------------------------------------------------------------------------- storage on disks


def storage_problem(key: str, storage: str | None,
                    known: Mapping[str, disks.System]) -> str | None:
    """What is wrong with a setting (``key``) naming where the I/O servers store, one sentence,
    or None."""
    if storage is None or storage in STORAGE or storage in known:
        return None
    return (f"{key}: must be tmpfs, disk (a Docker volume on the host's disk) or a disk system "
            f"({', '.join(known)}, or one of disk_systems), got {storage!r}")


def io_server_bytes(total: int, io_servers: int) -> int:
    """Bytes of ``total`` on each I/O server: the strips spread evenly, plus a tenth for the
    storage's own records."""
    return total // io_servers + total // io_servers // 10


def storage_plan(system: disks.System, io_servers: int, total: int,
                 client_disk_bytes: int = 0) -> disks.Plan:
    """The disk plan of N I/O servers each storing its share of ``total`` bytes on its own
    device(s) of the system; with ``client_disk_bytes``, the (one) client's local disk on its
    own device(s) of the system too (every device is sized for the largest)."""
    servers = io_services(io_servers) + ([CLIENT_SERVICE] if client_disk_bytes else [])
    lay = disks.Layout(len(servers), system.devices, system.raid0)
    most = max(io_server_bytes(total, io_servers), client_disk_bytes)
    return disks.plan(system, lay, servers, disks.per_disk_bytes(lay, most))


def storage_services(built: diskbuild.Built, system: disks.System) -> dict[str, dict[str, Any]]:
    """The overlay's services for OrangeFS on a disk system: each I/O server's mount at its
    /data (over compose/pvfs-disk.yml's volume, which the compose files put first), the
    client's at its /disk (over the local-disk volume), each container's devices throttled."""
    return {s.name: {"volumes": [{"type": "bind", "source": s.root,
                                  "target": "/disk" if s.name == CLIENT_SERVICE else "/data"}],
                     "blkio_config": diskbuild.throttles(s, system)} for s in built.servers}


def storage_hosts(where: placer.Placer, p: disks.Plan) -> dict[str, disks.Host]:
    """Each server of a storage plan -> the host its devices are built on, the node its
    container runs on (a bind mount and a device throttle name paths there): pvfs-ioN round
    the pfs_io nodes, the client on the first pfs_clients node."""
    return {s: disks.of_role(where, "pfs_clients") if s == CLIENT_SERVICE
            else disks.of_role(where, "pfs_io", int(s[len(IO_SERVICE):]) - 1) for s in p.servers}


def build_storage(p: disks.Plan, env: Mapping[str, str], log: Any,
                  hosts: Mapping[str, disks.Host] | disks.Host = disks.LOCAL) -> diskbuild.Built:
    """The plan's disk system built (or kept) and its Compose overlay written
    (disks.overlay_path)."""
    built = diskbuild.ensure(p, env, log, hosts)
    diskbuild.write_overlay(storage_services(built, p.system))
    return built
