"""Who may connect to what: the services that admit only the peers that need them, the
addresses they admit, and the database password.

- **Admitted peers.** PHP-FPM (``listen.allowed_clients``), PostgreSQL (one ``pg_hba`` line per
  address) and GlusterFS (``auth.allow``) each read a comma-separated list of addresses from
  one environment variable: an :class:`Admission` the kind declares (the web kind's application
  and database tiers, the fs kind's file server: ``ADMISSIONS`` in their packages) and hands
  down with the services it brings up (``Services.admissions``). On a cluster the list is the first data-plane
  address of every node whose role talks to the service and runs one of its clients
  (:func:`cluster_admitted`, from the cluster file and where the services were placed); on one host, the addresses the Compose files give the services that talk
  to it on the stack's networks (:func:`host_admitted`). The images refuse to start with an
  empty list: an empty ``listen.allowed_clients`` or ``auth.allow`` would admit anyone.
- **The database password** is made at random when the stack is brought up from nothing
  (:func:`database_password`), handed to the database, the seed job and the application tier
  in their environment at ``compose up``, and kept only in a root-only file of the run state
  (``$TIERBENCH_STATE_DIR/secrets/db-password``: folder 0700, file 0600); removing the stack
  removes it (:func:`forget_database_password`), so the next bring-up makes a new one. It is in
  no image, no compose file, no result and no log.

The other services (Apache and HAProxy, the HTTP servers under test; the Locust master, iperf,
iperf3, sockperf and OrangeFS, which cannot restrict their peers) are only bound to their node's
data-plane address; docs/security.md lists every port.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tierbench.config.errors import TierbenchError
from tierbench.config.files import state_dir
from tierbench.placement.clusterfile import Cluster
from tierbench.placement.model import Admission

__all__ = ["Admission", "AccessError", "PASSWORD_VARIABLE", "cluster_admitted",
           "database_password", "env", "forget_database_password", "host_admitted",
           "password_path"]

PASSWORD_VARIABLE = "DB_PASSWORD"


class AccessError(TierbenchError):
    """Admitted peers or the password file cannot be worked out; the message says why."""


def cluster_admitted(cluster: Cluster, admissions: Iterable[Admission],
                     services: Mapping[str, Iterable[str]] | None = None,
                     ) -> dict[str, list[str]]:
    """Each admission's variable and the addresses it admits on a cluster: the first
    data-plane address of every node of the roles that talk to the service (a role not placed
    adds none; a service whose peers are all unplaced admits nobody). With ``services`` (each
    service brought up and the nodes it runs on), only the nodes of those roles that run one of
    the admission's clients: of a role listing several nodes, a service admits the node of its
    own client, not those of the other services of the role."""
    placed = cluster.placement()
    out: dict[str, list[str]] = {}
    for a in admissions:
        if not a.roles:  # a service that does not run on a cluster
            continue
        names = [n for role in a.roles for n in placed.get(role, [])]
        if services is not None:
            used = {n for client in a.clients for n in services.get(client, ())}
            names = [n for n in names if n in used]
        out[a.variable] = list(dict.fromkeys(cluster.node(n).interface().ip for n in names))
    return out


def host_admitted(config: Mapping[str, Any],
                  admissions: Iterable[Admission]) -> dict[str, list[str]]:
    """Each admission's variable and the addresses it admits on one host: the fixed addresses
    (``ipv4_address``) that the resolved Compose configuration gives the client services it
    defines, for the services it defines. AccessError names a client without a fixed address."""
    services = config.get("services") or {}
    out: dict[str, list[str]] = {}
    for a in admissions:
        if a.service not in services:
            continue
        found: list[str] = []
        for client in a.clients:
            if client not in services:
                continue
            networks = services[client].get("networks") or {}
            fixed = [(n or {}).get("ipv4_address") for n in networks.values()
                     if isinstance(n, Mapping)] if isinstance(networks, Mapping) else []
            addresses = [str(f) for f in fixed if f]
            if not addresses:
                raise AccessError(f"service {client} connects to {a.service} but has no fixed "
                                  f"address on the stack's networks, so {a.what} cannot name "
                                  "it: give it an ipv4_address in its compose file")
            found += addresses
        out[a.variable] = list(dict.fromkeys(found))
    return out


def env(admitted: Mapping[str, list[str]]) -> dict[str, str]:
    """The environment for ``compose up``: each variable as comma-separated addresses (checked
    to be addresses: nothing else may reach a pg_hba line or auth.allow)."""
    out = {}
    for variable, addresses in admitted.items():
        for address in addresses:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise AccessError(f"{variable}: {address!r} is not an IP address") from None
        out[variable] = ",".join(addresses)
    return out


def password_path() -> Path:
    """The database password's file in the run state."""
    return state_dir() / "secrets" / "db-password"


def _private_folder(path: Path) -> None:
    """Make ``path`` (mode 0700, owned by this user), or refuse one that others may use."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() \
            or info.st_mode & 0o077:
        raise AccessError(f"{path} must be a folder only user {os.geteuid()} may use (mode "
                          f"0700), but it has mode {stat.S_IMODE(info.st_mode):04o} and is "
                          f"owned by user {info.st_uid}: remove it (tierbench makes it again)")


def database_password() -> str:
    """The database password of the stack now up, made at random (32 bytes, URL-safe) when
    there is none: a file only this user can read, in a folder only it can enter."""
    path = password_path()
    _private_folder(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        info = path.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid() \
                or info.st_mode & 0o077:
            raise AccessError(f"{path} must be a file only user {os.geteuid()} may read (mode "
                              f"0600), but it has mode {stat.S_IMODE(info.st_mode):04o} and is "
                              f"owned by user {info.st_uid}: remove it and the stack "
                              "(`tierbench clean`)") from None
        value = path.read_text().strip()
        if value:
            return value
        path.unlink()
        return database_password()
    value = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    return value


def forget_database_password() -> None:
    """Remove the password file (the stack that used it is gone)."""
    password_path().unlink(missing_ok=True)
