"""The OrangeFS cluster (compose/pvfs.yml): 1 metadata + N I/O servers and K clients brought up,
listed, labelled and checked."""

from __future__ import annotations

import json
import os

from tierbench.config.errors import TierbenchError
from tierbench.kinds.pfs.roles import CPUSETS
from tierbench.placement import compose

MAX_IO_SERVERS = 8
STORAGE = ("tmpfs", "disk")
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


def compose_files(storage: str) -> list[str]:
    """The OrangeFS tier's compose files: the base file, pvfs.yml, and pvfs-disk.yml for disk."""
    files = ["docker-compose.yml", OVERLAY]
    if storage == "disk":
        files.append(DISK_OVERLAY)
    return [str(compose.ROOT / f) for f in files]


def cluster_env(io_servers: int, strip_size: int, job_timeout_s: int) -> dict[str, str]:
    """Environment for docker compose: .env, the shell's, then the cluster's settings."""
    return {**compose.dotenv(), **os.environ, "PVFS_IO_SERVERS": str(io_servers),
            "PVFS_STRIP_SIZE": str(strip_size), "PVFS_JOB_TIMEOUT": str(job_timeout_s)}


def server_services(io_servers: int) -> list[str]:
    """Compose services of a cluster with N I/O servers."""
    return ["pvfs-meta", *(f"pvfs-io{i}" for i in range(1, io_servers + 1))]


def check_image() -> None:
    """The OrangeFS image built and up to date, or one sentence saying how to build it."""
    compose.require_image(IMAGE, BUILD)


def cluster_spec(io_servers: int, clients: int, *, strip_size: int = 65536,
                 storage: str = "tmpfs", job_timeout_s: int = 15) -> compose.Services:
    """1 metadata + N I/O servers and K clients, as a placement brings them up."""
    if not 1 <= io_servers <= MAX_IO_SERVERS or clients < 1:
        raise PfsError(f"the overlay has 1-{MAX_IO_SERVERS} I/O servers and needs at least one "
                       f"client; asked for {io_servers} servers and {clients} clients")
    check_image()
    env = cluster_env(io_servers, strip_size, job_timeout_s)
    return compose.Services(compose_files(storage), env,
                            services=[*server_services(io_servers), "pvfs-client"],
                            scale={"pvfs-client": clients}, timeout=300, cpusets=CPUSETS)


def cluster_up(io_servers: int, clients: int, *, strip_size: int = 65536,
               storage: str = "tmpfs", job_timeout_s: int = 15) -> None:
    """Bring up 1 metadata + N I/O servers and K clients on this host, waiting until all are
    healthy."""
    compose.up_spec(cluster_spec(io_servers, clients, strip_size=strip_size, storage=storage,
                                 job_timeout_s=job_timeout_s))


def cluster_containers(found: list[compose.Container] | None = None,
                       ) -> tuple[list[compose.Container], list[compose.Container]]:
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


def label(c: compose.Container) -> str:
    """A container's name in results: pvfs-meta, pvfs-io2, pvfs-client-3."""
    if c.service == "pvfs-client":
        return f"pvfs-client-{c.name.rsplit('-', 1)[-1]}"
    return c.service


def stopped_servers(io_servers: int, found: list[compose.Container] | None = None) -> list[str]:
    """Servers of the cluster that are not running (stopped or crashed), among ``found`` (else
    this host's running containers)."""
    running = {c.service for c in (compose.replicas() if found is None else found)}
    return [s for s in server_services(io_servers) if s not in running]


def status_json() -> str:
    """The running cluster, for `tierbench pfs status`."""
    servers, clients = cluster_containers()
    return json.dumps({"servers": [label(c) for c in servers],
                       "clients": [label(c) for c in clients]}, indent=1)
